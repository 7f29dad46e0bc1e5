import numpy as np
import pytest
from scipy import stats

from cosent_tf import build_encoder, build_interaction_model, mining
from cosent_tf.data.pairs import normalized_text
from cosent_tf.evaluation import (
    PAIR_SCORERS,
    accuracy_at,
    best_threshold,
    mean_over_tasks,
    own_text_positions,
    pair_cosines,
    pair_retrieval_sets,
    pair_scores,
    retrieval_by,
    retrieval_metrics,
    spearman,
    task_metrics,
)
from cosent_tf.inference.runtime import cosine_scores, interaction_scores
from cosent_tf.models.kinds import KINDS


@pytest.mark.parametrize("seed", range(5))
def test_best_threshold_is_the_exhaustive_optimum(seed):
    rng = np.random.default_rng(seed)
    scores = np.round(rng.normal(size=200), 1)  # rounding makes ties
    labels = (scores + rng.normal(size=200) > 0).astype(int)
    threshold, accuracy = best_threshold(scores, labels)
    candidates = np.concatenate([[scores.min() - 1], np.unique(scores)])
    brute = max(np.mean((scores > t) == labels) for t in candidates)
    assert accuracy == pytest.approx(brute)
    assert accuracy_at(scores, labels, threshold) == pytest.approx(accuracy)


def test_threshold_edge_cases():
    assert best_threshold([0.1, 0.2, 0.3], [1, 1, 1]) == (pytest.approx(-0.9), 1.0)
    threshold, accuracy = best_threshold([0.1, 0.2, 0.3], [0, 0, 0])
    assert accuracy == 1.0 and threshold == pytest.approx(0.3)


def test_spearman_matches_scipy():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=50), rng.normal(size=50)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).correlation)


def test_binary_tasks_get_accuracy_at_the_threshold_tuned_on_valid():
    valid_scores, valid_labels = [0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]  # best cut: 0.5
    metrics = task_metrics([0.3, 0.6, 0.7, 0.4], [0, 1, 1, 1], valid_scores, valid_labels, binary=True)
    assert metrics["threshold"] == pytest.approx(0.5) and metrics["accuracy"] == pytest.approx(0.75)
    assert metrics["majority_accuracy"] == 0.75 and metrics["positive_rate"] == 0.75  # "match" every time: 3 of 4
    assert set(task_metrics([0.3, 0.6, 0.7], [0, 1, 2], valid_scores, valid_labels)) == {"spearman", "pearson"}


def test_several_tasks_are_headlined_by_their_mean_spearman():
    one = {"BQ": {"spearman": 0.5, "pearson": 0.4}}
    assert mean_over_tasks(one) == one["BQ"]
    two = mean_over_tasks({"BQ": {"spearman": 0.5}, "ATEC": {"spearman": 0.1}})
    assert two == {"spearman": pytest.approx(0.3), "BQ.spearman": 0.5, "ATEC.spearman": 0.1}


def test_pair_scores_score_through_inference(tiny_config):
    encoder = build_encoder(tiny_config, pooling="last-avg")
    ids = [np.array([101, 672 + i, 102], np.int32) for i in range(4)]
    np.testing.assert_allclose(
        pair_scores(encoder, "feature", (ids[:2], ids[2:])), cosine_scores(encoder, ids[:2], ids[2:])
    )
    with pytest.warns(DeprecationWarning, match="cosine_scores"):
        np.testing.assert_allclose(pair_cosines(encoder, ids[:2], ids[2:]), cosine_scores(encoder, ids[:2], ids[2:]))
    scorer = build_interaction_model(tiny_config, head="softmax")
    np.testing.assert_allclose(pair_scores(scorer, "interaction", ids), interaction_scores(scorer, ids))
    with pytest.raises(ValueError, match="unknown model kind 'siamese'; choose one of feature, interaction"):
        pair_scores(encoder, "siamese", ids)


def test_every_model_kind_has_a_pair_scorer():
    assert set(PAIR_SCORERS) == set(KINDS)


def test_pairs_become_queries_with_positives_and_a_corpus_of_every_second_text():
    queries, corpus, relevant = pair_retrieval_sets(
        ["a", "a", "b", "c", "c"], ["x", "y", "x", "z", "y"], [True, False, False, True, True]
    )
    assert (queries, corpus, relevant) == (["a", "c"], ["x", "y", "z"], [{0}, {2, 1}])


@pytest.mark.parametrize("seed", range(3))
def test_retrieval_metrics_match_a_hand_count_on_random_vectors(seed):
    rng = np.random.default_rng(seed)
    corpus = rng.normal(size=(30, 8)).astype(np.float32)
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    queries = corpus[rng.choice(30, 6, replace=False)] + 0.3 * rng.normal(size=(6, 8)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    relevant = [set(rng.choice(30, int(rng.integers(1, 4)), replace=False).tolist()) for _ in range(6)]
    got = retrieval_metrics(queries, corpus, relevant)
    ranks = [
        [int(np.sum(row > row[d])) + 1 for d in sorted(wanted)] for row, wanted in zip(queries @ corpus.T, relevant)
    ]  # 1-based rank of each relevant text (no ties in random floats)
    assert_figures_of_ranks(got, ranks)
    assert (got["queries"], got["corpus"]) == (6, 30)


def test_a_perfect_ranking_scores_one():
    vectors = np.eye(4, dtype=np.float32)
    got = retrieval_metrics(vectors, vectors, [{0}, {1}, {2}, {3}])
    assert [got[k] for k in ("recall@1", "recall@10", "mrr@10", "ndcg@10")] == [1.0, 1.0, 1.0, 1.0]


def test_a_score_at_the_threshold_counts_as_dissimilar():
    # best_threshold predicts 1 for score > threshold; accuracy_at must apply the same rule.
    assert accuracy_at([0.5, 0.7, 0.2], [0, 1, 0], 0.5) == 1.0
    threshold, accuracy = best_threshold([0.2, 0.5, 0.5, 0.9], [0, 0, 0, 1])
    assert accuracy_at([0.2, 0.5, 0.5, 0.9], [0, 0, 0, 1], threshold) == accuracy == 1.0


def test_a_querys_own_text_is_taken_out_of_its_ranking_and_answers_as_a_brute_force_ranks_without_it():
    rng = np.random.default_rng(7)
    corpus = [f"问题{i}" for i in range(25)]
    corpus_vectors = rng.normal(size=(25, 8)).astype(np.float32)
    corpus_vectors /= np.linalg.norm(corpus_vectors, axis=1, keepdims=True)
    # Queries 0 to 3 are corpus texts (query 2 differs only in width and punctuation, which mining's
    # normalisation drops), so their own copy scores a cosine of 1 and would rank first; query 3's
    # only relevant text is its own; queries 4 and 5 are not in the corpus.
    queries = ["问题3", "问题8", "问题 11！", "问题20", "别的", "另一个"]
    own = [{3}, {8}, {11}, {20}, set(), set()]
    query_vectors = np.concatenate([corpus_vectors[[3, 8, 11, 20]], rng.normal(size=(2, 8)).astype(np.float32)])
    query_vectors /= np.linalg.norm(query_vectors, axis=1, keepdims=True)
    relevant = [{5, 3}, {1, 17, 22}, {0}, {20}, {4, 9}, {13}]
    vectors = {**dict(zip(corpus, corpus_vectors)), **dict(zip(queries, query_vectors))}

    def encode(texts):
        return np.array([vectors[text] for text in texts])

    got = retrieval_by(encode, queries, corpus, relevant)

    kept = [q for q in range(6) if relevant[q] - own[q]]
    assert kept == [0, 1, 2, 4, 5]
    ranks = []  # 1-based rank of each answer among the corpus texts other than the query's own
    for q in kept:
        others = [d for d in range(25) if d not in own[q]]
        order = sorted(others, key=lambda d: -float(query_vectors[q] @ corpus_vectors[d]))
        ranks.append([order.index(d) + 1 for d in sorted(relevant[q] - own[q])])
    assert_figures_of_ranks(got, ranks)
    assert (got["queries"], got["corpus"]) == (5, 25)
    assert (got["own_text_excluded"], got["own_text_only_left_out"]) == (4, 1)
    # searched with their own copies, queries 1 and 2 find them first, a miss at rank 1
    assert retrieval_metrics(query_vectors[1:3], corpus_vectors, relevant[1:3])["recall@1"] == 0


def test_own_text_positions_are_the_corpus_texts_mining_takes_for_the_same_text():
    queries = ["花呗怎么还款", "手机", "ＱＱ号码"]
    corpus = ["花呗 怎么还款？", "电话", "花呗怎么还款", "qq号码!", "手机号"]
    assert (
        own_text_positions(queries, corpus)
        == [
            {d for d, text in enumerate(corpus) if normalized_text(text) == normalized_text(query)} for query in queries
        ]
        == [{0, 2}, set(), {3}]
    )
    assert mining.normalized_text is normalized_text  # one test of "the same text", mining's guards' too


def test_a_retrieval_test_whose_every_query_has_only_its_own_text_is_refused_naming_its_file():
    with pytest.raises(ValueError, match=r"pairs\.tsv: every one of the 2 queries has its own text as its only"):
        retrieval_by(
            lambda texts: np.eye(3, dtype=np.float32)[: len(texts)],
            ["a", "b"],
            ["a", "b", "c"],
            [{0}, {1}],
            "pairs.tsv",
        )


def assert_figures_of_ranks(got, ranks):
    """``got``'s recall@k, MRR@10 and nDCG@10 are those of ``ranks``: each query's 1-based ranks of
    its relevant texts, counted by brute force."""
    for k in (1, 5, 10):
        assert got[f"recall@{k}"] == pytest.approx(np.mean([np.mean([r <= k for r in rs]) for rs in ranks]))
    assert got["mrr@10"] == pytest.approx(np.mean([1 / min(rs) if min(rs) <= 10 else 0 for rs in ranks]))
    ideal = [sum(1 / np.log2(i + 2) for i in range(min(len(rs), 10))) for rs in ranks]
    dcg = [sum(1 / np.log2(r + 1) for r in rs if r <= 10) for rs in ranks]
    assert got["ndcg@10"] == pytest.approx(np.mean(np.array(dcg) / ideal))
