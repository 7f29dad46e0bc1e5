"""The one Keras of this process, for the code written once over both: the losses, the pooling
layers and the training heads (and every class that subclasses a Keras class) import ``keras`` and
the maths's :func:`ops` from here.

A process holds one Keras. Keras 3 is chosen by importing :mod:`cosent_tf.keras3` first (the
``cosent-tf ... --keras 3`` commands do); otherwise the Keras 2 engine is: tf-keras, set up by
:mod:`cosent_tf.backend`. keras-nlp wrote its layers once in the same way, over one alias of
``keras``, before it dropped Keras 2.

Example:
    >>> from cosent_tf.process_keras import KERAS_MAJOR, keras
    >>> KERAS_MAJOR, keras.__name__  # doctest: +SKIP
    (2, 'tf_keras')
"""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Iterator
from typing import Any, Callable, TypeVar

import numpy as np

from .environment import keras_dtype_policy
from .maths.ops import Ops, keras_ops, tensorflow_ops

# the package that every cosent-tf class is registered under, in both Kerases' registries
SERIALIZATION_PACKAGE = "cosent_tf"

Registered = TypeVar("Registered")

keras: Any
if "cosent_tf.keras3" in sys.modules:  # importing the package chose (and checked) Keras 3
    from .keras3.runtime import checked_keras, imported_quietly

    keras = checked_keras()
    # tf.data feeds either Keras and tf.distribute runs the strategies, on either backend
    tf: Any = imported_quietly("tensorflow")
    KERAS_MAJOR = 3
    _ops: Callable[[], Ops] = keras_ops
else:
    from .backend import dtype_policy, keras, random_seed, tf  # noqa: F401  (tf-keras's; the seed and policy reach into its state)

    KERAS_MAJOR = 2
    _ops = tensorflow_ops


def ops() -> Ops:
    """The tensor functions of this process's Keras that :mod:`cosent_tf.maths` computes with:
    ``tf`` under Keras 2, ``keras.ops`` on the Keras 3 backend in use."""
    return _ops()


def serializable(cls: type[Registered]) -> type[Registered]:
    """``cls`` registered for Keras's saving (``cosent_tf>Name``), so that a saved model holding it
    loads where cosent_tf's module has been imported."""
    return keras.saving.register_keras_serializable(package=SERIALIZATION_PACKAGE)(cls)


if KERAS_MAJOR == 3:

    def dtype_policy(policy: str) -> contextlib.AbstractContextManager[None]:
        """Within the block the global Keras dtype policy is ``policy``; the previous one is put back."""
        return keras_dtype_policy(keras, policy)

    @contextlib.contextmanager
    def random_seed(seed: int) -> Iterator[None]:
        """Seed Python, NumPy and Keras (and TensorFlow's global seed) for the block, as
        ``keras.utils.set_random_seed`` does; Python's and NumPy's generators are put back afterwards
        (Keras 3's and TensorFlow's global seeds stay at ``seed``: neither says what it was)."""
        python_state, numpy_state = random.getstate(), np.random.get_state()
        keras.utils.set_random_seed(seed)
        try:
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)
