"""Indexes and model folders replaced (``--overwrite``) while a reader loads them: the reader gets
one whole build or a clear error, never one build's vectors with another's texts (issue 54, item 0).
"""

import json
import os
import shutil
import threading

import numpy as np
import pytest

from cosent_tf import ConfigError, DataError, SentenceEncoder
from cosent_tf.inference import ann as approximate
from cosent_tf.inference import model_dir
from cosent_tf.inference.index import VectorIndex
from cosent_tf.inference.model_dir import MODEL_FOLDER
from cosent_tf.io import FOLDER_READ_ATTEMPTS, FolderKind, atomic_directory
from cosent_tf.models.spec import SPEC_FILE

DIMENSION = 8


def build(number, precision="float32", kind="exact", rows=6):
    """Build ``number``: every vector points along axis ``number % DIMENSION`` and every text
    starts with the number, so a mix of two builds shows."""
    vectors = np.zeros((rows, DIMENSION), dtype=np.float32)
    vectors[:, number % DIMENSION] = 1.0
    settings = {"nlist": 1} if kind == "ivf" else {}
    texts = [f"{number}:{row}" for row in range(rows)]
    return VectorIndex.build(vectors, texts, precision=precision, kind=kind, **settings)


def build_of(index):
    """The build an index's texts, vectors and codes come from; an AssertionError when they disagree."""
    from_texts = {int(text.split(":")[0]) % DIMENSION for text in index.texts}
    from_vectors = set(np.argmax(np.asarray(index.vectors), axis=1).tolist())
    assert len(from_texts) == 1 and from_texts == from_vectors, (from_texts, from_vectors)
    if index.codes is not None:  # the codes and their calibration are those of these vectors
        own = VectorIndex.build(np.asarray(index.vectors), index.texts, precision=index.precision)
        np.testing.assert_array_equal(index.codes, own.codes)
        np.testing.assert_array_equal(index.ranges, own.ranges)
    return from_texts.pop()


@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_an_index_rebuilt_between_two_of_its_files_is_read_again_whole(precision, tmp_path, monkeypatch):
    folder = tmp_path / "index"
    build(1, precision).save(folder)
    read_texts = VectorIndex._load_texts
    rebuilds = []

    def texts_after_a_rebuild(path):
        if not rebuilds:  # the vectors of build 1 are read: build 2 replaces the folder now
            build(2, precision).save(folder, overwrite=True)
            rebuilds.append(path)
        return read_texts(path)

    monkeypatch.setattr(VectorIndex, "_load_texts", staticmethod(texts_after_a_rebuild))
    index = VectorIndex.load(folder)
    assert build_of(index) == 2 and rebuilds
    scores, rows = index.search(np.eye(1, DIMENSION, 2, dtype=np.float32), top_k=1)
    assert scores[0, 0] == pytest.approx(1.0, abs=1e-2) and index.texts[rows[0, 0]].startswith("2:")


def test_an_index_replaced_during_every_read_is_a_clear_error(tmp_path, monkeypatch):
    folder = tmp_path / "index"
    build(1).save(folder)
    read_texts = VectorIndex._load_texts
    builds = iter(range(2, 100))

    def texts_after_a_rebuild(path):
        build(next(builds)).save(folder, overwrite=True)
        return read_texts(path)

    monkeypatch.setattr(VectorIndex, "_load_texts", staticmethod(texts_after_a_rebuild))
    with pytest.raises(ConfigError) as caught:
        VectorIndex.load(folder)
    assert str(caught.value) == (
        f"{folder}: replaced by a writer each of the {FOLDER_READ_ATTEMPTS} times the index was read; "
        "read it again when the writer has finished"
    )
    assert next(builds) == 2 + FOLDER_READ_ATTEMPTS


def test_a_folder_replaced_in_one_step_is_never_missing(tmp_path):
    # A reader of the path finds the old folder or the new, never none: the earlier output is swapped
    # out in one step rather than moved aside first.
    kind = FolderKind("a test output", "marker", ("marker",))
    target = tmp_path / "out"
    with atomic_directory(target, kind) as tmp:
        open(os.path.join(tmp, "marker"), "w").close()
    seen = []
    real_replace = os.replace

    def watched_replace(source, destination):
        real_replace(source, destination)
        seen.append(os.path.isdir(target))

    os.replace = watched_replace
    try:
        with atomic_directory(target, kind, overwrite=True) as tmp:
            with open(os.path.join(tmp, "marker"), "w") as f:
                f.write("new")
    finally:
        os.replace = real_replace
    assert (target / "marker").read_text() == "new"
    assert all(seen), "the folder was missing after one of the renames"
    assert os.listdir(tmp_path) == ["out"]


@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_loads_beside_a_writer_rebuilding_the_index_in_a_loop_see_whole_builds(precision, tmp_path):
    # The adversarial round's case in threads: one rebuilds with --overwrite without pause, the
    # other loads and searches; every load is one build, or the clear error of a folder replaced
    # during every attempt.
    folder = tmp_path / "index"
    build(0, precision).save(folder)
    done = threading.Event()
    failures = []

    def rebuild():
        number = 1
        try:
            while not done.is_set():
                build(number, precision).save(folder, overwrite=True)
                number += 1
        except BaseException as error:  # noqa: BLE001 - reported by the test below
            failures.append(error)

    writer = threading.Thread(target=rebuild)
    writer.start()
    loads = replaced = 0
    try:
        while loads < 150 and writer.is_alive():
            try:
                index = VectorIndex.load(folder)
            except ConfigError as error:
                assert "replaced by a writer each of the" in str(error)
                replaced += 1
                continue
            number = build_of(index)
            query = np.eye(1, DIMENSION, number, dtype=np.float32)
            scores, rows = index.search(query, top_k=1)
            assert (
                scores[0, 0] == pytest.approx(1.0, abs=1e-2)
                and int(index.texts[rows[0, 0]].split(":")[0]) % DIMENSION == number
            )
            loads += 1
    finally:
        done.set()
        writer.join()
    assert not failures and loads == 150 and replaced < loads


def test_a_huge_stored_search_setting_is_named_with_its_file(tmp_path):
    pytest.importorskip("faiss", reason="the [ann] extra: approximate indexes need faiss")
    folder = tmp_path / "index"
    build(1, kind="hnsw").save(folder)
    info_path = folder / "index.json"
    info = info_path.read_text()
    info_path.write_text(info.replace('"ef_search": 64', f'"ef_search": {10**12}'))
    with pytest.raises(ConfigError) as caught:
        VectorIndex.load(folder)
    assert str(caught.value) == (
        f"{info_path}: ann_settings.ef_search {10**12}: an index setting is a positive integer of at most "
        f"{approximate.SETTING_MOST}; rebuild the index"
    )
    index = build(1, kind="hnsw")
    with pytest.raises(ConfigError, match=r"ef_search 4294967296: an index setting is a positive integer of at most"):
        index.search(np.eye(1, DIMENSION, 1, dtype=np.float32), top_k=1, ef_search=2**32)


@pytest.mark.parametrize("name", ["vectors.npy", "texts.jsonl", "index.json"])
def test_a_named_pipe_in_an_index_is_refused_not_read(name, tmp_path):
    folder = tmp_path / "index"
    build(1).save(folder)
    os.remove(folder / name)
    os.mkfifo(folder / name)  # a reader opening it would wait for a writer that never comes
    with pytest.raises(DataError) as caught:
        VectorIndex.load(folder)
    assert str(caught.value) == (
        f"{folder / name}: not a regular file (a named pipe): an index's files are files it wrote; rebuild the index"
    )


def test_a_model_folder_replaced_while_it_loads_is_loaded_whole(mining_models, tmp_path, monkeypatch):
    # decision.json is read before the weights: a replacement between them would pair one model's
    # weights with the other's threshold.
    folder = tmp_path / "model"
    for source, destination, threshold in (
        (mining_models / "encoder", folder, 0.25),
        (mining_models / "other", tmp_path / "next", 0.75),
    ):
        shutil.copytree(source, destination)
        spec = json.loads((destination / SPEC_FILE).read_text())
        spec["threshold"] = threshold  # a decision kept in the description (the folders of 0.5), read first
        (destination / SPEC_FILE).write_text(json.dumps(spec))
    load_weights = model_dir.load_model_dir
    replaced = []

    def weights_after_a_replacement(path, precision):
        if not replaced:
            with atomic_directory(folder, MODEL_FOLDER, overwrite=True) as tmp:
                shutil.copytree(tmp_path / "next", tmp, dirs_exist_ok=True)
            replaced.append(path)
        return load_weights(path, precision)

    monkeypatch.setattr(model_dir, "load_model_dir", weights_after_a_replacement)
    encoder = SentenceEncoder.load(str(folder))
    expected = SentenceEncoder.load(str(tmp_path / "next"))
    assert replaced and encoder.threshold == pytest.approx(0.75) == expected.threshold
    texts = ["我们是中国人", "你说他们在大地上"]
    np.testing.assert_allclose(encoder.encode(texts), expected.encode(texts), atol=1e-6)
