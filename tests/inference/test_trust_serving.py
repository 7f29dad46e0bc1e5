"""Model folders and indexes as inputs: a fault names its file (and line). (Exports as outputs:
tests/export/test_trust_export.py.)"""

import dataclasses
import json
import shutil

import numpy as np
import pytest

from cosent_tf import ConfigError, DataError, ModelSpec, VectorIndex
from cosent_tf.inference.model_dir import SPEC_FILE, SPEC_TYPES, read_spec
from tests.helpers import make_model_dir

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
