"""Retrieve, then rerank: an interaction model re-orders the hits a first stage found.

A sentence encoder finds candidates fast (one vector per text, exact cosine over an index); an
interaction model reads each (query, candidate) pair whole and ranks them better, but costs a model
call per pair. So the encoder retrieves a query's top K and the interaction model re-scores only
those K: :func:`rerank` does the second stage, ``SentenceEncoder.search(..., rerank=scorer)`` both.

This module imports no TensorFlow (the command line's help reads :data:`RERANK_TOP` from it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Optional

import numpy as np

from .index import Hit

if TYPE_CHECKING:
    from .matchers import PairScorer

# First-stage hits re-scored per query when the caller does not say how many: enough that a
# relevant text the encoder ranked a little low can still rise to the top, few enough that the
# interaction model's cost (one call per pair) stays small.
RERANK_TOP = 20


class RerankedHit(NamedTuple):
    """One hit after reranking: the interaction model's score, and where the first stage had it.

    Attributes:
        index: the text's position in the corpus (or the index's texts).
        score: the interaction model's score of the (query, text) pair; higher is more similar.
        text: the corpus text itself.
        cosine: the first stage's score (the cosine of the query's and the text's vectors).
        cosine_rank: the text's 1-based rank in the first stage's order.

    Example:
        >>> hit = encoder.search(["花呗怎么还款"], corpus, top_k=1, rerank=scorer)[0][0]
        >>> hit.score, hit.cosine_rank  # the interaction score; 3 if cosine had it third
    """

    index: int  # type: ignore[assignment]  # as Hit's: the field's name hides tuple.index
    score: float
    text: str
    cosine: float
    cosine_rank: int


def rerank(
    scorer: PairScorer,
    queries: Iterable[str],
    hits: Sequence[Sequence[Hit]],
    top_k: Optional[int] = None,
    batch_size: int = 64,
    show_progress: Optional[bool] = None,
) -> list[list[RerankedHit]]:
    """Re-order each query's first-stage hits by an interaction model's score of (query, hit text).

    Every pair of every query is scored in one batched ``scorer.similarity`` call, so pairs of
    similar length share batches across queries. Each query's hits are sorted by that score, best
    first; ties keep the first stage's order (a stable sort), so a tie goes to the better cosine.

    Args:
        scorer: a :class:`~cosent_tf.inference.matchers.PairScorer` (or anything whose
            ``similarity(texts_a, texts_b, batch_size, show_progress)`` scores aligned pairs).
        queries: the queries, one per list of hits.
        hits: each query's hits as the first stage ranked them, best first (any number per query;
            a ``SentenceEncoder.search`` result); a hit's place in its list is its ``cosine_rank``.
        top_k: hits kept per query after reranking; all of them when None.
        batch_size: pairs per model call.
        show_progress: a progress bar; None shows one from ``PROGRESS_FROM`` pairs on.

    Returns:
        One list of :class:`RerankedHit` per query, best first by the interaction score.

    Raises:
        TypeError: ``queries`` is not a sequence of strings.
        ValueError: ``hits`` does not hold one list per query, ``top_k`` is below 1, or the
            interaction model gave a score that is not finite (the model is broken).

    Example:
        >>> first = encoder.search(queries, index, top_k=50)
        >>> best = rerank(scorer, queries, first, top_k=10)
    """
    from .matchers import check_texts  # matchers imports this module; and it imports TensorFlow

    queries = check_texts(queries, "queries")
    if len(hits) != len(queries):
        raise ValueError(f"{len(queries)} queries but {len(hits)} lists of hits; give one list per query")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1 (or None for every hit), got {top_k}")
    pair_queries = [query for query, row in zip(queries, hits) for _ in row]
    pair_texts = [hit.text for row in hits for hit in row]
    scores = np.asarray(scorer.similarity(pair_queries, pair_texts, batch_size, show_progress), dtype=np.float32)
    if not np.isfinite(scores).all():
        bad = int(np.argmin(np.isfinite(scores)))
        raise ValueError(
            f"the interaction model scored the pair ({pair_queries[bad]!r:.40}, {pair_texts[bad]!r:.40}) "
            f"{scores[bad]}: its weights are broken"
        )
    reranked, start = [], 0
    for row in hits:
        row_scores = scores[start : start + len(row)]
        start += len(row)
        order = np.argsort(-row_scores, kind="stable")[:top_k]
        reranked.append(
            [
                RerankedHit(int(row[i].index), float(row_scores[i]), row[i].text, float(row[i].score), int(i) + 1)
                for i in order
            ]
        )
    return reranked
