"""Weight files of a Hugging Face folder: float16 and old names, shards, torch, missing and unused weights."""

import json
import logging
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from cosent_tf import CheckpointError, SentenceEncoder, build_encoder
from cosent_tf.huggingface.bert import google_arrays, hf_config, hf_weights
from cosent_tf.huggingface.folders import write_hf_folder
from tests.huggingface.helpers import SMALL, hf_folder, random_arrays


def test_old_layer_norm_names_and_float16_weights_are_read(tmp_path):
    weights = {name: value.astype(np.float16) for name, value in hf_weights(random_arrays(), 2).items()}
    weights["embeddings.LayerNorm.gamma"] = weights.pop("embeddings.LayerNorm.weight")
    write_hf_folder(tmp_path, weights, hf_config(SMALL))
    back, _, _ = google_arrays(tmp_path)
    gamma = back["bert/embeddings/LayerNorm/gamma"]
    assert gamma.dtype == np.float32
    np.testing.assert_array_equal(gamma, weights["embeddings.LayerNorm.gamma"].astype(np.float32))


def test_sharded_safetensors_are_read_through_their_index(tmp_path):
    weights = hf_weights(random_arrays(), 2)
    names = sorted(weights)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, keys in shards.items():
        save_file({key: weights[key] for key in keys}, tmp_path / shard)
    index = {"weight_map": {key: shard for shard, keys in shards.items() for key in keys}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    (tmp_path / "config.json").write_text(json.dumps(hf_config(SMALL)))
    back, unused, _ = google_arrays(tmp_path)
    assert unused == [] and len(back) == len(weights)
    np.testing.assert_array_equal(
        back["bert/encoder/layer_1/output/dense/kernel"], random_arrays()["bert/encoder/layer_1/output/dense/kernel"]
    )


def test_missing_misshapen_and_unused_weights_are_named(tiny_config, tmp_path, caplog):
    folder = hf_folder(tmp_path, tiny_config)
    path = folder / "model.safetensors"
    weights = load_file(path)
    weights["cls.predictions.bias"] = np.zeros(3, np.float32)
    save_file(weights, path)
    with caplog.at_level(logging.INFO, logger="cosent_tf.models.checkpoints"):
        build_encoder(None, str(folder), pooling="cls")
    assert (
        "3 weight(s) not used by this model: cls.predictions.bias, pooler.dense.bias, pooler.dense.weight"
        in caplog.text
    )
    weights["encoder.layer.1.output.dense.weight"] = weights["encoder.layer.1.output.dense.weight"][:, :5]
    del weights["encoder.layer.0.attention.self.key.bias"]
    save_file(weights, path)
    with pytest.raises(CheckpointError) as error:
        build_encoder(None, str(folder))
    assert "missing 1 variable(s): encoder.layer.0.attention.self.key.bias" in str(error.value)
    assert "encoder.layer.1.output.dense.weight (5, 16) != (32, 16)" in str(error.value)


def test_pytorch_bin_without_torch_says_how_to_get_it(tiny_config, tmp_path, monkeypatch):
    folder = hf_folder(tmp_path, tiny_config)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    with pytest.raises(CheckpointError, match="pytorch_model.bin needs torch: pip install cosent-tf\\[torch\\]"):
        SentenceEncoder.load(str(folder))
