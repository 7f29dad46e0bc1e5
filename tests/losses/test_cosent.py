import math

import numpy as np
import pytest

from cosent_tf import CoSENTLoss
from cosent_tf.backend import keras, tf
from cosent_tf.losses import cosent_loss
from tests.harness import run_keras_object_test


def brute_force_cosent(labels, vectors, scale):
    """Double loop over pairs of pairs, float64, straight from the formula."""
    vectors = np.asarray(vectors, dtype=np.float64)
    pair_labels = np.asarray(labels, dtype=np.float64).reshape(-1)[::2]
    cosines = [
        float(
            np.dot(vectors[2 * k], vectors[2 * k + 1])
            / (np.linalg.norm(vectors[2 * k]) * np.linalg.norm(vectors[2 * k + 1]))
        )
        for k in range(len(pair_labels))
    ]
    terms = [0.0]
    for high in range(len(pair_labels)):
        for low in range(len(pair_labels)):
            if pair_labels[high] > pair_labels[low]:
                terms.append(scale * (cosines[low] - cosines[high]))
    peak = max(terms)  # log-sum-exp by hand so large scales do not overflow the reference
    return peak + math.log(sum(math.exp(t - peak) for t in terms))


def interleaved_labels(pair_labels):
    return np.repeat(np.asarray(pair_labels, dtype=np.float32), 2)


LABEL_KINDS = {
    "binary_with_ties": lambda rng, n: rng.integers(0, 2, n).astype(float),
    "nli_ranks": lambda rng, n: rng.integers(0, 3, n).astype(float),
    "float_scores": lambda rng, n: rng.uniform(0, 5, n),
    "sts_integer_scores": lambda rng, n: rng.integers(0, 6, n).astype(float),
}


@pytest.mark.parametrize("kind", sorted(LABEL_KINDS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_brute_force(kind, seed):
    rng = np.random.default_rng(seed)
    pairs = int(rng.integers(2, 24))
    labels = interleaved_labels(LABEL_KINDS[kind](rng, pairs))
    vectors = rng.normal(size=(2 * pairs, 8)).astype(np.float32)
    expected = brute_force_cosent(labels, vectors, 20.0)
    actual = float(CoSENTLoss(20.0)(labels, vectors))
    assert actual == pytest.approx(expected, rel=1e-5)


def test_all_equal_labels_give_zero():
    vectors = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
    assert float(cosent_loss(np.ones(10), vectors)) == 0.0


def test_hand_computed_two_pairs():
    # Pair 0 (label 1) has cosine 0.5, pair 1 (label 0) has cosine 1:
    # loss = log(1 + exp(20 * (1 - 0.5))) = log(1 + e^10).
    # float64 inputs are computed in float64, which checks the formula to 1e-12.
    vectors = np.array([[1, 0], [0.5, math.sqrt(0.75)], [1, 0], [2, 0]], dtype=np.float64)
    loss = float(cosent_loss(np.array([1, 1, 0, 0]), vectors, scale=20.0))
    assert loss == pytest.approx(math.log1p(math.exp(10.0)), rel=1e-12)
    # Swap the labels: the ordered pair now has the larger cosine, exp(20 * (0.5 - 1)).
    loss = float(cosent_loss(np.array([0, 0, 1, 1]), vectors, scale=20.0))
    assert loss == pytest.approx(math.log1p(math.exp(-10.0)), rel=1e-12)
    # In float32, log(1 + x) is exact to float32's resolution around 1.
    loss = float(cosent_loss(np.array([0, 0, 1, 1]), vectors.astype(np.float32), scale=20.0))
    assert loss == pytest.approx(math.log1p(math.exp(-10.0)), abs=2e-7)


def test_label_shapes_are_equivalent():
    rng = np.random.default_rng(3)
    labels = interleaved_labels(rng.integers(0, 3, 6))
    vectors = rng.normal(size=(12, 5)).astype(np.float32)
    assert float(cosent_loss(labels, vectors)) == float(cosent_loss(labels[:, None], vectors))


def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(4)
    labels = tf.constant(interleaved_labels([0.0, 1.0, 2.0, 1.0]), tf.float64)
    vectors = tf.Variable(rng.normal(size=(8, 3)), dtype=tf.float64)
    with tf.GradientTape() as tape:
        loss = cosent_loss(labels, vectors, scale=20.0)
    analytic = tape.gradient(loss, vectors).numpy()
    numeric = np.zeros_like(analytic)
    step = 1e-6
    base = vectors.numpy()
    for index in np.ndindex(base.shape):
        shifted = base.copy()
        shifted[index] += step
        up = float(cosent_loss(labels, tf.constant(shifted), 20.0))
        shifted[index] -= 2 * step
        down = float(cosent_loss(labels, tf.constant(shifted), 20.0))
        numeric[index] = (up - down) / (2 * step)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


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
    vectors = tf.Variable(tf.cast(rng.normal(size=(64, 16)), tf.bfloat16))
    with tf.GradientTape() as tape:
        loss = CoSENTLoss(20.0)(labels, vectors)
    gradient = tape.gradient(loss, vectors)
    assert loss.dtype == tf.float32
    assert np.isfinite(float(loss))
    assert np.all(np.isfinite(tf.cast(gradient, tf.float32).numpy()))
    # bf16 inputs are computed in float32, so the loss equals the float64 reference on them.
    as_float = tf.cast(vectors, tf.float32).numpy()
    assert float(loss) == pytest.approx(brute_force_cosent(labels, as_float, 20.0), rel=1e-5)


def test_odd_number_of_rows_is_an_error():
    with pytest.raises(ValueError, match="even number of rows"):
        cosent_loss(np.zeros(3), np.ones((3, 4), np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None]), tf.TensorSpec([None, 4])])
    def unknown_batch(y_true, y_pred):
        return cosent_loss(y_true, y_pred)

    with pytest.raises(tf.errors.InvalidArgumentError, match="even number of rows"):
        unknown_batch(tf.zeros(3), tf.ones((3, 4)))


def test_keras_contract():
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(8, 5)).astype(np.float32)
    run_keras_object_test(
        CoSENTLoss, {"scale": 7.5, "global_batch": False}, vectors, y_true=interleaved_labels([0, 1, 2, 1])
    )


@pytest.mark.parametrize("loss", [CoSENTLoss(20.0), cosent_loss], ids=["class", "function"])
def test_trains_in_model_fit(loss):
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
    encoder.compile(keras.optimizers.Adam(0.01), loss=loss)
    history = encoder.fit(x, y, batch_size=32, epochs=15, shuffle=False, verbose=0)
    assert history.history["loss"][-1] < 0.7 * history.history["loss"][0]
