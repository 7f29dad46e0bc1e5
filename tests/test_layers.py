import numpy as np
import pytest

from cosent_tf import ConfigError, PaddingMask, Pooling, build_encoder
from cosent_tf.backend import dtype_policy, tf
from cosent_tf.layers import POOLING_MODES
from tests.harness import run_keras_object_test


def masked_reference(mode, first, last, mask):
    real = mask.astype(bool)
    rows = []
    for b in range(last.shape[0]):
        if mode == "cls":
            rows.append(last[b, 0])
        elif mode == "last-avg":
            rows.append(last[b, real[b]].mean(0))
        elif mode == "max":
            rows.append(last[b, real[b]].max(0))
        else:
            rows.append((first[b, real[b]].mean(0) + last[b, real[b]].mean(0)) / 2)
    return np.stack(rows)


@pytest.mark.parametrize("mode", ["cls", "last-avg", "max", "first-last-avg"])
def test_padding_never_enters(mode):
    rng = np.random.default_rng(0)
    lengths = np.array([5, 2, 7])
    mask = (np.arange(7)[None, :] < lengths[:, None]).astype(np.float32)
    # Padding positions hold large values that would dominate a mean or a max.
    first = np.where(mask[..., None] > 0, rng.normal(size=(3, 7, 4)), 1e3).astype(np.float32)
    last = np.where(mask[..., None] > 0, rng.normal(size=(3, 7, 4)), 1e3).astype(np.float32)
    inputs = [first, last] if mode == "first-last-avg" else last
    pooled = Pooling(mode)(inputs, mask=mask).numpy()
    np.testing.assert_allclose(pooled, masked_reference(mode, first, last, mask), rtol=1e-5, atol=1e-6)


def test_negative_values_survive_max():
    # All real values negative: a max that let padding in as 0 would return 0.
    hidden = -np.ones((1, 3, 2), np.float32) * np.array([[[1], [2], [0]]], np.float32) - 1
    pooled = Pooling("max")(hidden, mask=np.array([[1, 1, 0]], np.float32)).numpy()
    np.testing.assert_allclose(pooled, [[-2, -2]])


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


def test_bad_mode():
    with pytest.raises(ConfigError, match="unknown pooling 'mean'"):
        Pooling("mean")


def test_padding_mask():
    mask = PaddingMask()(np.array([[101, 5, 102, 0, 0]])).numpy()
    np.testing.assert_array_equal(mask, [[1, 1, 1, 0, 0]])
