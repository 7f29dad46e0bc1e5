"""A folder of another kind given as the checkpoint is named for what it is, with what to pass
instead, before any data is read and before anything is written."""

import json
import os
import re

import pytest

from cosent_tf import CheckpointError, build_encoder, export_hf
from cosent_tf.backend import tf
from cosent_tf.cli import main as cosent_tf
from cosent_tf.models.checkpoints import refuse_other_folder
from cosent_tf.training import run_data
from cosent_tf.training.run_folder import METRICS, MODEL, RUN_CONFIG, RUN_MARKER
from tests.helpers import make_model_dir, write_config, write_tiny_data
from tests.test_readme import TABLE, quote_pattern

# What docs/guide.md's bad-input table quotes for each folder of another kind.
QUOTES = {
    "run": "PATH: is a cosent-tf training run folder, not a checkpoint: pass PATH/model",
    "saved model": "PATH: is a TensorFlow SavedModel (an export for serving), which cannot be trained or loaded from: "
    "pass the model folder it was exported from",
    "data": "PATH: no TensorFlow checkpoint or Hugging Face model in this folder: looked for bert_config.json and "
    "bert_model.ckpt.index (...), and config.json with model.safetensors or ... (a Hugging Face or "
    "sentence-transformers folder); it holds cnsd, senteval_cn, vocab",
}


def run_folder(root, marked=True):
    """A finished run's folder: its model folder, settings and metrics, and (since 0.4) its marker."""
    make_model_dir(root / MODEL, write_config(root.parent / f"{root.name}-config.json"))
    (root / RUN_CONFIG).write_text("{}", encoding="utf-8")
    (root / METRICS).write_text("{}", encoding="utf-8")
    if marked:
        (root / RUN_MARKER).write_text("{}", encoding="utf-8")
    return root


def saved_model(root):
    module = tf.Module()
    module.scale = tf.Variable(2.0)
    module.double = tf.function(lambda x: x * module.scale, input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(module, str(root))
    return root


@pytest.fixture
def pairs(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"第{i}句\t第{i}个\t{i % 2}\n" for i in range(20)), encoding="utf-8")
    return path


@pytest.fixture
def no_data_read(monkeypatch):
    def read(*args, **kwargs):
        raise AssertionError("the data was read before the checkpoint was checked")

    monkeypatch.setattr(run_data, "read_pair_file", read)


def train_error(folder, pairs, output):
    with pytest.raises(SystemExit) as stopped:
        cosent_tf(["train", "--train", str(pairs), "--checkpoint", str(folder), "--output-dir", str(output)])
    return str(stopped.value.code)


@pytest.mark.parametrize("marked", [True, False], ids=["run", "run-of-0.3"])
def test_a_run_folder_as_checkpoint_names_its_model_folder(marked, tmp_path, pairs, no_data_read):
    run = run_folder(tmp_path / "run", marked)
    message = train_error(run, pairs, tmp_path / "out")
    assert f"{run}: is a cosent-tf training run folder, not a checkpoint: pass {run / MODEL}" in message
    assert not (tmp_path / "out").exists()
    with pytest.raises(CheckpointError, match="is a cosent-tf training run folder"):
        build_encoder(None, checkpoint_path=str(run))


def test_the_model_folder_the_message_names_trains(tmp_path):
    run = run_folder(tmp_path / "run")
    refuse_other_folder(run / MODEL)  # passes
    assert build_encoder(None, checkpoint_path=str(run / MODEL)).output_shape == (None, 16)


def test_a_saved_model_as_checkpoint_is_named_an_export_for_serving(tmp_path, pairs, no_data_read):
    export = saved_model(tmp_path / "export")
    message = train_error(export, pairs, tmp_path / "out")
    assert f"{export}: is a TensorFlow SavedModel (an export for serving), which cannot be trained" in message
    assert "pass the model folder it was exported from" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", ["data", "empty"])
def test_a_folder_without_a_checkpoint_lists_what_was_looked_for_and_what_it_holds(
    content, tmp_path, pairs, no_data_read
):
    folder = tmp_path / "folder"
    folder.mkdir()
    if content == "data":  # the shared data root's layout
        write_tiny_data(folder)
        (folder / "vocab").mkdir()
    message = train_error(folder, pairs, tmp_path / "out")
    expected = f"{folder}: no TensorFlow checkpoint or Hugging Face model in this folder: looked for bert_config.json"
    assert expected + " and bert_model.ckpt.index" in message
    assert "config.json with model.safetensors" in message
    held = ", ".join(sorted(os.listdir(folder))) if content == "data" else "nothing"
    assert message.endswith(f"it holds {held}")
    assert "vocabulary not found" not in message
    assert not (tmp_path / "out").exists()


def test_checkpoints_of_each_format_pass(tmp_path):
    config = write_config(tmp_path / "config.json")
    make_model_dir(tmp_path / "model", config)
    export_hf(tmp_path / "model", tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["model_type"] == "bert"
    google = tmp_path / "google"
    google.mkdir()
    for name in os.listdir(tmp_path / "model"):
        if name.startswith("bert_model.ckpt."):
            os.link(tmp_path / "model" / name, google / name.replace("bert_model", "model"))
    for folder in ("model", "hf", "google"):
        refuse_other_folder(tmp_path / folder)
    refuse_other_folder(tmp_path / "absent")  # not a folder: what reads it says what is missing


def test_the_guide_quotes_what_each_folder_of_another_kind_gets(tmp_path, pairs):
    data = tmp_path / "data"
    write_tiny_data(data)
    (data / "vocab").mkdir()
    folders = {"run": run_folder(tmp_path / "run"), "saved model": saved_model(tmp_path / "export"), "data": data}
    for name, quote in QUOTES.items():
        assert f"`{quote}`" in TABLE, f"the guide's table no longer quotes: {quote}"
        printed = train_error(folders[name], pairs, tmp_path / "out")
        assert re.search(quote_pattern(quote), printed), f"docs/guide.md: {quote}\nprinted: {printed}"
