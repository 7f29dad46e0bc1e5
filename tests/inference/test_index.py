import json
import os
import tracemalloc

import numpy as np
import pytest

from cosent_tf import ConfigError, DataError, SentenceEncoder, VectorIndex
from cosent_tf.inference.index import top_k_cosine
from tests.helpers import make_model_dir


@pytest.fixture
def encoder_and_model(tiny_config, tmp_path):
    model = make_model_dir(tmp_path / "model", tiny_config, pooling="last-avg", maxlen=12, threshold=0.9)
    return SentenceEncoder.load(tmp_path / "model"), model


def random_units(rng, count, dim):
    vectors = rng.normal(size=(count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.mark.heavy
def test_top_k_equals_brute_force_on_120k_vectors_in_bounded_memory():
    rng = np.random.default_rng(0)
    corpus, queries = random_units(rng, 120_000, 48), random_units(rng, 300, 48)
    corpus[[5000, 90000]] = corpus[7]  # exact ties: the lower index must come first
    queries[0] = corpus[7]
    tracemalloc.start()
    scores, indices = top_k_cosine(queries, corpus, top_k=10, query_chunk=128, corpus_chunk=8192)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    full = queries @ corpus.T
    expected = np.argsort(-full, axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(full, expected, axis=1), atol=1e-5)
    assert list(indices[0, :3]) == [7, 5000, 90000]
    # Blocks of 128 x 8192 scores, not the 300 x 120000 matrix (144 MB).
    assert peak < full.nbytes / 8, f"peak {peak / 1e6:.1f} MB"


def test_index_problems_are_explained(encoder_and_model, tmp_path):
    encoder, _ = encoder_and_model
    index = encoder.build_index(["a", "b"])
    with pytest.raises(ValueError, match=r"query vectors of shape \(1, 3\) do not fit this index's dimension 16"):
        index.search(np.ones((1, 3), np.float32))
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        index.search(encoder.encode(["a"]), top_k=0)
    index.save(tmp_path / "index")
    (tmp_path / "index" / "texts.jsonl").write_text('"a"\nb\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"texts.jsonl, line 2: not a JSON string"):
        VectorIndex.load(tmp_path / "index")
    (tmp_path / "index" / "texts.jsonl").write_text(json.dumps("a") + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="2 vectors, 1 texts and a count of 2 do not agree"):
        VectorIndex.load(tmp_path / "index")
    (tmp_path / "index" / "texts.jsonl").write_text('"a"\n"b"\n', encoding="utf-8")
    vectors = (tmp_path / "index" / "vectors.npy").read_bytes()
    (tmp_path / "index" / "vectors.npy").write_bytes(vectors[:100])
    with pytest.raises(DataError, match=r"vectors.npy: not a readable .npy matrix .*; rebuild the index"):
        VectorIndex.load(tmp_path / "index")
    np.save(tmp_path / "index" / "vectors.npy", np.ones((2, 16), np.float64))
    with pytest.raises(DataError, match=r"vectors.npy: holds a float64 array of shape \(2, 16\), not a float32"):
        VectorIndex.load(tmp_path / "index")
    (tmp_path / "index" / "vectors.npy").write_bytes(vectors)
    info = (tmp_path / "index" / "index.json").read_text()
    (tmp_path / "index" / "index.json").write_text(info[:-5])
    with pytest.raises(ConfigError, match=r"index.json, line \d+: the index description is not valid JSON"):
        VectorIndex.load(tmp_path / "index")
    (tmp_path / "index" / "index.json").write_text(info)
    assert len(VectorIndex.load(tmp_path / "index")) == 2
    (tmp_path / "index" / "vectors.npy").unlink()
    with pytest.raises(ConfigError, match=r"not a complete cosent-tf index \(missing vectors.npy\)"):
        VectorIndex.load(tmp_path / "index")


def test_a_failed_index_save_leaves_the_previous_index_whole(tmp_path, monkeypatch):
    index = VectorIndex(np.eye(3, dtype=np.float32), ["a", "b", "c"])
    index.save(tmp_path / "index")
    before = {name: (tmp_path / "index" / name).read_bytes() for name in os.listdir(tmp_path / "index")}

    def crash(path, array, **kwargs):
        with open(path, "wb") as f:
            f.write(b"\x93NUMPY partial")
        raise KeyboardInterrupt  # as if the process were stopped while writing the vectors

    monkeypatch.setattr(np, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        VectorIndex(np.ones((2, 3), dtype=np.float32), ["x", "y"]).save(tmp_path / "index", overwrite=True)
    monkeypatch.undo()
    assert {name: (tmp_path / "index" / name).read_bytes() for name in os.listdir(tmp_path / "index")} == before
    assert sorted(os.listdir(tmp_path)) == ["index"]  # no temporary folder left behind
    assert VectorIndex.load(tmp_path / "index").texts == ["a", "b", "c"]


def test_an_index_copies_its_vectors_cut_and_renormalised_a_block_at_a_time(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    vectors = random_units(rng, 11, 6)
    VectorIndex(vectors, [str(row) for row in range(11)]).save(tmp_path / "index")
    earlier = VectorIndex.load(tmp_path / "index")  # memory-mapped
    monkeypatch.setattr(VectorIndex, "CHECK_ROWS", 4)  # 11 rows: blocks of 4, 4 and 3
    copied = earlier.copy_vectors(np.full((11, 6), np.nan, dtype=np.float32))
    np.testing.assert_array_equal(copied, vectors)
    cut = vectors[:, :4].astype(np.float64)
    expected = cut / np.linalg.norm(cut, axis=1, keepdims=True)
    np.testing.assert_allclose(earlier.copy_vectors(np.zeros((11, 4), np.float32), dim=4), expected, atol=1e-7)
    with pytest.raises(ValueError, match="cannot cut vectors of 6 dimensions to 7"):
        earlier.copy_vectors(np.zeros((11, 7), np.float32), dim=7)
    with pytest.raises(ValueError, match=r"a float32 matrix of shape \(11, 6\) cannot take 11 float32 vectors of 4"):
        earlier.copy_vectors(np.zeros((11, 6), np.float32), dim=4)
    # a vector spoilt after the build (an int8 index's load does not read them all): named with its file
    spoilt = np.load(tmp_path / "index" / "vectors.npy")
    spoilt[9, 2] = np.nan
    np.save(tmp_path / "index" / "vectors.npy", spoilt)
    unchecked = VectorIndex(np.load(tmp_path / "index" / "vectors.npy", mmap_mode="r"), earlier.texts)
    unchecked.directory = str(tmp_path / "index")
    with pytest.raises(DataError, match=r"vectors.npy: vector 9 \(of texts.jsonl line 10\) holds NaN or infinite"):
        unchecked.copy_vectors(np.zeros((11, 6), np.float32))
