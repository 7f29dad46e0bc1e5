"""Every loss on degenerate and random batches: finite values and gradients, float32 and bf16."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from test_losses_cosent import brute_force_cosent

from cosent_tf import (
    CoSENTLoss,
    CosineMSELoss,
    InteractionCoSENTLoss,
    SentenceBertHead,
    SentenceBertSoftmaxLoss,
    ThresholdContrastiveLoss,
)
from cosent_tf.backend import tf

FEATURE_LOSSES = {
    "cosent": lambda y, x: CoSENTLoss(20.0)(y, x),
    "mse": lambda y, x: CosineMSELoss(max_label=1.0)(y, x),
    "contrastive": lambda y, x: ThresholdContrastiveLoss(0.5)(y, x),
    "sbert": lambda y, x: SentenceBertSoftmaxLoss()(tf.cast(y > 0.5, tf.float32), SentenceBertHead(2)(x)),
}


def loss_and_gradient(loss, labels, inputs, dtype):
    inputs = tf.constant(inputs, dtype=tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        value = loss(tf.constant(labels, tf.float32), tf.cast(inputs, dtype))
    return float(value), tape.gradient(value, inputs).numpy()


def degenerate_batches():
    rng = np.random.default_rng(0)
    vector = rng.normal(size=(1, 8))
    return {
        "identical sentences": (np.repeat(vector, 8, axis=0), [1, 1, 0, 0, 1, 1, 0, 0]),
        "zero vectors": (np.zeros((8, 8)), [1, 1, 0, 0, 1, 1, 0, 0]),
        "one zero vector per pair": (
            np.concatenate([np.zeros((4, 8)), rng.normal(size=(4, 8))])[[0, 4, 1, 5, 2, 6, 3, 7]],
            [1, 1, 0, 0, 1, 1, 0, 0],
        ),
        "a single pair": (rng.normal(size=(2, 8)), [1, 1]),
        "all labels equal": (rng.normal(size=(8, 8)), [1] * 8),
        "huge vectors": (rng.normal(size=(8, 8)) * 1e18, [1, 1, 0, 0, 1, 1, 0, 0]),
    }


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("batch", sorted(degenerate_batches()))
@pytest.mark.parametrize("name", sorted(FEATURE_LOSSES))
def test_feature_losses_stay_finite_on_degenerate_batches(name, batch, dtype):
    inputs, labels = degenerate_batches()[batch]
    value, gradient = loss_and_gradient(FEATURE_LOSSES[name], labels, inputs.astype(np.float32), dtype)
    assert np.isfinite(value) and value >= 0
    assert np.all(np.isfinite(gradient))


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize(
    "scores, labels",
    [([[0.0]], [1]), ([[3.0], [3.0], [3.0]], [1, 0, 1]), ([[1e30], [-1e30]], [0, 1]), ([[2.0], [1.0]], [1, 1])],
)
def test_interaction_loss_stays_finite_on_degenerate_batches(scores, labels, dtype):
    value, gradient = loss_and_gradient(InteractionCoSENTLoss(), labels, np.asarray(scores, np.float32), dtype)
    assert np.isfinite(value) and value >= 0 and np.all(np.isfinite(gradient))


finite_floats = st.floats(-1e3, 1e3, allow_nan=False, width=32)


@st.composite
def pair_batches(draw):
    pairs = draw(st.integers(1, 12))
    dim = draw(st.integers(1, 6))
    vectors = draw(hnp.arrays(np.float32, (2 * pairs, dim), elements=finite_floats))
    labels = draw(hnp.arrays(np.float32, pairs, elements=st.sampled_from([0.0, 1.0, 2.0, 2.5, 5.0])))
    return vectors, np.repeat(labels, 2)


@settings(max_examples=60, deadline=None)
@given(pair_batches())
def test_cosent_on_random_batches_is_finite_and_matches_brute_force(batch):
    vectors, labels = batch
    value, gradient = loss_and_gradient(FEATURE_LOSSES["cosent"], labels, vectors, tf.float32)
    assert np.isfinite(value) and np.all(np.isfinite(gradient))
    if np.all(np.linalg.norm(vectors, axis=1) > 1e-3):  # the reference has no epsilon for zero vectors
        assert value == pytest.approx(brute_force_cosent(labels, vectors, 20.0), rel=1e-4, abs=1e-4)


@settings(max_examples=30, deadline=None)
@given(pair_batches(), st.sampled_from(sorted(FEATURE_LOSSES)), st.sampled_from([tf.float32, tf.bfloat16]))
def test_every_feature_loss_is_finite_on_random_batches(batch, name, dtype):
    vectors, labels = batch
    value, gradient = loss_and_gradient(FEATURE_LOSSES[name], np.minimum(labels, 1.0), vectors, dtype)
    assert np.isfinite(value) and value >= 0 and np.all(np.isfinite(gradient))


@settings(max_examples=30, deadline=None)
@given(
    hnp.arrays(np.float32, st.tuples(st.integers(1, 16), st.just(1)), elements=st.floats(-1e6, 1e6, width=32)),
    st.data(),
)
def test_interaction_loss_is_finite_on_random_scores(scores, data):
    labels = data.draw(hnp.arrays(np.float32, len(scores), elements=st.sampled_from([0.0, 1.0, 2.0])))
    value, gradient = loss_and_gradient(InteractionCoSENTLoss(), labels, scores, tf.float32)
    assert np.isfinite(value) and value >= 0 and np.all(np.isfinite(gradient))
