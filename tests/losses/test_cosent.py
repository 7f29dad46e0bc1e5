"""CoSENTLoss and cosent_loss on this process's Keras: collected by the Keras 2 suite here and by the
Keras 3 suite through tests/keras3/losses/ (a module of the same name). Values and gradients against
the brute force (labels 0/1, tied grades, float scores), all-equal labels, odd rows and fit with the
class: tests/losses/test_brute_force.py."""

import math

import numpy as np
import pytest

from cosent_tf.losses import CoSENTLoss, cosent_loss
from cosent_tf.process_keras import keras
from tests.backend_maths import HAS_FLOAT64, bfloat16_rounded, value_and_gradient
from tests.losses.test_brute_force import brute_cosent as brute_force_cosent


def interleaved_labels(pair_labels):
    return np.repeat(np.asarray(pair_labels, dtype=np.float32), 2)


def test_hand_computed_two_pairs():
    # Pair 0 (label 1) has cosine 0.5, pair 1 (label 0) has cosine 1:
    # loss = log(1 + exp(20 * (1 - 0.5))) = log(1 + e^10).
    # float64 inputs are computed in float64, which checks the formula to 1e-12 (where the backend
    # has float64; JAX computes them in float32, checked as the float32 case below).
    vectors = np.array([[1, 0], [0.5, math.sqrt(0.75)], [1, 0], [2, 0]], dtype=np.float64)
    exact = dict(rel=1e-12) if HAS_FLOAT64 else dict(rel=1e-6, abs=2e-7)
    loss = float(cosent_loss(np.array([1, 1, 0, 0]), vectors, scale=20.0))
    assert loss == pytest.approx(math.log1p(math.exp(10.0)), **exact)
    # Swap the labels: the ordered pair now has the larger cosine, exp(20 * (0.5 - 1)).
    loss = float(cosent_loss(np.array([0, 0, 1, 1]), vectors, scale=20.0))
    assert loss == pytest.approx(math.log1p(math.exp(-10.0)), **exact)
    # In float32, log(1 + x) is exact to float32's resolution around 1.
    loss = float(cosent_loss(np.array([0, 0, 1, 1]), vectors.astype(np.float32), scale=20.0))
    assert loss == pytest.approx(math.log1p(math.exp(-10.0)), abs=2e-7)


def test_label_shapes_are_equivalent():
    rng = np.random.default_rng(3)
    labels = interleaved_labels(rng.integers(0, 3, 6))
    vectors = rng.normal(size=(12, 5)).astype(np.float32)
    assert float(cosent_loss(labels, vectors)) == float(cosent_loss(labels[:, None], vectors))


def test_stable_for_huge_score_differences():
    rng = np.random.default_rng(5)
    labels = interleaved_labels(rng.integers(0, 2, 16))
    vectors = rng.normal(size=(32, 8)).astype(np.float32)
    loss = float(cosent_loss(labels, vectors, scale=1000.0))
    assert math.isfinite(loss)
    assert loss == pytest.approx(brute_force_cosent(labels, vectors, 1000.0), rel=1e-5)


def test_finite_in_mixed_bfloat16():
    rng = np.random.default_rng(6)
    labels = interleaved_labels(rng.integers(0, 2, 32))
    vectors = rng.normal(size=(64, 16))
    value, gradient = value_and_gradient(lambda x: CoSENTLoss(20.0)(labels, x), vectors, "bfloat16")
    assert np.isfinite(value) and np.all(np.isfinite(gradient))
    # bf16 inputs are computed in float32, so the loss equals the float64 reference on them.
    assert value == pytest.approx(brute_force_cosent(labels, bfloat16_rounded(vectors), 20.0), rel=1e-5)


def test_the_function_trains_in_model_fit():
    """compile(loss=cosent_loss); the class in model.fit: tests/losses/test_brute_force.py."""
    # Two sentence "features" per pair through a shared Dense encoder; fit must lower the loss.
    rng = np.random.default_rng(7)
    pairs = 64
    labels = rng.integers(0, 2, pairs).astype(np.float32)
    first = rng.normal(size=(pairs, 6)).astype(np.float32)
    second = np.where(
        labels[:, None] > 0, first + 0.1 * rng.normal(size=(pairs, 6)), rng.normal(size=(pairs, 6))
    ).astype(np.float32)
    x = np.stack([first, second], axis=1).reshape(2 * pairs, 6)
    y = np.repeat(labels, 2)
    encoder = keras.Sequential([keras.layers.Input((6,)), keras.layers.Dense(4)])
    encoder.compile(keras.optimizers.Adam(0.01), loss=cosent_loss)
    history = encoder.fit(x, y, batch_size=32, epochs=15, shuffle=False, verbose=0)
    assert history.history["loss"][-1] < 0.7 * history.history["loss"][0]
