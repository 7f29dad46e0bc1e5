"""A builder takes only the keywords it documents: a misspelt or misnamed one is an error that
names it (and the parameter it is close to), never a model that silently starts random."""

import inspect
import re

import numpy as np
import pytest
from bert4keras import models as bert4keras_models

from cosent_tf import CoSENTLoss, Pooling, build_encoder, build_interaction_model, save_checkpoint
from cosent_tf.models import builders
from cosent_tf.models.builders import build_from_spec, build_transformer
from cosent_tf.models.spec import ModelSpec
from tests.helpers import made_vocab
from tests.test_readme import TABLE, quote_pattern

TOKENS = np.array([[101, 872, 1962, 102, 0]], np.int32)
INPUTS = [TOKENS, np.zeros_like(TOKENS)]
BUILDERS = {
    "build_encoder": build_encoder,
    "build_interaction_model": build_interaction_model,
    "build_transformer": build_transformer,
}


@pytest.fixture
def checkpoint_folder(tiny_config, tmp_path):
    """A Google-format checkpoint folder (config, weights, vocabulary) and the encoder saved in it."""
    encoder = build_encoder(tiny_config)
    save_checkpoint(encoder, tmp_path / "ckpt", tiny_config, vocab_path=made_vocab())
    return str(tmp_path / "ckpt"), encoder


@pytest.mark.parametrize("builder", sorted(BUILDERS))
@pytest.mark.parametrize(
    "keyword, meant",
    [("checkpoint", "checkpoint_path"), ("checkpont_path", "checkpoint_path"), ("config", "config_path")],
)
def test_a_misnamed_keyword_is_refused_naming_the_builder_and_the_parameter_meant(
    builder, keyword, meant, checkpoint_folder, tiny_config
):
    folder, _ = checkpoint_folder
    with pytest.raises(TypeError) as refused:
        BUILDERS[builder](tiny_config, **{keyword: folder})
    message = str(refused.value)
    assert f"{builder}() got an unexpected keyword argument '{keyword}'" in message
    assert f"did you mean {meant}?" in message


def test_a_keyword_close_to_nothing_gets_no_suggestion(tiny_config):
    with pytest.raises(TypeError) as refused:
        build_encoder(tiny_config, zzz=1)
    assert "'zzz'" in str(refused.value) and "did you mean" not in str(refused.value)


def test_no_config_and_the_checkpoint_misnamed_is_the_keyword_error_not_a_missing_config(checkpoint_folder):
    folder, _ = checkpoint_folder
    with pytest.raises(TypeError, match="did you mean checkpoint_path"):
        build_encoder(None, checkpoint=folder)


def test_no_config_takes_the_checkpoint_folders_and_loads_its_weights(checkpoint_folder):
    folder, saved = checkpoint_folder
    loaded = build_encoder(None, checkpoint_path=folder)
    np.testing.assert_allclose(loaded.predict(INPUTS, verbose=0), saved.predict(INPUTS, verbose=0), atol=1e-6)


def test_the_pooling_decides_the_pooler_so_with_pool_is_refused_by_the_model_builders(tiny_config):
    for build in (build_encoder, build_interaction_model):
        with pytest.raises(TypeError, match="with_pool"):
            build(tiny_config, with_pool=True)
    assert build_transformer(tiny_config, with_pool=True).with_pool


def test_build_from_spec_passes_its_options_to_a_builder_that_checks_them(tiny_config):
    with pytest.raises(TypeError, match="did you mean require_head"):
        build_from_spec(ModelSpec("interaction", pooling=None, head="score"), tiny_config, requre_head=True)


def test_a_config_field_and_a_bert4keras_option_are_still_taken(tiny_config):
    assert build_transformer(tiny_config, hidden_dropout_prob=0.3).dropout_rate == pytest.approx(0.3)
    assert build_transformer(tiny_config, hidden_dropout_prob=0.3, dropout_rate=0.2).dropout_rate == pytest.approx(0.2)
    encoder = build_encoder(tiny_config, attention_probs_dropout_prob=0.25, name="taken")
    assert encoder.name == "taken"
    assert build_interaction_model(tiny_config, num_hidden_layers=1).get_layer("Transformer-0-FeedForward")
    with pytest.raises(ValueError):
        build_interaction_model(tiny_config, num_hidden_layers=1).get_layer("Transformer-1-FeedForward")


def test_each_bert4keras_option_a_builder_takes_is_a_parameter_of_its_constructor():
    constructor = set(inspect.signature(bert4keras_models.Transformer.__init__).parameters)
    constructor |= set(inspect.signature(bert4keras_models.BERT.__init__).parameters)
    assert set(builders.TRANSFORMER_OPTIONS) <= constructor
    assert not set(builders.TRANSFORMER_OPTIONS) & set(builders.CONFIG_FIELDS)


def test_keras_layers_and_losses_refuse_an_unknown_keyword_themselves():
    with pytest.raises(TypeError, match="modd"):
        Pooling("cls", modd="max")
    with pytest.raises(TypeError, match="scal"):
        CoSENTLoss(scal=10.0)


def test_the_guide_quotes_what_a_misnamed_keyword_gets(checkpoint_folder):
    quote = "build_encoder() got an unexpected keyword argument 'checkpoint'; did you mean checkpoint_path? ..."
    assert f"`{quote}`" in TABLE
    with pytest.raises(TypeError) as refused:
        build_encoder(None, checkpoint=checkpoint_folder[0])
    assert re.search(quote_pattern(quote), str(refused.value))
