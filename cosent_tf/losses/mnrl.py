"""Multiple negatives ranking: softmax cross-entropy over in-batch candidates (InfoNCE)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..maths import mnrl as maths
from ..maths.mnrl import (  # noqa: F401 (the directions, re-exported)
    DIRECTIONS,
    DOC_TO_DOC,
    DOC_TO_QUERY,
    PARTITION_MODES,
    QUERY_TO_DOC,
    QUERY_TO_QUERY,
    check_directions,
    check_group_size,
)
from ..process_keras import ops, serializable
from .base import BatchLoss


def grouped_vectors(y_pred: Any, group_size: int) -> Any:
    """``y_pred`` as (examples, group_size, d) in float32 (float64 stays float64), checking that the
    rows come in whole groups: at trace time when the batch size is static, else when run."""
    return maths.grouped_vectors(ops(), y_pred, group_size)


def in_batch_negatives_loss(
    anchors: Any,
    candidates: Any,
    scale: float,
    directions: Sequence[str] = (QUERY_TO_DOC,),
    partition_mode: str = "joint",
) -> Any:
    """Mean over anchors of the softmax cross-entropy that picks each anchor's own positive.

    ``anchors`` is (B, d); ``candidates`` is (B, k, d) with each anchor's positive at index 0
    and its hard negatives after it (:func:`cosent_tf.maths.mnrl.in_batch_negatives`).
    """
    return maths.in_batch_negatives(ops(), anchors, candidates, scale, directions, partition_mode)


def multiple_negatives_ranking_loss(
    y_true: Any,
    y_pred: Any,
    scale: float = 20.0,
    group_size: int = 2,
    directions: Sequence[str] = (QUERY_TO_DOC,),
    partition_mode: str = "joint",
    global_batch: bool = True,
) -> Any:
    """Multiple negatives ranking loss of a grouped batch; usable as ``compile(loss=...)``.

    See :class:`MultipleNegativesRankingLoss` for the formula, the inputs and the options;
    ``y_true`` is not read.
    """
    return maths.multiple_negatives_ranking(
        ops(), y_true, y_pred, scale, group_size, directions, partition_mode, global_batch
    )


@serializable
class MultipleNegativesRankingLoss(BatchLoss):
    """In-batch negatives (InfoNCE) for a feature-based model: each anchor must pick its own
    positive among every positive and hard negative of the batch.

    With ``B`` examples of an anchor ``a_i``, its positive ``p_i`` and hard negatives
    ``n_i1 .. n_ik``, the candidates ``D`` are every ``p_j`` and ``n_jm`` of the batch and::

        loss = mean_i [ log sum_{d in D} exp(scale * cos(a_i, d)) - scale * cos(a_i, p_i) ]

    ``directions`` adds candidate rows to each anchor's softmax, as sentence-transformers'
    ``MultipleNegativesRankingLoss`` does (checked against sentence-transformers 6.2):
    ``doc_to_query`` scores ``p_i`` against every anchor (the symmetric loss),
    ``query_to_query`` ``a_i`` against every other anchor, ``doc_to_doc`` ``p_i`` against the
    candidates of the other examples. ``partition_mode="joint"`` puts them all in one softmax;
    ``"per_direction"`` averages the log-partition of each direction, which with
    ``("query_to_doc", "doc_to_query")`` is the mean of the two cross-entropies (the older
    ``MultipleNegativesSymmetricRankingLoss``). sentence-transformers' ``hardness_mode``
    weighting and its choice of similarity function are not offered: the score is the cosine.

    Called as ``loss(y_true, y_pred)`` on

    * ``y_pred``: sentence vectors of shape (B * group_size, d), in groups of ``group_size``
      consecutive rows: anchor, positive, then ``group_size - 2`` hard negatives. The
      interleaved pair layout of the other losses is ``group_size=2``. Any float dtype;
      computed in float32.
    * ``y_true``: not read (which row is whose positive follows from the layout); Keras needs
      one, of shape (rows,) or (rows, 1).

    it returns one float32 scalar for the batch. A duplicate text in a batch is a false
    negative for the anchors it does not belong to; keep duplicates apart when batching.

    Args:
        scale: the factor on the cosines, the inverse temperature (20, temperature 0.05, as in
            sentence-transformers).
        group_size: rows per example, at least 2.
        directions: which similarity terms make each anchor's softmax; must include
            ``"query_to_doc"``. A string is one direction.
        partition_mode: ``"joint"`` or ``"per_direction"`` (not with ``query_to_query`` or
            ``doc_to_doc``).
        global_batch: under a tf.distribute strategy with several replicas, gather every
            replica's vectors (with their gradients) so that each anchor sees the candidates of
            the whole global batch and the update equals one device's on that batch (see
            :meth:`~cosent_tf.maths.ops.Ops.gather_across_replicas`); when false each replica
            uses only its own slice.
        name: the loss's name in Keras logs.
        **kwargs: further ``keras.losses.Loss`` arguments.

    Raises:
        ValueError: ``group_size`` below 2, an unknown direction or partition mode; and (when
            called) a batch whose rows are not a multiple of ``group_size``.

    Example:
        >>> vectors = tf.constant([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
        >>> loss = MultipleNegativesRankingLoss(scale=20.0)  # two (anchor, positive) pairs
        >>> round(float(loss(tf.zeros(4), vectors)), 6)  # log(1 + exp(-20))
        0.0
        >>> encoder.compile(optimizer="adam", loss=MultipleNegativesRankingLoss(group_size=3))  # doctest: +SKIP

    References: Henderson et al., "Efficient Natural Language Response Suggestion for Smart
    Reply", arXiv:1705.00652 (2017); van den Oord et al., "Representation Learning with
    Contrastive Predictive Coding", arXiv:1807.03748 (2018); sentence-transformers'
    ``MultipleNegativesRankingLoss``, https://sbert.net/docs/package_reference/sentence_transformer/losses.html.
    """

    def __init__(
        self,
        scale: float = 20.0,
        group_size: int = 2,
        directions: Sequence[str] = (QUERY_TO_DOC,),
        partition_mode: str = "joint",
        global_batch: bool = True,
        name: str = "multiple_negatives_ranking",
        **kwargs: Any,
    ) -> None:
        super().__init__(name=name, **kwargs)
        self.scale = float(scale)
        self.group_size = check_group_size(group_size)
        self.directions = check_directions(directions, partition_mode)
        self.partition_mode = partition_mode
        self.global_batch = bool(global_batch)

    def call(self, y_true: Any, y_pred: Any) -> Any:
        return multiple_negatives_ranking_loss(
            y_true, y_pred, self.scale, self.group_size, self.directions, self.partition_mode, self.global_batch
        )

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "scale": self.scale,
            "group_size": self.group_size,
            "directions": list(self.directions),
            "partition_mode": self.partition_mode,
            "global_batch": self.global_batch,
        }
