"""Every loss on degenerate and random batches: finite values and gradients, float32 and bf16."""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from cosent_tf import (
    CoSENTLoss,
    CosineMSELoss,
    InteractionCoSENTLoss,
    SentenceBertHead,
    SentenceBertSoftmaxLoss,
    ThresholdContrastiveLoss,
)
from cosent_tf.backend import tf
from tests.losses.test_cosent import brute_force_cosent

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


@pytest.mark.heavy
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
    # not below 0 by more than float32 rounding: a cosine of two equal vectors can round to 1 + 1e-7
    assert np.isfinite(value) and value >= -1e-6 and np.all(np.isfinite(gradient))


@settings(max_examples=30, deadline=None)
@given(
    hnp.arrays(np.float32, st.tuples(st.integers(1, 16), st.just(1)), elements=st.floats(-1e6, 1e6, width=32)),
    st.data(),
)
def test_interaction_loss_is_finite_on_random_scores(scores, data):
    labels = data.draw(hnp.arrays(np.float32, len(scores), elements=st.sampled_from([0.0, 1.0, 2.0])))
    value, gradient = loss_and_gradient(InteractionCoSENTLoss(), labels, scores, tf.float32)
    assert np.isfinite(value) and value >= 0 and np.all(np.isfinite(gradient))


MIRRORED_FIT = """
import sys
import numpy as np
import cosent_tf as ct
from cosent_tf.backend import keras, tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model = keras.Sequential([keras.layers.Dense(4, input_shape=(3,))])
    model.compile(optimizer="adam", loss=ct.CoSENTLoss())
rng = np.random.default_rng(0)
pairs = int(sys.argv[1])
features = rng.normal(size=(4 * pairs, 3)).astype("float32")
labels = np.repeat(rng.integers(0, 2, 2 * pairs), 2).astype("float32")
data = tf.data.Dataset.from_tensor_slices((features, labels)).batch(2 * pairs, drop_remainder=True)
model.fit(data, epochs=1, verbose=0)
print("trained")
"""


@pytest.mark.slow
def test_under_a_mirrored_strategy_an_odd_slice_says_what_to_change():
    def fit(pairs_per_batch):
        return subprocess.run(
            [sys.executable, "-c", MIRRORED_FIT, str(pairs_per_batch)], capture_output=True, text=True, timeout=300
        )

    works = fit(4)  # 8 rows: 4 a replica, 2 pairs each
    assert works.returncode == 0 and "trained" in works.stdout, works.stderr[-2000:]
    odd = fit(3)  # 6 rows: 3 a replica
    assert odd.returncode != 0
    assert "make the pairs per batch divisible by the number of replicas" in odd.stderr, odd.stderr[-2000:]
