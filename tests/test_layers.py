"""The pooling layers on this process's Keras and backend (tests/backend_maths.py): Pooling in every
mode against NumPy, padding never counted, float32 out of bfloat16 in, PaddingMask, serialisation,
a functional model saved and loaded.

Written once: the Keras 2 suite collects it here, tests/keras3/test_layers.py imports it for the
Keras 3 suite (TensorFlow and JAX); tests/test_layers_keras2.py has what only the Keras 2 engine
checks (its encoders, tests/harness.py's Keras contract)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cosent_tf.choices import POOLING_MODES
from cosent_tf.errors import ConfigError
from cosent_tf.layers import PaddingMask, Pooling
from cosent_tf.process_keras import keras
from tests.backend_maths import cast, numpy_of

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
    first, last = (cast(x, "bfloat16") for x in hidden_states(2))
    pooled = Pooling(mode)(layer_inputs(mode, first, last), mask=MASK)
    assert numpy_of(pooled).dtype == np.float32
    as_float = [numpy_of(cast(x, "float32")) for x in (first, last)]
    np.testing.assert_allclose(numpy_of(pooled), expected_pooling(mode, *as_float, MASK), rtol=1e-5, atol=1e-6)


def test_the_max_of_negative_values_leaves_padding_out():
    # every real value negative: a max that let padding in as 0 would give 0
    hidden = -np.ones((1, 3, 2), np.float32) * np.array([[[1], [2], [0]]], np.float32) - 1
    pooled = numpy_of(Pooling("max")(hidden, mask=np.array([[1, 1, 0]], np.float32)))
    np.testing.assert_allclose(pooled, [[-2, -2]])


def test_without_a_mask_every_token_counts():
    first, last = hidden_states(3)
    pooled = numpy_of(Pooling("last-avg")(last))
    np.testing.assert_allclose(pooled, last.astype(np.float64).mean(axis=1), rtol=1e-5, atol=1e-6)


def test_padding_mask_marks_the_tokens_that_are_not_padding():
    ids = np.array([[101, 872, 102, 0, 0], [101, 3, 3, 102, 3]], np.int32)
    np.testing.assert_array_equal(numpy_of(PaddingMask()(ids)), (ids != 0).astype(np.float32))
    np.testing.assert_array_equal(numpy_of(PaddingMask(padding_id=3)(ids)), (ids != 3).astype(np.float32))
    assert numpy_of(PaddingMask()(ids)).dtype == np.float32


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
