"""Interleaved sentence-pair batches, and the ranking that CoSENT and its relatives share."""

from __future__ import annotations

from typing import Any

from .ops import Ops

# Under tf.distribute each replica computes the loss on its own slice of the batch, which is
# where an odd slice usually comes from.
ODD_ROWS = (
    "an interleaved pair batch needs an even number of rows (rows 2k and 2k+1 are the two sentences of "
    "pair k), got {rows}. Under tf.distribute each replica gets its own slice of the batch: make the "
    "pairs per batch divisible by the number of replicas (strategy.num_replicas_in_sync)"
)


def interleaved_vectors(ops: Ops, y_pred: Any) -> Any:
    """``y_pred`` in the compute dtype, checked to hold whole pairs (rows 2k and 2k+1)."""
    return ops.check_rows(ops.as_compute(y_pred), 2, ODD_ROWS)


def pair_labels(ops: Ops, y_true: Any, dtype: str) -> Any:
    """One label per pair, read from the pair's first row."""
    return ops.cast(ops.reshape(ops.convert_to_tensor(y_true), [-1])[::2], dtype)


def interleaved_cosines(ops: Ops, y_pred: Any) -> Any:
    """Cosine of rows 2k and 2k+1 for every pair k, in float32 (or float64)."""
    vectors = interleaved_vectors(ops, y_pred)
    first = ops.normalize(vectors[::2], axis=1)
    second = ops.normalize(vectors[1::2], axis=1)
    return ops.sum(first * second, axis=1)


def ranking_loss(ops: Ops, scores: Any, labels: Any) -> Any:
    """log(1 + sum over label_i > label_j of exp(score_j - score_i)), computed stably.

    ``scores`` and ``labels`` are vectors of one value per pair. Pairs whose labels are
    not ordered contribute exp(-inf) = 0; the leading 0 is the "1 +" term, so the
    log-sum-exp never overflows however large the score differences get.
    """
    differences = scores[None, :] - scores[:, None]  # [i, j] = score_j - score_i
    ordered = labels[:, None] > labels[None, :]
    masked = ops.where(ordered, differences, ops.minus_infinity(scores))
    terms = ops.concatenate([ops.zeros([1], ops.dtype_name(scores)), ops.reshape(masked, [-1])], axis=0)
    return ops.logsumexp(terms)


def cosent(ops: Ops, y_true: Any, y_pred: Any, scale: float = 20.0, global_batch: bool = True) -> Any:
    """CoSENT of an interleaved batch (the formula: :class:`cosent_tf.losses.CoSENTLoss`)."""
    cosines = interleaved_cosines(ops, y_pred)
    labels = pair_labels(ops, y_true, ops.dtype_name(cosines))
    if global_batch:
        cosines, labels = ops.gather_across_replicas(cosines, labels)
    return ranking_loss(ops, ops.constant(scale, cosines) * cosines, labels)
