"""The Keras 3 layers (cosent_tf.keras3.layers): Pooling in every mode against NumPy, padding never
counted, float32 out of bfloat16 in, PaddingMask, serialisation, a functional model, and the same
values and gradients as the Keras 2 layers (from one Keras 2 subprocess)."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from cosent_tf.choices import POOLING_MODES
from cosent_tf.errors import ConfigError
from cosent_tf.keras3.layers import PaddingMask, Pooling
from tests.keras3.support import run_keras2

MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], np.float32)


def hidden_states(seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(3, 5, 8)).astype(dtype) for _ in range(2)]


def layer_inputs(mode, first, last):
    if mode == "pooler":
        return last[:, 0]
    return [first, last] if mode == "first-last-avg" else last


def expected_pooling(mode, first, last, mask):
    """Each mode written out with the real tokens of each row, float64."""
    if mode == "pooler":
        return last[:, 0].astype(np.float64)
    rows = []
    for row in range(len(mask)):
        real = mask[row] > 0
        if mode == "cls":
            rows.append(last[row, 0])
        elif mode == "last-avg":
            rows.append(last[row, real].astype(np.float64).mean(axis=0))
        elif mode == "max":
            rows.append(last[row, real].max(axis=0))
        else:
            rows.append((first[row, real].astype(np.float64).mean(0) + last[row, real].astype(np.float64).mean(0)) / 2)
    return np.array(rows, np.float64)


def numpy_of(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize("mode", POOLING_MODES)
def test_every_mode_equals_numpy_and_ignores_padding(mode):
    first, last = hidden_states(0)
    pooled = numpy_of(Pooling(mode)(layer_inputs(mode, first, last), mask=MASK))
    np.testing.assert_allclose(pooled, expected_pooling(mode, first, last, MASK), rtol=1e-5, atol=1e-6)
    if mode != "pooler":  # the pooler's input has no tokens
        noise = np.random.default_rng(1).normal(size=first.shape).astype(np.float32) * 100
        padded = (MASK == 0)[:, :, None]
        changed_first, changed_last = np.where(padded, noise, first), np.where(padded, -noise, last)
        again = numpy_of(Pooling(mode)(layer_inputs(mode, changed_first, changed_last), mask=MASK))
        np.testing.assert_array_equal(again, pooled)


@pytest.mark.parametrize("mode", POOLING_MODES)
def test_bfloat16_in_gives_float32_out(mode):
    first, last = (keras.ops.cast(x, "bfloat16") for x in hidden_states(2))
    pooled = Pooling(mode)(layer_inputs(mode, first, last), mask=MASK)
    assert keras.backend.standardize_dtype(pooled.dtype) == "float32"
    as_float = [numpy_of(keras.ops.cast(x, "float32")) for x in (first, last)]
    np.testing.assert_allclose(numpy_of(pooled), expected_pooling(mode, *as_float, MASK), rtol=1e-5, atol=1e-6)


def test_without_a_mask_every_token_counts():
    first, last = hidden_states(3)
    pooled = numpy_of(Pooling("last-avg")(last))
    np.testing.assert_allclose(pooled, last.astype(np.float64).mean(axis=1), rtol=1e-5, atol=1e-6)


def test_padding_mask_marks_the_tokens_that_are_not_padding():
    ids = np.array([[101, 872, 102, 0, 0], [101, 3, 3, 102, 3]], np.int32)
    np.testing.assert_array_equal(numpy_of(PaddingMask()(ids)), (ids != 0).astype(np.float32))
    np.testing.assert_array_equal(numpy_of(PaddingMask(padding_id=3)(ids)), (ids != 3).astype(np.float32))
    assert keras.backend.standardize_dtype(PaddingMask()(ids).dtype) == "float32"


def test_an_unknown_mode_is_refused_naming_the_choices():
    with pytest.raises(ConfigError, match="unknown pooling 'mean'; choose one of cls, "):
        Pooling("mean")


@pytest.mark.parametrize("layer", [Pooling("first-last-avg", name="p"), PaddingMask(padding_id=5, name="m")])
def test_serialisation_round_trip(layer):
    serialised = keras.saving.serialize_keras_object(layer)
    assert serialised["registered_name"] == f"cosent_tf>{type(layer).__name__}"
    rebuilt = keras.saving.deserialize_keras_object(json.loads(json.dumps(serialised)))
    assert type(rebuilt) is type(layer) and rebuilt.get_config() == layer.get_config()


@pytest.mark.parametrize("mode", ["cls", "last-avg", "max"])
def test_a_functional_encoder_on_token_ids_pools_the_real_tokens(mode, tmp_path):
    ids = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(20, 4)(ids)
    model = keras.Model(ids, Pooling(mode)(hidden, mask=PaddingMask()(ids)))
    tokens = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], np.int32)
    vectors = numpy_of(model(tokens))
    table = numpy_of(model.layers[1].embeddings)
    mask = (tokens != 0).astype(np.float32)
    np.testing.assert_allclose(vectors, expected_pooling(mode, None, table[tokens], mask), rtol=1e-5, atol=1e-6)
    model.save(tmp_path / "encoder.keras")
    loaded = keras.saving.load_model(tmp_path / "encoder.keras")
    np.testing.assert_allclose(numpy_of(loaded(tokens)), vectors, rtol=1e-6)


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
    if keras.backend.backend() == "jax":
        import jax

        def objective(f, h):
            pooled = Pooling(mode)(layer_inputs(mode, f, h), mask=MASK)
            return keras.ops.sum(pooled * weights), pooled

        (_, pooled), gradients = jax.value_and_grad(objective, argnums=(0, 1), has_aux=True)(first, last)
        return numpy_of(pooled), [np.asarray(g) for g in gradients]
    import tensorflow as tf

    first, last = tf.constant(first), tf.constant(last)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([first, last])
        pooled = Pooling(mode)(layer_inputs(mode, first, last), mask=MASK)
        objective = tf.reduce_sum(pooled * weights)
    gradients = [tape.gradient(objective, x) for x in (first, last)]
    return pooled.numpy(), [np.zeros(first.shape) if g is None else g.numpy() for g in gradients]


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
