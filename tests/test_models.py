import numpy as np
import pytest

from cosent_tf import ConfigError, build_encoder, build_interaction_model
from cosent_tf.backend import keras

from conftest import SHARED_VOCAB, requires_shared_data, write_config

TOKENS = np.array([[101, 872, 1962, 102], [101, 2769, 102, 0]], np.int32)


def attention_kernels(model, layer_name):
    weights = model.get_layer(layer_name).get_weights()
    return weights[0], weights[2], weights[4], weights[6]  # query, key, value, output kernels


def test_random_init_gives_distinct_query_key_value_output(tiny_config):
    encoder = build_encoder(tiny_config)
    for index in range(2):
        kernels = attention_kernels(encoder, f"Transformer-{index}-MultiHeadSelfAttention")
        for i in range(4):
            for j in range(i + 1, 4):
                assert not np.allclose(kernels[i], kernels[j]), (index, i, j)
    # Independent draws: near-zero correlation, and the BERT scale of 0.02.
    query, key = kernels[0].ravel(), kernels[1].ravel()
    assert abs(np.corrcoef(query, key)[0, 1]) < 0.2
    assert 0.01 < query.std() < 0.03
    first = attention_kernels(encoder, "Transformer-0-MultiHeadSelfAttention")[0]
    assert not np.allclose(first, kernels[0])  # layers differ from each other too


def test_seed_makes_random_init_reproducible(tiny_config):
    keras.utils.set_random_seed(7)
    a = build_encoder(tiny_config).get_weights()
    keras.utils.set_random_seed(7)
    b = build_encoder(tiny_config).get_weights()
    keras.utils.set_random_seed(8)
    c = build_encoder(tiny_config).get_weights()
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


@pytest.mark.parametrize("model", ["bert", "roberta", "wobert", "nezha", "albert", "roformer"])
@pytest.mark.parametrize("pooling", ["cls", "first-last-avg"])
def test_every_model_family_builds(model, pooling, tiny_config):
    encoder = build_encoder(tiny_config, model=model, pooling=pooling)
    vectors = encoder.predict([TOKENS, np.zeros_like(TOKENS)], verbose=0)
    assert vectors.shape == (2, 16) and np.all(np.isfinite(vectors))
    assert not np.allclose(vectors[0], vectors[1])


def test_first_last_avg_uses_first_and_last_blocks(tiny_config):
    encoder = build_encoder(tiny_config, pooling="first-last-avg")
    first = keras.Model(encoder.inputs, encoder.get_layer("Transformer-0-FeedForward-Norm").output)
    last = keras.Model(encoder.inputs, encoder.get_layer("Transformer-1-FeedForward-Norm").output)
    inputs = [TOKENS[:1], np.zeros_like(TOKENS[:1])]
    expected = (first.predict(inputs, verbose=0).mean(1) + last.predict(inputs, verbose=0).mean(1)) / 2
    np.testing.assert_allclose(encoder.predict(inputs, verbose=0), expected, rtol=1e-5, atol=1e-6)


def test_interaction_heads(tiny_config):
    score = build_interaction_model(tiny_config, head="score")
    softmax = build_interaction_model(tiny_config, head="softmax")
    inputs = [TOKENS, np.zeros_like(TOKENS)]
    assert score.predict(inputs, verbose=0).shape == (2, 1)
    probs = softmax.predict(inputs, verbose=0)
    assert probs.shape == (2, 2)
    np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-6)
    with pytest.raises(ConfigError, match="unknown interaction head"):
        build_interaction_model(tiny_config, head="sigmoid")


def test_encoder_serialises_through_its_config(tiny_config):
    encoder = build_encoder(tiny_config, pooling="last-avg")
    clone = keras.models.model_from_json(encoder.to_json())
    clone.set_weights(encoder.get_weights())
    inputs = [TOKENS, np.zeros_like(TOKENS)]
    np.testing.assert_allclose(clone.predict(inputs, verbose=0), encoder.predict(inputs, verbose=0), atol=1e-6)


@requires_shared_data
def test_vocab_size_mismatch_names_both_files(tmp_path):
    config = write_config(tmp_path / "config.json", vocab_size=1000)
    with pytest.raises(ConfigError, match=r"vocab_size is 1000 but .*bert-base-chinese-vocab.txt has 21128"):
        build_encoder(config, vocab_path=SHARED_VOCAB)


def test_unknown_model_and_bad_config(tmp_path, tiny_config):
    with pytest.raises(ConfigError, match="unknown model 'gpt9'"):
        build_encoder(tiny_config, model="gpt9")
    broken = tmp_path / "broken.json"
    broken.write_text('{"vocab_size": 10,\n oops}')
    with pytest.raises(ConfigError, match=r"broken.json, line 2: not valid JSON"):
        build_encoder(str(broken))
    with pytest.raises(ConfigError, match="cannot read the model config"):
        build_encoder(str(tmp_path / "absent.json"))
