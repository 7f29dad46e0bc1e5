"""The approximate structures (cosent_tf.inference.ann): their recall against exact search, their
settings, how they are read (memory-mapped) and refused, and exact search without faiss."""

from __future__ import annotations

import importlib
import json
import shutil
import sys

import faiss
import numpy as np
import pytest

from cosent_tf import ConfigError, DataError, VectorIndex
from cosent_tf.inference import ann as approximate
from cosent_tf.inference.index import top_k_codes, top_k_cosine
from cosent_tf.inference.vectors import approximate_scores, int8_ranges
from tests.inference.test_index_precision import clustered_units, near_queries, recall

KINDS = ("hnsw", "ivf")
PRECISIONS = ("float32", "int8", "binary")


@pytest.fixture(scope="module")
def corpus():
    return clustered_units(10, 3000, 32, clusters=30, spread=0.5)


@pytest.fixture(scope="module")
def queries(corpus):
    return near_queries(corpus, 11, count=100, noise=0.3)


# ---- recall


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_the_structures_find_the_exact_first_stage_top_10_with_default_settings(
    kind, precision, corpus, queries, record_property
):
    """Recall@10 of the faiss structure against the exact search over the same representation."""
    index = VectorIndex.build(corpus, [str(i) for i in range(len(corpus))], precision=precision, kind=kind)
    found = approximate.search_ann(index.ann, queries, precision, kind, 10, index.ann_settings)
    if precision == "float32":
        truth = top_k_cosine(queries, corpus, 10)[1]
    else:
        truth = top_k_codes(queries, index.codes, precision, 10, index.ranges)[1]
    if precision == "binary":
        # Hamming scores tie often: a hit counts when its score reaches the exact 10th best.
        full = approximate_scores(queries, index.codes, "binary")
        tenth = top_k_codes(queries, index.codes, "binary", 10)[0][:, -1:]
        found_recall = float(((found >= 0) & (np.take_along_axis(full, found, axis=1) >= tenth - 1e-6)).mean())
    else:
        found_recall = recall(found, truth)
    record_property("recall_at_10", found_recall)
    assert found_recall >= 0.9, found_recall
    # Through the index, with its default re-scoring, against exact float32 search: about what an
    # exact index of the same codes finds (32 bits are too few for binary codes to find much more).
    texts = [str(i) for i in range(len(corpus))]
    exact_float = top_k_cosine(queries, corpus, 10)[1]
    final = recall(index.search(queries, 10)[1], exact_float)
    of_codes = recall(
        VectorIndex.build(corpus, texts, precision=precision, kind="exact").search(queries, 10)[1], exact_float
    )
    record_property("recall_at_10_rescored", final)
    assert final >= 0.9 * of_codes, (final, of_codes)
    if precision != "binary":
        assert final >= 0.9, final


def test_search_settings_apply_to_one_search_or_to_the_index(corpus, queries):
    texts = [str(i) for i in range(len(corpus))]
    ivf = VectorIndex.build(corpus, texts, kind="ivf", nlist=40, nprobe=1)
    assert ivf.ann.nlist == 40 and ivf.ann.nprobe == 1
    truth = top_k_cosine(queries, corpus, 10)[1]
    narrow = recall(ivf.search(queries, 10, rescore_multiplier=1)[1], truth)
    every_list = ivf.search(queries, 10, rescore_multiplier=1, nprobe=40)[1]
    np.testing.assert_array_equal(every_list, truth)  # every list searched: exact
    assert narrow < 1.0
    ivf.ann_settings["nprobe"] = 40
    np.testing.assert_array_equal(ivf.search(queries, 10, rescore_multiplier=1)[1], truth)
    hnsw = VectorIndex.build(corpus, texts, kind="hnsw", m=4, ef_construction=8, ef_search=1)
    assert (hnsw.ann.hnsw.efConstruction, hnsw.ann.hnsw.efSearch) == (8, 1)
    wide = hnsw.search(queries, 10, rescore_multiplier=1, ef_search=400)[1]
    assert recall(wide, truth) > recall(hnsw.search(queries, 10, rescore_multiplier=1)[1], truth)


def test_ivf_lists_too_few_for_the_candidates_are_completed_exactly(corpus, queries):
    """An IVF search whose probed lists hold fewer than top_k vectors (faiss returns -1 for the rest)
    completes those queries by the exact first stage, so every query gets top_k hits."""
    texts = [str(i) for i in range(len(corpus))]
    index = VectorIndex.build(corpus, texts, precision="int8", kind="ivf", nlist=60, nprobe=1)
    found = approximate.search_ann(index.ann, queries, "int8", "ivf", 200, index.ann_settings)
    assert (found < 0).any(), "the test needs a list shorter than 200"
    scores, rows = index.search(queries, 200, rescore_multiplier=1)
    assert (rows >= 0).all() and all(len(set(row)) == 200 for row in rows.tolist())
    np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", queries, corpus[rows]), atol=1e-6)


# ---- the structures


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_each_structure_is_the_documented_faiss_class_with_its_settings(kind, precision, corpus):
    vectors = corpus[:500, :20]  # 20 dimensions: binary codes of 3 bytes, 24 bits in faiss
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    index = VectorIndex.build(vectors, [str(i) for i in range(500)], precision=precision, kind=kind)
    assert type(index.ann).__name__ == approximate.CLASSES[(precision, kind)]
    assert index.ann.ntotal == 500 and index.ann.d == (24 if precision == "binary" else 20)
    if precision != "binary":
        assert index.ann.metric_type == faiss.METRIC_INNER_PRODUCT
    if kind == "hnsw":
        assert index.ann_settings == {"m": 32, "ef_construction": 80, "ef_search": 64}
        assert (index.ann.hnsw.efConstruction, index.ann.hnsw.efSearch) == (80, 64)
    else:
        assert index.ann_settings == {"nlist": 10, "nprobe": 16}  # 500 // 50 lists
        assert (index.ann.nlist, index.ann.nprobe) == (10, 16)


@pytest.mark.parametrize("kind", KINDS)
def test_the_int8_structures_use_the_index_calibration(kind, corpus):
    index = VectorIndex.build(corpus, [str(i) for i in range(len(corpus))], precision="int8", kind=kind)
    holder = faiss.downcast_index(index.ann.storage) if kind == "hnsw" else index.ann
    low, high = int8_ranges(corpus)
    trained = faiss.vector_to_array(holder.sq.trained)
    np.testing.assert_array_equal(trained, np.concatenate([low, high - low]))
    assert holder.sq.qtype == faiss.ScalarQuantizer.QT_8bit
    if kind == "ivf":
        assert not index.ann.by_residual  # the vectors themselves are coded, as in codes.npy
    faiss_codes = holder.sa_encode(corpus[:200]) if kind == "hnsw" else holder.sq.compute_codes(corpus[:200])
    difference = faiss_codes.astype(np.int16) - (index.codes[:200].astype(np.int16) + 128)
    assert np.abs(difference).max() <= 1  # the same steps; only rounding at a half step may differ


def test_settings_are_checked():
    assert approximate.ann_settings("ivf", 1_000_000, {}) == {"nlist": 4000, "nprobe": 16}
    assert approximate.ann_settings("ivf", 300, {"nprobe": None}) == {"nlist": 6, "nprobe": 16}
    assert approximate.default_nlist(10) == 1
    with pytest.raises(ConfigError, match=r"nprobe: not a setting of an hnsw index \(its settings: m, ef_constr"):
        approximate.ann_settings("hnsw", 100, {"nprobe": 3})
    with pytest.raises(ConfigError, match="M, efs: not a setting of an ivf index"):
        approximate.ann_settings("ivf", 100, {"M": 3, "efs": 1})
    for bad in (0, -1, 2.0, True, "8"):
        with pytest.raises(ConfigError, match=r"ef_search .*: an index setting is a positive integer"):
            approximate.ann_settings("hnsw", 100, {"ef_search": bad})
    with pytest.raises(ConfigError, match="m 1: an HNSW graph needs at least 2 links a vector"):
        approximate.ann_settings("hnsw", 100, {"m": 1})
    with pytest.raises(ConfigError, match=r"nlist 101: more IVF lists than the 100 vectors; leave nlist out for about"):
        approximate.ann_settings("ivf", 100, {"nlist": 101})


def test_building_adds_in_chunks_with_a_progress_bar(corpus, monkeypatch, capsys):
    monkeypatch.setattr(approximate, "ADD_CHUNK", 700)
    monkeypatch.setattr(approximate, "live_progress_on", lambda stream: True)
    added = []
    real_add = faiss.IndexBinaryHNSW.add
    monkeypatch.setattr(faiss.IndexBinaryHNSW, "add", lambda self, x: (added.append(len(x)), real_add(self, x))[1])
    index = VectorIndex.build(corpus, [str(i) for i in range(3000)], precision="binary", kind="hnsw")
    assert added == [700, 700, 700, 700, 200] and index.ann.ntotal == 3000
    assert "indexing (hnsw)" in capsys.readouterr().err
    VectorIndex.build(corpus, [str(i) for i in range(3000)], precision="binary", kind="hnsw", show_progress=False)
    assert "indexing" not in capsys.readouterr().err


# ---- reading


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_loaded_structure_is_memory_mapped(kind, precision, corpus, queries, tmp_path):
    index = VectorIndex.build(corpus[:800], [str(i) for i in range(800)], precision=precision, kind=kind)
    index.save(str(tmp_path / "index"))
    path = str(tmp_path / "index" / "ann.faiss")
    mapped = VectorIndex.load(tmp_path / "index")
    with open("/proc/self/maps") as f:
        assert path in f.read()
    read = VectorIndex.load(tmp_path / "index", mmap=False)
    for got, want in zip(mapped.search(queries, 10), index.search(queries, 10)):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(read.search(queries, 10), index.search(queries, 10)):
        np.testing.assert_array_equal(got, want)
    del mapped
    with open("/proc/self/maps") as f:
        assert path not in f.read()  # read whole, and the mapped one released


@pytest.fixture(scope="module")
def saved_indexes(corpus, tmp_path_factory):
    """Folders of float32 hnsw, binary hnsw and int8 ivf indexes of 500 vectors, and a float32 hnsw
    index of 400 vectors of another width, to copy files from."""
    root = tmp_path_factory.mktemp("ann-indexes")
    texts = [str(i) for i in range(500)]
    for precision, kind in (("float32", "hnsw"), ("binary", "hnsw"), ("int8", "ivf"), ("float32", "ivf")):
        VectorIndex.build(corpus[:500], texts, precision=precision, kind=kind).save(str(root / f"{precision}-{kind}"))
    other = clustered_units(12, 400, 16)
    VectorIndex.build(other, texts[:400], kind="hnsw").save(str(root / "other"))
    return root


@pytest.fixture
def copy_of(saved_indexes, tmp_path):
    def copy(name):
        shutil.copytree(saved_indexes / name, tmp_path / name)
        return tmp_path / name

    return copy


def set_recorded_size(folder):
    info = json.loads((folder / "index.json").read_text())
    info["ann_bytes"] = (folder / "ann.faiss").stat().st_size
    (folder / "index.json").write_text(json.dumps(info))


@pytest.mark.parametrize("name", ["float32-hnsw", "binary-hnsw", "int8-ivf"])
@pytest.mark.parametrize("keep", [8, 100, 0.5, -1])
def test_a_truncated_faiss_file_is_refused_before_faiss_reads_it(name, keep, copy_of):
    folder = copy_of(name)
    data = (folder / "ann.faiss").read_bytes()
    cut = int(len(data) * keep) if isinstance(keep, float) else keep % len(data)
    (folder / "ann.faiss").write_bytes(data[:cut])
    with pytest.raises(
        DataError,
        match=rf"ann.faiss: holds {cut} bytes, but the index recorded {len(data)} when it wrote it: the file was cut "
        r"short or replaced by another index's; rebuild the index",
    ):
        VectorIndex.load(folder)


def test_a_faiss_file_faiss_cannot_read_is_named(copy_of):
    folder = copy_of("float32-hnsw")
    data = (folder / "ann.faiss").read_bytes()
    (folder / "ann.faiss").write_bytes(data[:-8])
    set_recorded_size(folder)  # as if the record were lost with it: faiss's own check then speaks
    with pytest.raises(DataError, match=r"ann.faiss: faiss cannot read it \('.* failed: read error"):
        VectorIndex.load(folder)
    (folder / "ann.faiss").write_bytes(b"not an index at all")
    set_recorded_size(folder)
    with pytest.raises(DataError, match=r"ann.faiss: faiss cannot read it \(.*not recognized.*\); rebuild the index"):
        VectorIndex.load(folder)


def test_a_faiss_file_of_another_index_is_refused(copy_of, saved_indexes):
    folder = copy_of("float32-hnsw")
    (folder / "ann.faiss").write_bytes((saved_indexes / "other" / "ann.faiss").read_bytes())
    with pytest.raises(DataError, match=r"ann.faiss: holds \d+ bytes, but the index recorded \d+"):
        VectorIndex.load(folder)
    set_recorded_size(folder)  # the size alone would not tell: the structure's own width and count do
    with pytest.raises(
        DataError,
        match=r"ann.faiss: holds 400 vectors of width 16, but the index has 500 of width 32: it is another index's",
    ):
        VectorIndex.load(folder)
    (folder / "ann.faiss").write_bytes((saved_indexes / "float32-ivf" / "ann.faiss").read_bytes())
    set_recorded_size(folder)
    with pytest.raises(
        DataError,
        match=r"ann.faiss: holds a faiss IndexIVFFlat, but the index records float32 hnsw \(a IndexHNSWFlat\)",
    ):
        VectorIndex.load(folder)
    folder = copy_of("binary-hnsw")
    (folder / "ann.faiss").write_bytes((saved_indexes / "float32-hnsw" / "ann.faiss").read_bytes())
    set_recorded_size(folder)
    with pytest.raises(DataError, match=r"ann.faiss: faiss cannot read it"):  # the binary reader's own refusal
        VectorIndex.load(folder)


def test_a_faiss_file_of_another_metric_is_refused(copy_of, corpus):
    folder = copy_of("float32-hnsw")
    l2 = faiss.IndexHNSWFlat(32, 32)  # faiss's default metric: L2
    l2.add(np.ascontiguousarray(corpus[:500]))
    faiss.write_index(l2, str(folder / "ann.faiss"))
    set_recorded_size(folder)
    with pytest.raises(DataError, match="ann.faiss: holds a faiss index that is not searched by inner product"):
        VectorIndex.load(folder)


# ---- without faiss


def test_exact_indexes_need_no_faiss_and_approximate_ones_say_how_to_install_it(
    corpus, queries, copy_of, tmp_path, monkeypatch
):
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss now raises ImportError
    with pytest.raises(ImportError):
        importlib.import_module("faiss")
    texts = [str(i) for i in range(len(corpus))]
    for precision in PRECISIONS:
        index = VectorIndex.build(corpus, texts, precision=precision, kind="exact")
        index.save(str(tmp_path / precision))
        loaded = VectorIndex.load(tmp_path / precision)
        np.testing.assert_array_equal(
            loaded.search(queries, 10, rescore_multiplier=300)[1], top_k_cosine(queries, corpus, 10)[1]
        )
    hint = r"an approximate index \(hnsw, ivf\) needs faiss, which is not installed .*; install it with: pip install"
    with pytest.raises(ConfigError, match=hint + r' "cosent-tf\[ann\]", or use an exact index'):
        VectorIndex.build(corpus, texts, kind="hnsw")
    folder = copy_of("int8-ivf")
    with pytest.raises(ConfigError, match=hint):
        VectorIndex.load(folder)
    assert not approximate.faiss_available()
