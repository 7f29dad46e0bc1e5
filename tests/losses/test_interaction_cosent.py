"""InteractionCoSENTLoss (an interaction model's scores ranked as CoSENT ranks cosines) on this
process's Keras: collected by the Keras 2 suite here and by the Keras 3 suite through
tests/keras3/losses/ (a module of the same name). Its gradients against the brute force:
tests/losses/test_brute_force.py."""

import math

import numpy as np
import pytest

from cosent_tf.losses import InteractionCoSENTLoss, interaction_cosent_loss
from tests.backend_maths import HAS_FLOAT64, value_and_gradient


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
    # label 1 scored 0.0, label 0 scored 3.0: log(1 + e^3); float64 is computed in float64 where the
    # backend has it
    assert float(interaction_cosent_loss(np.array([1.0, 0.0]), np.array([[0.0], [3.0]]))) == pytest.approx(
        math.log1p(math.exp(3.0)), rel=1e-12 if HAS_FLOAT64 else 1e-6
    )
    assert float(interaction_cosent_loss(np.ones(5), np.arange(5.0)[:, None])) == 0.0


def test_scores_are_clipped():
    loss = float(interaction_cosent_loss(np.array([1.0, 0.0]), np.array([[-1e30], [1e30]], np.float32)))
    assert loss == pytest.approx(2e6, rel=1e-6)


def test_finite_in_bfloat16():
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 2, 64).astype(np.float32)
    value, gradient = value_and_gradient(
        lambda scores: InteractionCoSENTLoss()(labels, scores), rng.normal(size=(64, 1)) * 50, "bfloat16"
    )
    assert np.isfinite(value) and np.all(np.isfinite(gradient))
