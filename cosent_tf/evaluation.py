"""Metrics as the original experiments report them: Spearman (and Pearson) of scores against
labels, and accuracy at the threshold that is best on valid; and retrieval metrics
(Recall@k, MRR@10, nDCG@10), since a high Spearman can hide a poor retriever, of cosine search
and of cosine search reranked by an interaction model. Scores and nearest neighbours come from
:mod:`cosent_tf.inference` (:func:`cosent_tf.inference.cosine_scores`,
:func:`cosent_tf.inference.interaction_scores`, the matchers' ``similarity`` and ``encode``)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Callable, NamedTuple, Optional

import numpy as np
from scipy import stats

from . import inference
from .calibration import accuracy_at, best_threshold, majority_baseline, match_share_at
from .data.pairs import normalized_text
from .data.tasks import Task
from .errors import lookup
from .inference.index import RERANK_TOP, Hit
from .models.kinds import FEATURE, INTERACTION

# Anything np.asarray reads as a vector: a list, a tuple, an array.
ArrayLike = Any


def spearman(scores: ArrayLike, labels: ArrayLike) -> float:
    """Spearman's rank correlation of ``scores`` with ``labels``."""
    return float(stats.spearmanr(scores, labels).correlation)


def pearson(scores: ArrayLike, labels: ArrayLike) -> float:
    """Pearson's correlation of ``scores`` with ``labels``."""
    return float(stats.pearsonr(scores, labels)[0])


def _cosines_of_pairs(model: Any, inputs: Any, batch_size: int, sep_id: Optional[int]) -> np.ndarray:
    ids_a, ids_b = inputs
    return inference.cosine_scores(model, ids_a, ids_b, batch_size=batch_size)


def _head_scores_of_pairs(model: Any, inputs: Any, batch_size: int, sep_id: Optional[int]) -> np.ndarray:
    return inference.interaction_scores(model, inputs, batch_size=batch_size, sep_id=sep_id)


# How a pair is scored, by model kind (cosent_tf.models.kinds): the cosine of a feature model's
# two sentence vectors, or an interaction model's head on the concatenated pair.
PAIR_SCORERS: dict[str, Callable[[Any, Any, int, Optional[int]], np.ndarray]] = {
    FEATURE.name: _cosines_of_pairs,
    INTERACTION.name: _head_scores_of_pairs,
}


def pair_scores(model: Any, kind: str, inputs: Any, batch_size: int = 64, sep_id: Optional[int] = None) -> np.ndarray:
    """One score per pair: the cosine of a feature model's two vectors (``inputs`` = (ids_a,
    ids_b)), or an interaction model's score of the concatenated pair (``inputs`` = pair ids;
    ``sep_id`` for a model with pair segment ids). An unknown ``kind`` is a ConfigError that
    lists the kinds."""
    return lookup(PAIR_SCORERS, kind, "model kind")(model, inputs, batch_size, sep_id)


def correlation_metrics(scores: ArrayLike, labels: ArrayLike) -> dict[str, float]:
    """``{"spearman": ..., "pearson": ...}`` of ``scores`` against ``labels``."""
    return {"spearman": spearman(scores, labels), "pearson": pearson(scores, labels)}


def task_metrics(
    scores: ArrayLike,
    labels: ArrayLike,
    valid_scores: Optional[ArrayLike] = None,
    valid_labels: Optional[ArrayLike] = None,
    binary: bool = False,
) -> dict[str, float]:
    """Spearman and Pearson; for ``binary`` labels also accuracy at the threshold tuned on valid, next
    to the majority baseline (:func:`cosent_tf.calibration.majority_baseline`)."""
    metrics = correlation_metrics(scores, labels)
    if binary and valid_scores is not None:
        threshold, _ = best_threshold(valid_scores, valid_labels)
        accuracy = accuracy_at(scores, labels, threshold)
        metrics.update(accuracy=accuracy, threshold=threshold, **majority_baseline(labels))
    return metrics


def mean_over_tasks(per_task: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Flatten per-task metrics; with several tasks the headline is their mean Spearman."""
    if len(per_task) == 1:
        return dict(next(iter(per_task.values())))
    flat = {"spearman": float(np.mean([m["spearman"] for m in per_task.values()]))}
    for task, metrics in per_task.items():
        flat.update({f"{task}.{k}": v for k, v in metrics.items()})
    return flat


RECALL_AT = (1, 5, 10)
RANK_CUTOFF = 10  # MRR@10 and nDCG@10


def pair_retrieval_sets(
    texts_a: Iterable[str], texts_b: Iterable[str], positive: Iterable[bool]
) -> tuple[list[str], list[str], list[set[int]]]:
    """A retrieval test made of pairs: ``(queries, corpus, relevant)``.

    The queries are the distinct first sentences with at least one positive pair; the
    corpus is every distinct second sentence; ``relevant[i]`` is the set of corpus indices
    paired positively with query ``i``. Texts keep their order of first appearance.
    """
    corpus_index: dict[str, int] = {}
    for text in texts_b:
        corpus_index.setdefault(text, len(corpus_index))
    relevant: dict[str, set[int]] = {}
    for text_a, text_b, is_positive in zip(texts_a, texts_b, positive):
        if is_positive:
            relevant.setdefault(text_a, set()).add(corpus_index[text_b])
    return list(relevant), list(corpus_index), list(relevant.values())


def ranking_metrics(
    ranked: ArrayLike, relevant: Sequence[set[int]], corpus_size: int, recall_at: Sequence[int] = RECALL_AT
) -> dict[str, Any]:
    """Recall@k, MRR@10 and nDCG@10 (binary relevance) of given rankings, means over queries.

    Recall@k is the share of a query's relevant texts in its top k; MRR@10 is 1/rank of the first
    relevant text in the top 10 (0 if none); nDCG@10 is DCG = sum of 1/log2(rank + 1) over relevant
    texts in the top 10, divided by the DCG of a perfect ranking.

    Args:
        ranked: (queries, depth) corpus indices, each row a query's ranking, best first; a depth
            of ``max(recall_at)`` and 10 suffices (less only when the corpus is smaller); a row
            shorter than others ends in -1.
        relevant: ``relevant[i]`` is the set of corpus indices relevant to query i (not empty).
        corpus_size: the number of corpus texts, reported as ``"corpus"``.
        recall_at: the cutoffs k of Recall@k.

    Returns:
        ``{"recall@1": ..., "recall@5": ..., "recall@10": ..., "mrr@10": ..., "ndcg@10": ...,
        "queries": ..., "corpus": ...}``.

    Raises:
        ValueError: ``ranked`` is not a matrix with one row per set of ``relevant``.

    Example:
        >>> ranking_metrics(np.array([[2, 0, 1]]), [{0}], corpus_size=3)["mrr@10"]
        0.5
    """
    ranked = np.asarray(ranked)
    if ranked.ndim != 2 or len(ranked) != len(relevant):
        raise ValueError(f"rankings of shape {ranked.shape} do not give one row per query ({len(relevant)} queries)")
    discounts = 1.0 / np.log2(np.arange(2, RANK_CUTOFF + 2))
    recall: dict[int, list[float]] = {k: [] for k in recall_at}
    reciprocal_ranks: list[float] = []
    ndcgs: list[float] = []
    for row, wanted in zip(ranked, relevant):
        hits = np.array([index in wanted for index in row], dtype=bool)
        for k in recall_at:
            recall[k].append(hits[:k].sum() / len(wanted))
        first = np.flatnonzero(hits[:RANK_CUTOFF])
        reciprocal_ranks.append(1.0 / (first[0] + 1) if len(first) else 0.0)
        ideal = discounts[: min(len(wanted), RANK_CUTOFF)].sum()
        ndcgs.append((hits[:RANK_CUTOFF] * discounts[: len(hits[:RANK_CUTOFF])]).sum() / ideal)
    metrics: dict[str, Any] = {f"recall@{k}": float(np.mean(values)) for k, values in recall.items()}
    metrics.update(
        {
            f"mrr@{RANK_CUTOFF}": float(np.mean(reciprocal_ranks)),
            f"ndcg@{RANK_CUTOFF}": float(np.mean(ndcgs)),
            "queries": len(relevant),
            "corpus": int(corpus_size),
        }
    )
    return metrics


def retrieval_metrics(
    query_vectors: ArrayLike,
    corpus_vectors: ArrayLike,
    relevant: Sequence[set[int]],
    recall_at: Sequence[int] = RECALL_AT,
    excluded: Optional[Sequence[set[int]]] = None,
) -> dict[str, Any]:
    """:func:`ranking_metrics` of exact cosine search: Recall@k, MRR@10 and nDCG@10, means over queries.

    ``query_vectors`` and ``corpus_vectors`` are unit rows; ``relevant[i]`` is the set of
    corpus indices relevant to query i (not empty); ``excluded[i]``, when given, the corpus
    indices left out of query i's ranking (its own text: :func:`own_text_positions`).
    """
    depth = _depth(recall_at)
    scores, ranked = inference.top_k_cosine(
        np.asarray(query_vectors, np.float32), corpus_vectors, depth + _most_excluded(excluded)
    )
    _, ranked = _without_excluded(scores, ranked, excluded, depth)
    return ranking_metrics(ranked, relevant, len(corpus_vectors), recall_at)


def _depth(recall_at: Sequence[int]) -> int:
    """How deep a ranking the metrics read."""
    return max(*recall_at, RANK_CUTOFF)


def own_text_positions(queries: Sequence[str], corpus: Sequence[str]) -> list[set[int]]:
    """Per query, the corpus indices that hold the query's own text: the same text as mining's
    ``anchor_itself`` guard takes it (:func:`~cosent_tf.data.pairs.normalized_text` equal).

    A query's own text is never an answer to it: a search finds it first whatever the model, so
    the retrieval metrics leave it out of that query's ranking and out of its relevant texts
    (:func:`retrieval_by`).

    Example:
        >>> own_text_positions(["花呗怎么还款", "手机"], ["花呗 怎么还款？", "电话", "花呗怎么还款"])
        [{0, 2}, set()]
    """
    keys = {normalized_text(query) for query in queries}
    positions: dict[str, set[int]] = {}
    for index, text in enumerate(corpus):
        key = normalized_text(text)
        if key in keys:
            positions.setdefault(key, set()).add(index)
    return [positions.get(normalized_text(query), set()) for query in queries]


class RetrievalTest(NamedTuple):
    """The queries that retrieval metrics measure, once each query's own text is taken out:
    ``numbers`` their places among the queries given, ``relevant`` their relevant corpus indices
    without their own text, ``excluded`` the corpus indices of their own text; ``own_text`` how
    many of the queries given had their own text in the corpus, ``own_text_only`` how many of those
    were left out because their own text was their only relevant one."""

    numbers: list[int]
    relevant: list[set[int]]
    excluded: list[set[int]]
    own_text: int
    own_text_only: int

    def counts(self) -> dict[str, int]:
        """The metrics' fields that say what was taken out."""
        return {"own_text_excluded": self.own_text, "own_text_only_left_out": self.own_text_only}


def without_own_text(queries: Sequence[str], corpus: Sequence[str], relevant: Sequence[set[int]]) -> RetrievalTest:
    """The retrieval test of ``queries`` over ``corpus`` with each query's own text taken out
    (:func:`own_text_positions`): out of its ranking, and out of its relevant texts; a query whose
    only relevant text is its own has nothing left to find and is left out.

    Example:
        >>> without_own_text(["a", "b"], ["a", "b!", "c"], [{0, 2}, {1}])
        RetrievalTest(numbers=[0], relevant=[{2}], excluded=[{0}], own_text=2, own_text_only=1)
    """
    own = own_text_positions(queries, corpus)
    numbers = [number for number, wanted in enumerate(relevant) if wanted - own[number]]
    return RetrievalTest(
        numbers,
        [relevant[number] - own[number] for number in numbers],
        [own[number] for number in numbers],
        sum(1 for positions in own if positions),
        len(relevant) - len(numbers),
    )


def _most_excluded(excluded: Optional[Sequence[set[int]]]) -> int:
    """How much deeper a search must go so that each ranking keeps its depth once its excluded
    indices are taken out."""
    return max((len(indices) for indices in excluded), default=0) if excluded is not None else 0


def _without_excluded(
    scores: np.ndarray, ranked: np.ndarray, excluded: Optional[Sequence[set[int]]], depth: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each query's ranking without its excluded corpus indices, ``depth`` long at most: rows that
    come out shorter than others end in index -1 (which no relevant set holds) and score -inf."""
    if excluded is None:
        return scores[:, :depth], ranked[:, :depth]
    width = min(depth, ranked.shape[1])
    kept_scores = np.full((len(ranked), width), -np.inf, dtype=scores.dtype)
    kept_ranked = np.full((len(ranked), width), -1, dtype=np.int64)
    for row, (row_scores, row_indices, left_out) in enumerate(zip(scores, ranked, excluded)):
        kept = [place for place, index in enumerate(row_indices.tolist()) if index not in left_out][:width]
        kept_scores[row, : len(kept)] = row_scores[kept]
        kept_ranked[row, : len(kept)] = row_indices[kept]
    return kept_scores, kept_ranked


def retrieval_by(
    encode: Callable[[Sequence[str]], np.ndarray],
    queries: Sequence[str],
    corpus: Sequence[str],
    relevant: Sequence[set[int]],
    source: Optional[str] = None,
) -> dict[str, Any]:
    """:func:`retrieval_metrics` of the unit vectors ``encode(texts)`` gives for queries and corpus,
    each query's own text taken out (:func:`without_own_text`); ``"own_text_excluded"`` counts the
    queries whose own text the corpus holds, ``"own_text_only_left_out"`` those left out for having
    no other relevant text. ``source``: the file the test was read from, for the error.

    Raises:
        ValueError: every query's only relevant text is its own.
    """
    test = _measurable(queries, corpus, relevant, source)
    metrics = retrieval_metrics(
        encode([queries[number] for number in test.numbers]), encode(corpus), test.relevant, excluded=test.excluded
    )
    metrics.update(test.counts())
    return metrics


def _measurable(
    queries: Sequence[str], corpus: Sequence[str], relevant: Sequence[set[int]], source: Optional[str]
) -> RetrievalTest:
    test = without_own_text(queries, corpus, relevant)
    if not test.numbers:
        raise ValueError(
            f"{source or 'retrieval test'}: every one of the {len(queries)} queries has its own text as its only "
            "relevant text, and a query's own text is not an answer to it: nothing to retrieve"
        )
    return test


def retrieval_with_rerank(
    encode: Callable[[Sequence[str]], np.ndarray],
    scorer: Any,
    queries: Sequence[str],
    corpus: Sequence[str],
    relevant: Sequence[set[int]],
    rerank_top: int = RERANK_TOP,
    recall_at: Sequence[int] = RECALL_AT,
    batch_size: int = 64,
    source: Optional[str] = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The retrieval metrics of cosine search, and of the same search with its top ``rerank_top``
    re-ordered by an interaction model: ``(plain, reranked)``, from one encoding and one search.

    The ranking measured is the reranked top ``rerank_top`` followed by the cosine order below it.
    Since reranking only permutes the top ``rerank_top``, the set of a query's first k texts is the
    cosine search's for every k >= ``rerank_top``: Recall@k for those k cannot change, and only
    the metrics that look inside the top ``rerank_top`` (Recall@k below it, MRR@10, nDCG@10) can.
    With ``rerank_top`` 1 nothing moves, and the metrics are the cosine search's. Each query's own
    text is taken out first, as :func:`retrieval_by` takes it out.

    Args:
        encode: unit vectors of a list of texts (a ``SentenceEncoder.encode``).
        scorer: a :class:`~cosent_tf.inference.matchers.PairScorer`, or anything whose
            ``similarity(texts_a, texts_b, batch_size, show_progress)`` scores aligned pairs.
        queries: the query texts.
        corpus: the corpus texts.
        relevant: ``relevant[i]`` is the set of corpus indices relevant to query i (not empty).
        rerank_top: the cosine hits per query that the scorer re-orders.
        recall_at: the cutoffs k of Recall@k.
        batch_size: pairs per call of the scorer's model.
        source: the file the test was read from, for the error.

    Returns:
        ``(plain, reranked)``: two :func:`ranking_metrics` dicts with :func:`retrieval_by`'s counts
        of own texts; ``reranked`` also holds ``"rerank_top"`` and ``"reranker"`` (the scorer's model
        folder, None for one held in memory).

    Raises:
        ValueError: ``rerank_top`` is below 1, or every query's only relevant text is its own.

    Example:
        >>> plain, reranked = retrieval_with_rerank(encoder.encode, scorer, queries, corpus, relevant, 50)
    """
    if rerank_top < 1:
        raise ValueError(f"rerank_top must be at least 1, got {rerank_top}")
    test = _measurable(queries, corpus, relevant, source)
    queries = [queries[number] for number in test.numbers]
    depth = max(_depth(recall_at), rerank_top)
    cosines, ranked = inference.top_k_cosine(
        np.asarray(encode(queries), np.float32), encode(corpus), depth + _most_excluded(test.excluded)
    )
    cosines, ranked = _without_excluded(cosines, ranked, test.excluded, depth)
    depth = _depth(recall_at)
    plain = ranking_metrics(ranked[:, :depth], test.relevant, len(corpus), recall_at)
    kept = min(rerank_top, ranked.shape[1])
    first_stage = [
        [Hit(int(i), float(s), corpus[i]) for s, i in zip(row_cosines[:kept], row_indices[:kept]) if i >= 0]
        for row_cosines, row_indices in zip(cosines, ranked)
    ]
    # imported here: the matchers import TensorFlow, and the report (cosent_tf.experiments.report)
    # reads this module's RANK_CUTOFF without it
    from .inference.matchers import rerank as rerank_hits

    reordered = rerank_hits(scorer, queries, first_stage, batch_size=batch_size)
    head = np.full((len(queries), kept), -1, dtype=np.int64)
    for row, hits in enumerate(reordered):
        head[row, : len(hits)] = [hit.index for hit in hits]
    reranked = ranking_metrics(
        np.concatenate([head, ranked[:, kept:]], axis=1)[:, :depth], test.relevant, len(corpus), recall_at
    )
    reranked.update(rerank_top=int(rerank_top), reranker=getattr(scorer, "path", None))
    plain.update(test.counts())
    reranked.update(test.counts())
    return plain, reranked


def pair_retrieval(encode: Callable[[Sequence[str]], np.ndarray], pairs: Any, task: Task) -> Optional[dict[str, Any]]:
    """Retrieval metrics over labelled pairs (:func:`pair_retrieval_sets`, positives as ``task``
    says), with vectors from ``encode``, each query's own text taken out (:func:`retrieval_by`);
    None when no pair is positive, or when every query's only relevant text is its own."""
    queries, corpus, relevant = pair_retrieval_sets(pairs.texts_a, pairs.texts_b, task.positive(pairs.labels))
    if not without_own_text(queries, corpus, relevant).numbers:
        return None
    return retrieval_by(encode, queries, corpus, relevant)


def evaluate_pairs(
    matcher: Any,
    pairs: Any,
    threshold: Optional[float] = None,
    retrieval: bool = False,
    batch_size: int = 64,
    rerank: Any = None,
    rerank_top: int = RERANK_TOP,
    dim: Optional[int] = None,
) -> tuple[dict[str, Any], np.ndarray, Optional[np.ndarray]]:
    """Score labelled pairs with a loaded :class:`~cosent_tf.inference.matchers.SentenceEncoder` or
    :class:`~cosent_tf.inference.matchers.PairScorer`: ``(metrics, scores, predictions)``.

    Metrics are Spearman and Pearson; for 0/1 labels also accuracy at ``threshold`` (default:
    the model's tuned one; predictions are None without one), with the majority baseline
    (:func:`cosent_tf.calibration.majority_baseline`) and the share of pairs decided a match
    (``match_share``); with ``retrieval`` (a sentence encoder only) the metrics of
    :func:`pair_retrieval_sets` under ``retrieval``, each query's own text taken out of its
    ranking (:func:`retrieval_by`); with
    ``rerank`` too (a PairScorer), those of the same search with each query's top ``rerank_top``
    re-ordered by it (:func:`retrieval_with_rerank`) under ``retrieval_reranked``, from the
    same encoding of queries and corpus.

    With ``dim`` (a sentence encoder only), every score and search is of the vectors cut to their
    first ``dim`` dimensions (``SentenceEncoder.encode(dim=...)``), and the model's tuned threshold,
    fitted on full-width cosines, is not used: accuracy only at a ``threshold`` given.

    Raises:
        ValueError: ``rerank`` without ``retrieval``, or ``retrieval`` on pairs with no positive one,
            or none but of a text with itself.
        ConfigError: ``dim`` above the encoder's width.
    """
    if rerank is not None and not retrieval:
        raise ValueError("rerank re-orders retrieval results: pass retrieval=True with it")
    widths = {} if dim is None else {"dim": dim}
    scores = matcher.similarity(pairs.texts_a, pairs.texts_b, batch_size, **widths)
    metrics: dict[str, Any] = {
        "pairs": len(pairs),
        "labels": pairs.label_kind,
        **correlation_metrics(scores, pairs.labels),
    }
    if threshold is None and dim is None:
        threshold = matcher.threshold
    predictions = None
    if pairs.label_kind == "binary" and threshold is not None:
        predictions = (np.asarray(scores, dtype=np.float64) > threshold).astype(int)
        metrics.update(
            accuracy=accuracy_at(scores, pairs.labels, threshold),
            threshold=float(threshold),
            **majority_baseline(pairs.labels),
            match_share=match_share_at(scores, threshold),
        )
    if retrieval:
        task = Task.for_labels("pairs", pairs.label_kind, pairs.labels.min(), pairs.labels.max())
        queries, corpus, relevant = pair_retrieval_sets(pairs.texts_a, pairs.texts_b, task.positive(pairs.labels))
        if not queries:
            raise ValueError(f"{pairs.source}: no positive pair, so nothing to retrieve")

        def encode(texts: Sequence[str]) -> np.ndarray:
            return matcher.encode(texts, batch_size, **widths)

        if rerank is None:
            metrics["retrieval"] = retrieval_by(encode, queries, corpus, relevant, source=pairs.source)
        else:
            metrics["retrieval"], metrics["retrieval_reranked"] = retrieval_with_rerank(
                encode, rerank, queries, corpus, relevant, rerank_top, batch_size=batch_size, source=pairs.source
            )
    return metrics, scores, predictions


def pair_cosines(
    encoder: Any, ids_a: np.ndarray, ids_b: np.ndarray, batch_size: int = 64, show_progress: bool = False
) -> np.ndarray:
    """Deprecated: :func:`cosent_tf.inference.cosine_scores`."""
    warnings.warn("pair_cosines is deprecated; use cosent_tf.inference.cosine_scores", DeprecationWarning, stacklevel=2)
    return inference.cosine_scores(encoder, ids_a, ids_b, batch_size, show_progress)
