import numpy as np
import pytest

from cosent_tf import CosineMSELoss
from tests.harness import run_keras_object_test


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


def test_keras_contract():
    vectors = np.random.default_rng(1).normal(size=(8, 3)).astype(np.float32)
    run_keras_object_test(CosineMSELoss, {"max_label": 5.0}, vectors, y_true=np.repeat([0, 5, 2, 3.0], 2))
