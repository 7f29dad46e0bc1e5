"""AnglE's mix for labelled pairs (Li & Li, ACL 2024; the authors' ``angle_emb``)::

    loss = cosine_w * CoSENT(scale=cosine_scale)
         + ibn_w * InBatchNegatives(positive pairs, scale=ibn_scale)
         + angle_w * AnglE(scale=angle_scale)

CoSENT and AnglE rank every pair of the batch by its label. The in-batch part is the multiple
negatives ranking loss (:mod:`cosent_tf.maths.mnrl`) of the pairs whose label is above
``positive_above``: the first sentence of each must pick its second sentence among the second
sentences of those pairs; a batch without a positive pair adds 0. The positive pairs are chosen
by a mask over the whole batch, not gathered, so that JAX can trace it (same values).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .angle import angle_similarities
from .mnrl import QUERY_TO_DOC, check_directions, in_batch_negatives
from .ops import Ops
from .pairs import interleaved_cosines, interleaved_vectors, pair_labels, ranking_loss


def positive_pairs_in_batch(
    ops: Ops, y_true: Any, y_pred: Any, scale: float, positive_above: float, directions: Sequence[str] = (QUERY_TO_DOC,)
) -> Any:
    """In-batch negatives over the positive pairs of an interleaved batch (see the module)."""
    vectors = interleaved_vectors(ops, y_pred)
    positive = pair_labels(ops, y_true, ops.dtype_name(vectors)) > ops.constant(positive_above, vectors)
    return in_batch_negatives(ops, vectors[::2], vectors[1::2][:, None, :], scale, directions, "joint", positive)


def cosent_ibn(
    ops: Ops,
    y_true: Any,
    y_pred: Any,
    cosine_w: float = 0.0,
    ibn_w: float = 20.0,
    angle_w: float = 1.0,
    cosine_scale: float = 20.0,
    ibn_scale: float = 20.0,
    angle_scale: float = 20.0,
    positive_above: float = 0.5,
    directions: Sequence[str] = (QUERY_TO_DOC,),
    global_batch: bool = True,
) -> Any:
    """The weighted mix of an interleaved batch (see the module); a part whose weight is 0 is
    not computed. ``global_batch`` gathers the vectors and labels of every replica first."""
    directions = check_directions(directions, "joint")
    vectors = interleaved_vectors(ops, y_pred)
    labels = ops.cast(ops.reshape(ops.convert_to_tensor(y_true), [-1]), ops.dtype_name(vectors))
    if global_batch:
        vectors, labels = ops.gather_across_replicas(vectors, labels)
    pairs = pair_labels(ops, labels, ops.dtype_name(vectors))
    total = ops.zeros([], ops.dtype_name(vectors))
    if cosine_w:
        cosines = ops.constant(cosine_scale, vectors) * interleaved_cosines(ops, vectors)
        total = total + ops.constant(cosine_w, vectors) * ranking_loss(ops, cosines, pairs)
    if ibn_w:
        in_batch = positive_pairs_in_batch(ops, labels, vectors, ibn_scale, positive_above, directions)
        total = total + ops.constant(ibn_w, vectors) * in_batch
    if angle_w:
        scores = ops.constant(angle_scale, vectors) * angle_similarities(ops, vectors)
        total = total + ops.constant(angle_w, vectors) * ranking_loss(ops, scores, pairs)
    return total
