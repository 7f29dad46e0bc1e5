"""The pooling layers on Keras 3 (this process's backend): the body written once over both Kerases
(tests/test_layers.py), and what only Keras 3 checks: the same values and gradients as the Keras 2
layers, from one Keras 2 subprocess."""

from __future__ import annotations

import numpy as np
import pytest

from cosent_tf.choices import POOLING_MODES
from cosent_tf.layers import PaddingMask, Pooling
from cosent_tf.process_keras import ops
from tests.backend_maths import numpy_of, value_and_gradients
from tests.keras3.support import run_keras2
from tests.test_layers import *  # noqa: F403  (the tests written once, collected here too)
from tests.test_layers import MASK, hidden_states, layer_inputs

# ---------------------------------------------------------------- the same as Keras 2

KERAS2_LAYERS = """
from cosent_tf.backend import tf
from cosent_tf.layers import PaddingMask, Pooling

first, last, mask, weights = (tf.constant(inputs[name]) for name in ("first", "last", "mask", "weights"))
for mode in MODES:
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([first, last])
        layer_input = last[:, 0] if mode == "pooler" else [first, last] if mode == "first-last-avg" else last
        pooled = Pooling(mode)(layer_input, mask=mask)
        objective = tf.reduce_sum(pooled * weights)
    outputs[mode + ".value"] = pooled.numpy()
    for name, tensor in (("first", first), ("last", last)):
        gradient = tape.gradient(objective, tensor)
        outputs[mode + ".gradient." + name] = tf.zeros_like(tensor).numpy() if gradient is None else gradient.numpy()
outputs["mask"] = PaddingMask(padding_id=3)(tf.constant(inputs["ids"])).numpy()
"""


@pytest.fixture(scope="module")
def keras2(tmp_path_factory):
    first, last = hidden_states(4)
    arrays = {
        "first": first,
        "last": last,
        "mask": MASK,
        "weights": np.random.default_rng(5).normal(size=(3, 8)).astype(np.float32),
        "ids": np.array([[101, 3, 7, 3], [3, 3, 3, 3]], np.int32),
    }
    code = f"MODES = {list(POOLING_MODES)!r}\n" + KERAS2_LAYERS
    return arrays, run_keras2(code, tmp_path_factory.mktemp("keras2-layers"), **arrays)


def pooled_and_gradients(mode, first, last, weights):
    """The pooled vectors and the gradient of sum(pooled * weights) on first and last."""

    def objective(inputs):
        pooled = Pooling(mode)(layer_inputs(mode, *inputs), mask=MASK)
        return ops().sum(pooled * weights), pooled

    _, gradients, pooled = value_and_gradients(objective, [first, last])
    return numpy_of(pooled), gradients


@pytest.mark.parametrize("mode", POOLING_MODES)
def test_pooling_values_and_gradients_equal_the_keras2_layer(mode, keras2):
    arrays, reference = keras2
    pooled, (first_gradient, last_gradient) = pooled_and_gradients(
        mode, arrays["first"], arrays["last"], arrays["weights"]
    )
    np.testing.assert_allclose(pooled, reference[f"{mode}.value"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(first_gradient, reference[f"{mode}.gradient.first"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(last_gradient, reference[f"{mode}.gradient.last"], rtol=1e-6, atol=1e-6)
    assert np.abs(last_gradient).max() > 0.1


def test_padding_mask_equals_the_keras2_layer(keras2):
    arrays, reference = keras2
    np.testing.assert_array_equal(numpy_of(PaddingMask(padding_id=3)(arrays["ids"])), reference["mask"])
