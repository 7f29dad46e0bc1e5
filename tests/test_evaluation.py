import numpy as np
import pytest
from scipy import stats

from cosent_tf import build_encoder, build_interaction_model
from cosent_tf.evaluation import (
    accuracy_at,
    best_threshold,
    mean_over_tasks,
    pair_cosines,
    pair_scores,
    spearman,
    task_metrics,
)
from cosent_tf.inference import cosine_scores, interaction_scores


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
    with pytest.raises(ValueError, match="unknown model kind 'siamese'"):
        pair_scores(encoder, "siamese", ids)
