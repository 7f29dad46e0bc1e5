"""CoSENTIBNLoss: the mix equals its parts computed separately, the in-batch part uses the positive
pairs only, bad input; on this process's Keras (collected by the Keras 2 suite here and by the Keras
3 suite through tests/keras3/losses/ (a module of the same name))."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cosent_tf.losses import AnglELoss, CoSENTIBNLoss, CoSENTLoss, MultipleNegativesRankingLoss
from cosent_tf.losses.cosent_ibn import cosent_ibn_loss, positive_pair_loss
from tests.backend_maths import HAS_FLOAT64, bfloat16_rounded
from tests.backend_maths import loss_value_and_gradient as value_and_gradient
from tests.losses.test_angle import brute_force_angle
from tests.losses.test_brute_force import brute_cosent, brute_cosent_ibn, brute_mnrl

WEIGHTS = dict(cosine_w=0.3, ibn_w=2.0, angle_w=0.7, cosine_scale=15.0, ibn_scale=25.0, angle_scale=10.0)


def labelled_batch(seed, kind):
    rng = np.random.default_rng(seed)
    pairs = int(rng.integers(3, 12))
    pair_labels = rng.integers(0, 2, pairs).astype(float) if kind == "binary" else rng.uniform(0, 5, pairs)
    pair_labels[0] = 1.0 if kind == "binary" else 4.5  # at least one positive pair
    vectors = rng.normal(size=(2 * pairs, 8)).astype(np.float32)
    return pair_labels, np.repeat(pair_labels, 2).astype(np.float32), vectors


@pytest.mark.parametrize("kind, positive_above", [("binary", 0.5), ("graded", 2.5)])
def test_the_mix_equals_its_parts_computed_separately(kind, positive_above):
    pair_labels, labels, vectors = labelled_batch(len(kind), kind)
    mix = CoSENTIBNLoss(**WEIGHTS, positive_above=positive_above, global_batch=False)
    value, gradient = value_and_gradient(mix, labels, vectors)

    positive_rows = np.repeat(pair_labels > positive_above, 2)
    parts = [
        (WEIGHTS["cosine_w"], CoSENTLoss(WEIGHTS["cosine_scale"], global_batch=False), labels, vectors),
        (WEIGHTS["angle_w"], AnglELoss(WEIGHTS["angle_scale"], global_batch=False), labels, vectors),
    ]
    ibn = MultipleNegativesRankingLoss(WEIGHTS["ibn_scale"], global_batch=False)
    parts.append((WEIGHTS["ibn_w"], ibn, labels[positive_rows], vectors[positive_rows]))
    expected_value, expected_gradient = 0.0, np.zeros_like(vectors)
    for weight, loss, part_labels, part_vectors in parts:
        part_value, part_gradient = value_and_gradient(loss, part_labels, part_vectors)
        expected_value += weight * part_value
        if part_vectors is vectors:
            expected_gradient += weight * part_gradient
        else:
            expected_gradient[positive_rows] += weight * part_gradient
    assert value == pytest.approx(expected_value, rel=1e-5)
    np.testing.assert_allclose(gradient, expected_gradient, atol=1e-5, rtol=1e-5)
    # and each part is its brute force
    brute_force = (
        WEIGHTS["cosine_w"] * brute_cosent(labels, vectors, WEIGHTS["cosine_scale"])
        + WEIGHTS["angle_w"] * brute_force_angle(pair_labels, vectors, WEIGHTS["angle_scale"])
        + WEIGHTS["ibn_w"] * brute_mnrl(vectors[positive_rows], 2, WEIGHTS["ibn_scale"])
    )
    assert value == pytest.approx(brute_force, rel=1e-5)


def test_hand_computed_in_batch_part_skips_negative_pairs():
    # Pairs 0 and 2 are positive; pair 1 is negative and its second sentence, equal to the first
    # anchor, must not be a candidate. Positive pairs: a0 = (1, 0), p0 = (0.6, 0.8);
    # a2 = (0, 1), p2 = (0, 2): cos(a0, p0) = 0.6, cos(a0, p2) = 0, cos(a2, p0) = 0.8, cos(a2, p2) = 1.
    vectors = np.array([[1, 0], [0.6, 0.8], [5, 5], [1, 0], [0, 1], [0, 2]], dtype=np.float64)
    labels = np.array([1, 1, 0, 0, 1, 1], dtype=np.float64)
    expected = ((math.log(math.exp(0.6) + 1) - 0.6) + (math.log(math.exp(0.8) + math.e) - 1)) / 2
    exact = 1e-12 if HAS_FLOAT64 else 1e-6  # float64 is computed in float64 where the backend has it
    assert float(positive_pair_loss(labels, vectors, 1.0, 0.5)) == pytest.approx(expected, rel=exact)
    only_ibn = cosent_ibn_loss(labels, vectors, cosine_w=0.0, ibn_w=3.0, angle_w=0.0, ibn_scale=1.0)
    assert float(only_ibn) == pytest.approx(3 * expected, rel=exact)


@pytest.mark.backends("tensorflow")
def test_a_graded_batch_without_a_positive_pair_stays_finite_in_a_graph():
    """Without a positive pair the in-batch part adds nothing (tests/losses/test_brute_force.py);
    traced with an unknown batch size, as model.fit on TensorFlow does, it stays finite."""
    import tensorflow as tf

    vectors = np.random.default_rng(4).normal(size=(8, 5)).astype(np.float32)

    @tf.function(input_signature=[tf.TensorSpec([None]), tf.TensorSpec([None, 5])])
    def traced(y_true, y_pred):
        with tf.GradientTape() as tape:
            tape.watch(y_pred)
            loss = CoSENTIBNLoss(cosine_w=1.0, ibn_w=20.0, angle_w=1.0)(y_true, y_pred)
        return loss, tape.gradient(loss, y_pred)

    graded = np.repeat([0.0, 0.5, 0.2, 0.4], 2).astype(np.float32)  # ordered, none above 0.5
    loss, gradient = traced(graded, vectors)
    assert math.isfinite(float(loss)) and np.all(np.isfinite(gradient.numpy()))


def test_a_part_with_weight_zero_is_left_out():
    pair_labels, labels, vectors = labelled_batch(5, "binary")
    only_angle = float(CoSENTIBNLoss(cosine_w=0.0, ibn_w=0.0, angle_w=1.0, angle_scale=20.0)(labels, vectors))
    assert only_angle == pytest.approx(float(AnglELoss(20.0)(labels, vectors)), rel=1e-6)
    only_cosent = float(CoSENTIBNLoss(cosine_w=1.0, ibn_w=0.0, angle_w=0.0)(labels, vectors))
    assert only_cosent == pytest.approx(float(CoSENTLoss(20.0)(labels, vectors)), rel=1e-6)


def test_finite_float32_in_mixed_bfloat16():
    pair_labels, labels, vectors = labelled_batch(6, "binary")
    loss = CoSENTIBNLoss(cosine_w=1.0)
    value, gradient = value_and_gradient(loss, labels, vectors, "bfloat16")
    assert math.isfinite(value) and np.all(np.isfinite(gradient))
    options = (loss.cosine_w, loss.ibn_w, loss.angle_w, loss.cosine_scale, loss.ibn_scale, loss.angle_scale)
    expected = brute_cosent_ibn(labels, bfloat16_rounded(vectors), *options, loss.positive_above, loss.directions)
    assert value == pytest.approx(expected, rel=1e-5)


def test_an_unknown_direction_is_refused():
    with pytest.raises(ValueError, match="unknown direction"):
        CoSENTIBNLoss(directions=("query_to_doc", "sideways"))
