"""ThresholdContrastiveLoss against NumPy, on this process's Keras: collected by the Keras 2 suite here
and by the Keras 3 suite through tests/keras3/losses/ (a module of the same name)."""

import numpy as np
import pytest

from cosent_tf.losses import ThresholdContrastiveLoss


@pytest.mark.parametrize("epsilon", [-1.0, 0.0, 0.9])
def test_matches_numpy(epsilon):
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(16, 3)).astype(np.float32)
    labels = np.repeat(rng.integers(0, 2, 8), 2).astype(np.float32)
    u, v = vectors[::2], vectors[1::2]
    cosines = (u * v).sum(1) / np.linalg.norm(u, axis=1) / np.linalg.norm(v, axis=1)
    positive = labels[::2] > 0.5
    expected = np.mean(np.where(positive, 1 - cosines, np.maximum(cosines - epsilon, 0)))
    assert float(ThresholdContrastiveLoss(epsilon)(labels, vectors)) == pytest.approx(expected, rel=1e-5)


def test_negative_below_threshold_costs_nothing():
    # A negative pair with cosine 0 under epsilon 0.5 contributes 0; a positive with cosine 1 too.
    vectors = np.array([[1, 0], [0, 1], [1, 1], [2, 2]], np.float32)
    assert float(ThresholdContrastiveLoss(0.5)(np.array([0, 0, 1, 1]), vectors)) == pytest.approx(0.0, abs=1e-6)


def test_scores_binarised():
    vectors = np.array([[1, 0], [1, 0]], np.float32)
    # STS-B score 4 > 2.5 is positive: cosine 1 costs nothing.
    assert float(ThresholdContrastiveLoss(0.5, positive_above=2.5)(np.array([4, 4]), vectors)) == pytest.approx(
        0.0, abs=1e-6
    )
