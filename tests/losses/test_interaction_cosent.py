import math

import numpy as np
import pytest

from cosent_tf import InteractionCoSENTLoss
from cosent_tf.backend import tf
from cosent_tf.losses import interaction_cosent_loss
from tests.harness import run_keras_object_test


def brute_force(labels, scores):
    terms = [0.0]
    for high in range(len(labels)):
        for low in range(len(labels)):
            if labels[high] > labels[low]:
                terms.append(scores[low] - scores[high])
    peak = max(terms)
    return peak + math.log(sum(math.exp(t - peak) for t in terms))


@pytest.mark.parametrize("seed", range(4))
def test_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    count = int(rng.integers(2, 40))
    labels = rng.integers(0, 3, count).astype(np.float32) if seed % 2 else rng.uniform(0, 5, count)
    scores = (rng.normal(size=(count, 1)) * 10).astype(np.float32)
    expected = brute_force(labels.tolist(), scores[:, 0].astype(np.float64).tolist())
    assert float(InteractionCoSENTLoss()(labels, scores)) == pytest.approx(expected, rel=1e-5)


def test_hand_computed_and_equal_labels():
    # label 1 scored 0.0, label 0 scored 3.0: log(1 + e^3)
    assert float(interaction_cosent_loss(np.array([1.0, 0.0]), np.array([[0.0], [3.0]]))) == pytest.approx(
        math.log1p(math.exp(3.0)), rel=1e-12
    )
    assert float(interaction_cosent_loss(np.ones(5), np.arange(5.0)[:, None])) == 0.0


def test_scores_are_clipped():
    loss = float(interaction_cosent_loss(np.array([1.0, 0.0]), np.array([[-1e30], [1e30]], np.float32)))
    assert loss == pytest.approx(2e6, rel=1e-6)


def test_gradient_matches_finite_differences():
    labels = tf.constant([0.0, 2.0, 1.0, 1.0, 2.0], tf.float64)
    scores = tf.Variable(np.random.default_rng(1).normal(size=(5, 1)), dtype=tf.float64)
    with tf.GradientTape() as tape:
        loss = interaction_cosent_loss(labels, scores)
    analytic = tape.gradient(loss, scores).numpy()
    numeric = np.zeros_like(analytic)
    for i in range(5):
        for sign in (1, -1):
            shifted = scores.numpy().copy()
            shifted[i, 0] += sign * 1e-6
            numeric[i, 0] += sign * float(interaction_cosent_loss(labels, tf.constant(shifted))) / 2e-6
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)


def test_finite_in_bfloat16():
    rng = np.random.default_rng(2)
    scores = tf.Variable(tf.cast(rng.normal(size=(64, 1)) * 50, tf.bfloat16))
    with tf.GradientTape() as tape:
        loss = InteractionCoSENTLoss()(rng.integers(0, 2, 64).astype(np.float32), scores)
    assert np.isfinite(float(loss))
    assert np.all(np.isfinite(tf.cast(tape.gradient(loss, scores), tf.float32).numpy()))


def test_keras_contract():
    scores = np.random.default_rng(8).normal(size=(6, 1)).astype(np.float32)
    run_keras_object_test(InteractionCoSENTLoss, {"global_batch": False}, scores, y_true=np.array([0, 1, 2, 1, 0, 2.0]))
