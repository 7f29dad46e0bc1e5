"""What only the Keras 2 engine checks of the pooling layers: its encoders' vectors ignore padding
and stay float32 under mixed_bfloat16, and the Keras contract of tests/harness.py (tf-keras). The
layers' own values, on both Kerases, are tests/test_layers.py's."""

import numpy as np
import pytest

from cosent_tf import PaddingMask, Pooling, build_encoder
from cosent_tf.backend import dtype_policy, tf
from cosent_tf.layers import POOLING_MODES
from tests.harness import run_keras_object_test


@pytest.mark.parametrize("mode", list(POOLING_MODES))
def test_encoder_vectors_ignore_extra_padding(mode, tiny_config):
    encoder = build_encoder(tiny_config, pooling=mode)
    token_ids = np.array([[101, 872, 1962, 102, 0], [101, 2769, 102, 0, 0]], np.int32)
    padded = np.pad(token_ids, [(0, 0), (0, 9)])
    plain = encoder.predict([token_ids, np.zeros_like(token_ids)], verbose=0)
    extra = encoder.predict([padded, np.zeros_like(padded)], verbose=0)
    assert np.abs(plain - extra).max() < 1e-5


def test_float32_output_under_mixed_bfloat16(tiny_config):
    with dtype_policy("mixed_bfloat16"):
        encoder = build_encoder(tiny_config, pooling="last-avg")
        vectors = encoder([np.array([[101, 872, 102, 0]]), np.zeros((1, 4), np.int32)])
    assert vectors.dtype == tf.float32 and np.all(np.isfinite(vectors.numpy()))


@pytest.mark.parametrize("mode", list(POOLING_MODES))
def test_keras_contract_of_pooling(mode):
    rng = np.random.default_rng(5)
    hidden = rng.normal(size=(3, 6, 4)).astype(np.float32)
    mask = (np.arange(6)[None, :] < np.array([[3], [6], [1]])).astype(np.float32)
    inputs = {"pooler": hidden[:, 0], "first-last-avg": [hidden, 2 * hidden + 1]}.get(mode, hidden)
    run_keras_object_test(Pooling, {"mode": mode, "name": "p"}, inputs, call_kwargs={"mask": mask})


def test_keras_contract_of_padding_mask():
    run_keras_object_test(PaddingMask, {"padding_id": 3}, np.array([[101, 5, 3, 3], [101, 3, 3, 3]], np.int32))
