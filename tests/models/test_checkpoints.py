import os

import numpy as np
import pytest
import tensorflow as tf

from cosent_tf import CheckpointError, ConfigError, build_encoder, build_interaction_model, save_checkpoint
from cosent_tf.models import checkpoints
from cosent_tf.models.checkpoints import checkpoint_files
from tests.helpers import write_config

TOKENS = np.array([[101, 872, 1962, 102, 0], [101, 2769, 3221, 6821, 102]], np.int32)
INPUTS = [TOKENS, np.zeros_like(TOKENS)]


@pytest.mark.heavy
@pytest.mark.parametrize("model", ["bert", "nezha", "albert", "roformer"])
def test_round_trip_gives_identical_outputs(model, tiny_config, tmp_path):
    encoder = build_encoder(tiny_config, architecture=model, pooling="pooler")
    save_checkpoint(encoder, tmp_path / "ckpt", tiny_config, architecture=model)
    config, prefix, _ = checkpoint_files(tmp_path / "ckpt")
    loaded = build_encoder(config, prefix, architecture=model, pooling="pooler")
    np.testing.assert_array_equal(loaded.predict(INPUTS, verbose=0), encoder.predict(INPUTS, verbose=0))
    # Without a pooler the same checkpoint gives the same transformer: compare mean pooling.
    mean_loaded = build_encoder(config, prefix, architecture=model, pooling="last-avg")
    mean_reference = build_encoder(tiny_config, architecture=model, pooling="last-avg")
    mean_reference.set_weights(encoder.get_weights()[:-2])  # all but the pooler kernel and bias
    np.testing.assert_array_equal(mean_loaded.predict(INPUTS, verbose=0), mean_reference.predict(INPUTS, verbose=0))


def test_bert_checkpoint_uses_google_names_and_loads_by_folder(tiny_config, tmp_path):
    encoder = build_encoder(tiny_config, pooling="pooler")
    save_checkpoint(encoder, tmp_path / "ckpt", tiny_config)
    variables = dict(tf.train.list_variables(str(tmp_path / "ckpt" / "bert_model.ckpt")))
    assert variables["bert/embeddings/word_embeddings"] == [21128, 16]
    assert variables["bert/encoder/layer_1/attention/self/query/kernel"] == [16, 16]
    assert variables["bert/encoder/layer_0/output/LayerNorm/gamma"] == [16]
    assert variables["bert/pooler/dense/kernel"] == [16, 16]
    kernel = tf.train.load_variable(str(tmp_path / "ckpt"), "bert/encoder/layer_0/attention/self/key/kernel")
    np.testing.assert_array_equal(kernel, encoder.get_layer("Transformer-0-MultiHeadSelfAttention").get_weights()[2])
    # A folder is accepted as well as a prefix, and a [CLS] encoder needs no pooler.
    loaded = build_encoder(tiny_config, str(tmp_path / "ckpt"), pooling="cls")
    reference = build_encoder(tiny_config, pooling="cls")
    reference.set_weights(encoder.get_weights()[:-2])  # everything but the pooler's kernel and bias
    np.testing.assert_array_equal(loaded.predict(INPUTS, verbose=0), reference.predict(INPUTS, verbose=0))


def test_interaction_model_shares_the_transformer_weights(tiny_config, tmp_path):
    model = build_interaction_model(tiny_config, head="score")
    save_checkpoint(model, tmp_path / "ckpt", tiny_config)
    loaded = build_interaction_model(tiny_config, str(tmp_path / "ckpt"), head="score")
    for name in ("Embedding-Token", "Transformer-1-FeedForward"):
        for a, b in zip(loaded.get_layer(name).get_weights(), model.get_layer(name).get_weights()):
            np.testing.assert_array_equal(a, b)


def test_missing_variables_are_listed(tiny_config, tmp_path):
    save_checkpoint(build_encoder(tiny_config, pooling="cls"), tmp_path / "ckpt", tiny_config)
    with pytest.raises(
        CheckpointError,
        match=r"has no pooler \(bert/pooler/dense/kernel, bert/pooler/dense/bias "
        r"missing\), so pooling 'pooler' cannot be used with it",
    ):
        build_encoder(tiny_config, str(tmp_path / "ckpt"), pooling="pooler")
    deeper = write_config(tmp_path / "deeper.json", layers=3)
    with pytest.raises(
        CheckpointError, match=r"missing 16 variable\(s\): bert/encoder/layer_2/attention/self/query/kernel"
    ):
        build_encoder(deeper, str(tmp_path / "ckpt"))


def test_wrong_shapes_are_listed(tiny_config, tmp_path):
    save_checkpoint(build_encoder(tiny_config), tmp_path / "ckpt", tiny_config)
    wider = write_config(tmp_path / "wider.json", intermediate=48)
    with pytest.raises(CheckpointError, match=r"layer_0/intermediate/dense/kernel \(16, 32\) != \(16, 48\)"):
        build_encoder(wider, str(tmp_path / "ckpt"))


def test_missing_checkpoint_is_named(tiny_config, tmp_path):
    with pytest.raises(CheckpointError, match=r"nowhere/bert_model.ckpt: checkpoint not found"):
        build_encoder(tiny_config, str(tmp_path / "nowhere" / "bert_model.ckpt"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no TensorFlow checkpoint"):
        build_encoder(tiny_config, str(tmp_path / "empty"))


def test_failed_save_leaves_previous_checkpoint_intact(tiny_config, tmp_path, monkeypatch):
    encoder = build_encoder(tiny_config)
    save_checkpoint(encoder, tmp_path / "ckpt", tiny_config)
    before = {f: (tmp_path / "ckpt" / f).read_bytes() for f in os.listdir(tmp_path / "ckpt")}

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoints, "model_arrays", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(build_encoder(tiny_config), tmp_path / "ckpt", tiny_config, overwrite=True)
    after = {f: (tmp_path / "ckpt" / f).read_bytes() for f in os.listdir(tmp_path / "ckpt")}
    assert after == before
    assert sorted(os.listdir(tmp_path)) == ["ckpt", "tiny_config.json"]  # no temporary left behind


def test_a_checkpoint_file_naming_another_folder_is_refused(tiny_config, tmp_path):
    for name in ("a", "b"):
        save_checkpoint(build_encoder(tiny_config), tmp_path / name, tiny_config)
    (tmp_path / "b" / "checkpoint").write_text(f'model_checkpoint_path: "{tmp_path / "a" / "bert_model.ckpt"}"\n')
    with pytest.raises(
        CheckpointError, match="b: its 'checkpoint' file names .*a/bert_model.ckpt, outside this folder"
    ):
        build_encoder(tiny_config, str(tmp_path / "b"))


def test_a_checkpoint_deeper_than_its_config_is_refused(tmp_path):
    deep, shallow = write_config(tmp_path / "deep.json", layers=2), write_config(tmp_path / "shallow.json", layers=1)
    save_checkpoint(build_encoder(deep), tmp_path / "ckpt", deep)
    with pytest.raises(
        CheckpointError,
        match=r"16 variable\(s\) of layers beyond the config's num_hidden_layers 1 "
        r"\(bert/encoder/layer_1/",
    ):
        build_encoder(shallow, str(tmp_path / "ckpt"))


def test_truncated_or_corrupted_checkpoints_are_named(tiny_config, tmp_path):
    save_checkpoint(build_encoder(tiny_config), tmp_path / "ckpt", tiny_config)
    data = next((tmp_path / "ckpt").glob("bert_model.ckpt.data-*"))
    whole = data.read_bytes()
    flipped = bytearray(whole)
    flipped[len(whole) // 2] ^= 0xFF
    for damaged in (bytes(flipped), whole[: len(whole) // 2]):  # "Checksum does not match", "Read less bytes"
        data.write_bytes(damaged)
        with pytest.raises(
            CheckpointError,
            match="bert_model.ckpt: cannot read this checkpoint's weights .*; it may be truncated or corrupted",
        ):
            build_encoder(tiny_config, str(tmp_path / "ckpt"))
    index = tmp_path / "ckpt" / "bert_model.ckpt.index"
    index.write_bytes(index.read_bytes()[:40])
    with pytest.raises(
        CheckpointError, match="bert_model.ckpt: cannot read this checkpoint .*; it may be truncated or corrupted"
    ):
        build_encoder(tiny_config, str(tmp_path / "ckpt"))


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"layers": 0}, "num_hidden_layers must be a positive integer, got 0"),
        ({"hidden": -16}, "hidden_size must be a positive integer, got -16"),
        ({"heads": 3}, "hidden_size 16 is not a multiple of num_attention_heads 3"),
    ],
)
def test_config_values_are_checked(tmp_path, settings, message):
    config = write_config(tmp_path / "config.json", **settings)
    with pytest.raises(ConfigError, match=f"config.json: {message}"):
        build_encoder(config)


def test_the_old_keyword_model_type_still_chooses_the_architecture_with_a_warning(tiny_config, tmp_path):
    encoder = build_encoder(tiny_config, architecture="nezha")
    with pytest.warns(DeprecationWarning, match="model_type= is deprecated; use architecture="):
        save_checkpoint(encoder, tmp_path / "ckpt", tiny_config, model_type="nezha")
    config, prefix, _ = checkpoint_files(tmp_path / "ckpt")
    loaded = build_encoder(config, prefix, architecture="nezha")
    np.testing.assert_array_equal(loaded.predict(INPUTS, verbose=0), encoder.predict(INPUTS, verbose=0))
