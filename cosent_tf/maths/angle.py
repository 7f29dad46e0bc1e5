"""AnglE: CoSENT's ranking on an angle score in complex space (Li & Li, ACL 2024)::

    s(x, y) = | sum_m Re(z_m) + Im(z_m) |,  z = x / y  (x, y normalised, read as complex vectors)
    loss = log(1 + sum_{label(i,j) > label(k,l)} exp(scale * (s(u_k, u_l) - s(u_i, u_j))))

A vector's first half holds the real parts and its second half the imaginary parts (an odd width
gets a zero last dimension). For unit vectors the score is
``|cos(x, y) + sum(Im(x) * Re(y) - Re(x) * Im(y))|``; it is not a geometric angle. This is
sentence-transformers' ``AnglELoss`` (``pairwise_angle_sim``).
"""

from __future__ import annotations

from typing import Any

from .ops import Ops
from .pairs import interleaved_vectors, pair_labels, ranking_loss


def angle_similarities(ops: Ops, y_pred: Any) -> Any:
    """The score s of rows 2k and 2k+1 for every pair k, in float32 (or float64)."""
    vectors = interleaved_vectors(ops, y_pred)
    width = ops.dim(vectors, 1)
    vectors = ops.normalize(ops.pad(vectors, [[0, 0], [0, width % 2]]), axis=1)
    half = (width + 1) // 2
    first, second = vectors[::2], vectors[1::2]
    cosines = ops.sum(first * second, axis=1)
    sines = ops.sum(first[:, half:] * second[:, :half] - first[:, :half] * second[:, half:], axis=1)
    return ops.abs(cosines + sines)


def angle(ops: Ops, y_true: Any, y_pred: Any, scale: float = 20.0, global_batch: bool = True) -> Any:
    """The AnglE loss of an interleaved batch (the formula above); ``global_batch`` ranks the
    whole batch of every replica (:meth:`~cosent_tf.maths.ops.Ops.gather_across_replicas`)."""
    scores = angle_similarities(ops, y_pred)
    labels = pair_labels(ops, y_true, ops.dtype_name(scores))
    if global_batch:
        scores, labels = ops.gather_across_replicas(scores, labels)
    return ranking_loss(ops, ops.constant(scale, scores) * scores, labels)
