"""An index of int8 or binary codes, exact or approximate, searched with re-scoring: its hits against
exact float32 search, its folder round trip, and every way its files can be wrong."""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import tracemalloc

import numpy as np
import pytest

from cosent_tf import ConfigError, DataError, VectorIndex
from cosent_tf.calibration import weights_fingerprint
from cosent_tf.choices import INDEX_KINDS, RESCORE_MULTIPLIER, VECTOR_PRECISIONS
from cosent_tf.inference import ann as approximate
from cosent_tf.inference import index as index_module
from cosent_tf.inference.index import top_k_codes, top_k_cosine
from cosent_tf.inference.vectors import approximate_scores, quantize

COMBINATIONS = list(itertools.product(VECTOR_PRECISIONS, INDEX_KINDS))


def clustered_units(seed, count, dim, clusters=12, spread=0.35):
    """Unit vectors around ``clusters`` random centres (so that neighbours are near, as a model's
    are), in shuffled order."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim))
    vectors = centres[rng.integers(0, clusters, count)] + spread * rng.normal(size=(count, dim))
    vectors = vectors.astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def near_queries(corpus, seed, count=40, noise=0.15):
    rng = np.random.default_rng(seed)
    queries = corpus[rng.integers(0, len(corpus), count)] + noise * rng.normal(size=(count, corpus.shape[1]))
    queries = queries.astype(np.float32)
    return queries / np.linalg.norm(queries, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def corpus():
    vectors = clustered_units(0, 300, 24)
    vectors[[120, 250]] = vectors[5]  # exact ties: the lower row must come first
    return vectors, [f"text {i}" for i in range(300)]


@pytest.fixture(scope="module")
def built(corpus):
    vectors, texts = corpus
    return {(p, k): VectorIndex.build(vectors, texts, precision=p, kind=k) for p, k in COMBINATIONS}


def recall(found, truth):
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(found, truth)]))


# ---- hits


@pytest.mark.parametrize("precision, kind", COMBINATIONS)
def test_rescoring_that_covers_the_corpus_gives_exact_search(precision, kind, corpus, built):
    vectors, _ = corpus
    index = built[(precision, kind)]
    queries = np.concatenate([near_queries(vectors, 1), vectors[5:6]])
    expected_scores, expected_rows = top_k_cosine(queries, vectors, 10)
    scores, rows = index.search(queries, top_k=10, rescore_multiplier=30)  # 30 x 10 = every vector
    np.testing.assert_array_equal(rows, expected_rows)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-6)
    assert rows[-1, :3].tolist() == [5, 120, 250]  # the three copies, lower rows first
    assert scores.dtype == np.float32 and rows.dtype == np.int64


@pytest.mark.parametrize("precision, kind", COMBINATIONS)
def test_without_extra_candidates_the_hits_are_valid_and_rescored(precision, kind, corpus, built, record_property):
    vectors, _ = corpus
    index = built[(precision, kind)]
    queries = near_queries(vectors, 2)
    scores, rows = index.search(queries, top_k=10, rescore_multiplier=1)
    assert rows.shape == scores.shape == (40, 10)
    assert all(len(set(row)) == 10 for row in rows.tolist()) and rows.min() >= 0 and rows.max() < 300
    # Each score is the exact cosine of its row, best first.
    exact = np.einsum("qd,qkd->qk", queries, vectors[rows])
    np.testing.assert_allclose(scores, exact, atol=1e-6)
    assert (np.diff(scores, axis=1) <= 0).all()
    found = recall(rows, top_k_cosine(queries, vectors, 10)[1])
    record_property("recall_at_10", found)
    if precision == "float32" and kind == "exact":
        assert found == 1.0


def test_rescoring_in_pieces_smaller_than_the_candidates_gives_the_same_hits(corpus, built, monkeypatch):
    vectors, _ = corpus
    queries = near_queries(vectors, 12)
    index = built[("int8", "hnsw")]
    whole = index.search(queries, 10, rescore_multiplier=30)
    monkeypatch.setattr(VectorIndex, "RESCORE_ROWS", 7)  # 300 candidates a query: 43 pieces, one query at a time
    for got, want in zip(index.search(queries, 10, rescore_multiplier=30), whole):
        np.testing.assert_array_equal(got, want)
    few = index.search(queries, 10, rescore_multiplier=3)
    monkeypatch.setattr(VectorIndex, "RESCORE_ROWS", 95)  # 3 queries a piece
    for got, want in zip(index.search(queries, 10, rescore_multiplier=3), few):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(index.search(queries[4:5], 10, rescore_multiplier=3), few):  # alone, the same
        np.testing.assert_array_equal(got[0], want[4])
    np.testing.assert_array_equal(whole[1], top_k_cosine(queries, vectors, 10)[1])


def test_a_float32_exact_index_is_top_k_cosine_bit_for_bit(corpus, built):
    vectors, _ = corpus
    queries = near_queries(vectors, 3)
    for multiplier in (None, 1, 7):
        scores, rows = built[("float32", "exact")].search(queries, 10, rescore_multiplier=multiplier)
        expected_scores, expected_rows = top_k_cosine(queries, vectors, 10)
        np.testing.assert_array_equal(scores, expected_scores)
        np.testing.assert_array_equal(rows, expected_rows)


def test_the_default_multiplier_takes_four_times_top_k_candidates(corpus, built, monkeypatch):
    vectors, _ = corpus
    depths = []
    real = index_module.top_k_codes

    def spy(queries, codes, precision, top_k, ranges=None, **kwargs):
        depths.append(top_k)
        return real(queries, codes, precision, top_k, ranges, **kwargs)

    monkeypatch.setattr(index_module, "top_k_codes", spy)
    index = built[("binary", "exact")]
    index.search(near_queries(vectors, 4), top_k=5)
    index.search(near_queries(vectors, 4), top_k=5, rescore_multiplier=3)
    index.search(near_queries(vectors, 4), top_k=200, rescore_multiplier=3)  # never past the corpus
    assert depths == [RESCORE_MULTIPLIER * 5, 15, 300]


@pytest.mark.parametrize("precision", ["int8", "binary"])
def test_exact_search_over_codes_is_brute_force_in_blocks(precision):
    corpus = clustered_units(5, 1000, 20)
    queries = near_queries(corpus, 6, count=30)
    ranges = np.stack([corpus.min(axis=0), corpus.max(axis=0)])
    codes = quantize(corpus, precision, ranges if precision == "int8" else None)
    scores, rows = top_k_codes(queries, codes, precision, 25, ranges, query_chunk=7, corpus_chunk=64)
    full = approximate_scores(queries, codes, precision, ranges)
    expected = np.argsort(-full, axis=1, kind="stable")[:, :25]  # ties (many, for bits) to the lower row
    np.testing.assert_array_equal(rows, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(full, expected, axis=1), atol=1e-6)


def test_exact_search_over_binary_codes_holds_blocks_not_the_whole_matrix():
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 256, size=(60_000, 16), dtype=np.uint8)
    queries = rng.normal(size=(300, 128)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    tracemalloc.start()
    scores, rows = top_k_codes(queries, codes, "binary", 10, query_chunk=100, corpus_chunk=4096)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # The scores of every pair would be 300 x 60000 float32 (72 MB).
    assert peak < 300 * 60_000 * 4 / 4, f"peak {peak / 1e6:.1f} MB"
    spot = approximate_scores(queries[17:18], codes, "binary")[0]
    np.testing.assert_array_equal(rows[17], np.argsort(-spot, kind="stable")[:10])


# ---- the folder


@pytest.mark.parametrize("precision, kind", COMBINATIONS)
def test_save_and_load_keep_every_attribute_and_map_the_arrays(precision, kind, corpus, built, tmp_path):
    vectors, texts = corpus
    model = tmp_path / "model"
    model.mkdir()
    (model / "bert_model.ckpt.index").write_bytes(b"weights")
    index = VectorIndex.build(vectors, texts, str(model), precision=precision, kind=kind, model_width=64)
    index.save(str(tmp_path / "index"))
    loaded = VectorIndex.load(tmp_path / "index")
    assert (loaded.precision, loaded.kind, loaded.dimension, len(loaded)) == (precision, kind, 24, 300)
    assert loaded.texts == texts and loaded.model_dir == str(model) and loaded.model_width == 64
    assert loaded.model_fingerprint == index.model_fingerprint == weights_fingerprint(str(model))
    assert loaded.ann_settings == index.ann_settings == built[(precision, kind)].ann_settings
    assert isinstance(loaded.vectors, np.memmap)
    np.testing.assert_array_equal(loaded.vectors, vectors)
    if precision == "float32":
        assert loaded.codes is None and index.codes is None
    else:
        assert isinstance(loaded.codes, np.memmap)
        np.testing.assert_array_equal(loaded.codes, index.codes)
    if precision == "int8":
        np.testing.assert_array_equal(loaded.ranges, [vectors.min(axis=0), vectors.max(axis=0)])
    else:
        assert loaded.ranges is None
    assert (loaded.ann is None) == (kind == "exact")
    if loaded.ann is not None:
        assert (loaded.ann.ntotal, type(loaded.ann)) == (300, type(index.ann))
    queries = near_queries(vectors, 8)
    for multiplier in (1, 30):
        for got, want in zip(loaded.search(queries, 10, multiplier), index.search(queries, 10, multiplier)):
            np.testing.assert_array_equal(got, want)
    files = {"index.json", "texts.jsonl", "vectors.npy"}
    files |= {"codes.npy"} if precision != "float32" else set()
    files |= {"ranges.npy"} if precision == "int8" else set()
    files |= {"ann.faiss"} if kind != "exact" else set()
    assert set(os.listdir(tmp_path / "index")) == files
    info = json.loads((tmp_path / "index" / "index.json").read_text())
    assert info["format_version"] == 2 and (info["precision"], info["kind"]) == (precision, kind)
    assert info["model_width"] == 64 and info["model_fingerprint"].startswith("sha256:")
    # Loaded without memory maps, the same index; saved again, the same files.
    whole = VectorIndex.load(tmp_path / "index", mmap=False)
    assert not isinstance(whole.vectors, np.memmap) and not isinstance(whole.codes, np.memmap)
    whole.save(str(tmp_path / "again"))
    for name in files - {"index.json"}:
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "index" / name).read_bytes(), name


def test_an_index_folder_written_before_precisions_loads_as_float32_exact(corpus, tmp_path):
    vectors, texts = corpus
    folder = tmp_path / "old"
    folder.mkdir()
    np.save(folder / "vectors.npy", vectors)
    (folder / "texts.jsonl").write_text("".join(json.dumps(t) + "\n" for t in texts), encoding="utf-8")
    old = {"format": "cosent-tf-index", "count": 300, "dimension": 24, "model_dir": None, "model_dir_from_index": None}
    (folder / "index.json").write_text(json.dumps(old))
    loaded = VectorIndex.load(folder)
    assert (loaded.precision, loaded.kind, loaded.codes, loaded.ranges, loaded.ann) == (
        "float32",
        "exact",
        None,
        None,
        None,
    )
    assert loaded.model_fingerprint is None and loaded.model_width is None and loaded.ann_settings == {}
    queries = near_queries(vectors, 9)
    np.testing.assert_array_equal(loaded.search(queries, 5)[1], top_k_cosine(queries, vectors, 5)[1])
    loaded.save(str(tmp_path / "rewritten"))  # and may be written in the new format
    assert json.loads((tmp_path / "rewritten" / "index.json").read_text())["format_version"] == 2


def test_the_plain_constructor_is_a_float32_exact_index(corpus):
    vectors, texts = corpus
    index = VectorIndex(vectors, texts, "somewhere")
    assert (index.precision, index.kind, index.codes, index.ranges, index.ann) == ("float32", "exact", None, None, None)
    assert index.model_fingerprint is None and index.model_dir == "somewhere"


def test_kind_none_is_exact_up_to_the_limit_and_hnsw_above(corpus, monkeypatch, caplog):
    vectors, texts = corpus
    with caplog.at_level(logging.INFO, logger="cosent_tf"):
        assert VectorIndex.build(vectors, texts, precision="binary").kind == "exact"
    assert "index of 300 vectors: exact search" in caplog.text
    monkeypatch.setattr(index_module, "EXACT_INDEX_LIMIT", 299)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cosent_tf"):
        index = VectorIndex.build(vectors, texts, precision="binary")
    assert index.kind == "hnsw"
    assert "index of 300 vectors: hnsw, approximate (exact up to 299 vectors)" in caplog.text
    monkeypatch.setattr(approximate, "faiss_available", lambda: False)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cosent_tf"):
        assert VectorIndex.build(vectors, texts).kind == "exact"
    assert "exact search, as faiss is not installed" in caplog.text and 'pip install "cosent-tf[ann]"' in caplog.text


def test_the_exact_default_index_limit_lies_within_the_sizes_the_bench_measured():
    assert 10_000 <= index_module.EXACT_INDEX_LIMIT <= 1_000_000  # benchmarks/ANN.md: between its sizes


def test_a_failed_save_leaves_the_previous_index_whole(corpus, built, tmp_path, monkeypatch):
    built[("int8", "hnsw")].save(str(tmp_path / "index"))
    before = {name: (tmp_path / "index" / name).read_bytes() for name in os.listdir(tmp_path / "index")}

    def crash(ann, precision, path):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise KeyboardInterrupt  # as if the process were stopped while writing the faiss file

    monkeypatch.setattr(approximate, "write_ann", crash)
    with pytest.raises(KeyboardInterrupt):
        built[("binary", "ivf")].save(str(tmp_path / "index"), overwrite=True)
    monkeypatch.undo()
    assert {name: (tmp_path / "index" / name).read_bytes() for name in os.listdir(tmp_path / "index")} == before
    assert sorted(os.listdir(tmp_path)) == ["index"]  # no temporary folder left behind
    assert VectorIndex.load(tmp_path / "index").precision == "int8"


# ---- bad input


@pytest.fixture
def saved(corpus, built, tmp_path):
    """Save the built index of (precision, kind) in tmp_path/index; returns the folder."""

    def save(precision, kind):
        built[(precision, kind)].save(str(tmp_path / "index"), overwrite=True)
        return tmp_path / "index"

    return save


def edit_info(folder, **changes):
    info = json.loads((folder / "index.json").read_text())
    info.update(changes)
    (folder / "index.json").write_text(json.dumps(info))


@pytest.mark.parametrize("mmap", [True, False])
def test_a_truncated_codes_file_is_named(saved, mmap):
    folder = saved("int8", "exact")
    data = (folder / "codes.npy").read_bytes()
    (folder / "codes.npy").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"codes.npy: not a readable .npy matrix .*; rebuild the index"):
        VectorIndex.load(folder, mmap=mmap)


def test_codes_of_another_precision_are_refused(saved, corpus):
    vectors, _ = corpus
    folder = saved("int8", "exact")
    np.save(folder / "codes.npy", quantize(vectors, "binary"))
    with pytest.raises(
        DataError,
        match=r"codes.npy: holds a uint8 array of shape \(300, 3\) \(binary codes\), but the index records 300 int8 "
        r"vectors of dimension 24 \(int8 codes of shape \(300, 24\)\): it is another index's, or of another precision",
    ):
        VectorIndex.load(folder)
    folder = saved("binary", "exact")
    np.save(folder / "codes.npy", np.zeros((300, 24), np.int8))
    with pytest.raises(DataError, match=r"codes.npy: holds a int8 array .*\(int8 codes\), but .* 300 binary vectors"):
        VectorIndex.load(folder)
    np.save(folder / "codes.npy", np.zeros((299, 3), np.uint8))
    with pytest.raises(DataError, match=r"codes.npy: holds a uint8 array of shape \(299, 3\)"):
        VectorIndex.load(folder)


@pytest.mark.parametrize(
    "ranges, message",
    [
        (np.zeros((2, 23), np.float32), r"holds a float32 array of shape \(2, 23\), not the int8 calibration of 24"),
        (np.zeros((24,), np.float32), r"holds a float32 array of shape \(24,\), not the int8 calibration"),
        (np.zeros((2, 24), np.float64), r"holds a float64 array of shape \(2, 24\)"),
        (np.array([np.ones(24), np.zeros(24)], np.float32), "dimension 0 has a minimum above its maximum"),
        (np.full((2, 24), np.nan, np.float32), "holds NaN"),
    ],
)
def test_int8_ranges_that_do_not_fit_are_refused(ranges, message, saved):
    folder = saved("int8", "hnsw")
    np.save(folder / "ranges.npy", ranges)
    with pytest.raises(DataError, match=f"ranges.npy: {message}"):
        VectorIndex.load(folder)


@pytest.mark.parametrize("name", ["codes.npy", "ranges.npy", "ann.faiss"])
def test_a_missing_file_of_the_recorded_precision_or_kind_is_named(name, saved):
    folder = saved("int8", "ivf")
    (folder / name).unlink()
    with pytest.raises(ConfigError, match=rf"index: not a complete cosent-tf index \(missing {name}\)"):
        VectorIndex.load(folder)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"format_version": 3}, "an index of format 3, written by a newer cosent-tf"),
        ({"precision": "int4"}, "precision 'int4' and kind 'exact': not an index this cosent-tf reads"),
        ({"kind": "lsh"}, "precision 'float32' and kind 'lsh': not an index"),
        ({"precision": 8}, "'precision' must be a JSON string, not integer"),
        ({"ann_settings": {"m": 32}}, r"ann_settings \['m'\] are not the settings of an exact index \(none\)"),
        ({"model_fingerprint": 5}, "'model_fingerprint' must be a JSON string or null"),
        ({"model_width": "312"}, "'model_width' must be a JSON integer or null"),
    ],
)
def test_an_index_description_that_cannot_be_read_is_named(changes, message, saved):
    folder = saved("float32", "exact")
    edit_info(folder, **changes)
    with pytest.raises(ConfigError, match=f"index.json: {message}"):
        VectorIndex.load(folder)


def test_recorded_ann_settings_are_checked(saved):
    folder = saved("float32", "ivf")
    edit_info(folder, ann_settings={"nlist": 6, "nprobe": 0})
    with pytest.raises(
        ConfigError,
        match=r"index.json: ann_settings.nprobe 0: an index setting is a positive integer of at most 2147483647",
    ):
        VectorIndex.load(folder)
    edit_info(folder, ann_settings={"nlist": 6, "nprobe": "4"})
    with pytest.raises(ConfigError, match=r"index.json: ann_settings.nprobe must be a JSON integer, not string"):
        VectorIndex.load(folder)
    edit_info(folder, ann_settings={"m": 32, "ef_construction": 80, "ef_search": 64})
    with pytest.raises(ConfigError, match=r"are not the settings of an ivf index \(nlist, nprobe\)"):
        VectorIndex.load(folder)


def make_model(folder, weights):
    folder.mkdir(exist_ok=True)
    (folder / "bert_model.ckpt.index").write_bytes(weights)
    return str(folder)


def test_a_model_retrained_at_the_same_path_is_refused(corpus, tmp_path):
    vectors, texts = corpus
    model = make_model(tmp_path / "model", b"first weights")
    VectorIndex.build(vectors, texts, model, precision="binary").save(str(tmp_path / "index"))
    loaded = VectorIndex.load(tmp_path / "index")
    assert loaded.model_path() == model and loaded.model_path(model) == model
    make_model(tmp_path / "model", b"retrained weights")
    retrained = r"index: the model .*model does not have the weights that built the index \(retrained or replaced"
    with pytest.raises(ConfigError, match=retrained + r".*rebuild the index with the model as it is now"):
        loaded.model_path()
    with pytest.raises(ConfigError, match=retrained + ".*query it without --model-dir"):
        loaded.model_path(model)
    with pytest.raises(ConfigError, match=retrained + ".*mine with it"):
        loaded.check_model(model, "mine with it")
    # Moved away, the recorded folder is gone: a folder given instead is checked by its weights.
    shutil.move(tmp_path / "model", tmp_path / "moved")
    with pytest.raises(ConfigError, match=r"the model .*moved does not have the weights that built the index"):
        loaded.model_path(str(tmp_path / "moved"))
    copy = make_model(tmp_path / "copy", b"first weights")
    assert loaded.model_path(copy) == copy
    no_weights = tmp_path / "bare"
    no_weights.mkdir()
    assert loaded.model_path(str(no_weights)) == str(no_weights)  # nothing to compare: the caller's word


def test_queries_of_another_width_are_refused_naming_the_index(saved, corpus):
    vectors, _ = corpus
    folder = saved("binary", "hnsw")
    edit_info(folder, model_width=64)
    loaded = VectorIndex.load(folder)
    with pytest.raises(
        ConfigError,
        match=r"index: query vectors of shape \(2, 64\) do not fit this index's dimension 24; encode them with the "
        r"index's model \(None\) cut to the index's width \(--dim 24; the model's full width is 64\)",
    ):
        loaded.search(np.ones((2, 64), np.float32))
    with pytest.raises(ConfigError, match=r"query vectors of shape \(24,\) do not fit"):
        loaded.search(vectors[0])
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        loaded.search(vectors[:1], top_k=0)
    nan = vectors[:2].copy()
    nan[1, 3] = np.nan
    with pytest.raises(ValueError, match="query vector 1 holds NaN"):
        loaded.search(nan)


@pytest.mark.parametrize("multiplier", [0, -2, 2.5, True, "4"])
def test_a_rescore_multiplier_that_is_not_a_positive_integer_is_refused(multiplier, saved, corpus):
    vectors, _ = corpus
    loaded = VectorIndex.load(saved("int8", "exact"))
    with pytest.raises(ConfigError, match=r"index: --rescore-multiplier .*: candidates per result are a positive"):
        loaded.search(vectors[:2], 5, rescore_multiplier=multiplier)
    with pytest.raises(ValueError):  # as the contract of search says: a ConfigError is a ValueError
        loaded.search(vectors[:2], 5, rescore_multiplier=multiplier)


def test_search_settings_of_another_kind_are_refused(built, corpus):
    vectors, _ = corpus
    with pytest.raises(ConfigError, match="this index: ef_search is a setting of hnsw indexes; this index is ivf"):
        built[("float32", "ivf")].search(vectors[:2], ef_search=10)
    with pytest.raises(ConfigError, match="nprobe is a setting of ivf indexes; this index is exact"):
        built[("binary", "exact")].search(vectors[:2], nprobe=10)
    with pytest.raises(ConfigError, match="nprobe 0: an index setting is a positive integer"):
        built[("int8", "ivf")].search(vectors[:2], nprobe=0)


def test_building_checks_its_arguments(corpus):
    vectors, texts = corpus
    with pytest.raises(ConfigError, match="unknown vector precision 'int4'"):
        VectorIndex.build(vectors, texts, precision="int4")
    with pytest.raises(ConfigError, match="unknown index kind 'flat'; choose one of exact, hnsw, ivf"):
        VectorIndex.build(vectors, texts, kind="flat")
    with pytest.raises(ConfigError, match="ef_search: settings of an approximate index .*; an exact index has none"):
        VectorIndex.build(vectors, texts, kind="exact", ef_search=10)
    with pytest.raises(ConfigError, match=r"an index of int8 vectors \(exact\) needs at least one vector"):
        VectorIndex.build(np.zeros((0, 24), np.float32), [], precision="int8")
    with pytest.raises(ValueError, match=r"vectors of shape \(300, 24\) do not match 299 texts"):
        VectorIndex.build(vectors, texts[:-1], precision="binary")
    empty = VectorIndex.build(np.zeros((0, 24), np.float32), [])
    assert empty.search(vectors[:2], 5)[1].shape == (2, 0)
