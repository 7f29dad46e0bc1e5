"""The learning-rate schedule and the optimizer's weight decay, on the process's Keras: one body run
by the Keras 2 suite (here) and by the Keras 3 one on each backend (tests/keras3/test_schedule_and_decay.py
imports these tests), against the formulas written out."""

import numpy as np
import pytest

from cosent_tf.optimizers import WarmupSchedule, build_optimizer
from cosent_tf.process_keras import keras, ops


def reference_schedule(step, peak, total, warmup, decay):
    """transformers' get_linear_schedule_with_warmup / get_constant_schedule_with_warmup, written out."""
    if step < warmup:
        return peak * step / warmup
    return peak if decay == "constant" else peak * max(0.0, (total - step) / max(1, total - warmup))


def reference_adamw(variables, gradient_steps, lrs, weight_decay, decayed, b1=0.9, b2=0.999, eps=1e-7):
    """AdamW with decoupled decay, in float64: θ ← θ − lr·wd·θ, then Keras's Adam update."""
    values = {name: value.astype(np.float64) for name, value in variables.items()}
    m = {name: np.zeros_like(value) for name, value in values.items()}
    v = {name: np.zeros_like(value) for name, value in values.items()}
    for t, (gradients, lr) in enumerate(zip(gradient_steps, lrs), start=1):
        for name, g in gradients.items():
            if name in decayed:
                values[name] -= lr * weight_decay * values[name]
            m[name] = b1 * m[name] + (1 - b1) * g
            v[name] = b2 * v[name] + (1 - b2) * g * g
            values[name] -= lr * np.sqrt(1 - b2**t) / (1 - b1**t) * m[name] / (np.sqrt(v[name]) + eps)
    return values


@pytest.mark.parametrize(("decay", "warmup"), [("linear", 4), ("constant", 4), ("linear", 0), ("linear", 20)])
def test_the_warmup_schedule_is_the_formula(decay, warmup):
    schedule = WarmupSchedule(1e-3, total_steps=20, warmup_steps=warmup, decay=decay)
    for step in range(24):
        expected = reference_schedule(step, 1e-3, 20, warmup, decay)
        assert float(schedule(step)) == pytest.approx(expected, rel=1e-6, abs=1e-12), step


def test_the_schedule_is_saved_with_its_settings():
    schedule = WarmupSchedule(2e-5, total_steps=100, warmup_steps=10, decay="constant")
    config = keras.optimizers.schedules.serialize(schedule)
    assert config["config"] == {"peak_lr": 2e-5, "total_steps": 100, "warmup_steps": 10, "decay": "constant"}
    again = keras.optimizers.schedules.deserialize(config)
    assert type(again) is WarmupSchedule
    assert [float(again(s)) for s in (5, 50)] == pytest.approx([1e-5, 2e-5], rel=1e-6)


def test_weight_decay_skips_the_variables_it_is_given_and_the_update_is_adamw_under_the_schedule():
    rng = np.random.default_rng(0)
    dense, norm = keras.layers.Dense(3), keras.layers.LayerNormalization()
    keras.Sequential([keras.Input((4,)), dense, norm])
    variables = {"kernel": dense.kernel, "bias": dense.bias, "gamma": norm.gamma, "beta": norm.beta}
    start = {name: rng.normal(size=v.shape).astype(np.float32) for name, v in variables.items()}
    for name, variable in variables.items():
        variable.assign(start[name])
    steps = [{name: rng.normal(size=v.shape) for name, v in variables.items()} for _ in range(6)]
    not_decayed = [variables[name] for name in ("bias", "gamma", "beta")]
    optimizer = build_optimizer(1e-2, 6, weight_decay=0.1, warmup=0.5, schedule="linear", not_decayed=not_decayed)
    for gradients in steps:
        optimizer.apply_gradients(
            [(ops().convert_to_tensor(gradients[name].astype(np.float32)), v) for name, v in variables.items()]
        )
    lrs = [reference_schedule(t, 1e-2, 6, 3, "linear") for t in range(6)]
    expected = reference_adamw(start, steps, lrs, 0.1, {"kernel"})
    for name, variable in variables.items():
        np.testing.assert_allclose(variable.numpy(), expected[name], rtol=1e-5, atol=1e-7, err_msg=name)
    # decay changes each variable beyond the tolerance, so the comparison above sees which ones it acted on
    undecayed, all_decayed = (reference_adamw(start, steps, lrs, 0.1, decayed) for decayed in (set(), set(variables)))
    for name in variables:
        other = undecayed if name == "kernel" else all_decayed
        assert not np.allclose(expected[name], other[name], rtol=1e-5, atol=1e-7), name
