"""A training run opens its model source once: the model config is parsed once, the vocabulary
read once and the checkpoint opened once, however many steps (checks, tokenizer, builder, model
folder) need them."""

import collections
import os
import sys

import pytest

import cosent_tf.inference.model_dir
import cosent_tf.models.sources
import cosent_tf.training.engine
from cosent_tf import build_encoder, save_checkpoint
from cosent_tf.io import read_json
from cosent_tf.models.checkpoints import open_checkpoint, read_config
from cosent_tf.models.tokenization import load_vocab
from cosent_tf.training.config import RunConfig
from cosent_tf.training.engine import train
from tests.helpers import make_model_dir, make_tiny_setup

READERS = {"config": read_json, "vocabulary": load_vocab, "checkpoint": open_checkpoint}


def count_reads(monkeypatch, paths):
    """{what: calls} of each reader in READERS on its path in ``paths``, counted from now on.

    Every cosent_tf module that holds a reader under any name gets the counting one, so that
    a read is counted wherever it is made from."""
    counts = collections.Counter()

    def counting(what, reader):
        def read(path, *args, **kwargs):
            if os.path.abspath(os.fspath(path)) == os.path.abspath(paths[what]):
                counts[what] += 1
            return reader(path, *args, **kwargs)

        return read

    for what, reader in READERS.items():
        wrapper = counting(what, reader)
        for module in list(sys.modules.values()):
            if not getattr(module, "__name__", "").startswith("cosent_tf"):
                continue
            for name, value in list(vars(module).items()):
                if value is reader:
                    monkeypatch.setattr(module, name, wrapper)
    return counts


def google_checkpoint(tmp_path):
    folder = tmp_path / "ckpt"
    save_checkpoint(
        build_encoder(str(tmp_path / "config.json")),
        folder,
        str(tmp_path / "config.json"),
        vocab_path=str(tmp_path / "vocab.txt"),
    )
    return folder, {"config": folder / "bert_config.json", "vocabulary": folder / "vocab.txt", "checkpoint": folder}


def sentence_transformers_folder(tmp_path):
    from cosent_tf.export.huggingface import export_hf

    make_model_dir(tmp_path / "source", str(tmp_path / "config.json"), pooling="max", vocab=str(tmp_path / "vocab.txt"))
    folder = tmp_path / "st"
    export_hf(str(tmp_path / "source"), str(folder))
    return folder, {"config": folder / "config.json", "vocabulary": folder / "vocab.txt", "checkpoint": folder}


@pytest.mark.slow
@pytest.mark.parametrize("make_checkpoint", [google_checkpoint, sentence_transformers_folder])
def test_a_run_reads_its_config_vocabulary_and_checkpoint_once(tmp_path, monkeypatch, make_checkpoint):
    make_tiny_setup(tmp_path)
    checkpoint, paths = make_checkpoint(tmp_path)
    assert cosent_tf.training.engine and cosent_tf.models.sources and cosent_tf.inference.model_dir
    counts = count_reads(monkeypatch, paths)
    cfg = RunConfig(
        task="BQ",
        data_dir=str(tmp_path / "data"),
        checkpoint=str(checkpoint),
        batch_size=8,
        epochs=1,
        lr=1e-3,
        max_train_pairs=16,
        max_eval_pairs=16,
        output_dir=str(tmp_path / "run"),
    )
    metrics = train(cfg)
    assert metrics["steps"] == 2 and not metrics["random_weights"]
    assert dict(counts) == {"config": 1, "vocabulary": 1, "checkpoint": 1}
    # What the run wrote still names and holds the same files.
    written = read_json(str(tmp_path / "run" / "config.json"), "the run's settings")
    assert (written["config"], written["vocab"]) == (str(paths["config"]), str(paths["vocabulary"]))
    model = tmp_path / "run" / "model"
    assert read_config(str(model / "bert_config.json")) == read_config(str(paths["config"]))
    assert (model / "vocab.txt").read_bytes() == paths["vocabulary"].read_bytes()
