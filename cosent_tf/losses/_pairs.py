"""Helpers shared by the losses that read interleaved sentence-pair batches."""

from __future__ import annotations

from typing import Any

from ..backend import tf


def compute_dtype(y_pred: tf.Tensor) -> tf.DType:
    """float64 stays float64 (for gradient checks); everything else is computed in float32."""
    return tf.float64 if y_pred.dtype == tf.float64 else tf.float32


# Under tf.distribute each replica computes the loss on its own slice of the batch, which is
# where an odd slice usually comes from.
_ODD_ROWS = (
    "an interleaved pair batch needs an even number of rows (rows 2k and 2k+1 are the two sentences of "
    "pair k), got {rows}. Under tf.distribute each replica gets its own slice of the batch: make the "
    "pairs per batch divisible by the number of replicas (strategy.num_replicas_in_sync)"
)


def check_interleaved(y_pred: tf.Tensor) -> list[Any]:
    """Raise if the batch cannot hold whole pairs (rows 2k and 2k+1 are one pair)."""
    rows = y_pred.shape[0]
    if rows is not None:
        if rows % 2:
            raise ValueError(_ODD_ROWS.format(rows=rows))
        return []
    return [tf.debugging.assert_equal(tf.shape(y_pred)[0] % 2, 0, message=_ODD_ROWS.format(rows="an odd number"))]


def pair_labels(y_true: Any, dtype: tf.DType) -> tf.Tensor:
    """One label per pair, read from the pair's first row."""
    return tf.cast(tf.reshape(y_true, [-1])[::2], dtype)


def interleaved_cosines(y_pred: tf.Tensor) -> tf.Tensor:
    """Cosine of rows 2k and 2k+1 for every pair k, in float32 (or float64)."""
    checks = check_interleaved(y_pred)
    with tf.control_dependencies(checks):
        vectors = tf.cast(y_pred, compute_dtype(y_pred))
    first = tf.math.l2_normalize(vectors[::2], axis=1)
    second = tf.math.l2_normalize(vectors[1::2], axis=1)
    return tf.reduce_sum(first * second, axis=1)


def gather_across_replicas(*tensors: tf.Tensor) -> tuple[tf.Tensor, ...]:
    """Each tensor concatenated over the replicas of a tf.distribute strategy (replica order),
    or unchanged with one replica or outside a replica context.

    A ranking loss needs this: each replica ranks the whole global batch instead of its own
    slice. ``all_gather``'s gradient sums what every replica sends back and keeps this
    replica's rows, so with every replica computing the same global loss L each one's rows
    get R times dL/d(rows); Keras divides each replica's loss by R (as for any loss averaged
    over the global batch) and sums the replicas' gradients, so the update equals one
    device's on the global batch. A custom training loop must divide by R likewise.
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return tensors
    return tuple(context.all_gather(tensor, axis=0) for tensor in tensors)
