"""AnglELoss: sentence-transformers' values and gradients (the reference side as in
tests/losses/test_mnrl.py), a brute force, hand-computed scores, on this process's Keras (collected
by the Keras 2 suite here and by the Keras 3 suite through tests/keras3/losses/ (a module of the
same name))."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cosent_tf.losses import AnglELoss
from cosent_tf.losses.angle import angle_loss, angle_similarities
from tests.backend_maths import HAS_FLOAT64, bfloat16_rounded, numpy_of
from tests.backend_maths import loss_value_and_gradient as value_and_gradient
from tests.losses.test_brute_force import brute_angle
from tests.losses.test_mnrl import TOLERANCE, run_reference


def brute_force_angle(pair_labels, vectors, scale):
    """tests/losses/test_brute_force.py's AnglE brute force on one label a pair."""
    return brute_angle(np.repeat(np.asarray(pair_labels, np.float64), 2), np.asarray(vectors, np.float64), scale)


LABEL_KINDS = {
    "binary": lambda rng, n: rng.integers(0, 2, n).astype(float),
    "graded": lambda rng, n: rng.uniform(0, 5, n),
    "sts_integers": lambda rng, n: rng.integers(0, 6, n).astype(float),
}


def parity_cases():
    rng = np.random.default_rng(136)
    cases, inputs = [], {}
    # each kind of label once, an odd width (padded with a zero dimension) among them
    for kind, width in zip(sorted(LABEL_KINDS), (16, 9, 16)):
        name = f"{kind}-{width}"
        pairs = int(rng.integers(4, 12))
        cases.append(dict(name=name, loss="angle", scale=20.0))
        inputs[f"{name}.vectors"] = rng.normal(size=(2 * pairs, width)).astype(np.float32)
        inputs[f"{name}.labels"] = LABEL_KINDS[kind](rng, pairs).astype(np.float32)
    return cases, inputs


CASES, INPUTS = parity_cases()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return run_reference(tmp_path_factory.mktemp("angle-reference"), CASES, INPUTS)


@pytest.mark.heavy
@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_values_and_gradients_equal_sentence_transformers(case, reference):
    vectors = INPUTS[f"{case['name']}.vectors"]
    labels = np.repeat(INPUTS[f"{case['name']}.labels"], 2)
    value, gradient = value_and_gradient(AnglELoss(case["scale"], global_batch=False), labels, vectors)
    expected_value, expected_gradient = reference[case["name"]]
    assert abs(value - expected_value) <= TOLERANCE
    np.testing.assert_allclose(gradient, expected_gradient, atol=TOLERANCE, rtol=0)
    assert expected_value > 0.1 and np.abs(expected_gradient).max() > 0.01


def test_hand_computed_two_pairs():
    # Pair 0 is (1, 0) twice: x / y = 1, score 1. Pair 1 is (1, 0) and (1, 1), read as the
    # complex numbers 1 and 1 + i: x * conj(y) / (|x| |y|) = (1 - i) / sqrt(2), score 0.
    vectors = np.array([[1, 0], [1, 0], [1, 0], [1, 1]], dtype=np.float64)
    # float64 is computed in float64 where the backend has it (JAX: float32)
    exact = dict(rel=1e-12, abs=1e-12) if HAS_FLOAT64 else dict(rel=1e-6, abs=1e-6)
    np.testing.assert_allclose(numpy_of(angle_similarities(vectors)), [1.0, 0.0], atol=exact["abs"])
    assert float(angle_loss(np.array([1, 1, 0, 0]), vectors, 20.0)) == pytest.approx(
        math.log1p(math.exp(-20.0)), **exact
    )
    assert float(angle_loss(np.array([0, 0, 1, 1]), vectors, 20.0)) == pytest.approx(
        math.log1p(math.exp(20.0)), **exact
    )


def test_the_score_is_not_the_cosine():
    # (1, 0) and (0, 1) are orthogonal, but as complex numbers 1 and i their quotient is -i:
    # AnglE scores the pair 1, as high as two equal vectors
    assert float(angle_similarities(np.array([[1.0, 0.0], [0.0, 1.0]]))[0]) == pytest.approx(1.0)


def test_all_equal_labels_give_zero_and_labels_shapes_are_equivalent():
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(12, 5)).astype(np.float32)
    assert float(angle_loss(np.ones(12), vectors)) == 0.0
    labels = np.repeat(rng.integers(0, 3, 6), 2).astype(np.float32)
    assert float(angle_loss(labels, vectors)) == float(angle_loss(labels[:, None], vectors))


def test_zero_vectors_stay_finite():
    vectors = np.zeros((4, 6), np.float32)
    value, gradient = value_and_gradient(AnglELoss(), np.array([1, 1, 0, 0], np.float32), vectors)
    assert math.isfinite(value) and np.all(np.isfinite(gradient))


def test_finite_float32_in_mixed_bfloat16():
    rng = np.random.default_rng(6)
    labels = np.repeat(rng.integers(0, 2, 16), 2).astype(np.float32)
    vectors = rng.normal(size=(32, 16))
    value, gradient = value_and_gradient(AnglELoss(), labels, vectors, "bfloat16")
    assert math.isfinite(value) and np.all(np.isfinite(gradient))
    assert value == pytest.approx(brute_force_angle(labels[::2], bfloat16_rounded(vectors), 20.0), rel=1e-5)
