"""Model folders, indexes and exports as inputs and outputs: a fault names its file (and line),
an export replaces only this tool's own export, and a served signature refuses what it cannot serve."""

import dataclasses
import json
import os
import shutil

import numpy as np
import pytest

from cosent_tf import ConfigError, DataError, ModelSpec, SentenceEncoder, VectorIndex
from cosent_tf.backend import tf
from cosent_tf.export.huggingface import export_hf
from cosent_tf.export.savedmodel import EXPORT_FORMAT, EXPORT_RECORD, export_saved_model
from cosent_tf.inference.model_dir import SPEC_FILE, SPEC_TYPES, read_spec
from tests.helpers import make_model_dir


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
def model_dir(tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config, pooling="last-avg", maxlen=16)
    return tmp_path / "model"


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
    assert sorted(os.listdir(tmp_path)) == ["model", "out", "tiny_config.json"]  # no temporary folder either


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
def test_a_saved_model_refuses_strings_that_are_not_a_1d_batch(kind, tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config, kind=kind, maxlen=16)
    export_saved_model(str(tmp_path / "model"), str(tmp_path / "exported"))
    record = json.loads((tmp_path / "exported" / EXPORT_RECORD).read_text(encoding="utf-8"))
    assert record["format"] == EXPORT_FORMAT and record["export"] == "savedmodel" and record["kind"] == kind
    served = tf.saved_model.load(str(tmp_path / "exported")).signatures["serving_default"]
    names, key = (["sentences"], "embeddings") if kind == "feature" else (["first", "second"], "scores")
    batch = tf.constant(["今天天气怎么样", "好"])
    assert served(**dict.fromkeys(names, batch))[key].shape[0] == 2
    for bad in (tf.constant([["今天", "天气"], ["怎么", "样"]]), tf.constant("今天天气怎么样")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"{names[0]} must be a 1-D batch of strings"):
            served(**dict.fromkeys(names, bad))  # served as 4 (1) sentences before
    if kind == "interaction":
        with pytest.raises(tf.errors.InvalidArgumentError, match="first and second must hold as many strings"):
            served(first=batch, second=tf.constant(["好"]))
    else:  # overwrite replaces the export it marked
        (tmp_path / "exported" / "fingerprint.pb").unlink()
        export_saved_model(str(tmp_path / "model"), str(tmp_path / "exported"), overwrite=True)
        assert (tmp_path / "exported" / "fingerprint.pb").exists()


# ---- a model description's fields are checked for their JSON type


def test_the_json_type_table_covers_every_field_of_a_model_description():
    assert set(SPEC_TYPES) == {field.name for field in dataclasses.fields(ModelSpec)}


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"format_version": "3"}, "'format_version' must be a JSON integer, not string"),
        ({"format_version": 2.5}, "'format_version' must be a JSON integer, not number"),
        ({"format_version": True}, "'format_version' must be a JSON integer, not true/false"),
        ({"format": ["cosent-tf-model"]}, "'format' must be a JSON string, not array"),
        ({"model": 5, "architecture": "bert"}, "'model' must be a JSON string, not integer"),
        ({"kind": 1}, "'kind' must be a JSON string, not integer"),
        ({"pooling": {"mode": "cls"}}, "'pooling' must be a JSON string or null, not object"),
        ({"head": 2}, "'head' must be a JSON string or null, not integer"),
        ({"head_input": None}, "'head_input' must be a JSON string, not null"),
        ({"pair_segments": 0}, "'pair_segments' must be a JSON true/false, not integer"),
        ({"maxlen": 64.0}, "'maxlen' must be a JSON integer, not number"),
        ({"maxlen": "64"}, "'maxlen' must be a JSON integer, not string"),
        ({"do_lower_case": None}, "'do_lower_case' must be a JSON true/false, not null"),
        ({"word_level": "no"}, "'word_level' must be a JSON true/false, not string"),
        ({"threshold": [0.5]}, "'threshold' must be a JSON integer or number or null, not array"),
        ({"threshold": False}, "'threshold' must be a JSON integer or number or null, not true/false"),
        ({"source": "run"}, "'source' must be a JSON object, not string"),
    ],
)
def test_a_model_description_field_of_the_wrong_json_type_is_named_with_its_file(
    changes, message, tiny_config, tmp_path
):
    make_model_dir(tmp_path / "model", tiny_config)
    path = tmp_path / "model" / SPEC_FILE
    record = json.loads(path.read_text())
    record.update(changes)
    path.write_text(json.dumps(record))
    with pytest.raises(ConfigError, match=f"{SPEC_FILE}: {message}"):
        read_spec(str(tmp_path / "model"))


def test_a_model_description_that_is_not_an_object_is_named(tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config)
    (tmp_path / "model" / SPEC_FILE).write_text('["cosent-tf-model"]')
    with pytest.raises(ConfigError, match=f"{SPEC_FILE}: the model description must be a JSON object, not array"):
        read_spec(str(tmp_path / "model"))


# ---- an index is checked file by file


def saved_index(tmp_path, rows=3, model=True):
    (tmp_path / "model").mkdir(parents=True, exist_ok=True)
    vectors = np.eye(rows, 4, dtype=np.float32)
    VectorIndex(vectors, [f"text {i}" for i in range(rows)], str(tmp_path / "model") if model else None).save(
        tmp_path / "index"
    )
    return tmp_path / "index"


def edit_info(index, **changes):
    info = json.loads((index / "index.json").read_text())
    info.update(changes)
    (index / "index.json").write_text(json.dumps(info))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"model_dir": 5}, "'model_dir' must be a JSON string or null, not integer"),
        ({"model_dir": ["model"]}, "'model_dir' must be a JSON string or null, not array"),
        ({"model_dir_from_index": {"path": ".."}}, "'model_dir_from_index' must be a JSON string or null, not object"),
        ({"count": "3"}, "'count' must be a JSON integer, not string"),
        ({"count": 3.0}, "'count' must be a JSON integer, not number"),
        ({"dimension": True}, "'dimension' must be a JSON integer, not true/false"),
    ],
)
def test_an_index_description_field_of_the_wrong_json_type_is_named_with_its_file(changes, message, tmp_path):
    index = saved_index(tmp_path)
    edit_info(index, **changes)
    with pytest.raises(ConfigError, match=f"index.json: {message}"):
        VectorIndex.load(index)


def test_an_old_index_naming_its_model_by_a_non_string_is_refused(tmp_path):
    index = saved_index(tmp_path)
    info = json.loads((index / "index.json").read_text())
    del info["model_dir"], info["model_dir_from_index"]
    (index / "index.json").write_text(json.dumps({**info, "model": 7}))
    with pytest.raises(ConfigError, match="index.json: 'model' must be a JSON string or null, not integer"):
        VectorIndex.load(index)


@pytest.mark.parametrize(
    "line, message",
    [
        (b"5", "holds a JSON integer, not a string"),
        (b"null", "holds a JSON null, not a string"),
        (b'["text"]', "holds a JSON array, not a string"),
        (b'{"text": "a"}', "holds a JSON object, not a string"),
        (b"true", "holds a JSON true/false, not a string"),
        (b"2.5", "holds a JSON number, not a string"),
        (b"[" * 100000, r"not a JSON string"),
        ('"caf\xe9"'.encode("latin-1"), r"not valid UTF-8"),
    ],
)
def test_every_line_of_an_index_texts_file_must_be_a_json_string(line, message, tmp_path):
    index = saved_index(tmp_path)
    (index / "texts.jsonl").write_bytes(b'"text 0"\n' + line + b'\n"text 2"\n')
    with pytest.raises(DataError, match=rf"texts.jsonl, line 2: {message}"):
        VectorIndex.load(index)


def test_an_index_texts_line_is_read_with_a_bound(tmp_path, monkeypatch):
    import cosent_tf.inference.index

    index = saved_index(tmp_path)
    (index / "texts.jsonl").write_bytes(b'"text 0"\n"' + b"x" * (1 << 20) + b'"\n"text 2"\n')
    monkeypatch.setattr(cosent_tf.inference.index, "MAX_LINE_BYTES", 1 << 17)  # the limit is 8 times this: 1 MB
    with pytest.raises(DataError, match=r"texts.jsonl, line 2: longer than 1 MB; rebuild the index"):
        VectorIndex.load(index)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("mmap", [True, False])
def test_an_index_vector_that_is_not_finite_is_named_by_row(bad, mmap, tmp_path, monkeypatch):
    index = saved_index(tmp_path, rows=7)
    vectors = np.load(index / "vectors.npy")
    vectors[5, 2] = bad
    np.save(index / "vectors.npy", vectors)
    monkeypatch.setattr(VectorIndex, "CHECK_ROWS", 2)  # the bad row in a later block than the first
    with pytest.raises(DataError, match=r"vectors.npy: vector 5 \(of texts.jsonl line 6\) holds NaN or infinite"):
        VectorIndex.load(index, mmap=mmap)


def test_index_vectors_must_have_the_recorded_dimension(tmp_path):
    index = saved_index(tmp_path)
    edit_info(index, dimension=3)
    with pytest.raises(DataError, match="vectors.npy: holds vectors of dimension 4, but the index records 3"):
        VectorIndex.load(index)


def test_searching_vectors_that_are_not_finite_says_which(tmp_path):
    corpus = np.eye(5, 4, dtype=np.float32)
    corpus[3, 0] = np.nan
    index = VectorIndex(corpus, list("abcde"))
    with pytest.raises(ValueError, match="corpus vector 3 gives NaN or infinite scores"):
        index.search(np.eye(1, 4, dtype=np.float32), top_k=2)  # was "cannot reshape array"
    queries = np.eye(3, 4, dtype=np.float32)
    queries[1, 1] = np.inf
    with pytest.raises(ValueError, match="query vector 1 holds NaN or infinite values"):
        VectorIndex(np.eye(5, 4, dtype=np.float32), list("abcde")).search(queries)


# ---- an index finds its model, or says to pass --model-dir


def test_an_index_moved_with_its_model_finds_the_model_beside_it(tmp_path):
    saved_index(tmp_path / "before")
    shutil.move(tmp_path / "before", tmp_path / "after")
    loaded = VectorIndex.load(tmp_path / "after" / "index")
    assert loaded.model_dir == loaded.model_path() == str(tmp_path / "after" / "model")


def test_an_index_moved_away_from_its_model_still_finds_it_where_it_was(tmp_path):
    saved_index(tmp_path)
    (tmp_path / "elsewhere" / "deeper").mkdir(parents=True)
    shutil.move(tmp_path / "index", tmp_path / "elsewhere" / "deeper" / "index")
    assert VectorIndex.load(tmp_path / "elsewhere" / "deeper" / "index").model_path() == str(tmp_path / "model")


def test_an_index_whose_model_is_gone_says_to_pass_model_dir(tmp_path):
    index = saved_index(tmp_path)
    shutil.move(tmp_path / "model", tmp_path / "renamed")
    loaded = VectorIndex.load(index)
    with pytest.raises(
        ConfigError,
        match=rf"index: the index's model {tmp_path / 'model'} is not there \(moved or removed\); pass --model-dir",
    ):
        loaded.model_path()
    assert loaded.model_path(str(tmp_path / "renamed")) == str(tmp_path / "renamed")


def test_an_index_refuses_another_model_where_its_own_is_there(tmp_path):
    loaded = VectorIndex.load(saved_index(tmp_path))
    (tmp_path / "other").mkdir()
    with pytest.raises(ConfigError, match=r"index: the index was built with the model .*model, not .*other; its"):
        loaded.model_path(str(tmp_path / "other"))
    assert loaded.model_path(str(tmp_path / "model")) == str(tmp_path / "model")


def test_an_index_without_a_model_says_to_pass_model_dir(tmp_path):
    loaded = VectorIndex.load(saved_index(tmp_path, model=False))
    with pytest.raises(ConfigError, match="index: the index does not record its model; pass --model-dir"):
        loaded.model_path()


def test_an_index_recording_an_absolute_model_path_still_loads(tmp_path):
    index = saved_index(tmp_path)
    info = json.loads((index / "index.json").read_text())
    del info["model_dir_from_index"]  # as indexes before the relative path were written
    (index / "index.json").write_text(json.dumps(info))
    assert VectorIndex.load(index).model_path() == str(tmp_path / "model")
    info["model"] = info.pop("model_dir")  # and before 0.2
    (index / "index.json").write_text(json.dumps(info))
    assert VectorIndex.load(index).model_path() == str(tmp_path / "model")
