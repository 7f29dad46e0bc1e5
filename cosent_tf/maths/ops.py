"""The tensor functions the maths needs, on TensorFlow (Keras 2) or on ``keras.ops`` (Keras 3).

The names follow ``keras.ops`` (numpy's): :func:`keras_ops` is ``keras.ops`` with the few things
it lacks, and :func:`tensorflow_ops` gives the same names over ``tf``. Besides the numpy-like
functions an :class:`Ops` knows its framework's ways with three things numpy does not have: the
replicas of a ``tf.distribute`` strategy (:meth:`Ops.gather_across_replicas`), checks that can
only run with the data (:meth:`Ops.check_rows`), and the dtypes the maths computes in.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np


class Ops:
    """What every framework's ops share; subclasses give the tensor functions."""

    name = ""

    if TYPE_CHECKING:  # the tensor functions, each subclass's own (keras.ops names)

        def __getattr__(self, name: str) -> Any: ...

    def compute_dtype(self, x: Any) -> str:
        """float64 stays float64 (for gradient checks); every other dtype is computed in float32."""
        return "float64" if self.dtype_name(x) == "float64" else "float32"

    def as_compute(self, x: Any) -> Any:
        """``x`` as a tensor in :meth:`compute_dtype`."""
        x = self.convert_to_tensor(x)
        return self.cast(x, self.compute_dtype(x))

    def constant(self, value: Any, like: Any) -> Any:
        """``value`` as a tensor of ``like``'s dtype."""
        return self.cast(self.convert_to_tensor(np.asarray(value)), self.dtype_name(like))

    def minus_infinity(self, like: Any) -> Any:
        return self.constant(-np.inf, like)

    def dim(self, x: Any, axis: int) -> Any:
        """The size of ``x`` along ``axis``: an int when it is static, else a tensor."""
        size = x.shape[axis]
        return size if size is not None else self.shape(x)[axis]

    def check_rows(self, x: Any, divisor: int, message: str) -> Any:
        """``x``, after making sure its first dimension is a multiple of ``divisor``.

        A static size is checked at once (ValueError with ``message``, ``{rows}`` filled in); a
        size known only when the graph runs is checked then, where the framework can."""
        rows = x.shape[0]
        if rows is not None:
            if rows % divisor:
                raise ValueError(message.format(rows=rows))
            return x
        return self._check_rows_when_run(x, divisor, message.format(rows="a number that is not"))

    def _check_rows_when_run(self, x: Any, divisor: int, message: str) -> Any:
        return x

    def gather_across_replicas(self, *tensors: Any) -> tuple[Any, ...]:
        """Each tensor concatenated over the replicas of a ``tf.distribute`` strategy, in replica
        order; unchanged with one replica, outside a replica context, and on backends whose
        losses already see the global batch (JAX's ``keras.distribution`` shards one global array).

        A ranking loss needs this: each replica ranks the whole global batch instead of its own
        slice. ``all_gather``'s gradient sums what every replica sends back and keeps this
        replica's rows, so with every replica computing the same global loss L each one's rows
        get R times dL/d(rows); Keras divides each replica's loss by R (as for any loss averaged
        over the global batch) and sums the replicas' gradients, so the update equals one
        device's on the global batch. A custom training loop must divide by R likewise.
        """
        return tensors


def _replica_gather(tf: Any, tensors: tuple[Any, ...]) -> tuple[Any, ...]:
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return tensors
    return tuple(context.all_gather(tensor, axis=0) for tensor in tensors)


def _tf_check_rows_when_run(tf: Any, x: Any, divisor: int, message: str) -> Any:
    check = tf.debugging.assert_equal(tf.shape(x)[0] % divisor, 0, message=message)
    with tf.control_dependencies([check]):
        return tf.identity(x)  # a cast to the same dtype would make no op to hold the check


class TensorFlowOps(Ops):
    """The functions over ``tf``, for the Keras 2 engine (tf-keras)."""

    name = "tensorflow"

    def __init__(self, tf: Any) -> None:
        self.tf = tf

    def convert_to_tensor(self, x: Any) -> Any:
        return self.tf.convert_to_tensor(x)

    def dtype_name(self, x: Any) -> str:
        return self.tf.as_dtype(x.dtype).name

    def cast(self, x: Any, dtype: str) -> Any:
        return self.tf.cast(x, dtype)

    def shape(self, x: Any) -> Any:
        return self.tf.shape(x)

    def reshape(self, x: Any, shape: Any) -> Any:
        return self.tf.reshape(x, shape)

    def transpose(self, x: Any, axes: Any) -> Any:
        return self.tf.transpose(x, axes)

    def concatenate(self, xs: Any, axis: int = 0) -> Any:
        return self.tf.concat(list(xs), axis=axis)

    def pad(self, x: Any, pad_width: Any) -> Any:
        return self.tf.pad(x, pad_width)

    def where(self, condition: Any, x: Any, y: Any) -> Any:
        return self.tf.where(condition, x, y)

    def zeros(self, shape: Any, dtype: str = "float32") -> Any:
        return self.tf.zeros(shape, dtype)

    def ones(self, shape: Any, dtype: str = "float32") -> Any:
        return self.tf.ones(shape, dtype)

    def zeros_like(self, x: Any) -> Any:
        return self.tf.zeros_like(x)

    def eye(self, n: Any, dtype: str = "float32") -> Any:
        return self.tf.eye(n, dtype=dtype)

    def arange(self, n: Any) -> Any:
        return self.tf.range(n)

    def equal(self, x: Any, y: Any) -> Any:
        return self.tf.equal(x, y)

    def not_equal(self, x: Any, y: Any) -> Any:
        return self.tf.not_equal(x, y)

    def sum(self, x: Any, axis: Any = None) -> Any:
        return self.tf.reduce_sum(x, axis=axis)

    def max(self, x: Any, axis: Any = None) -> Any:
        return self.tf.reduce_max(x, axis=axis)

    def maximum(self, x: Any, y: Any) -> Any:
        return self.tf.maximum(x, y)

    def minimum(self, x: Any, y: Any) -> Any:
        return self.tf.minimum(x, y)

    def clip(self, x: Any, low: Any, high: Any) -> Any:
        return self.tf.clip_by_value(x, low, high)

    def logsumexp(self, x: Any, axis: Any = None) -> Any:
        return self.tf.reduce_logsumexp(x, axis=axis)

    def log_softmax(self, x: Any, axis: int = -1) -> Any:
        return self.tf.nn.log_softmax(x, axis=axis)

    def matmul(self, x: Any, y: Any) -> Any:
        return self.tf.matmul(x, y)

    def matmul_transpose_b(self, x: Any, y: Any) -> Any:
        """``x @ y.T`` for matrices, in one kernel (a transposed copy would round otherwise)."""
        return self.tf.matmul(x, y, transpose_b=True)

    def normalize(self, x: Any, axis: int = -1) -> Any:
        """Rows of unit L2 norm; a zero row stays zero (``tf.math.l2_normalize``'s epsilon)."""
        return self.tf.math.l2_normalize(x, axis=axis)

    def take(self, x: Any, indices: Any, axis: int = 0) -> Any:
        return self.tf.gather(x, indices, axis=axis)

    def take_along_axis(self, x: Any, indices: Any, axis: int) -> Any:
        return self.tf.experimental.numpy.take_along_axis(x, indices, axis=axis)

    def one_hot(self, indices: Any, depth: int, dtype: str = "float32") -> Any:
        return self.tf.one_hot(indices, depth, dtype=dtype)

    def abs(self, x: Any) -> Any:
        return self.tf.abs(x)

    def square(self, x: Any) -> Any:
        return self.tf.square(x)

    def relu(self, x: Any) -> Any:
        return self.tf.nn.relu(x)

    def mean(self, x: Any, axis: Any = None) -> Any:
        return self.tf.reduce_mean(x, axis=axis)

    def _check_rows_when_run(self, x: Any, divisor: int, message: str) -> Any:
        return _tf_check_rows_when_run(self.tf, x, divisor, message)

    def gather_across_replicas(self, *tensors: Any) -> tuple[Any, ...]:
        return _replica_gather(self.tf, tensors)


class KerasOps(Ops):
    """``keras.ops`` (Keras 3, any backend), with the few functions it spells otherwise."""

    def __init__(self, keras: Any) -> None:
        self.keras = keras
        self.ops = keras.ops
        self.name = keras.backend.backend()

    def __getattr__(self, name: str) -> Any:
        # the numpy-like functions that keras.ops has under the same names
        return getattr(self.ops, name)

    def dtype_name(self, x: Any) -> str:
        return self.keras.backend.standardize_dtype(x.dtype)

    def normalize(self, x: Any, axis: int = -1) -> Any:
        # tf.math.l2_normalize's formula, so that both Kerases agree on tiny rows too
        # (keras.ops.normalize takes its epsilon on the norm, not on its square).
        squared = self.ops.sum(self.ops.square(x), axis=axis, keepdims=True)
        return x * self.ops.rsqrt(self.ops.maximum(squared, self.ops.cast(1e-12, self.dtype_name(x))))

    def take_along_axis(self, x: Any, indices: Any, axis: int) -> Any:
        return self.ops.take_along_axis(x, indices, axis=axis)

    def matmul_transpose_b(self, x: Any, y: Any) -> Any:
        """``x @ y.T`` for matrices; on TensorFlow the kernel the Keras 2 maths runs, so that both
        Kerases round alike (XLA folds the transpose into its dot on JAX)."""
        if self.name == "tensorflow":
            import tensorflow as tf

            return tf.matmul(x, y, transpose_b=True)
        return self.ops.matmul(x, self.ops.transpose(y))

    def _check_rows_when_run(self, x: Any, divisor: int, message: str) -> Any:
        if self.name == "tensorflow":
            import tensorflow as tf

            return _tf_check_rows_when_run(tf, x, divisor, message)
        return x  # JAX traces with static shapes: check_rows has already checked

    def gather_across_replicas(self, *tensors: Any) -> tuple[Any, ...]:
        if self.name != "tensorflow":
            return tensors
        import tensorflow as tf

        return _replica_gather(tf, tensors)

    def share_of_replicas(self, value: Any) -> Any:
        """``value`` divided by the replicas of the ``tf.distribute`` strategy in use (TensorFlow
        backend; unchanged on JAX, whose ``keras.distribution`` computes one loss on the global batch)."""
        if self.name != "tensorflow":
            return value
        import tensorflow as tf

        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return value if replicas == 1 else value * self.ops.cast(1.0 / replicas, self.dtype_name(value))


@functools.cache
def tensorflow_ops() -> TensorFlowOps:
    """The functions over ``tf`` (the Keras 2 engine's)."""
    from ..backend import tf

    return TensorFlowOps(tf)


def keras_ops() -> KerasOps:
    """The functions over ``keras.ops`` of the Keras 3 in this process, on its backend now."""
    import keras

    return KerasOps(keras)
