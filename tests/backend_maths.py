"""What the tests written once over both Kerases (the losses, the head, the pooling layers) compute
with: a value and its gradient on this process's backend, and arrays back as NumPy.

Such a test module imports ``keras`` and the classes from :mod:`cosent_tf.process_keras`,
:mod:`cosent_tf.losses` and :mod:`cosent_tf.layers` (never ``cosent_tf.backend`` or
tests/harness.py, which are Keras 2's): the Keras 2 suite collects it where it lies, and a module of
the Keras 3 suite imports its tests, so that one body runs on tf-keras and on Keras 3's TensorFlow
and JAX backends.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from cosent_tf.process_keras import KERAS_MAJOR, keras, ops

BACKEND = keras.backend.backend()  # "tensorflow" under tf-keras
# float64 inputs are computed in float64, except on JAX, which keeps to float32 unless told otherwise
HAS_FLOAT64 = BACKEND != "jax"

__all__ = [
    "BACKEND",
    "HAS_FLOAT64",
    "KERAS_MAJOR",
    "bfloat16_rounded",
    "cast",
    "numpy_of",
    "loss_value_and_gradient",
    "value_and_gradient",
    "value_and_gradients",
]


def numpy_of(x: Any) -> np.ndarray:
    """A tensor of either Keras (or a NumPy array) as a NumPy array."""
    if hasattr(x, "numpy"):
        return x.numpy()
    return np.asarray(x)


def cast(x: Any, dtype: str) -> Any:
    """``x`` as a tensor of ``dtype`` (``"bfloat16"`` too) on this process's backend."""
    return ops().cast(ops().convert_to_tensor(x), dtype)


def value_and_gradient(function: Callable[[Any], Any], x: Any, dtype: str = "float32") -> tuple[float, np.ndarray]:
    """``function(x)`` (a scalar) and its gradient with respect to ``x``, computed from ``x`` cast to
    ``dtype``; the gradient comes back in float32 where ``dtype`` is bfloat16."""
    value, (gradient,), _ = value_and_gradients(lambda inputs: (function(inputs[0]), None), [x], dtype)
    return value, gradient


def loss_value_and_gradient(
    loss: Callable[[Any, Any], Any], y_true: Any, y_pred: Any, dtype: Optional[str] = None
) -> tuple[float, np.ndarray]:
    """``loss(y_true, y_pred)`` and its gradient with respect to ``y_pred``, computed from ``y_pred``
    in ``dtype``: by default float64 where ``y_pred`` is (and the backend has it), else float32."""
    if dtype is None:
        dtype = "float64" if np.asarray(y_pred).dtype == np.float64 else "float32"
    return value_and_gradient(lambda x: loss(y_true, x), y_pred, dtype)


def bfloat16_rounded(x: Any) -> np.ndarray:
    """``x`` rounded to bfloat16 on this backend, as float64: what a loss computing a bfloat16 input
    in float32 sees."""
    return numpy_of(cast(cast(np.asarray(x, np.float32), "bfloat16"), "float32")).astype(np.float64)


def value_and_gradients(
    function: Callable[[list], tuple[Any, Any]], xs: list, dtype: str = "float32"
) -> tuple[float, list[np.ndarray], Any]:
    """``function(xs)`` gives (a scalar, anything else): the scalar, its gradient with respect to
    each of ``xs`` (zeros where it does not depend on one), and the other thing, as NumPy.

    tf.GradientTape on TensorFlow (both Kerases), jax.value_and_grad on JAX (jit-compiled as a whole:
    eager JAX compiles every primitive again for every new shape).
    """
    xs = [np.asarray(x, np.float64 if dtype == "float64" else np.float32) for x in xs]
    if BACKEND == "jax":
        import jax

        def objective(arrays):
            value, other = function([cast(a, dtype) for a in arrays])
            return ops().cast(value, "float32"), other

        (value, other), gradients = jax.jit(jax.value_and_grad(objective, has_aux=True))(
            [jax.numpy.asarray(x) for x in xs]
        )
        return float(value), [np.asarray(g, np.float32 if dtype != "float64" else None) for g in gradients], other
    import tensorflow as tf

    tensors = [tf.constant(x) for x in xs]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        value, other = function([tf.cast(t, dtype) for t in tensors])
    gradients = tape.gradient(value, tensors)
    arrays = [np.zeros_like(x) if g is None else tf.convert_to_tensor(g).numpy() for x, g in zip(xs, gradients)]
    other = tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, other)
    return float(value), arrays, other
