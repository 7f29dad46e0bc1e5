import numpy as np
import pytest

from cosent_tf import FusedAdam
from cosent_tf.backend import keras, tf


def _train(optimizer, steps=4, seed=0):
    """Variables after ``steps`` updates of a dense kernel and an embedding (sparse gradient)."""
    rng = np.random.default_rng(seed)
    embedding = tf.Variable(rng.normal(size=(50, 6)).astype(np.float32))
    kernel = tf.Variable(rng.normal(size=(6, 3)).astype(np.float32))
    for _ in range(steps):
        ids = rng.integers(0, 50, size=12)  # repeated ids: their gradients must add up
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.tanh(tf.gather(embedding, ids) @ kernel) ** 2)
        gradients = tape.gradient(loss, [embedding, kernel])
        assert isinstance(gradients[0], tf.IndexedSlices)
        optimizer.apply_gradients(zip(gradients, [embedding, kernel]))
    return embedding.numpy(), kernel.numpy()


@pytest.mark.parametrize("options", [{}, {"beta_1": 0.5, "beta_2": 0.9, "epsilon": 1e-3}])
def test_fused_adam_matches_keras_adam(options):
    expected = _train(keras.optimizers.Adam(0.05, **options))
    fused = _train(FusedAdam(0.05, **options))
    untouched = _train(FusedAdam(0.0, **options))
    for want, got, start in zip(expected, fused, untouched):
        assert not np.allclose(got, start)  # it did move the variables
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_fused_adam_keeps_keras_amsgrad():
    np.testing.assert_allclose(
        _train(FusedAdam(0.05, amsgrad=True))[1],
        _train(keras.optimizers.Adam(0.05, amsgrad=True))[1],
        rtol=1e-5,
        atol=1e-6,
    )


def test_fused_adam_round_trips_through_config():
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(FusedAdam(3e-4, beta_2=0.98)))
    assert isinstance(restored, FusedAdam)
    assert restored.get_config()["beta_2"] == pytest.approx(0.98)
    assert float(restored.learning_rate) == pytest.approx(3e-4)
