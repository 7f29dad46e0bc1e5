"""The TensorFlow runtime cosent-tf runs on: Keras 2, the CPU split, precision and randomness.

Everything else in the package imports ``keras`` and ``tf`` from here and reads as plain
Keras 2. Importing this module imports TensorFlow (its start-up notices held back, see
:func:`cosent_tf.console.tensorflow_start_up_held_back`), checks that ``tf.keras`` is tf-keras,
splits the CPU into ``COSENT_TF_CPU_DEVICES`` logical devices and installs the repeatable dropout
(:func:`install_repeatable_dropout`). The environment it relies on is set by
:mod:`cosent_tf.environment`; the transformer classes and their fixes are
:mod:`cosent_tf.models.architectures`. Why each setting exists: docs/platform.md.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import environment  # noqa: F401  (before TensorFlow: Keras 2 and the allocator settings)
from .console import TENSORFLOW_STARTUP_LINES, tensorflow_start_up_held_back  # noqa: F401  (named here as before)


@contextlib.contextmanager
def _jax_unimportable() -> Iterator[None]:
    """For the block, ``import jax`` fails as it does where JAX is not installed; sys.modules is as
    before after it. TensorFlow's import imports an installed JAX only for TFLite's converter of JAX
    functions, which this engine never calls, at a cost the CHANGELOG gives."""
    if "jax" in sys.modules:
        yield
        return
    sys.modules["jax"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if "jax" in sys.modules and sys.modules["jax"] is None:
            del sys.modules["jax"]


# Keras 3 imported without cosent_tf.keras3 cannot be told from TensorFlow's own import of it (tensorflow
# imports keras when TF_USE_LEGACY_KERAS is unset), so only the route is refused here.
if "cosent_tf.keras3" in sys.modules:
    raise ImportError(
        "this process uses cosent_tf.keras3; cosent_tf's Keras 2 engine would point `keras` at tf-keras under it "
        "(bert4keras does): use one Keras per process, and run the Keras 2 code in a process of its own"
    )

with tensorflow_start_up_held_back(), _jax_unimportable():
    import tensorflow as tf  # noqa: E402

    tf.config.list_physical_devices()  # probes the devices now, while their notices are held back
import tf_keras as keras  # noqa: E402

if os.environ["TF_USE_LEGACY_KERAS"] != "1" or tf.keras.__name__.split(".")[0] != "tf_keras":
    raise ImportError(
        "cosent_tf's Keras 2 engine needs tf.keras to be tf-keras, but tf.keras was used before cosent_tf was "
        "imported and is Keras 3: import cosent_tf first, or set TF_USE_LEGACY_KERAS=1 before TensorFlow is "
        "first imported; for Keras 3 models use cosent_tf.keras3 instead"
    )

from bert4keras.tokenizers import Tokenizer as Bert4kerasTokenizer  # noqa: E402
from tensorflow.python.eager import context as _eager_context  # noqa: E402
from tf_keras.src import backend as _keras_backend  # noqa: E402

from .choices import PRECISIONS  # noqa: E402
from .environment import keras_dtype_policy, split_cpu  # noqa: E402
from .errors import lookup  # noqa: E402

# TensorFlow takes a split of the CPU (COSENT_TF_CPU_DEVICES) only before its runtime starts: hence here.
split_cpu(tf)


def policy_name(precision: str) -> str:
    """The Keras dtype policy of a ``--precision`` value.

    Args:
        precision: ``float32``, ``bf16`` or ``fp16`` (or a policy name, returned as it is).

    Returns:
        The policy name (``mixed_bfloat16`` for ``bf16``).

    Raises:
        ConfigError: an unknown precision; the message lists the choices.

    Example:
        >>> policy_name("bf16")
        'mixed_bfloat16'
    """
    if precision in PRECISIONS.values():
        return precision
    return lookup(PRECISIONS, precision, "precision")


def inference_policy_name(precision: str) -> str:
    """The dtype policy of a model that only runs (a loaded matcher, an export) at ``precision``.

    A mixed policy keeps float32 weights and casts each one to the compute dtype on every
    call; a model that is never trained can keep them in that dtype instead. Its outputs are
    the same bit for bit, with half the weight memory and no casts per call.

    Args:
        precision: as :func:`policy_name`.

    Returns:
        The policy without ``mixed_`` (``bfloat16`` for ``bf16``).

    Raises:
        ConfigError: an unknown precision.

    Example:
        >>> inference_policy_name("bf16")
        'bfloat16'
    """
    return policy_name(precision).removeprefix("mixed_")


def dtype_policy(policy: str) -> contextlib.AbstractContextManager[None]:
    """Within the block the global Keras dtype policy is ``policy``; the previous one is put back.

    Args:
        policy: a Keras policy name (``float32``, ``mixed_bfloat16``, ...).

    Example:
        >>> with dtype_policy("mixed_bfloat16"):  # doctest: +SKIP
        ...     model = build_encoder(config)
    """
    return keras_dtype_policy(keras, policy)


@contextlib.contextmanager
def model_precision(model: keras.Model) -> Iterator[None]:
    """Within the block the global dtype policy is the one ``model`` was built under.

    bert4keras creates a Dropout layer inside the attention's ``call``, which takes the global
    policy of the moment the model is traced: a (mixed-)bfloat16 model traced under float32
    fails. Trace a model's call inside this block.

    Args:
        model: a built model; its first layer that is not float32 names the policy.

    Example:
        >>> with model_precision(model):  # doctest: +SKIP
        ...     vectors = tf.function(model)(inputs)
    """
    other = (layer.dtype_policy.name for layer in model.layers if layer.dtype_policy.name != "float32")
    with dtype_policy(next(other, "float32")):
        yield


@contextlib.contextmanager
def random_seed(seed: int) -> Iterator[None]:
    """Seed Python, NumPy, TensorFlow and Keras for the block, as ``keras.utils.set_random_seed`` does.

    Afterwards each generator is back in the state it had before (TensorFlow's eager seed
    state is read through its private context).

    Args:
        seed: the seed.

    Example:
        >>> with random_seed(42):  # doctest: +SKIP
        ...     model = build_encoder(config)
    """
    eager = _eager_context.context()
    tf_rng = getattr(eager, "_rng", None)
    saved = (
        random.getstate(),
        np.random.get_state(),
        eager._seed,
        tf_rng and tf_rng.getstate(),
        getattr(_keras_backend._SEED_GENERATOR, "generator", None),
    )
    keras.utils.set_random_seed(seed)
    try:
        yield
    finally:
        python_state, numpy_state, tf_seed, tf_rng_state, keras_generator = saved
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        tf.random.set_seed(tf_seed)
        if tf_rng_state is not None:
            eager._rng.setstate(tf_rng_state)
        _keras_backend._SEED_GENERATOR.generator = keras_generator


# -- repeatable dropout ---------------------------------------------------------------------------

# Micro-batches (cosent_tf.training.gradient_cache) run every chunk of a batch twice and need the same
# dropout masks both times. Every Keras dropout, bert4keras's included (it makes its attention
# dropout inside the layer's call), draws its mask through RandomGenerator.dropout: inside
# `repeatable_dropout(seed)` that draws from a stateless generator keyed by the seed and the
# dropout's place in the order of calls, which is the same on each run of the same model.
# Outside such a block a float32 dropout is Keras's own; any other draws in float32 (below).
_dropout_keys = threading.local()
_keras_dropout = _keras_backend.RandomGenerator.dropout


def _dropout(self: Any, inputs: Any, rate: Any, noise_shape: Any = None) -> Any:
    key = getattr(_dropout_keys, "key", None)
    if key is None:
        if inputs.dtype == tf.float32:
            return _keras_dropout(self, inputs, rate, noise_shape)
        draw = self.random_uniform
    else:
        key[1] += 1
        draw = functools.partial(
            tf.random.stateless_uniform, seed=tf.random.experimental.stateless_fold_in(key[0], key[1])
        )
    # Drawn in bfloat16, the uniform numbers would have 7 bits: rate 0.1 would drop 13/128 of the
    # units (docs/performance.md, 'bf16 dropout').
    return tf.nn.experimental.general_dropout(
        inputs, rate, uniform_sampler=lambda shape, dtype: draw(shape=shape, dtype=tf.float32), noise_shape=noise_shape
    )


def install_repeatable_dropout() -> None:
    """Make every Keras dropout draw its mask through :func:`repeatable_dropout`'s generator.

    Replaces tf-keras's private ``RandomGenerator.dropout`` (named in ``setup.py``). Outside a
    :func:`repeatable_dropout` block a float32 dropout is Keras's own; a mixed-precision one
    draws its uniform numbers in float32. Idempotent.

    Example:
        >>> install_repeatable_dropout()
    """
    _keras_backend.RandomGenerator.dropout = _dropout


# Installed once, when TensorFlow is set up: every model, whoever builds it, then drops the
# same units under the same seed.
install_repeatable_dropout()


@contextlib.contextmanager
def repeatable_dropout(seed: Any) -> Iterator[None]:
    """Dropout masks drawn within the block depend only on ``seed`` and their order.

    Calling a model twice, each time in such a block with the same seed, drops the same units.
    Blocks nest; the outer one's count goes on after an inner one.

    Args:
        seed: an int32 tensor of shape [2].

    Example:
        >>> with repeatable_dropout(tf.constant([1, 2])):  # doctest: +SKIP
        ...     first = model(inputs, training=True)
    """
    saved = getattr(_dropout_keys, "key", None)
    _dropout_keys.key = [seed, 0]
    try:
        yield
    finally:
        _dropout_keys.key = saved


__all__ = ["tf", "keras", "np", "Bert4kerasTokenizer"]
