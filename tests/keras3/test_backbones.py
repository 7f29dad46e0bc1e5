"""The converter between Google-named arrays and keras-hub backbones, on sources written here with
NumPy (a Google-format checkpoint, a Hugging Face and a sentence-transformers folder, model folders),
and what it refuses. What the backbones compute is compared with the Keras 2 engine in
test_encoder.py."""

import json
import os
import shutil

import keras
import numpy as np
import pytest

from cosent_tf import huggingface
from cosent_tf.errors import CheckpointError, ConfigError
from cosent_tf.keras3.backbones import LoadedBackbone, backbone_from_config, google_arrays, load_backbone
from cosent_tf.keras3.encoder import SentenceEncoder
from cosent_tf.models.checkpoint_files import CHECKPOINT_PREFIX, CONFIG_FILE, VOCAB_FILE, write_checkpoint_arrays
from cosent_tf.models.spec import ModelSpec, write_spec

CONFIG = dict(
    vocab_size=40,
    hidden_size=16,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=32,
    hidden_act="gelu",
    max_position_embeddings=32,
    type_vocab_size=2,
)
ALBERT_CONFIG = dict(CONFIG, embedding_size=8)
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"你好我们的是不了在有人这中大为上个国和地到以说时要就出会可也"]


def random_arrays(config, architecture, seed=0):
    """Google-named arrays of every weight of ``config``'s backbone, random (none left at its init)."""
    rng = np.random.default_rng(seed)
    shapes = {name: value.shape for name, value in google_arrays(backbone_from_config(config, architecture)).items()}
    return {name: rng.normal(0.0, 0.5, shape).astype(np.float32) for name, shape in shapes.items()}


def write_checkpoint(folder, config, arrays, vocab=True):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, CONFIG_FILE), "w") as f:
        json.dump(config, f)
    write_checkpoint_arrays(os.path.join(folder, CHECKPOINT_PREFIX), arrays)
    if vocab:
        huggingface.write_vocab(
            os.path.join(folder, VOCAB_FILE),
            TOKENS[: config["vocab_size"]] + [f"[unused{i}]" for i in range(config["vocab_size"] - len(TOKENS))],
        )
    return str(folder)


def assert_same_arrays(actual, expected):
    assert sorted(actual) == sorted(expected)
    for name, value in expected.items():
        assert actual[name].dtype == np.float32 and actual[name].shape == value.shape, name
        np.testing.assert_array_equal(actual[name], value, err_msg=name)


@pytest.fixture(scope="module")
def bert_arrays():
    return random_arrays(CONFIG, "bert")


def test_a_google_checkpoint_round_trips_exactly(tmp_path, bert_arrays):
    folder = write_checkpoint(tmp_path / "ckpt", CONFIG, bert_arrays)
    for path in (folder, os.path.join(folder, CHECKPOINT_PREFIX)):  # the folder, or the prefix
        loaded = load_backbone(path)
        assert isinstance(loaded, LoadedBackbone) and loaded.architecture == "bert"
        assert (loaded.pooling, loaded.maxlen, loaded.has_pooler) == (None, None, True)
        assert loaded.vocab_path == os.path.join(folder, VOCAB_FILE) and loaded.config == CONFIG
        assert_same_arrays(google_arrays(loaded.backbone, "bert"), bert_arrays)
    assert loaded.backbone.max_sequence_length == 32 and loaded.backbone.num_segments == 2
    assert loaded.backbone.get_config()["hidden_act"] == "gelu"


def test_roberta_checkpoints_load_on_bert(tmp_path, bert_arrays):
    loaded = load_backbone(write_checkpoint(tmp_path / "ckpt", CONFIG, bert_arrays), "roberta")
    assert loaded.architecture == "roberta"
    assert_same_arrays(google_arrays(loaded.backbone, "roberta"), bert_arrays)


def test_hugging_face_and_sentence_transformers_folders_load_through_the_one_name_table(tmp_path, bert_arrays):
    folder = tmp_path / "hf"
    folder.mkdir()
    huggingface.write_hf_folder(folder, huggingface.hf_weights(bert_arrays, 2), huggingface.hf_config(CONFIG))
    huggingface.write_vocab(folder / "vocab.txt", TOKENS)
    loaded = load_backbone(folder)
    assert_same_arrays(google_arrays(loaded.backbone), bert_arrays)
    assert loaded.pooling == "last-avg"  # a bare transformers folder is pooled by the mean, as Keras 2 does
    assert loaded.vocab_path == str(folder / "vocab.txt")
    huggingface.write_sentence_transformers_modules(folder, "cls", 16, 24, True)
    loaded = load_backbone(folder)
    assert (loaded.pooling, loaded.maxlen, loaded.do_lower_case) == ("cls", 24, True)


@pytest.mark.parametrize("embedding_size", [8, 16])
def test_albert_round_trips_exactly(tmp_path, embedding_size):
    config = dict(CONFIG, embedding_size=embedding_size)
    arrays = random_arrays(config, "albert", seed=1)
    mapping = "bert/encoder/embedding_hidden_mapping_in/kernel"
    # bert4keras's ALBERT has no embedding mapping when the widths agree: it is then an identity here
    assert (mapping in arrays) == (embedding_size != 16)
    loaded = load_backbone(write_checkpoint(tmp_path / "albert", config, arrays), "albert")
    assert_same_arrays(google_arrays(loaded.backbone, "albert"), arrays)
    projection = loaded.backbone.embeddings_projection
    assert projection.trainable == (embedding_size != 16)
    if embedding_size == 16:
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(keras.ops.convert_to_tensor(projection.kernel)), np.eye(16)
        )


def test_a_model_folder_gives_its_spec(tmp_path, bert_arrays):
    folder = write_checkpoint(tmp_path / "model", CONFIG, bert_arrays)
    write_spec(folder, ModelSpec("feature", pooling="first-last-avg", maxlen=20, do_lower_case=False))
    loaded = load_backbone(folder)
    assert (loaded.pooling, loaded.maxlen, loaded.do_lower_case) == ("first-last-avg", 20, False)
    encoder = SentenceEncoder.load(folder)
    assert (encoder.tokenizer.maxlen, encoder.tokenizer.do_lower_case) == (20, False)
    assert encoder.model.get_layer("pooling").mode == "first-last-avg"
    assert SentenceEncoder.load(folder, pooling="max", maxlen=12).model.get_layer("pooling").mode == "max"


def test_a_missing_or_misshapen_weight_is_named_with_the_file(tmp_path, bert_arrays):
    arrays = dict(bert_arrays)
    del arrays["bert/encoder/layer_1/output/dense/kernel"]
    folder = write_checkpoint(tmp_path / "missing", CONFIG, arrays)
    with pytest.raises(
        CheckpointError,
        match=r"missing/bert_model.ckpt: does not fit the model config: missing 1 variable\(s\): "
        r"bert/encoder/layer_1/output/dense/kernel$",
    ):
        load_backbone(folder)
    arrays = dict(bert_arrays, **{"bert/encoder/layer_0/intermediate/dense/kernel": np.zeros((16, 48), np.float32)})
    with pytest.raises(
        CheckpointError, match=r"wide/bert_model.ckpt: .*layer_0/intermediate/dense/kernel \(16, 48\) != \(16, 32\)"
    ):
        load_backbone(write_checkpoint(tmp_path / "wide", CONFIG, arrays))
    deeper = write_checkpoint(
        tmp_path / "deep", dict(CONFIG, num_hidden_layers=3), random_arrays(dict(CONFIG, num_hidden_layers=3), "bert")
    )
    shutil.copy(os.path.join(folder, CONFIG_FILE), os.path.join(deeper, CONFIG_FILE))
    with pytest.raises(CheckpointError, match=r"16 variable\(s\) of layers beyond the config's num_hidden_layers 2"):
        load_backbone(deeper)


def test_a_weight_that_is_not_finite_is_named(tmp_path, bert_arrays):
    bad = bert_arrays["bert/encoder/layer_0/attention/self/key/bias"].copy()
    bad[3] = np.nan
    arrays = dict(bert_arrays, **{"bert/encoder/layer_0/attention/self/key/bias": bad})
    with pytest.raises(CheckpointError, match=r"nan/bert_model.ckpt.*layer_0/attention/self/key/bias"):
        load_backbone(write_checkpoint(tmp_path / "nan", CONFIG, arrays))


def test_a_checkpoint_without_a_pooler_loads_but_refuses_pooling_pooler(tmp_path, bert_arrays):
    arrays = {name: value for name, value in bert_arrays.items() if "pooler" not in name}
    folder = write_checkpoint(tmp_path / "nopool", CONFIG, arrays)
    assert load_backbone(folder).has_pooler is False
    assert SentenceEncoder.load(folder, pooling="cls").encode(["你好"]).shape == (1, 16)
    with pytest.raises(CheckpointError, match="nopool.*: this checkpoint has no pooler, so pooling 'pooler'"):
        SentenceEncoder.load(folder, pooling="pooler")


@pytest.mark.parametrize("architecture", ["nezha", "roformer", "wobert"])
def test_keras2_only_architectures_are_refused_saying_why(tmp_path, bert_arrays, architecture):
    with pytest.raises(ConfigError, match=f"architecture '{architecture}' is on the Keras 2 engine only"):
        backbone_from_config(CONFIG, architecture)
    folder = write_checkpoint(tmp_path / architecture, CONFIG, bert_arrays)
    with pytest.raises(ConfigError, match=f"architecture '{architecture}' is on the Keras 2 engine only"):
        load_backbone(folder, architecture)
    write_spec(folder, ModelSpec("feature", architecture=architecture, word_level=architecture != "nezha"))
    with pytest.raises(ConfigError, match=f"architecture '{architecture}' is on the Keras 2 engine only"):
        load_backbone(folder)


def test_an_interaction_model_folder_is_refused(tmp_path, bert_arrays):
    folder = write_checkpoint(tmp_path / "cross", CONFIG, bert_arrays)
    write_spec(folder, ModelSpec("interaction", pooling=None, head="score"))
    with pytest.raises(ConfigError, match=r"cross: holds an interaction model .*builds sentence encoders"):
        load_backbone(folder)


def test_configs_and_paths_it_cannot_follow_are_refused(tmp_path, bert_arrays):
    with pytest.raises(ConfigError, match="hidden_act 'swish' has no keras-hub block here"):
        backbone_from_config(dict(CONFIG, hidden_act="swish"))
    with pytest.raises(ConfigError, match="embedding_size 8 differs from hidden_size 16"):
        backbone_from_config(ALBERT_CONFIG, "bert")
    with pytest.raises(ConfigError, match="lacks intermediate_size"):
        backbone_from_config({key: value for key, value in CONFIG.items() if key != "intermediate_size"})
    with pytest.raises(ConfigError, match="'albert' is built on AlbertBackbone, not GoogleBertBackbone"):
        google_arrays(backbone_from_config(CONFIG), "albert")
    with pytest.raises(CheckpointError, match="nowhere: no such model folder, Hugging Face folder or checkpoint"):
        load_backbone(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    # the Keras 2 engine's words for it: open_source reads every source for both
    with pytest.raises(CheckpointError, match=r"empty.*: no TensorFlow checkpoint or Hugging Face model in this"):
        load_backbone(tmp_path / "empty")


def test_the_backbone_follows_the_configs_activation():
    """keras-hub builds the tanh GELU; bert4keras's gelu is the exact one (Keras 2 parity: test_encoder)."""
    exact, tanh = backbone_from_config(CONFIG), backbone_from_config(dict(CONFIG, hidden_act="gelu_tanh"))
    x = np.linspace(-3, 3, 13, dtype=np.float32)
    from scipy.special import erf

    for backbone, expected in ((exact, 0.5 * x * (1 + erf(x / np.sqrt(2)))), (tanh, None)):
        dense = backbone.transformer_layers[0]._feedforward_intermediate_dense
        got = np.asarray(dense.activation(x))
        if expected is None:
            expected = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
        np.testing.assert_allclose(got, expected, atol=1e-6)
    assert backbone_from_config(CONFIG, "albert").transformer_layers[0][0]._feedforward_layer_norm.epsilon == 1e-7
    assert exact.transformer_layers[1]._self_attention_layer_norm.epsilon == 1e-12


def test_a_damaged_checkpoint_is_named(tmp_path, bert_arrays):
    folder = write_checkpoint(tmp_path / "damaged", CONFIG, bert_arrays)
    index = os.path.join(folder, CHECKPOINT_PREFIX + ".index")
    with open(index, "r+b") as f:
        f.truncate(os.path.getsize(index) // 2)
    with pytest.raises(CheckpointError, match=r"damaged/bert_model.ckpt: cannot read this checkpoint \(.*corrupted"):
        load_backbone(folder)


@pytest.mark.parametrize("architecture", ["bert", "albert"])
def test_a_config_that_leaves_out_the_dropout_rates_trains_without_dropout_as_bert4keras_reads_it(architecture):
    """bert4keras reads a missing hidden_dropout_prob or attention_probs_dropout_prob as 0, not as
    keras-hub's default 0.1: the same config trains the same model on both Kerases."""
    config = ALBERT_CONFIG if architecture == "albert" else CONFIG
    inputs = {
        "token_ids": np.array([[2, 7, 9, 11, 3, 0]], np.int32),
        "segment_ids": np.zeros((1, 6), np.int32),
        "padding_mask": np.array([[1, 1, 1, 1, 1, 0]], bool),
    }
    for rates, dropped in [({}, False), ({"hidden_dropout_prob": 0.5, "attention_probs_dropout_prob": 0.5}, True)]:
        backbone = backbone_from_config({**config, **rates}, architecture)
        training = keras.ops.convert_to_numpy(backbone(inputs, training=True)["sequence_output"])
        inference = keras.ops.convert_to_numpy(backbone(inputs, training=False)["sequence_output"])
        assert (not np.allclose(training, inference)) == dropped, rates
