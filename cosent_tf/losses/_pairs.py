"""The pair helpers of :mod:`cosent_tf.maths.pairs` on TensorFlow, for the Keras 2 losses."""

from __future__ import annotations

from typing import Any

from ..backend import tf
from ..maths import pairs
from ..maths.ops import tensorflow_ops


def compute_dtype(y_pred: tf.Tensor) -> tf.DType:
    """float64 stays float64 (for gradient checks); everything else is computed in float32."""
    return tf.as_dtype(tensorflow_ops().compute_dtype(y_pred))


def check_interleaved(y_pred: tf.Tensor) -> list[Any]:
    """Raise if the batch cannot hold whole pairs (rows 2k and 2k+1 are one pair); the checks to
    run with a batch whose size is known only then."""
    rows = y_pred.shape[0]
    if rows is not None:
        if rows % 2:
            raise ValueError(pairs.ODD_ROWS.format(rows=rows))
        return []
    return [tf.debugging.assert_equal(tf.shape(y_pred)[0] % 2, 0, message=pairs.ODD_ROWS.format(rows="an odd number"))]


def pair_labels(y_true: Any, dtype: tf.DType) -> tf.Tensor:
    """One label per pair, read from the pair's first row."""
    return pairs.pair_labels(tensorflow_ops(), y_true, tf.as_dtype(dtype).name)


def interleaved_cosines(y_pred: tf.Tensor) -> tf.Tensor:
    """Cosine of rows 2k and 2k+1 for every pair k, in float32 (or float64)."""
    return pairs.interleaved_cosines(tensorflow_ops(), y_pred)


def gather_across_replicas(*tensors: tf.Tensor) -> tuple[tf.Tensor, ...]:
    """:meth:`cosent_tf.maths.ops.Ops.gather_across_replicas` on TensorFlow."""
    return tensorflow_ops().gather_across_replicas(*tensors)
