"""Vectors in files without the command line (cosent_tf.inference.parts): parts written, checked and
assembled straight into an index folder being written (VectorIndex.writing), which keeps the vectors
once; int8 codes with their ranges."""

from __future__ import annotations

import os

import numpy as np
import pytest

from cosent_tf import ConfigError, DataError, VectorIndex
from cosent_tf.inference.index import top_k_cosine
from cosent_tf.inference.parts import (
    PartRecord,
    assemble_parts,
    check_parts,
    ranges_path,
    read_int8_ranges,
    save_vectors,
    shard_lines,
    write_part,
)
from cosent_tf.inference.vectors import int8_ranges, quantize

COUNT, DIM, SHARDS = 50, 12, 3


def unit_rows(seed, count, dim=DIM):
    vectors = np.random.default_rng(seed).normal(size=(count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.fixture
def corpus(tmp_path):
    """A text file, a model folder (no weights: checked by its path), the corpus's vectors, and
    its parts written with the Python API."""
    texts = [f"text {i}" for i in range(COUNT)]
    (tmp_path / "corpus.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    (tmp_path / "model").mkdir()
    vectors = unit_rows(0, COUNT)
    (tmp_path / "parts").mkdir()
    paths = []
    for shard in range(SHARDS):
        record = PartRecord.for_shard(
            str(tmp_path / "corpus.txt"), COUNT, shard, SHARDS, str(tmp_path / "model"), DIM, DIM
        )
        assert (record.first_line, record.first_line + record.lines) == shard_lines(shard, SHARDS, COUNT)
        path = str(tmp_path / "parts" / f"part-{shard}.npy")
        write_part(path, vectors[record.first_line : record.first_line + record.lines], record)
        paths.append(path)
    return tmp_path, texts, vectors, paths


def test_parts_assemble_into_the_index_folder_being_written_without_a_second_copy(corpus, monkeypatch):
    root, texts, vectors, paths = corpus
    checked = check_parts(paths[::-1], str(root / "corpus.txt"), COUNT, str(root / "model"))
    assert [record.shard for _, record in checked] == [0, 1, 2]
    saved = []
    real_save = np.save
    monkeypatch.setattr(np, "save", lambda file, array, *a, **k: (saved.append(str(file)), real_save(file, array))[1])
    with VectorIndex.writing(str(root / "index")) as folder:
        made = folder.new_vectors(COUNT, DIM)
        assert isinstance(made, np.memmap) and os.path.dirname(made.filename) == folder.path
        assembled = assemble_parts(checked, made)
        index = VectorIndex.build(assembled, texts, str(root / "model"), precision="int8")
        assert index.vectors is made  # built on the map itself
        folder.save(index)
    assert not any(name.endswith(VectorIndex.VECTORS) for name in saved)  # the vectors were not written again
    assert any(name.endswith(VectorIndex.CODES) for name in saved)
    assert sorted(os.listdir(root)) == ["corpus.txt", "index", "model", "parts"]  # nothing beside the index
    loaded = VectorIndex.load(root / "index")
    np.testing.assert_array_equal(loaded.vectors, vectors)
    np.testing.assert_array_equal(loaded.codes, quantize(vectors, "int8", int8_ranges(vectors)))
    queries = unit_rows(1, 4)
    expected = np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(loaded.search(queries, top_k=5, rescore_multiplier=COUNT)[1], expected)
    np.testing.assert_array_equal(top_k_cosine(queries, loaded.vectors, 5)[1], expected)


def spoil_a_part(folder, checked):
    """A part that is not its record's file, found only as the parts are copied in."""
    np.save(checked[1][0], np.load(checked[1][0]) * 0.5)
    assemble_parts(checked, folder.new_vectors(COUNT, DIM))


def build_on_a_slice(folder, checked):
    made = assemble_parts(checked, folder.new_vectors(COUNT, DIM))
    folder.save(VectorIndex(made[: COUNT - 1], [str(i) for i in range(COUNT - 1)]))


@pytest.mark.parametrize(
    "block, error, message",
    [
        (spoil_a_part, DataError, "is not the file its record was written with"),
        (lambda folder, checked: folder.new_vectors(COUNT, DIM), ValueError, "no index was saved into the folder"),
        (build_on_a_slice, ValueError, "the index's vectors are part of the folder's vectors.npy"),
    ],
)
def test_a_folder_whose_block_fails_leaves_nothing(corpus, block, error, message):
    root, _, _, paths = corpus
    checked = check_parts(paths, str(root / "corpus.txt"), COUNT, str(root / "model"))
    before = sorted(os.listdir(root))
    with pytest.raises(error, match=message):
        with VectorIndex.writing(str(root / "index")) as folder:
            block(folder, checked)
    assert sorted(os.listdir(root)) == before


def test_assembling_into_a_matrix_of_another_shape_is_refused(corpus):
    root, _, _, paths = corpus
    checked = check_parts(paths, str(root / "corpus.txt"), COUNT, str(root / "model"))
    with pytest.raises(ValueError, match=r"cannot take the parts: they hold 50 float32 vectors of 12 dimensions"):
        assemble_parts(checked, np.zeros((COUNT, DIM + 1), np.float32))
    with pytest.raises(ValueError, match="is not the part its record says"):
        write_part(str(root / "wrong.npy"), np.zeros((3, DIM), np.float32), checked[0][1])
    assert not os.path.exists(root / "wrong.npy")


def test_int8_codes_are_written_with_their_ranges(tmp_path):
    vectors = unit_rows(2, 20)
    ranges = int8_ranges(vectors)
    output = str(tmp_path / "codes.npy")
    save_vectors(output, quantize(vectors, "int8", ranges), ranges)
    assert ranges_path(output) == str(tmp_path / "codes.ranges.npy")
    np.testing.assert_array_equal(read_int8_ranges(ranges_path(output)), [vectors.min(axis=0), vectors.max(axis=0)])
    np.testing.assert_array_equal(np.load(output), quantize(vectors, "int8", ranges))
    with pytest.raises(ConfigError, match="is a stream, and int8 codes need their ranges in a file beside them"):
        save_vectors(os.devnull, quantize(vectors, "int8", ranges), ranges)
