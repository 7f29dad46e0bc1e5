"""Issue 33, reading files: every data file, Hugging Face folder and checkpoint that is not what it
should be is an error naming the file (and line, key or tensor) and the fault, never a traceback,
a silent wrong value, or a read that fills memory."""

import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file, save_file

from cosent_tf import (
    CheckpointError,
    ConfigError,
    DataError,
    SentenceEncoder,
    build_encoder,
    save_checkpoint,
)
from cosent_tf import huggingface as hf
from cosent_tf.data.pairs import MAX_LINE_BYTES
from cosent_tf.models.checkpoints import read_config
from cosent_tf.models.tokenization import load_vocab
from tests.helpers import make_model_dir


def write(path, content):
    (path.write_bytes if isinstance(content, bytes) else lambda text: path.write_text(text, encoding="utf-8"))(content)
    return str(path)


# -- F-1: a line is read with a bound -----------------------------------------------------------


@pytest.mark.heavy
@pytest.mark.parametrize(
    "command",
    [
        ["encode", "{model}", "/dev/zero", "{out}/vectors.npy"],
        ["similarity", "{model}", "/dev/zero", "{out}/scores.tsv"],
        ["search", "build", "{model}", "/dev/zero", "{out}/index"],
    ],
    ids=["encode", "similarity", "search build"],
)
def test_the_command_line_refuses_dev_zero_in_bounded_memory(tiny_config, tmp_path, command):
    make_model_dir(tmp_path / "model", tiny_config)
    (tmp_path / "out").mkdir()
    arguments = [a.format(model=tmp_path / "model", out=tmp_path / "out") for a in command]
    cli = os.path.join(os.path.dirname(sys.executable), "cosent-tf")
    result = subprocess.run(
        ["prlimit", f"--as={4 << 30}", cli, *arguments], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert "error: /dev/zero, line 1: line 1 is longer than 1 MB; is this a text file?" in result.stderr
    assert os.listdir(tmp_path / "out") == []


def test_a_vocabulary_line_longer_than_1_mb_is_refused_and_lines_still_end_at_any_line_break(tmp_path):
    with pytest.raises(DataError, match=r"vocab.txt, line 2: line 2 is longer than 1 MB"):
        load_vocab(write(tmp_path / "vocab.txt", "[PAD]\n" + "x" * (3 * MAX_LINE_BYTES)))
    assert load_vocab(write(tmp_path / "vocab.txt", b"[PAD]\r\n[UNK]\r[CLS]\n \xe5\xa5\xbd ")) == [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "好",
    ]


# -- C-1: Hugging Face and sentence-transformers files of the wrong JSON type -------------------

SMALL = {"vocab_size": 8, "hidden_size": 4, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 8}
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "一", "二", "三"]


def small_weights():
    arrays = {name: np.full((2, 2), 0.5, np.float32) for name, _, _ in hf.bert_name_table(1)}
    return hf.hf_weights(arrays, 1)


def st_folder(tmp_path):
    """A sentence-transformers folder of every file kind cosent-tf reads (weights sharded), all good."""
    folder = tmp_path / "st"
    (folder / "1_Pooling").mkdir(parents=True)
    files = {
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ],
        "sentence_bert_config.json": {"max_seq_length": 32, "do_lower_case": False},
        "1_Pooling/config.json": {"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False},
        "config.json": {**hf.hf_config(dict(SMALL, hidden_act="gelu"), ["BertForSequenceClassification"], 2)},
        "tokenizer.json": {
            "normalizer": {"type": "BertNormalizer", "lowercase": True, "strip_accents": None, "clean_text": True},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {t: i for i, t in enumerate(TOKENS)}},
        },
        "tokenizer_config.json": {"do_lower_case": True, "model_max_length": 512},
        "model.safetensors.index.json": {"weight_map": dict.fromkeys(small_weights(), "model-1.safetensors")},
    }
    for name, value in files.items():
        (folder / name).write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")
    save_file(small_weights(), folder / "model-1.safetensors")
    return folder


def read_everything(folder):
    """What loading the folder reads, in the functions that read each file."""
    modules = hf.read_sentence_transformers(folder)
    config_path = os.path.join(folder, "config.json")
    read_config(config_path)
    labels = hf.classifier_labels(hf.read_hf_config(folder), config_path)
    return (
        modules,
        labels,
        hf.do_lower_case(folder),
        hf.model_max_length(folder),
        load_vocab(os.path.join(folder, "tokenizer.json")),
        hf.google_arrays(folder)[0],
    )


def test_the_good_folder_reads(tmp_path):
    modules, labels, lower, maxlen, tokens, arrays = read_everything(st_folder(tmp_path))
    assert (modules.pooling, modules.maxlen, labels, lower, maxlen, tokens) == ("last-avg", 32, 2, True, 512, TOKENS)
    assert len(arrays) == len(small_weights())


def set_key(keys, value):
    """A change that sets the value at ``keys`` (a path into the JSON value) to ``value``."""

    def change(record):
        for key in keys[:-1]:
            record = record[key]
        record[keys[-1]] = value

    return change


WRONG_TYPES = [
    ("modules.json", lambda m: {"modules": m}, r"the sentence-transformers modules must be a JSON array, not object"),
    ("modules.json", set_key([1], ["Pooling"]), r"module 1 is not a JSON object with a 'type'"),
    ("modules.json", set_key([1, "type"], 5), r"module 1's 'type' must be a JSON string, not integer"),
    (
        "modules.json",
        set_key([1, "path"], ["1_Pooling"]),
        r"module 1's 'path' must be a JSON string or null, not array",
    ),
    (
        "sentence_bert_config.json",
        lambda s: [s],
        r"the sentence-transformers settings must be a JSON object, not array",
    ),
    (
        "sentence_bert_config.json",
        set_key(["max_seq_length"], "32"),
        r"'max_seq_length' must be a JSON integer or null",
    ),
    (
        "sentence_bert_config.json",
        set_key(["max_seq_length"], 32.5),
        r"'max_seq_length' must be a JSON integer or null",
    ),
    ("sentence_bert_config.json", set_key(["do_lower_case"], "no"), r"'do_lower_case' must be a JSON true/false"),
    ("1_Pooling/config.json", lambda c: [c], r"the pooling config must be a JSON object, not array"),
    ("1_Pooling/config.json", set_key(["pooling_mode_mean_tokens"], "false"), r"'pooling_mode_mean_tokens' must be a"),
    ("1_Pooling/config.json", set_key(["pooling_mode"], 3), r"'pooling_mode' must be a JSON string or array, not"),
    ("1_Pooling/config.json", set_key(["pooling_mode"], [["mean"]]), r"'pooling_mode' must be a JSON string or an"),
    ("1_Pooling/config.json", set_key(["pooling_mode"], {"mean": 1}), r"'pooling_mode' must be a JSON string or array"),
    ("config.json", lambda c: [c], r"the model config must be a JSON object, not array"),
    ("config.json", set_key(["hidden_act"], ["gelu"]), r"'hidden_act' must be a JSON string, not array"),
    ("config.json", set_key(["model_type"], ["bert"]), r"'model_type' must be a JSON string or null, not array"),
    ("config.json", set_key(["vocab_size"], "8"), r"'vocab_size' must be a JSON integer, not string"),
    ("config.json", set_key(["hidden_size"], 4.0), r"'hidden_size' must be a JSON integer, not number"),
    ("config.json", set_key(["max_position_embeddings"], None), r"'max_position_embeddings' must be a JSON integer"),
    ("config.json", set_key(["type_vocab_size"], True), r"'type_vocab_size' must be a JSON integer, not true/false"),
    ("config.json", set_key(["hidden_dropout_prob"], "0.1"), r"'hidden_dropout_prob' must be a JSON integer or n"),
    ("config.json", set_key(["initializer_range"], [0.02]), r"'initializer_range' must be a JSON integer or number"),
    ("config.json", set_key(["layer_norm_eps"], "1e-12"), r"'layer_norm_eps' must be a JSON integer or number"),
    ("config.json", set_key(["is_decoder"], "false"), r"'is_decoder' must be a JSON true/false, not string"),
    ("config.json", set_key(["position_embedding_type"], None), r"'position_embedding_type' must be a JSON string"),
    ("config.json", set_key(["architectures"], "BertModel"), r"'architectures' must be a JSON array or null"),
    ("config.json", set_key(["architectures"], [["BertModel"]]), r"'architectures' must be a JSON array of strings"),
    ("config.json", set_key(["num_labels"], "2"), r"'num_labels' must be a JSON integer, not string"),
    ("tokenizer.json", lambda t: [t], r"the tokenizer must be a JSON object, not array"),
    ("tokenizer.json", set_key(["model"], "WordPiece"), r"'model' must be a JSON object or null, not string"),
    ("tokenizer.json", set_key(["model", "type"], ["WordPiece"]), r"model.type must be a JSON string or null"),
    ("tokenizer.json", set_key(["model", "vocab"], TOKENS), r"model.vocab must be a JSON object or null, not array"),
    ("tokenizer.json", set_key(["model", "vocab", "[PAD]"], "0"), r"the id of '\[PAD\]' in model.vocab must be a"),
    ("tokenizer.json", set_key(["model", "vocab", "[PAD]"], 0.0), r"the id of '\[PAD\]' in model.vocab must be a"),
    ("tokenizer.json", set_key(["model", "unk_token"], None), r"model.unk_token must be a JSON string, not null"),
    ("tokenizer.json", set_key(["normalizer"], ["BertNormalizer"]), r"'normalizer' must be a JSON object or null"),
    ("tokenizer.json", set_key(["normalizer", "lowercase"], "true"), r"normalizer.lowercase must be a JSON true/"),
    ("tokenizer.json", set_key(["normalizer", "strip_accents"], 0), r"normalizer.strip_accents must be a JSON true/"),
    ("tokenizer.json", set_key(["pre_tokenizer"], "BertPreTokenizer"), r"'pre_tokenizer' must be a JSON object or"),
    ("tokenizer.json", set_key(["pre_tokenizer", "type"], {}), r"pre_tokenizer.type must be a JSON string or null"),
    ("tokenizer_config.json", lambda c: [c], r"the tokenizer config must be a JSON object, not array"),
    ("tokenizer_config.json", set_key(["do_lower_case"], "false"), r"'do_lower_case' must be a JSON true/false"),
    ("tokenizer_config.json", set_key(["model_max_length"], "512"), r"'model_max_length' must be a JSON integer or"),
    ("model.safetensors.index.json", lambda i: [i], r"the safetensors index must be a JSON object, not array"),
    ("model.safetensors.index.json", set_key(["weight_map"], []), r"'weight_map' must be a JSON object, not array"),
    (
        "model.safetensors.index.json",
        set_key(["weight_map", "pooler.dense.bias"], 1),
        r"the file of 'pooler.dense.bias' in weight_map must be a JSON string, not integer",
    ),
    (
        "model.safetensors.index.json",
        set_key(["weight_map", "pooler.dense.bias"], "../model-1.safetensors"),
        r"weight_map names '../model-1.safetensors', which is not a file of",
    ),
]


@pytest.mark.parametrize("name, change, message", WRONG_TYPES, ids=[f"{n}-{m[:40]}" for n, _, m in WRONG_TYPES])
def test_a_wrong_json_type_in_any_hugging_face_file_is_a_config_error_naming_file_and_key(
    tmp_path, name, change, message
):
    folder = st_folder(tmp_path)
    path = folder / name
    value = json.loads(path.read_text(encoding="utf-8"))
    value = change(value) or value
    path.write_text(json.dumps(value), encoding="utf-8")
    if name == "model.safetensors.index.json":  # a shard outside the folder that would be read
        save_file(small_weights(), tmp_path / "model-1.safetensors")
    with pytest.raises(ConfigError, match=re.escape(str(path)) + ": " + message):
        read_everything(folder)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hidden_size": "16"}, r"'hidden_size' must be a JSON integer, not string"),
        ({"num_attention_heads": 2.0}, r"'num_attention_heads' must be a JSON integer, not number"),
        ({"max_position_embeddings": 0}, r"max_position_embeddings must be a positive integer, got 0"),
        ({"type_vocab_size": -1}, r"type_vocab_size must be an integer, 0 or more, got -1"),
        ({"hidden_dropout_prob": "0.1"}, r"'hidden_dropout_prob' must be a JSON integer or number, not string"),
        ({"attention_probs_dropout_prob": 1.5}, r"attention_probs_dropout_prob must be a number from 0 to 1, got 1.5"),
        ({"initializer_range": -0.02}, r"initializer_range must be a number from 0 to 1, got -0.02"),
        ({"hidden_act": {"name": "gelu"}}, r"'hidden_act' must be a JSON string or array, not object"),
    ],
)
def test_a_google_config_value_of_the_wrong_type_names_the_file_and_key(tmp_path, change, message):
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps({**SMALL, "hidden_act": "gelu", **change}), encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(str(path)) + ": " + message):
        read_config(str(path))
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(str(path)) + ": the model config must be a JSON object"):
        read_config(str(path))


# -- D-3/D-4: weights that are not finite floating-point numbers --------------------------------

BROKEN_TENSORS = {
    "NaN": lambda w: np.where(np.arange(w.size).reshape(w.shape) == 1, np.nan, w).astype(np.float32),
    "inf": lambda w: np.full(w.shape, -np.inf, np.float16),
    "beyond float32": lambda w: np.full(w.shape, 1e300, np.float64),
    "int32": lambda w: np.ones(w.shape, np.int32),
    "int64": lambda w: np.zeros(w.shape, np.int64),
    "bool": lambda w: np.ones(w.shape, bool),
}


@pytest.mark.parametrize("broken", BROKEN_TENSORS)
@pytest.mark.parametrize("name", ["embeddings.word_embeddings.weight", "bert.encoder.layer.0.output.dense.weight"])
def test_hugging_face_weights_that_are_not_finite_floats_name_the_file_and_tensor(tmp_path, broken, name):
    folder = st_folder(tmp_path)
    weights = load_file(folder / "model-1.safetensors")
    original = name.removeprefix("bert.")
    weights[name] = BROKEN_TENSORS[broken](weights.pop(original))
    save_file(weights, folder / "model-1.safetensors")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"][name] = index["weight_map"].pop(original)
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    problem = (
        "NaN or infinite value" if broken in ("NaN", "inf", "beyond float32") else f"{broken} values, not floating"
    )
    shown = re.escape(f"{folder / 'model-1.safetensors'}: tensor {name} holds ")
    with pytest.raises(CheckpointError, match=shown + r"(\d+ )?" + problem):
        hf.google_arrays(folder)


def test_an_unused_integer_buffer_is_no_weight_and_still_loads(tmp_path):
    folder = st_folder(tmp_path)
    weights = load_file(folder / "model-1.safetensors")
    weights["embeddings.position_ids"] = np.arange(16, dtype=np.int64)[None]
    save_file(weights, folder / "model-1.safetensors")
    assert len(hf.google_arrays(folder)[0]) == len(small_weights())


@pytest.mark.parametrize("broken", ["NaN", "inf", "int32"])
def test_google_checkpoint_weights_that_are_not_finite_floats_name_the_checkpoint_and_variable(
    tiny_config, tmp_path, broken
):
    save_checkpoint(build_encoder(tiny_config), tmp_path / "ckpt", tiny_config)
    prefix = str(tmp_path / "ckpt" / "bert_model.ckpt")
    reader = tf.train.load_checkpoint(prefix)
    arrays = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    name = "bert/encoder/layer_1/attention/self/query/kernel"
    arrays[name] = BROKEN_TENSORS[broken](arrays[name])
    for path in (tmp_path / "ckpt").glob("bert_model.ckpt.*"):
        path.unlink()
    tensors = [tf.constant(value) for value in arrays.values()]
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=list(arrays), shape_and_slices=[""] * len(arrays), tensors=tensors)
    problem = "int32 values, not floating" if broken == "int32" else r"\d+ NaN or infinite value"
    with pytest.raises(CheckpointError, match=re.escape(f"{prefix}: tensor {name} holds ") + problem):
        build_encoder(tiny_config, str(tmp_path / "ckpt"))


# -- glob characters in a checkpoint's path ---------------------------------------------------------


@pytest.mark.heavy
@pytest.mark.parametrize("folder", ["run[1]", "runs*?", "a[b-c]d"])
def test_a_checkpoint_under_a_path_with_glob_characters_is_written_and_read_back(tiny_config, tmp_path, folder):
    links_before = set(os.listdir(tempfile.gettempdir()))
    encoder = build_encoder(tiny_config, pooling="cls")
    save_checkpoint(encoder, tmp_path / folder / "model", tiny_config)
    loaded = build_encoder(tiny_config, str(tmp_path / folder / "model"), pooling="cls")
    tokens = np.array([[101, 872, 1962, 102]], np.int32)
    inputs = [tokens, np.zeros_like(tokens)]
    np.testing.assert_array_equal(loaded.predict(inputs, verbose=0), encoder.predict(inputs, verbose=0))
    make_model_dir(tmp_path / folder / "trained", tiny_config)
    shutil.copytree(tmp_path / folder / "trained", tmp_path / "plain")
    vectors = SentenceEncoder.load(str(tmp_path / folder / "trained")).encode(["你好", "一二三"])
    np.testing.assert_array_equal(vectors, SentenceEncoder.load(str(tmp_path / "plain")).encode(["你好", "一二三"]))
    gc.collect()
    assert not {
        name for name in set(os.listdir(tempfile.gettempdir())) - links_before if "cosent-tf-checkpoint" in name
    }
