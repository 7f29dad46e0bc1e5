"""Retrieve, then rerank: ``rerank``, ``PairScorer.rank``, ``SentenceEncoder.search(rerank=...)`` and
the retrieval metrics of a reranked search, each against a brute force or a hand count."""

import math

import numpy as np
import pytest

from cosent_tf import Hit, PairData, PairScorer, RerankedHit, SentenceEncoder, rerank
from cosent_tf.evaluation import (
    evaluate_pairs,
    ranking_metrics,
    retrieval_metrics,
    retrieval_with_rerank,
)
from cosent_tf.inference.index import RERANK_TOP
from tests.helpers import distinct_texts, make_model_dir

QUERIES = ["今天天气怎么样", "我想换手机", "ＱＱ号码是多少？"]


@pytest.fixture
def encoder(tiny_config, tmp_path):
    make_model_dir(tmp_path / "encoder", tiny_config, pooling="last-avg", maxlen=16)
    return SentenceEncoder.load(tmp_path / "encoder")


@pytest.fixture
def scorer(tiny_config, tmp_path):
    make_model_dir(tmp_path / "scorer", tiny_config, kind="interaction", maxlen=32)
    return PairScorer.load(tmp_path / "scorer")


class TableScorer:
    """A scorer whose score of (query, text) is looked up in a table (0 when absent), recording
    each call's number of pairs."""

    def __init__(self, table, path=None):
        self.table, self.path, self.calls = table, path, []

    def similarity(self, texts_a, texts_b, batch_size=64, show_progress=None):
        texts_a, texts_b = list(texts_a), list(texts_b)
        self.calls.append(len(texts_a))
        return np.array([self.table.get((a, b), 0.0) for a, b in zip(texts_a, texts_b)], dtype=np.float32)


def fake_pair_scorer(table):
    """A PairScorer (as search requires) with no model, whose similarity is a :class:`TableScorer`'s."""
    scorer = PairScorer(model=None, tokenizer=None)
    table_scorer = TableScorer(table)
    scorer.similarity = table_scorer.similarity
    return scorer, table_scorer


# rerank


def test_rerank_orders_each_querys_hits_as_scoring_each_pair_alone_would(encoder, scorer):
    corpus = distinct_texts(0, 12, shortest=2)
    hits = encoder.search(QUERIES, corpus, top_k=6)
    hits[2] = hits[2][:3]  # a first stage may give any number of hits per query
    got = rerank(scorer, QUERIES, hits, batch_size=4)
    for query, first_stage, row in zip(QUERIES, hits, got):
        alone = np.array([scorer.similarity([query], [hit.text], batch_size=1)[0] for hit in first_stage])
        order = np.argsort(-alone, kind="stable")
        assert [hit.index for hit in row] == [first_stage[i].index for i in order]
        np.testing.assert_allclose([hit.score for hit in row], alone[order], atol=1e-5)
        assert [hit.cosine_rank for hit in row] == [int(i) + 1 for i in order]
        assert [hit.cosine for hit in row] == [first_stage[i].score for i in order]
        assert [hit.text for hit in row] == [corpus[hit.index] for hit in row]
        assert all(isinstance(hit, RerankedHit) for hit in row)
    assert rerank(scorer, QUERIES, hits, top_k=2, batch_size=4) == [row[:2] for row in got]


def test_rerank_scores_every_pair_in_one_call_and_breaks_ties_by_the_cosine_rank():
    hits = [
        [Hit(7, 0.9, "a"), Hit(2, 0.8, "b"), Hit(5, 0.7, "c"), Hit(1, 0.6, "d")],
        [Hit(0, 0.5, "c"), Hit(3, 0.4, "a")],
    ]
    table = {("q1", "a"): 0.2, ("q1", "b"): 0.5, ("q1", "c"): 0.5, ("q1", "d"): 0.9, ("q2", "a"): 1.0}
    scorer = TableScorer(table)
    got = rerank(scorer, ["q1", "q2"], hits)
    assert scorer.calls == [6]
    # b and c tie at 0.5: b had the better cosine rank
    assert [(hit.index, hit.score, hit.cosine_rank) for hit in got[0]] == [
        (1, pytest.approx(0.9), 4),
        (2, 0.5, 2),
        (5, 0.5, 3),
        (7, pytest.approx(0.2), 1),
    ]
    assert [(hit.index, hit.cosine, hit.cosine_rank) for hit in got[1]] == [(3, 0.4, 2), (0, 0.5, 1)]


def test_rerank_refuses_misaligned_hits_a_bad_top_k_and_a_broken_model():
    hits = [[Hit(0, 0.5, "a")]]
    with pytest.raises(ValueError, match="2 queries but 1 lists of hits"):
        rerank(TableScorer({}), ["q1", "q2"], hits)
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        rerank(TableScorer({}), ["q1"], hits, top_k=0)
    with pytest.raises(TypeError, match="not a single str"):
        rerank(TableScorer({}), "q1", hits)
    with pytest.raises(ValueError, match=r"scored the pair \('q1', 'a'\) nan: its weights are broken"):
        rerank(TableScorer({("q1", "a"): float("nan")}), ["q1"], hits)


# PairScorer.rank


def test_rank_orders_documents_by_the_models_score(scorer):
    documents = distinct_texts(3, 7, shortest=2)
    got = scorer.rank("我想换手机", documents, batch_size=3)
    alone = np.array([scorer.similarity(["我想换手机"], [text], batch_size=1)[0] for text in documents])
    order = np.argsort(-alone, kind="stable")
    assert [hit.index for hit in got] == order.tolist()
    assert [hit.text for hit in got] == [documents[i] for i in order]
    np.testing.assert_allclose([hit.score for hit in got], alone[order], atol=1e-5)
    assert scorer.rank("我想换手机", documents, top_k=3, batch_size=3) == got[:3]


def test_rank_breaks_ties_to_the_lower_position_and_checks_its_arguments():
    scorer, _ = fake_pair_scorer({("q", "x"): 0.3, ("q", "y"): 0.7, ("q", "z"): 0.3})
    assert scorer.rank("q", ["x", "z", "y", "w"]) == [
        Hit(2, pytest.approx(0.7), "y"),
        Hit(0, pytest.approx(0.3), "x"),
        Hit(1, pytest.approx(0.3), "z"),
        Hit(3, 0.0, "w"),
    ]
    assert scorer.rank("q", []) == []
    with pytest.raises(TypeError, match="query must be a str, not a list"):
        scorer.rank(["q"], ["x"])
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        scorer.rank("q", ["x"], top_k=0)


# SentenceEncoder.search(rerank=...)


def test_search_with_rerank_reaches_below_top_k_and_reranks_all_it_retrieved(encoder):
    corpus = distinct_texts(1, 30, shortest=2)
    plain = encoder.search(QUERIES, corpus, top_k=8)
    # The scorer likes only each query's fifth cosine hit: reranking must bring it up from rank 5.
    liked = {(query, row[4].text): 1.0 for query, row in zip(QUERIES, plain)}
    scorer, table_scorer = fake_pair_scorer(liked)
    got = encoder.search(QUERIES, corpus, top_k=2, rerank=scorer, rerank_top=6)
    assert table_scorer.calls == [3 * 6]  # max(top_k, rerank_top) per query, in one call
    for first_stage, row in zip(plain, got):
        assert [(hit.index, hit.cosine_rank, hit.score) for hit in row] == [
            (first_stage[4].index, 5, 1.0),
            (first_stage[0].index, 1, 0.0),  # the rest tie at 0 and keep the cosine order
        ]
        assert row[0].cosine == pytest.approx(first_stage[4].score, abs=1e-6)
    assert got == rerank(scorer, QUERIES, [row[:6] for row in plain], top_k=2)

    table_scorer.calls.clear()
    encoder.search(QUERIES, corpus, top_k=3, rerank=scorer)
    assert table_scorer.calls == [3 * RERANK_TOP]  # the default depth
    table_scorer.calls.clear()
    assert len(encoder.search(QUERIES, corpus, top_k=25, rerank=scorer)[0]) == 25
    assert table_scorer.calls == [3 * 25]  # top_k above the default: every hit returned is reranked
    assert all(type(hit) is Hit for hit in encoder.search(QUERIES, corpus, top_k=3)[0])  # no rerank: as before


def test_search_refuses_a_rerank_top_below_top_k_or_without_a_scorer(encoder):
    scorer, _ = fake_pair_scorer({})
    with pytest.raises(ValueError, match="rerank_top=3 is below top_k=5: the hits past 3 would have no interaction"):
        encoder.search(QUERIES, ["a", "b"], top_k=5, rerank=scorer, rerank_top=3)
    with pytest.raises(ValueError, match="pass rerank=a PairScorer"):
        encoder.search(QUERIES, ["a", "b"], top_k=1, rerank_top=3)
    with pytest.raises(TypeError, match="rerank must be a PairScorer .* not a SentenceEncoder"):
        encoder.search(QUERIES, ["a", "b"], top_k=1, rerank=encoder)


# retrieval metrics of a ranking, and of a reranked search

# Three queries over 12 corpus texts, ranked by hand (best first) with what is relevant to each.
RANKED = np.array(
    [
        [3, 1, 4, 0, 2, 5, 6, 7, 8, 9],  # relevant {1}: rank 2
        [0, 2, 3, 4, 5, 7, 1, 6, 8, 9],  # relevant {0, 7}: ranks 1 and 6
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],  # relevant {11}: not in the top 10
    ]
)
RELEVANT = [{1}, {0, 7}, {11}]
BY_HAND = {
    "recall@1": (0 + 1 / 2 + 0) / 3,
    "recall@5": (1 + 1 / 2 + 0) / 3,
    "recall@10": (1 + 1 + 0) / 3,
    "mrr@10": (1 / 2 + 1 + 0) / 3,
    "ndcg@10": (1 / math.log2(3) + (1 + 1 / math.log2(7)) / (1 + 1 / math.log2(3)) + 0) / 3,
    "queries": 3,
    "corpus": 12,
}


def vectors_ranking(ranked, corpus_size):
    """Unit query vectors whose exact cosine search over the unit vectors of ``np.eye(corpus_size)``
    gives the rows of ``ranked`` (a text not in a row scores 0, below every one in it)."""
    queries = np.zeros((len(ranked), corpus_size), dtype=np.float32)
    for row, order in zip(queries, ranked):
        row[order] = np.arange(len(order), 0, -1)
    return queries / np.linalg.norm(queries, axis=1, keepdims=True), np.eye(corpus_size, dtype=np.float32)


def test_ranking_metrics_and_retrieval_metrics_match_a_hand_count():
    assert ranking_metrics(RANKED, RELEVANT, 12) == pytest.approx(BY_HAND)
    queries, corpus = vectors_ranking(RANKED, 12)
    assert retrieval_metrics(queries, corpus, RELEVANT) == pytest.approx(BY_HAND)
    with pytest.raises(ValueError, match=r"rankings of shape \(3, 10\) do not give one row per query \(2 queries\)"):
        ranking_metrics(RANKED, RELEVANT[:2], 12)


# The counts of a retrieval test none of whose queries is a corpus text.
NO_OWN_TEXT = {"own_text_excluded": 0, "own_text_only_left_out": 0}


class Oracle(TableScorer):
    """Scores 1 for a (query, text) pair the relevance sets call relevant, 0 for any other."""

    def __init__(self, queries, corpus, relevant):
        super().__init__({(queries[q], corpus[d]): 1.0 for q, wanted in enumerate(relevant) for d in wanted})


def test_reranking_the_hand_ranked_case_with_an_oracle_moves_the_relevant_texts_up():
    queries, corpus = [f"q{i}" for i in range(3)], [f"c{i}" for i in range(12)]
    query_vectors, corpus_vectors = vectors_ranking(RANKED, 12)
    vectors = dict(zip(queries + corpus, [*query_vectors, *corpus_vectors]))

    def encode(texts):
        return np.array([vectors[text] for text in texts])

    got = retrieval_with_rerank(encode, Oracle(queries, corpus, RELEVANT), queries, corpus, RELEVANT, 5)[1]
    # Top 5: query 0's relevant text (rank 2) rises to 1; query 1's second one (rank 6) stays out of reach.
    assert got == pytest.approx(
        {
            "recall@1": (1 + 1 / 2 + 0) / 3,
            "recall@5": BY_HAND["recall@5"],
            "recall@10": BY_HAND["recall@10"],
            "mrr@10": (1 + 1 + 0) / 3,
            "ndcg@10": (1 + (1 + 1 / math.log2(7)) / (1 + 1 / math.log2(3)) + 0) / 3,
            "queries": 3,
            "corpus": 12,
            "rerank_top": 5,
            "reranker": None,
            **NO_OWN_TEXT,
        }
    )


@pytest.mark.parametrize("seed", range(4))
def test_an_oracle_reranker_puts_a_relevant_text_first_whenever_one_is_in_its_reach(seed):
    rng = np.random.default_rng(seed)
    corpus_vectors = rng.normal(size=(40, 8)).astype(np.float32)
    corpus_vectors /= np.linalg.norm(corpus_vectors, axis=1, keepdims=True)
    query_vectors = rng.normal(size=(9, 8)).astype(np.float32)
    query_vectors /= np.linalg.norm(query_vectors, axis=1, keepdims=True)
    queries, corpus = [f"q{i}" for i in range(9)], [f"c{i}" for i in range(40)]
    relevant = [set(rng.choice(40, int(rng.integers(1, 4)), replace=False).tolist()) for _ in range(9)]
    vectors = dict(zip(queries + corpus, [*query_vectors, *corpus_vectors]))
    calls = []

    def encode(texts):
        calls.append(len(texts))
        return np.array([vectors[text] for text in texts])

    plain = {**retrieval_metrics(query_vectors, corpus_vectors, relevant), **NO_OWN_TEXT}
    # 1-based cosine rank of each query's best-ranked relevant text (random floats: no ties)
    cosines = query_vectors @ corpus_vectors.T
    first_relevant = [min(int(np.sum(row > row[d])) + 1 for d in wanted) for row, wanted in zip(cosines, relevant)]
    for rerank_top in (1, 3, 5, 10, 25):
        oracle = Oracle(queries, corpus, relevant)
        calls.clear()
        cosine, got = retrieval_with_rerank(encode, oracle, queries, corpus, relevant, rerank_top, batch_size=7)
        assert calls == [9, 40]  # one encoding of queries and corpus serves both
        assert oracle.calls == [9 * rerank_top]
        assert cosine == pytest.approx(plain)
        expected_rr = [1.0 if rank <= rerank_top else (1 / rank if rank <= 10 else 0.0) for rank in first_relevant]
        assert got["mrr@10"] == pytest.approx(np.mean(expected_rr))
        for k in (1, 5, 10):
            if k >= rerank_top:  # the same set of texts in the top k: its recall cannot change
                assert got[f"recall@{k}"] == pytest.approx(plain[f"recall@{k}"])
            else:
                assert got[f"recall@{k}"] >= plain[f"recall@{k}"] - 1e-12
        assert got["rerank_top"] == rerank_top
    single = retrieval_with_rerank(encode, Oracle(queries, corpus, relevant), queries, corpus, relevant, 1)[1]
    assert {k: v for k, v in single.items() if k not in ("rerank_top", "reranker")} == pytest.approx(plain)
    with pytest.raises(ValueError, match="rerank_top must be at least 1"):
        retrieval_with_rerank(encode, Oracle(queries, corpus, relevant), queries, corpus, relevant, 0)[1]


def test_evaluate_pairs_reports_both_rankings_from_one_encoding(encoder, scorer):
    pairs = PairData(
        ["今天天气", "今天天气", "我想换手机", "我想换手机", "号码"],
        ["明天下雨", "天气好", "换个手机", "天气好", "ＱＱ号码"],
        np.array([1, 0, 1, 0, 1], np.float32),
    )
    calls = []
    encode = encoder.encode

    def counted(texts, *args, **kwargs):
        calls.append(list(texts))
        return encode(texts, *args, **kwargs)

    encoder.encode = counted
    metrics, _, _ = evaluate_pairs(encoder, pairs, retrieval=True, rerank=scorer, rerank_top=2)
    assert calls[-2:] == [["今天天气", "我想换手机", "号码"], ["明天下雨", "天气好", "换个手机", "ＱＱ号码"]]
    assert len([texts for texts in calls if texts == ["今天天气", "我想换手机", "号码"]]) == 1
    plain, _, _ = evaluate_pairs(encoder, pairs, retrieval=True)
    assert metrics["retrieval"] == pytest.approx(plain["retrieval"])
    expected = retrieval_with_rerank(
        encode,
        scorer,
        ["今天天气", "我想换手机", "号码"],
        ["明天下雨", "天气好", "换个手机", "ＱＱ号码"],
        [{0}, {2}, {3}],
        rerank_top=2,
    )[1]
    assert metrics["retrieval_reranked"] == pytest.approx(expected)
    assert metrics["retrieval_reranked"]["reranker"] == scorer.path and metrics["retrieval_reranked"]["rerank_top"] == 2
    with pytest.raises(ValueError, match="rerank re-orders retrieval results: pass retrieval=True"):
        evaluate_pairs(encoder, pairs, rerank=scorer)


def test_reranked_retrieval_takes_each_querys_own_text_out_before_the_scorer_sees_it():
    # Query q0 is corpus text c2 and q1 is c5 (the same text once normalised): their own copies
    # score a cosine of 1, and q1's only other answer is c7; q2's only relevant text is its own.
    rng = np.random.default_rng(3)
    corpus = [f"c{i}" for i in range(12)]
    corpus_vectors = rng.normal(size=(12, 6)).astype(np.float32)
    corpus_vectors /= np.linalg.norm(corpus_vectors, axis=1, keepdims=True)
    queries, relevant = ["c2", "C5!", "c9", "q3"], [{2, 4}, {7}, {9}, {1, 10}]
    query_vectors = np.concatenate([corpus_vectors[[2, 5, 9]], rng.normal(size=(1, 6)).astype(np.float32)])
    query_vectors /= np.linalg.norm(query_vectors, axis=1, keepdims=True)
    vectors = {**dict(zip(corpus, corpus_vectors)), **dict(zip(queries, query_vectors))}

    def encode(texts):
        return np.array([vectors[text] for text in texts])

    scored = []

    class Recording(Oracle):
        def similarity(self, texts_a, texts_b, batch_size=64, show_progress=None):
            scored.extend(zip(texts_a, texts_b))
            return super().similarity(texts_a, texts_b, batch_size, show_progress)

    plain, reranked = retrieval_with_rerank(encode, Recording(queries, corpus, relevant), queries, corpus, relevant, 4)
    kept, own = [0, 1, 3], [{2}, {5}, set()]
    assert plain == pytest.approx(
        {
            **retrieval_metrics(query_vectors[kept], corpus_vectors, [{4}, {7}, {1, 10}], excluded=own),
            "own_text_excluded": 3,
            "own_text_only_left_out": 1,
        }
    )
    assert {query for query, _ in scored} == {"c2", "C5!", "q3"} and len(scored) == 3 * 4
    assert ("c2", "c2") not in scored and ("C5!", "c5") not in scored
    # brute force: each kept query's cosine order without its own text, its top 4 re-ordered by the oracle
    for q, row in zip(
        kept,
        [
            sorted(set(range(12)) - own[i], key=lambda d, v=query_vectors[q]: -float(v @ corpus_vectors[d]))
            for i, q in enumerate(kept)
        ],
    ):
        assert [b for a, b in scored if a == queries[q]] == [corpus[d] for d in row[:4]]
    assert reranked["queries"] == 3 and reranked["own_text_excluded"] == 3
