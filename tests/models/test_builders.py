import numpy as np
import pytest

from cosent_tf import ConfigError, build_encoder, build_interaction_model
from cosent_tf.backend import keras
from cosent_tf.models.builders import build_transformer
from tests.helpers import made_vocab, write_config

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
    encoder = build_encoder(tiny_config, architecture=model, pooling=pooling)
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


def test_vocab_size_mismatch_names_both_files(tmp_path):
    config = write_config(tmp_path / "config.json", vocab_size=1000)
    with pytest.raises(ConfigError, match=r"vocab_size is 1000 but .*vocab.txt has 21128 tokens"):
        build_encoder(config, vocab_path=made_vocab())


def test_the_old_keyword_model_still_chooses_the_architecture(tiny_config):
    with pytest.warns(DeprecationWarning, match="use architecture="):
        encoder = build_encoder(tiny_config, model="nezha")
    assert "First-Token-Query" not in [layer.name for layer in encoder.layers]  # NEZHA: no [CLS]-only block
    with pytest.warns(DeprecationWarning):
        scorer = build_interaction_model(tiny_config, model="albert")
    assert "Transformer-MultiHeadSelfAttention" in [layer.name for layer in scorer.layers]  # ALBERT: one shared block


def test_unknown_architecture_and_bad_config(tmp_path, tiny_config):
    with pytest.raises(ConfigError, match="unknown architecture 'gpt9'; choose one of albert, bert"):
        build_encoder(tiny_config, architecture="gpt9")
    broken = tmp_path / "broken.json"
    broken.write_text('{"vocab_size": 10,\n oops}')
    with pytest.raises(ConfigError, match=r"broken.json, line 2: the model config is not valid JSON"):
        build_encoder(str(broken))
    with pytest.raises(ConfigError, match="cannot read the model config"):
        build_encoder(str(tmp_path / "absent.json"))


def _full_first_token(config, model, inputs):
    """The full transformer's last-layer [CLS] vector, with the weights of ``model``."""
    transformer = build_transformer(config)
    full = keras.Model(transformer.inputs, transformer.output)
    full.set_weights(model.get_weights()[: len(full.get_weights())])
    return full(inputs).numpy()[:, 0]


@pytest.mark.parametrize("layers", [1, 3])
def test_cls_encoder_computes_only_the_first_token_of_the_last_block(tmp_path, layers):
    config = write_config(tmp_path / "config.json", layers=layers)
    encoder = build_encoder(config, pooling="cls")
    rng = np.random.default_rng(0)
    tokens = rng.integers(100, 21000, size=(6, 9)).astype(np.int32)
    tokens[2:, 5:] = 0  # padding must stay invisible to [CLS]
    inputs = [tokens, np.zeros_like(tokens)]
    assert "First-Token-Query" in [layer.name for layer in encoder.layers]
    np.testing.assert_allclose(encoder(inputs).numpy(), _full_first_token(config, encoder, inputs), atol=2e-6)
    # Padding the batch further changes nothing (the key mask reaches the shortened block).
    wider = np.pad(tokens, ((0, 0), (0, 4)))
    np.testing.assert_allclose(encoder([wider, np.zeros_like(wider)]).numpy(), encoder(inputs).numpy(), atol=2e-6)


def test_interaction_model_scores_from_the_first_token_path(tiny_config):
    model = build_interaction_model(tiny_config, head="score")
    inputs = [TOKENS, np.zeros_like(TOKENS)]
    cls = _full_first_token(tiny_config, model, inputs)
    kernel, bias = model.get_layer("Match-Score").get_weights()
    np.testing.assert_allclose(model(inputs).numpy(), cls @ kernel + bias, atol=2e-6)


def test_models_without_bert_blocks_pool_cls_from_the_full_output(tiny_config):
    for model in ("nezha", "albert", "roformer"):
        encoder = build_encoder(tiny_config, architecture=model, pooling="cls")
        assert "First-Token-Query" not in [layer.name for layer in encoder.layers]
        assert encoder([TOKENS, np.zeros_like(TOKENS)]).shape == (2, 16)


@pytest.mark.parametrize("build, option", [(build_encoder, {"pooling": "cls"}), (build_interaction_model, {})])
def test_a_built_model_round_trips_through_a_keras_file_outside_safe_mode(tiny_config, tmp_path, build, option):
    """What the README and the guide say of Keras's own saving: bert4keras's Lambda layers make
    a .keras file load only with safe_mode=False, and then it computes what was saved."""
    model = build(tiny_config, **option)
    model.save(tmp_path / "model.keras")
    ids = np.array([[101, 200, 300, 102], [101, 400, 102, 0]], np.int32)
    with pytest.raises(ValueError, match="safe_mode=False"):
        keras.models.load_model(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras", safe_mode=False)
    np.testing.assert_array_equal(
        loaded.predict([ids, np.zeros_like(ids)], verbose=0), model.predict([ids, np.zeros_like(ids)], verbose=0)
    )
