"""CosineMSELoss against NumPy, on this process's Keras: collected by the Keras 2 suite here and by the
Keras 3 suite through tests/keras3/losses/ (a module of the same name)."""

import numpy as np
import pytest

from cosent_tf.losses import CosineMSELoss


@pytest.mark.parametrize("max_label", [1.0, 5.0])
def test_matches_numpy(max_label):
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(12, 3)).astype(np.float32)
    labels = np.repeat(rng.integers(0, int(max_label) + 1, 6), 2).astype(np.float32)
    u, v = vectors[::2], vectors[1::2]
    cosines = (u * v).sum(1) / np.linalg.norm(u, axis=1) / np.linalg.norm(v, axis=1)
    expected = np.mean((cosines - labels[::2] / max_label) ** 2)
    assert float(CosineMSELoss(max_label)(labels, vectors)) == pytest.approx(expected, rel=1e-5)


def test_zero_vectors_stay_finite():
    assert np.isfinite(float(CosineMSELoss()(np.ones(4), np.zeros((4, 3), np.float32))))
