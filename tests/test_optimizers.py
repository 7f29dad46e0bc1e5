import numpy as np
import pytest

from cosent_tf import FusedAdam
from cosent_tf.backend import keras, tf
from cosent_tf.optimizers import WarmupSchedule, build_optimizer
from tests.harness import run_keras_object_test
from tests.test_schedule_and_decay import reference_adamw, reference_schedule


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


@pytest.mark.parametrize("schedule", [False, True], ids=["constant", "warmup-schedule"])
def test_keras_contract_of_fused_adam(schedule):
    features = np.random.default_rng(6).normal(size=(8, 5)).astype(np.float32)
    rate = WarmupSchedule(0.05, total_steps=6, warmup_steps=2) if schedule else 0.05
    run_keras_object_test(FusedAdam, {"learning_rate": rate, "beta_2": 0.98}, features)


def test_weight_decay_and_schedule_match_the_reference_update_and_skip_embeddings_norms_and_biases():
    rng = np.random.default_rng(0)
    names = (
        "Embedding-Token/embeddings",
        "Transformer-0-FeedForward/kernel",
        "Transformer-0-FeedForward/bias",
        "Transformer-0-FeedForward-Norm/gamma",
        "Match-Score/kernel",
    )
    start = {name: rng.normal(size=(4, 3)).astype(np.float32) for name in names}
    variables = {name: tf.Variable(value, name=name) for name, value in start.items()}
    steps = [{name: rng.normal(size=(4, 3)) for name in names} for _ in range(6)]
    optimizer = build_optimizer(1e-2, total_steps=6, weight_decay=0.1, warmup=0.5, schedule="linear")
    for gradients in steps:
        optimizer.apply_gradients([(tf.constant(gradients[name], tf.float32), variables[name]) for name in names])
    lrs = [reference_schedule(t, 1e-2, 6, 3, "linear") for t in range(6)]
    decayed = {"Transformer-0-FeedForward/kernel", "Match-Score/kernel"}
    expected = reference_adamw(start, steps, lrs, 0.1, decayed)
    for name in names:
        np.testing.assert_allclose(variables[name].numpy(), expected[name], rtol=1e-5, atol=1e-7, err_msg=name)
    undecayed = reference_adamw(start, steps, lrs, 0.1, set())
    for name in decayed:  # the decay did act, so the comparison above sees it
        assert not np.allclose(expected[name], undecayed[name], rtol=1e-5, atol=1e-7)


def test_in_a_bert_encoder_only_dense_kernels_are_decayed(tiny_config):
    from cosent_tf import build_interaction_model

    model = build_interaction_model(tiny_config, head_input="pooler")
    optimizer = build_optimizer(1e-3, total_steps=10, weight_decay=0.01)
    decayed = sorted(v.name for v in model.trainable_variables if optimizer._use_weight_decay(v))
    kept = sorted(v.name for v in model.trainable_variables if not optimizer._use_weight_decay(v))
    assert decayed and all(name.endswith("kernel:0") for name in decayed), decayed
    assert any("Embedding-Token" in name for name in kept) and any("Norm" in name for name in kept)
    assert all(name.endswith(("bias:0", "gamma:0", "beta:0", "embeddings:0")) for name in kept), kept
    assert "Pooler-Dense/kernel:0" in decayed and "Match-Score/kernel:0" in decayed


def test_float16_training_scales_the_loss_and_skips_an_overflowing_step():
    from cosent_tf.backend import dtype_policy

    optimizer = build_optimizer(1e-2, 10, loss_scaling=True)
    assert isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer) and optimizer.dynamic
    assert isinstance(optimizer.inner_optimizer, FusedAdam)
    with dtype_policy("mixed_float16"):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    assert model.layers[0].compute_dtype == "float16"
    x, y = np.ones((4, 3), np.float32), np.zeros((4, 2), np.float32)
    factor = tf.Variable(1e30)  # times the initial scale 2**15, the float16 gradients overflow

    def loss(y_true, y_pred):
        return tf.reduce_mean(tf.cast(y_pred, tf.float32)) * factor

    model.compile(optimizer=optimizer, loss=loss)
    before = [w.copy() for w in model.get_weights()]
    scale = float(optimizer.loss_scale)
    history = model.fit(x, y, epochs=1, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"][0])  # the loss itself is float32 and finite
    assert float(optimizer.loss_scale) == scale / 2  # the step was skipped and the scale halved
    for old, new in zip(before, model.get_weights()):
        np.testing.assert_array_equal(old, new)
    factor.assign(1.0)
    model.fit(x, y, epochs=1, batch_size=4, verbose=0)
    assert float(optimizer.loss_scale) == scale / 2  # a finite step keeps the scale (it grows after 2000)
    assert any(np.abs(old - new).max() > 1e-4 for old, new in zip(before, model.get_weights()))
