"""Multiple negatives ranking (InfoNCE): each anchor must pick its own positive among every
candidate of the batch.

With ``B`` examples of an anchor ``a_i``, its positive ``p_i`` and hard negatives
``n_i1 .. n_ik``, the candidates ``D`` are every ``p_j`` and ``n_jm`` of the batch and::

    loss = mean_i [ log sum_{d in D} exp(scale * cos(a_i, d)) - scale * cos(a_i, p_i) ]

The directions add candidate rows to each anchor's softmax as sentence-transformers'
``MultipleNegativesRankingLoss`` does: ``doc_to_query`` scores ``p_i`` against every anchor,
``query_to_query`` ``a_i`` against every other anchor, ``doc_to_doc`` ``p_i`` against the
candidates of the other examples. ``partition_mode="joint"`` puts them in one softmax;
``"per_direction"`` averages the log-partition of each direction.

Which examples take part can be chosen by a mask (CoSENT-IBN's positive pairs): the others are
neither anchors nor candidates. A mask, not a gather, so that the shapes stay those of the batch
and JAX can trace it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from .ops import Ops

QUERY_TO_DOC, QUERY_TO_QUERY, DOC_TO_QUERY, DOC_TO_DOC = "query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc"
DIRECTIONS = (QUERY_TO_DOC, QUERY_TO_QUERY, DOC_TO_QUERY, DOC_TO_DOC)
PARTITION_MODES = ("joint", "per_direction")

BAD_ROWS = (
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


def grouped_vectors(ops: Ops, y_pred: Any, group_size: int) -> Any:
    """``y_pred`` as (examples, group_size, d) in the compute dtype, checked to come in whole
    groups: at once when the batch size is static, else when the graph runs."""
    vectors = ops.as_compute(y_pred)
    rows = vectors.shape[0]
    if rows is not None and rows % group_size:
        raise ValueError(BAD_ROWS.format(group_size=group_size, rows=f"{rows} rows, a number"))
    # a static size has passed; an unknown one is checked when run (the message has no {rows} left)
    vectors = ops.check_rows(vectors, group_size, BAD_ROWS.format(group_size=group_size, rows="a number of rows"))
    return ops.reshape(vectors, [-1, group_size, ops.dim(vectors, 1)])


def in_batch_negatives(
    ops: Ops,
    anchors: Any,
    candidates: Any,
    scale: float,
    directions: Sequence[str] = (QUERY_TO_DOC,),
    partition_mode: str = "joint",
    chosen: Optional[Any] = None,
) -> Any:
    """Mean over anchors of the softmax cross-entropy that picks each anchor's own positive.

    ``anchors`` is (B, d); ``candidates`` is (B, k, d) with each anchor's positive at index 0 and
    its hard negatives after it; vectors need not be normalised. ``chosen`` (B,) booleans, when
    given, keeps only those examples (as anchors and as candidates), and the mean is over them;
    with no example the loss is 0.
    """
    examples = ops.dim(anchors, 0)
    queries = ops.normalize(anchors, axis=1)
    normalised = ops.normalize(candidates, axis=2)
    positives = normalised[:, 0]
    # column-major, as k blocks of B rows: candidate j belongs to anchor j % B
    documents = ops.reshape(ops.transpose(normalised, [1, 0, 2]), [-1, ops.dim(anchors, 1)])
    indices = ops.arange(examples)
    owner = ops.arange(examples * ops.dim(candidates, 1)) % examples
    same_example = ops.equal(indices[:, None], indices[None, :])
    own = ops.equal(indices[:, None], owner[None, :])
    minus_infinity = ops.minus_infinity(queries)
    scale = ops.constant(scale, queries)

    def similarities(rows: Any, columns_: Any) -> Any:
        return scale * ops.matmul_transpose_b(rows, columns_)

    def kept(scores: Any, candidate_kept: Any) -> Any:
        return scores if chosen is None else ops.where(candidate_kept, scores, minus_infinity)

    documents_kept = None if chosen is None else ops.take(chosen, owner, axis=0)[None, :]
    queries_kept = None if chosen is None else chosen[None, :]
    scores = {QUERY_TO_DOC: kept(similarities(queries, documents), documents_kept)}
    if QUERY_TO_QUERY in directions:
        to_queries = ops.where(same_example, minus_infinity, similarities(queries, queries))
        scores[QUERY_TO_QUERY] = kept(to_queries, queries_kept)
    if DOC_TO_QUERY in directions:
        scores[DOC_TO_QUERY] = kept(similarities(positives, queries), queries_kept)
    if DOC_TO_DOC in directions:
        to_documents = ops.where(own, minus_infinity, similarities(positives, documents))
        scores[DOC_TO_DOC] = kept(to_documents, documents_kept)
    blocks = [scores[direction] for direction in DIRECTIONS if direction in scores]
    if chosen is not None:
        # a row that takes no part gets finite scores, so that neither it nor its gradient is nan
        blocks = [ops.where(chosen[:, None], block, ops.zeros_like(block)) for block in blocks]
    target = scale * ops.sum(queries * positives, axis=1)
    if partition_mode == "joint":
        log_partition = ops.logsumexp(ops.concatenate(blocks, axis=1), axis=1)
    else:
        log_partition = ops.logsumexp(blocks[0], axis=1)
        for block in blocks[1:]:
            log_partition = log_partition + ops.logsumexp(block, axis=1)
        log_partition = log_partition / ops.constant(len(blocks), queries)
    losses = log_partition - target
    if chosen is None:
        count = ops.cast(ops.maximum(examples, 1), ops.dtype_name(queries))
        return ops.sum(losses) / count
    chosen_count = ops.sum(ops.cast(chosen, ops.dtype_name(queries)))
    total = ops.sum(ops.where(chosen, losses, ops.zeros_like(losses)))
    return total / ops.maximum(chosen_count, ops.constant(1.0, queries))


def multiple_negatives_ranking(
    ops: Ops,
    y_true: Any,
    y_pred: Any,
    scale: float = 20.0,
    group_size: int = 2,
    directions: Sequence[str] = (QUERY_TO_DOC,),
    partition_mode: str = "joint",
    global_batch: bool = True,
) -> Any:
    """The loss of a grouped batch (the formula above); ``y_true`` is not read (the layout says
    which row is whose positive)."""
    del y_true
    group_size = check_group_size(group_size)
    directions = check_directions(directions, partition_mode)
    groups = grouped_vectors(ops, y_pred, group_size)
    if global_batch:
        (groups,) = ops.gather_across_replicas(groups)
    return in_batch_negatives(ops, groups[:, 0], groups[:, 1:], scale, directions, partition_mode)
