"""Multiple negatives ranking: softmax cross-entropy over in-batch candidates (InfoNCE)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backend import keras, tf
from ._pairs import compute_dtype, gather_across_replicas

QUERY_TO_DOC, QUERY_TO_QUERY, DOC_TO_QUERY, DOC_TO_DOC = "query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc"
DIRECTIONS = (QUERY_TO_DOC, QUERY_TO_QUERY, DOC_TO_QUERY, DOC_TO_DOC)
PARTITION_MODES = ("joint", "per_direction")

_BAD_ROWS = (
    "a batch for an in-batch negatives loss holds groups of group_size={group_size} consecutive rows "
    "(anchor, positive, negative_1 ...), but it has {rows} that is not a multiple of {group_size}. Under "
    "tf.distribute each replica gets its own slice of the batch: make the examples per batch divisible by "
    "the number of replicas (strategy.num_replicas_in_sync)"
)


def check_group_size(group_size: Any) -> int:
    """``group_size`` as an int, or ValueError if it cannot hold an anchor and its positive."""
    if isinstance(group_size, bool) or int(group_size) != group_size or group_size < 2:
        raise ValueError(
            f"group_size must be an integer of at least 2 (anchor, positive, then any hard negatives), "
            f"got {group_size!r}"
        )
    return int(group_size)


def check_directions(directions: Sequence[str], partition_mode: str) -> tuple[str, ...]:
    """The directions as a tuple, or ValueError naming what is wrong with them."""
    if isinstance(directions, str):
        directions = (directions,)
    directions = tuple(directions)
    unknown = [direction for direction in directions if direction not in DIRECTIONS]
    if unknown:
        raise ValueError(f"unknown direction(s) {', '.join(map(repr, unknown))}; choose from {', '.join(DIRECTIONS)}")
    if QUERY_TO_DOC not in directions:
        raise ValueError(f"directions must include {QUERY_TO_DOC!r}, the term that holds each anchor's positive")
    if len(set(directions)) != len(directions):
        raise ValueError(f"directions name a direction twice: {directions}")
    if partition_mode not in PARTITION_MODES:
        raise ValueError(f"partition_mode must be one of {', '.join(PARTITION_MODES)}, got {partition_mode!r}")
    if partition_mode == "per_direction" and set(directions) & {QUERY_TO_QUERY, DOC_TO_DOC}:
        raise ValueError(
            "partition_mode='per_direction' cannot take query_to_query or doc_to_doc: their candidates never "
            "include the positive, so their own softmax has no target; use partition_mode='joint'"
        )
    return directions


def grouped_vectors(y_pred: Any, group_size: int) -> tf.Tensor:
    """``y_pred`` as (examples, group_size, d) in float32 (float64 stays float64), checking that the
    rows come in whole groups: at trace time when the batch size is static, else when run."""
    vectors = tf.convert_to_tensor(y_pred)
    rows = vectors.shape[0]
    checks = []
    if rows is not None:
        if rows % group_size:
            raise ValueError(_BAD_ROWS.format(group_size=group_size, rows=f"{rows} rows, a number"))
    else:
        checks.append(
            tf.debugging.assert_equal(
                tf.shape(vectors)[0] % group_size,
                0,
                message=_BAD_ROWS.format(group_size=group_size, rows="a number of rows"),
            )
        )
    with tf.control_dependencies(checks):  # identity: a cast to the same dtype makes no op to hold the check
        vectors = tf.identity(tf.cast(vectors, compute_dtype(vectors)))
    width = vectors.shape[1] if vectors.shape[1] is not None else tf.shape(vectors)[1]
    return tf.reshape(vectors, [-1, group_size, width])


def in_batch_negatives_loss(
    anchors: tf.Tensor,
    candidates: tf.Tensor,
    scale: float,
    directions: Sequence[str] = (QUERY_TO_DOC,),
    partition_mode: str = "joint",
) -> tf.Tensor:
    """Mean over anchors of the softmax cross-entropy that picks each anchor's own positive.

    ``anchors`` is (B, d); ``candidates`` is (B, k, d) with each anchor's positive at index 0
    and its hard negatives after it. Vectors need not be normalised. Every anchor's
    candidates are every candidate of the batch; the other directions add the rows described
    in :class:`MultipleNegativesRankingLoss`. With B = 0 the loss is 0.
    """
    examples = tf.shape(anchors)[0]
    columns = tf.shape(candidates)[1]
    queries = tf.math.l2_normalize(anchors, axis=1)
    normalised = tf.math.l2_normalize(candidates, axis=2)
    positives = normalised[:, 0]
    # column-major, as k blocks of B rows: candidate j belongs to anchor j % B
    documents = tf.reshape(tf.transpose(normalised, [1, 0, 2]), [-1, tf.shape(anchors)[1]])
    owner = tf.range(examples * columns) % examples
    own = tf.equal(tf.range(examples)[:, None], owner[None, :])
    dtype = queries.dtype
    minus_infinity = tf.constant(-np.inf, dtype=dtype)
    scale = tf.cast(scale, dtype)

    scores = {QUERY_TO_DOC: scale * tf.matmul(queries, documents, transpose_b=True)}
    if QUERY_TO_QUERY in directions:
        to_queries = scale * tf.matmul(queries, queries, transpose_b=True)
        scores[QUERY_TO_QUERY] = tf.where(tf.eye(examples, dtype=tf.bool), minus_infinity, to_queries)
    if DOC_TO_QUERY in directions:
        scores[DOC_TO_QUERY] = scale * tf.matmul(positives, queries, transpose_b=True)
    if DOC_TO_DOC in directions:
        to_documents = scale * tf.matmul(positives, documents, transpose_b=True)
        scores[DOC_TO_DOC] = tf.where(own, minus_infinity, to_documents)
    target = scale * tf.reduce_sum(queries * positives, axis=1)
    ordered = [scores[direction] for direction in DIRECTIONS if direction in scores]
    if partition_mode == "joint":
        log_partition = tf.reduce_logsumexp(tf.concat(ordered, axis=1), axis=1)
    else:
        log_partition = tf.add_n([tf.reduce_logsumexp(block, axis=1) for block in ordered]) / len(ordered)
    total = tf.reduce_sum(log_partition - target)
    return total / tf.cast(tf.maximum(examples, 1), dtype)


def multiple_negatives_ranking_loss(
    y_true: Any,
    y_pred: Any,
    scale: float = 20.0,
    group_size: int = 2,
    directions: Sequence[str] = (QUERY_TO_DOC,),
    partition_mode: str = "joint",
    global_batch: bool = True,
) -> tf.Tensor:
    """Multiple negatives ranking loss of a grouped batch; usable as ``compile(loss=...)``.

    See :class:`MultipleNegativesRankingLoss` for the formula, the inputs and the options;
    ``y_true`` is not read.
    """
    del y_true  # in-batch negatives need no labels: the layout says which row is whose positive
    group_size = check_group_size(group_size)
    directions = check_directions(directions, partition_mode)
    groups = grouped_vectors(y_pred, group_size)
    if global_batch:
        (groups,) = gather_across_replicas(groups)
    return in_batch_negatives_loss(groups[:, 0], groups[:, 1:], scale, directions, partition_mode)


@keras.utils.register_keras_serializable(package="cosent_tf")
class MultipleNegativesRankingLoss(keras.losses.Loss):
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
            :func:`~cosent_tf.losses._pairs.gather_across_replicas`); when false each replica
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

    def call(self, y_true: Any, y_pred: Any) -> tf.Tensor:
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
