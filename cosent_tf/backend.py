"""The one place that knows about bert4keras and TensorFlow quirks at import and build time.

Everything else in the package imports ``keras`` and ``tf`` from here and reads as plain
Keras 2. What this module works around:

* bert4keras needs Keras 2: ``TF_USE_LEGACY_KERAS=1`` makes ``tf.keras`` the tf-keras
  package and ``TF_KERAS=1`` makes bert4keras use it. Both must be set before TensorFlow
  resolves ``tf.keras``, so this module sets them at import time.
* Since Keras 2.10 an unseeded initializer instance repeats its values on every call,
  and bert4keras hands one instance to the query, key, value and output kernels of an
  attention block, so a model built from scratch starts with Q = K = V = O. The
  transformer classes built here draw fresh values on every call instead.
* bert4keras creates a Dropout layer inside the attention's ``call``, so it takes the
  global dtype policy of the moment the model is traced: a (mixed-)bfloat16 model traced
  under a float32 policy fails. ``model_precision`` restores the model's own policy.
* TensorFlow's native code prints start-up notices (absl, oneDNN, CPU features, CUDA probing)
  that ``TF_CPP_MIN_LOG_LEVEL`` does not silence; they are held back while TensorFlow is
  imported here (every other line passes on; ``COSENT_TF_VERBOSE=1`` keeps them).
* tensorflow-text (WordPiece inside a graph, for export) is imported only when needed:
  it registers ops at import and is not needed for training.
* Micro-batches (:mod:`cosent_tf.training.gradient_cache`) run each chunk of a batch twice and need
  the same dropout masks both times: every Keras dropout draws its mask through
  ``RandomGenerator.dropout``, which is replaced here by one that, inside
  :func:`repeatable_dropout`, draws from a stateless generator (and otherwise is Keras's own).
  The replacement also draws a mixed-precision model's masks from float32 uniform numbers:
  Keras draws them in the compute dtype, and bfloat16's 7 bits make rate 0.1 drop 13/128
  of the units.
* Keras's Dense runs a (batch, tokens, features) input through ``tensordot``, which puts a
  reshape between the matmul and its bias and activation, so TensorFlow's oneDNN remapper
  cannot fuse them. bert4keras's attention and feed-forward blocks are given
  :class:`TokenDense` instead, which multiplies the tokens as one 2-D matrix and reshapes
  after the activation: matmul, bias and GELU then run as one fused op.
* ``COSENT_TF_CPU_DEVICES=N`` splits the CPU into N logical devices (for trying
  :mod:`cosent_tf.training.distribute` without accelerators); TensorFlow takes that only before its
  runtime starts, so it happens at import.
* TensorFlow's default CPU allocator hands large buffers (a 21128-row embedding's
  gradient, say) back to the system and faults them in again on the next step.
  ``TF_CPU_ALLOCATOR_USE_BFC=1`` (set here unless already set) keeps them in
  TensorFlow's own BFC pool.
* oneDNN 3.7 (bundled with TensorFlow 2.21) can hand a matmul over a size-1 dimension a
  cached primitive made for the same shapes with other strides on that dimension, which
  may need a larger scratchpad than the one TensorFlow allocated (fixed in oneDNN 3.11,
  uxlfoundation/oneDNN#5043); the primitive then writes past the scratchpad into whatever
  tensor the allocator put next to it. [CLS] pooling's single query
  (:func:`cosent_tf.models.builders.first_token_output`) makes such matmuls in every training
  step. oneDNN's own primitive cache is therefore off
  (``ONEDNN_PRIMITIVE_CACHE_CAPACITY=0``, set here unless already set).
* ``TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1`` lets oneDNN keep each fused Dense's weights in its
  blocked layout, reordered once, which is what its AMX kernel needs: bf16 encoding on an
  Intel Xeon with AMX gained 1.30-1.35x for BERT-base and 1.05-1.17x for the small model
  (``docs/performance.md``, item 13). TensorFlow then never reads those weights again, so a
  model trained in such a process would go on computing with its first weights: a run
  (:func:`check_weights_may_change`) and :class:`TokenDense`, traced for training, refuse.
  The ``cosent-tf`` script sets it for its bf16 inference commands on a CPU with AMX
  (:func:`cosent_tf.cli.keeps_weights_in_amx_layout`).

The package relies on private internals of its pinned stack in these places, all named
in ``setup.py``: bert4keras's transformer classes and tf-keras's ``RandomGenerator.dropout``
(here), tf-keras's ``BackupAndRestore`` hooks (:class:`cosent_tf.callbacks.StepBackup`) and
Adam's slot bookkeeping (:class:`cosent_tf.optimizers.FusedAdam`); :func:`random_seed` also
reads TensorFlow's eager seed state.
"""

import contextlib
import dataclasses
import functools
import os
import random
import re
import sys
import tempfile
import threading
from collections.abc import Iterator

import numpy as np

from . import environment  # before TensorFlow: Keras 2 and the allocator settings

# What TensorFlow's native code prints at start-up whatever TF_CPP_MIN_LOG_LEVEL says: absl's
# notice, oneDNN's, the CPU-feature note, and CUDA probing on a machine without a GPU.
TENSORFLOW_STARTUP_LINES = re.compile(
    r"All log messages before absl::InitializeLog|oneDNN custom operations are on|Could not find cuda drivers"
    r"|failed call to cuInit|Unable to register cu|This TensorFlow binary is optimized to use"
    r"|rebuild TensorFlow with the appropriate compiler flags"
)


@contextlib.contextmanager
def _startup_lines_held_back():
    """For the block, hold back what native code writes to stderr (file descriptor 2); then
    pass on every line but TensorFlow's start-up lines. ``COSENT_TF_VERBOSE=1`` shows them."""
    if os.environ.get("COSENT_TF_VERBOSE") == "1":
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable stderr: nothing to hold back
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().decode("utf-8", "replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not TENSORFLOW_STARTUP_LINES.search(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


with _startup_lines_held_back():
    import tensorflow as tf  # noqa: E402

    tf.config.list_physical_devices()  # probes the devices now, while their notices are held back
import tf_keras as keras  # noqa: E402

if os.environ["TF_USE_LEGACY_KERAS"] != "1" or tf.keras.__name__.split(".")[0] != "tf_keras":
    raise ImportError(
        "cosent_tf needs Keras 2 (tf-keras): set TF_USE_LEGACY_KERAS=1 before TensorFlow "
        "is first imported, or import cosent_tf first."
    )

from bert4keras import layers as _b4k_layers  # noqa: E402
from bert4keras import models as _b4k_models  # noqa: E402
from bert4keras.tokenizers import Tokenizer as Bert4kerasTokenizer  # noqa: E402
from tensorflow.python.eager import context as _eager_context  # noqa: E402
from tf_keras.src import backend as _keras_backend  # noqa: E402

from .errors import ConfigError, lookup  # noqa: E402

# COSENT_TF_CPU_DEVICES=N splits the CPU into N logical devices, which a MirroredStrategy uses
# as N replicas (see cosent_tf.training.distribute): a way to try, and test, training on several devices
# without accelerators. TensorFlow takes the split only before its runtime starts: hence here.
CPU_DEVICES_VARIABLE = "COSENT_TF_CPU_DEVICES"


def _split_cpu():
    wanted = os.environ.get(CPU_DEVICES_VARIABLE)
    if not wanted:
        return
    if not wanted.isdigit() or int(wanted) < 1:
        raise ConfigError(f"{CPU_DEVICES_VARIABLE}={wanted!r}: give a number of devices, 1 or more")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * int(wanted))
    except RuntimeError:  # the runtime had started (TensorFlow was used before cosent_tf was imported)
        have = len(tf.config.list_logical_devices("CPU"))
        if have != int(wanted):
            raise ConfigError(
                f"{CPU_DEVICES_VARIABLE}={wanted}, but TensorFlow had already started with {have} CPU device(s): "
                "import cosent_tf before using TensorFlow"
            ) from None


_split_cpu()


def weights_assumed_frozen() -> bool:
    """Whether TensorFlow's oneDNN matmuls may take their weights for constants in this process
    (``TF_ONEDNN_ASSUME_FROZEN_WEIGHTS`` true now, or when cosent_tf was imported)."""
    values = (environment.FROZEN_WEIGHTS_AT_IMPORT, os.environ.get(environment.FROZEN_WEIGHTS_VARIABLE))
    return any((value or "").strip().lower() in ("1", "true") for value in values)


def check_weights_may_change() -> None:
    """A ConfigError where training could not change what the model computes (see above)."""
    if weights_assumed_frozen():
        raise ConfigError(
            f"{environment.FROZEN_WEIGHTS_VARIABLE} is set in this process, so TensorFlow would keep computing "
            "with the first weights it saw and training would not change the model: it is for processes that "
            "only encode or serve; train without it"
        )


class TokenDense(keras.layers.Dense):
    """Dense over the last axis that computes a rank-3 or higher input as one 2-D matmul.

    Same arithmetic as Keras's Dense (whose ``tensordot`` also multiplies a 2-D view), but
    bias and activation come before the reshape back, so oneDNN fuses matmul, bias and GELU
    into one op instead of three passes over the hidden states: up to a fifth more sentences
    a second in encoding here, least (2%) for BERT-base in float32 (profile and figures in
    ``docs/performance.md``).
    """

    def call(self, inputs, training=None):
        if training is True:  # any training step, model.fit's or a custom loop's, traces this
            check_weights_may_change()
        rank = inputs.shape.rank if isinstance(inputs, tf.Tensor) else None
        if rank is None or rank <= 2:
            return super().call(inputs)
        if inputs.dtype.base_dtype != self._compute_dtype_object.base_dtype:
            inputs = tf.cast(inputs, self._compute_dtype_object)
        outputs = tf.matmul(tf.reshape(inputs, [-1, inputs.shape[-1]]), self.kernel)
        if training is True and outputs.dtype == tf.bfloat16:
            # Fused with bias and GELU, a matmul runs oneDNN's inner product, whose AMX kernel
            # needs weights TensorFlow may take for constants, not weights a step changes. Kept
            # apart (grappler fuses across neither this op nor a cast), it runs oneDNN's matmul,
            # which reaches AMX as the backward pass's matmuls do (docs/performance.md, item 14).
            outputs = tf.ensure_shape(outputs, outputs.shape)
        if self.use_bias:
            outputs = tf.nn.bias_add(outputs, self.bias)
        if self.activation is not None:
            outputs = self.activation(outputs)
        outputs = tf.reshape(outputs, tf.concat([tf.shape(inputs)[:-1], [self.units]], axis=0))
        outputs.set_shape(inputs.shape[:-1].concatenate(self.units))
        return outputs


# bert4keras's blocks make their Dense layers from these module globals.
_b4k_layers.Dense = _b4k_models.Dense = TokenDense


@dataclasses.dataclass(frozen=True)
class Architecture:
    """A transformer family ``build_encoder(architecture=...)`` accepts.

    ``word_level``: its vocabulary is of words (jieba pre-tokenisation, as WoBERT and the
    original RoFormer). ``learned_positions``: positions are a table of
    ``max_position_embeddings`` rows, which bounds maxlen. ``first_token_only``: its last
    block can be computed at [CLS] alone (BERT-style blocks with absolute positions).
    """

    base: type
    word_level: bool = False
    learned_positions: bool = True
    first_token_only: bool = True


ARCHITECTURES = {
    "bert": Architecture(_b4k_models.BERT),
    "roberta": Architecture(_b4k_models.BERT),  # RoBERTa-wwm checkpoints are BERT format
    "wobert": Architecture(_b4k_models.BERT, word_level=True),
    "nezha": Architecture(_b4k_models.NEZHA, learned_positions=False, first_token_only=False),
    "albert": Architecture(_b4k_models.ALBERT, first_token_only=False),  # one block shared by all depths
    "roformer": Architecture(_b4k_models.RoFormer, word_level=True, learned_positions=False, first_token_only=False),
}


def get_architecture(name: str) -> Architecture:
    """The :class:`Architecture` called ``name``; a ConfigError listing the choices otherwise."""
    return lookup(ARCHITECTURES, name, "architecture", sorted(ARCHITECTURES))
    return ARCHITECTURES[name]


@keras.utils.register_keras_serializable(package="cosent_tf")
class IndependentTruncatedNormal(keras.initializers.Initializer):
    """BERT's truncated normal initializer, drawing new values on every call.

    Values come from TensorFlow's stateful generator, so ``keras.utils.set_random_seed``
    makes a whole model reproducible while every kernel still differs from the others.
    """

    def __init__(self, stddev=0.02):
        self.stddev = stddev

    def __call__(self, shape, dtype=None, **kwargs):
        dtype = tf.as_dtype(dtype or keras.backend.floatx())
        return tf.random.truncated_normal(shape, stddev=self.stddev, dtype=dtype)

    def get_config(self):
        return {"stddev": self.stddev}


class _IndependentInitializer:
    @property
    def initializer(self):
        return IndependentTruncatedNormal(stddev=0.02)


def transformer_class(name: str) -> type:
    """The bert4keras transformer class of architecture ``name``, with a working initializer."""
    base = get_architecture(name).base
    return type(base.__name__, (_IndependentInitializer, base), {})


def import_tensorflow_text():
    try:
        import tensorflow_text
    except ImportError as e:
        raise ConfigError(
            "in-graph tokenisation (export) needs tensorflow-text: "
            f"pip install tensorflow-text=={tf.__version__.rsplit('.', 1)[0]}.*"
        ) from e
    return tensorflow_text


# --precision: its Keras dtype policy. fp16 is for GPUs without bfloat16 (T4, V100); it trains
# with dynamic loss scaling (cosent_tf.optimizers.build_optimizer) and is slow on a CPU.
PRECISIONS = {"float32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def policy_name(precision: str) -> str:
    """The Keras dtype policy of a ``--precision`` value (``float32``, ``bf16`` or ``fp16``)."""
    if precision in PRECISIONS.values():
        return precision
    return lookup(PRECISIONS, precision, "precision")


def inference_policy_name(precision: str) -> str:
    """The dtype policy of a model that only runs (a loaded matcher, an export) at ``precision``.

    A mixed policy keeps float32 weights and casts each one to the compute dtype on every
    call; a model that is never trained can keep them in that dtype instead (``bfloat16``
    for ``bf16``). Its outputs are the same bit for bit, with half the weight memory and
    no casts per call.
    """
    return policy_name(precision).removeprefix("mixed_")


@contextlib.contextmanager
def dtype_policy(policy: str) -> Iterator[None]:
    """Within the block the global Keras dtype policy is ``policy``; the previous one is put back."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


@contextlib.contextmanager
def model_precision(model: keras.Model) -> Iterator[None]:
    """Within the block the global dtype policy is the one ``model`` was built under.

    Trace a model's call inside this block (see the module docstring).
    """
    other = (layer.dtype_policy.name for layer in model.layers if layer.dtype_policy.name != "float32")
    with dtype_policy(next(other, "float32")):
        yield


@contextlib.contextmanager
def random_seed(seed: int) -> Iterator[None]:
    """Seed Python, NumPy, TensorFlow and Keras for the block, as ``keras.utils.set_random_seed``
    does; afterwards each generator is back in the state it had before."""
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


# Micro-batches (cosent_tf.training.gradient_cache) run every chunk of a batch twice and need the same
# dropout masks both times. Every Keras dropout, bert4keras's included (it makes its attention
# dropout inside the layer's call), draws its mask through RandomGenerator.dropout: inside
# `repeatable_dropout(seed)` that draws from a stateless generator keyed by the seed and the
# dropout's place in the order of calls, which is the same on each run of the same model.
# Outside such a block a float32 dropout is Keras's own; any other draws in float32 (below).
_dropout_keys = threading.local()
_keras_dropout = _keras_backend.RandomGenerator.dropout


def _dropout(self, inputs, rate, noise_shape=None):
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
    # Drawn in bfloat16, the uniform numbers would have 7 bits: rate 0.1 would drop 13/128 of
    # the units, and the draw itself is slower than in float32 on a CPU (docs/performance.md).
    return tf.nn.experimental.general_dropout(
        inputs, rate, uniform_sampler=lambda shape, dtype: draw(shape=shape, dtype=tf.float32), noise_shape=noise_shape
    )


_keras_backend.RandomGenerator.dropout = _dropout


@contextlib.contextmanager
def repeatable_dropout(seed) -> Iterator[None]:
    """Dropout masks drawn within the block depend only on ``seed`` (an int32 tensor of shape
    [2]) and their order: calling a model twice, each time in such a block with the same seed,
    drops the same units. Blocks nest; the outer one's count goes on after an inner one."""
    saved = getattr(_dropout_keys, "key", None)
    _dropout_keys.key = [seed, 0]
    try:
        yield
    finally:
        _dropout_keys.key = saved


__all__ = ["tf", "keras", "np", "Bert4kerasTokenizer"]
