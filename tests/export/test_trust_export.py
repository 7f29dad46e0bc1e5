"""Exports as outputs: an export replaces only this tool's own export (marked by its export
record), and a served signature refuses what it cannot serve."""

import json
import logging
import os

import numpy as np
import pytest

from cosent_tf import ConfigError, SentenceEncoder
from cosent_tf.backend import tf
from cosent_tf.export.graph_tokenization import import_tensorflow_text
from cosent_tf.export.huggingface import export_hf
from cosent_tf.export.savedmodel import EXPORT_FORMAT, export_saved_model
from cosent_tf.exports import EXPORT_RECORD
from tests.export.conftest import EXPORTED
from tests.zoo import copy_of


def contents(folder):
    """Every file under ``folder`` with its bytes: what must stay as it was."""
    found = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, folder)] = f.read()
    return found


def write_files(folder, files):
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return contents(folder)


# ---- exports replace only what this tool marked as its own export


@pytest.fixture
def model_dir(feature_model_folder):
    """The zoo's feature model folder (tests/export/conftest.py: mean pooling, maxlen 16), read-only:
    a test that edits it takes ``copy_of`` it."""
    return feature_model_folder


DOWNLOADED_HF = {  # a Hugging Face checkpoint as the hub gives it: each name is one an export writes
    "config.json": '{"model_type": "bert"}',
    "model.safetensors": "weights",
    "vocab.txt": "[PAD]\n",
    "tokenizer_config.json": "{}",
    "special_tokens_map.json": "{}",
    "modules.json": "[]",
    "README.md": "# someone's model card\n",
}
OTHER_SAVED_MODEL = {"saved_model.pb": "graph", "fingerprint.pb": "x", "variables/variables.index": "v"}


@pytest.mark.parametrize(
    "export, files, found",
    [
        (export_hf, DOWNLOADED_HF, "config.json"),
        (export_hf, {**DOWNLOADED_HF, "README.md": "# cosent-tf export from before the record\n"}, "config.json"),
        (export_saved_model, OTHER_SAVED_MODEL, "saved_model.pb"),
        (export_saved_model, {**OTHER_SAVED_MODEL, "assets.extra/cosent_model.json": "{}"}, "saved_model.pb"),
    ],
)
def test_overwrite_refuses_a_model_folder_this_tool_did_not_mark_as_its_export(
    export, files, found, model_dir, tmp_path
):
    before = write_files(tmp_path / "out", files)
    with pytest.raises(
        ConfigError,
        match=rf"out: holds a model \({found}\) that cosent-tf did not mark as its own export \(no {EXPORT_RECORD}\): "
        r"another program's model, or an export from before exports carried that file, is never replaced; "
        r"nothing was written: delete the folder yourself",
    ):
        export(str(model_dir), str(tmp_path / "out"), overwrite=True)
    assert contents(tmp_path / "out") == before
    assert os.listdir(tmp_path) == ["out"]  # no temporary folder either


@pytest.mark.parametrize(
    "record, message",
    [
        ('{"format": "someone-else"}', rf"{EXPORT_RECORD}: not a cosent-tf export record \(format is not"),
        ('{"format": 7}', rf"{EXPORT_RECORD}: 'format' must be a JSON string, not integer"),
        ("[]", rf"{EXPORT_RECORD}: the cosent-tf export record must be a JSON object, not array"),
        ("{", rf"{EXPORT_RECORD}, line 1: the cosent-tf export record is not valid JSON"),
    ],
)
def test_overwrite_refuses_a_folder_whose_export_record_is_not_this_tools(record, message, model_dir, tmp_path):
    before = write_files(tmp_path / "out", {**DOWNLOADED_HF, EXPORT_RECORD: record})
    with pytest.raises(ConfigError, match=message):
        export_hf(str(model_dir), str(tmp_path / "out"), overwrite=True)
    assert contents(tmp_path / "out") == before


def test_a_hugging_face_export_is_marked_and_replaced_only_as_its_own(model_dir, tmp_path):
    out = tmp_path / "hf"
    assert export_hf(str(model_dir), str(out)) == "sentence-transformers"
    record = json.loads((out / EXPORT_RECORD).read_text(encoding="utf-8"))
    assert record["format"] == EXPORT_FORMAT and record["export"] == "sentence-transformers"
    assert record["model_dir"] == str(model_dir) and record["kind"] == "feature"
    with pytest.raises(ConfigError, match="hf: already holds a Hugging Face export; nothing was written"):
        export_hf(str(model_dir), str(out))
    (out / "README.md").write_text("stale\n", encoding="utf-8")
    export_hf(str(model_dir), str(out), overwrite=True)
    assert (out / "README.md").read_text(encoding="utf-8") != "stale\n"
    # the record does not disturb reading the folder as a Hugging Face model
    texts = ["今天天气怎么样", "好"]
    np.testing.assert_allclose(
        SentenceEncoder.load(str(out)).encode(texts), SentenceEncoder.load(str(model_dir)).encode(texts), atol=1e-5
    )


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["feature", "interaction"])
def test_a_saved_model_refuses_strings_that_are_not_a_1d_batch(kind, request):
    exported = request.getfixturevalue(f"{kind}_strings") / EXPORTED  # the zoo's: read-only
    record = json.loads((exported / EXPORT_RECORD).read_text(encoding="utf-8"))
    assert record["format"] == EXPORT_FORMAT and record["export"] == "savedmodel" and record["kind"] == kind
    import_tensorflow_text()  # registers the graph's WordPiece op, which loading needs
    served = tf.saved_model.load(str(exported)).signatures["serving_default"]
    names, key = (["sentences"], "embeddings") if kind == "feature" else (["first", "second"], "scores")
    batch = tf.constant(["今天天气怎么样", "好"])
    assert served(**dict.fromkeys(names, batch))[key].shape[0] == 2
    for bad in (tf.constant([["今天", "天气"], ["怎么", "样"]]), tf.constant("今天天气怎么样")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"{names[0]} must be a 1-D batch of strings"):
            served(**dict.fromkeys(names, bad))  # served as 4 (1) sentences before
    if kind == "interaction":
        with pytest.raises(tf.errors.InvalidArgumentError, match="first and second must hold as many strings"):
            served(first=batch, second=tf.constant(["好"]))
    # that overwrite replaces the export it marked is shown on a copy of the feature export by
    # test_exports_repeat_the_random_weights_warning_of_inference, which exports that model anyway


# ---- an export of a model trained from random weights says so, as loading it for inference does


def mark_random_weights(model_dir):
    """Give ``model_dir``'s description the source of a run without --checkpoint."""
    spec_path = model_dir / "cosent_model.json"
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    spec["source"] = {**spec.get("source", {}), "random_weights": True}
    spec_path.write_text(json.dumps(spec), encoding="utf-8")


def random_weights_warnings(records):
    return [r.getMessage() for r in records if r.levelno == logging.WARNING and "random weights" in r.getMessage()]


@pytest.mark.parametrize("export", [export_hf, pytest.param(export_saved_model, marks=pytest.mark.slow)])
def test_exports_repeat_the_random_weights_warning_of_inference(export, model_dir, request, tmp_path, caplog):
    model_dir = copy_of(model_dir, tmp_path / "model")  # its description is edited below
    pretrained, options = tmp_path / "pretrained", {}
    if export is export_saved_model:
        # written over a copy of the zoo's string export of the same model, so that this export also
        # shows that overwrite replaces an export this tool marked
        copy_of(request.getfixturevalue("feature_strings") / EXPORTED, pretrained)
        (pretrained / "fingerprint.pb").unlink()
        options["overwrite"] = True
    with caplog.at_level(logging.WARNING):
        export(str(model_dir), str(pretrained), **options)
    assert not random_weights_warnings(caplog.records)  # a model of a pretrained run exports quietly
    if export is export_saved_model:
        assert (pretrained / "fingerprint.pb").exists()
    mark_random_weights(model_dir)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        SentenceEncoder.load(str(model_dir))
    loaded = random_weights_warnings(caplog.records)
    assert len(loaded) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        export(str(model_dir), str(tmp_path / "random"))
    assert random_weights_warnings(caplog.records) == loaded
