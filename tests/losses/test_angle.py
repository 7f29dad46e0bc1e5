"""AnglELoss: sentence-transformers' values and gradients, a brute force over complex numbers, the
Keras contract and bad input (the reference side as in tests/losses/test_mnrl.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cosent_tf.backend import tf
from cosent_tf.losses import AnglELoss
from cosent_tf.losses.angle import angle_loss, angle_similarities
from tests.harness import run_keras_object_test
from tests.losses.test_mnrl import TOLERANCE, run_reference, value_and_gradient


def brute_force_angle_score(x, y):
    """|Re + Im| of sum_m x_m * conj(y_m) / (|x| |y|), the vectors read as complex: first half real."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if len(x) % 2:
        x, y = np.append(x, 0.0), np.append(y, 0.0)
    half = len(x) // 2
    total = 0j
    for m in range(half):
        total += complex(x[m], x[half + m]) * complex(y[m], y[half + m]).conjugate()
    total /= np.linalg.norm(x) * np.linalg.norm(y)
    return abs(total.real + total.imag)


def brute_force_angle(pair_labels, vectors, scale):
    scores = [brute_force_angle_score(vectors[2 * k], vectors[2 * k + 1]) for k in range(len(pair_labels))]
    terms = [0.0]
    for high in range(len(pair_labels)):
        for low in range(len(pair_labels)):
            if pair_labels[high] > pair_labels[low]:
                terms.append(scale * (scores[low] - scores[high]))
    peak = max(terms)
    return peak + math.log(sum(math.exp(t - peak) for t in terms))


LABEL_KINDS = {
    "binary": lambda rng, n: rng.integers(0, 2, n).astype(float),
    "graded": lambda rng, n: rng.uniform(0, 5, n),
    "sts_integers": lambda rng, n: rng.integers(0, 6, n).astype(float),
}


def parity_cases():
    rng = np.random.default_rng(136)
    cases, inputs = [], {}
    for kind in sorted(LABEL_KINDS):
        for width in (16, 9):  # an odd width is padded with a zero dimension
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


@pytest.mark.parametrize("kind", sorted(LABEL_KINDS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_brute_force(kind, seed):
    rng = np.random.default_rng(seed)
    pairs = int(rng.integers(2, 16))
    width = int(rng.integers(1, 9))
    pair_labels = LABEL_KINDS[kind](rng, pairs)
    vectors = rng.normal(size=(2 * pairs, width)).astype(np.float32)
    scale = float(rng.uniform(1, 30))
    actual = float(angle_loss(np.repeat(pair_labels, 2), vectors, scale))
    assert actual == pytest.approx(brute_force_angle(pair_labels, vectors, scale), rel=1e-5, abs=1e-5)


def test_hand_computed_two_pairs():
    # Pair 0 is (1, 0) twice: x / y = 1, score 1. Pair 1 is (1, 0) and (1, 1), read as the
    # complex numbers 1 and 1 + i: x * conj(y) / (|x| |y|) = (1 - i) / sqrt(2), score 0.
    vectors = np.array([[1, 0], [1, 0], [1, 0], [1, 1]], dtype=np.float64)
    np.testing.assert_allclose(angle_similarities(vectors).numpy(), [1.0, 0.0], atol=1e-12)
    assert float(angle_loss(np.array([1, 1, 0, 0]), vectors, 20.0)) == pytest.approx(math.log1p(math.exp(-20.0)))
    assert float(angle_loss(np.array([0, 0, 1, 1]), vectors, 20.0)) == pytest.approx(math.log1p(math.exp(20.0)))


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
    vectors = tf.Variable(tf.cast(rng.normal(size=(32, 16)), tf.bfloat16))
    with tf.GradientTape() as tape:
        loss = AnglELoss()(labels, vectors)
    gradient = tape.gradient(loss, vectors)
    assert loss.dtype == tf.float32 and math.isfinite(float(loss))
    assert np.all(np.isfinite(tf.cast(gradient, tf.float32).numpy()))
    as_float = tf.cast(vectors, tf.float32).numpy()
    assert float(loss) == pytest.approx(brute_force_angle(labels[::2], as_float, 20.0), rel=1e-5)


def test_odd_number_of_rows_is_an_error():
    with pytest.raises(ValueError, match="even number of rows"):
        angle_loss(np.zeros(3), np.ones((3, 4), np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None]), tf.TensorSpec([None, 4])])
    def unknown_batch(y_true, y_pred):
        return AnglELoss()(y_true, y_pred)

    with pytest.raises(tf.errors.InvalidArgumentError, match="even number of rows"):
        unknown_batch(tf.zeros(3), tf.ones((3, 4)))


def test_keras_contract():
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(8, 6)).astype(np.float32)
    labels = np.repeat([0.0, 1.0, 2.0, 1.0], 2).astype(np.float32)
    run_keras_object_test(AnglELoss, {"scale": 7.5, "global_batch": False}, vectors, y_true=labels)
