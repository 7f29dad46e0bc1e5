import os

import numpy as np
import pytest
from scipy import stats

from cosent_tf import build_encoder
from cosent_tf.callbacks import ValidationCheckpoint
from cosent_tf.evaluation import accuracy_at, best_threshold, spearman
from cosent_tf.inference import batched_outputs, cosine_scores
from cosent_tf.backend import keras


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


def test_encode_returns_input_order(tiny_config):
    encoder = build_encoder(tiny_config, pooling="last-avg")
    token_ids = [np.array([101] + [672 + i] * n + [102], np.int32) for i, n in enumerate([5, 1, 9, 3, 3, 7])]
    vectors = batched_outputs(encoder, token_ids, batch_size=4)
    for ids, vector in zip(token_ids, vectors):
        single = encoder.predict([ids[None], np.zeros_like(ids)[None]], verbose=0)[0]
        np.testing.assert_allclose(vector, single, atol=1e-5)
    cosines = cosine_scores(encoder, token_ids[:3], token_ids[3:], batch_size=4)
    expected = [np.dot(vectors[i], vectors[i + 3]) / np.linalg.norm(vectors[i]) / np.linalg.norm(vectors[i + 3])
                for i in range(3)]
    np.testing.assert_allclose(cosines, expected, rtol=1e-5)


def test_validation_checkpoint_keeps_the_best_epoch(tmp_path):
    model = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1), loss="mse")
    scores = iter([0.1, 0.5, 0.3])
    snapshots = []

    def evaluate(m):
        snapshots.append(m.get_weights())
        return {"spearman": next(scores)}

    path = tmp_path / "best.weights.h5"
    callback = ValidationCheckpoint(evaluate, str(path))
    x = np.random.default_rng(0).normal(size=(16, 3))
    model.fit(x, x[:, :2] * 3, epochs=3, callbacks=[callback], verbose=0)
    assert callback.best_epoch == 2 and callback.best == 0.5
    for restored, best in zip(model.get_weights(), snapshots[1]):
        np.testing.assert_array_equal(restored, best)
    fresh = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(2)])
    fresh.load_weights(str(path))
    for loaded, best in zip(fresh.get_weights(), snapshots[1]):
        np.testing.assert_array_equal(loaded, best)
    assert os.listdir(tmp_path) == ["best.weights.h5"]
