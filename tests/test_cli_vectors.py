"""The vector options of the command line reach the model, the index and the output: --dim (encode,
similarity, evaluate, search, export), --vector-precision and --int8-ranges (encode, search build),
--index and its settings (search build), --rescore-multiplier (search query).

Each output is checked against an independent computation: the full vectors of the Python API cut
and renormalised with NumPy, codes made from the contract's formulas, exact top-k by brute force.
"""

from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pytest
from scipy import stats

from cosent_tf import SentenceEncoder, VectorIndex
from cosent_tf.cli import main
from cosent_tf.inference.parts import ranges_path
from tests.helpers import distinct_texts, kept_from_others, make_model_dir, write_config

WIDTH = 16  # the tiny config's hidden size: the model's full width
QUERIES = ["我是中国人", "他们在大国", "你说的不会", "这个地方"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A feature model (mean pooling: a random model's [CLS] vectors are all alike), one trained for
    Matryoshka widths 16 and 8 (the same weights, its description says so), an interaction model,
    a corpus, queries and labelled pairs."""
    root = tmp_path_factory.mktemp("cli-vectors")
    config = write_config(root / "config.json")
    make_model_dir(root / "model", config, pooling="last-avg", threshold=0.5)
    make_model_dir(root / "matryoshka", config, pooling="last-avg", threshold=0.5)
    spec_path = root / "matryoshka" / "cosent_model.json"
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    spec_path.write_text(json.dumps({**spec, "matryoshka_dims": [16, 8]}), encoding="utf-8")
    make_model_dir(root / "scorer", config, kind="interaction")
    corpus = distinct_texts(3, 150)
    (root / "corpus.txt").write_text("\n".join(corpus) + "\n", encoding="utf-8")
    (root / "queries.txt").write_text("\n".join(QUERIES) + "\n", encoding="utf-8")
    rng = np.random.default_rng(0)
    pairs = [(corpus[i], corpus[i + 1], int(rng.integers(0, 2))) for i in range(0, 60, 2)]
    (root / "pairs.tsv").write_text("".join(f"{a}\t{b}\t{y}\n" for a, b, y in pairs), encoding="utf-8")
    return root


def cut(vectors, dim):
    """The first ``dim`` dimensions of each row, renormalised: the truncation computed here."""
    vectors = np.asarray(vectors, dtype=np.float64)[:, :dim]
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


_VECTORS = {}


def full_vectors(folder, texts, model="model"):
    """The Python API's full vectors of ``texts``, computed once per list: loading a model folder and
    tracing its function costs far more than encoding the tiny corpus. The same list is encoded as one
    batch, as the command line encodes its file, so a cached result is the one a fresh encoder gives."""
    key = (str(folder / model), tuple(texts))
    if key not in _VECTORS:
        _VECTORS[key] = SentenceEncoder.load(folder / model).encode(list(texts))
        _VECTORS[key].setflags(write=False)
    return _VECTORS[key]


def lines(path):
    return path.read_text(encoding="utf-8").splitlines()


# --- encode ------------------------------------------------------------------------------------


@pytest.mark.heavy
def test_encode_at_a_width_is_the_full_vector_cut_and_renormalised(folder, tmp_path, capsys):
    texts = lines(folder / "corpus.txt")
    main(["encode", str(folder / "model"), str(folder / "corpus.txt"), str(tmp_path / "v8.npy"), "--dim", "8"])
    written = np.load(tmp_path / "v8.npy")
    assert written.shape == (150, 8) and written.dtype == np.float32
    np.testing.assert_allclose(written, cut(full_vectors(folder, texts), 8), atol=1e-6)
    np.testing.assert_allclose(written, SentenceEncoder.load(folder / "model").encode(texts, dim=8), atol=1e-7)
    captured = capsys.readouterr()
    assert "150 vectors of dimension 8" in captured.out
    # The model was not trained for 8: the warning of check_dim reaches the console.
    assert f"--dim 8: {folder / 'model'} was trained for its full width 16 only" in captured.err
    # The full width is no cut, and warns of nothing.
    main(["encode", str(folder / "model"), str(folder / "corpus.txt"), str(tmp_path / "v16.npy"), "--dim", "16"])
    np.testing.assert_allclose(np.load(tmp_path / "v16.npy"), full_vectors(folder, texts), atol=1e-7)
    assert "--dim" not in capsys.readouterr().err


def test_a_width_the_model_was_trained_for_warns_of_nothing(folder, tmp_path, capsys):
    model = str(folder / "matryoshka")
    main(["encode", model, str(folder / "queries.txt"), str(tmp_path / "v8.npy"), "--dim", "8"])
    assert "--dim" not in capsys.readouterr().err
    main(["encode", model, str(folder / "queries.txt"), str(tmp_path / "v4.npy"), "--dim", "4"])
    assert f"--dim 4: {model} was trained for the widths 16, 8" in capsys.readouterr().err
    np.testing.assert_allclose(
        np.load(tmp_path / "v4.npy"), cut(full_vectors(folder, QUERIES, "matryoshka"), 4), atol=1e-6
    )


def int8_codes(vectors, low, high):
    """int8 codes as the contract defines them: rint((v - min) / step) - 128, step = (max - min) / 255."""
    step = (high - low) / 255.0
    return (np.clip(np.rint((vectors - low) / step), 0, 255) - 128).astype(np.int8)


def test_encode_int8_writes_codes_and_their_ranges_beside_them(folder, tmp_path, capsys):
    texts = lines(folder / "corpus.txt")
    output = tmp_path / "codes.npy"
    main(["encode", str(folder / "model"), str(folder / "corpus.txt"), str(output), "--vector-precision", "int8"])
    vectors = full_vectors(folder, texts)
    ranges = np.load(tmp_path / "codes.ranges.npy")
    assert ranges_path(str(output)) == str(tmp_path / "codes.ranges.npy")
    assert ranges.dtype == np.float32 and ranges.shape == (2, WIDTH)
    np.testing.assert_allclose(ranges, [vectors.min(axis=0), vectors.max(axis=0)], atol=1e-6)
    codes = np.load(output)
    assert codes.dtype == np.int8 and codes.shape == (150, WIDTH)
    # Each dimension's minimum and maximum take the end codes.
    assert (codes.min(axis=0) == -128).all() and (codes.max(axis=0) == 127).all()
    expected = int8_codes(vectors, ranges[0], ranges[1])
    assert np.abs(codes.astype(int) - expected).max() <= 1  # a value on a half step may round either way
    assert (codes == expected).mean() > 0.99
    assert "as int8 codes, the ranges of these vectors in" in capsys.readouterr().out

    # --int8-ranges: the queries quantised with the corpus's ranges, written beside them too.
    queries = tmp_path / "queries.npy"
    main(
        [
            "encode",
            str(folder / "model"),
            str(folder / "queries.txt"),
            str(queries),
            "--vector-precision",
            "int8",
            "--int8-ranges",
            str(tmp_path / "codes.ranges.npy"),
        ]
    )
    query_vectors = full_vectors(folder, QUERIES)
    expected = int8_codes(query_vectors, ranges[0], ranges[1])
    assert np.abs(np.load(queries).astype(int) - expected).max() <= 1
    np.testing.assert_array_equal(np.load(tmp_path / "queries.ranges.npy"), ranges)


def test_encode_binary_writes_the_sign_bits_packed(folder, tmp_path):
    main(
        [
            "encode",
            str(folder / "model"),
            str(folder / "corpus.txt"),
            str(tmp_path / "bits.npy"),
            "--vector-precision",
            "binary",
            "--dim",
            "12",
        ]
    )
    bits = np.load(tmp_path / "bits.npy")
    assert bits.dtype == np.uint8 and bits.shape == (150, 2)  # 12 bits in 2 bytes
    signs = cut(full_vectors(folder, lines(folder / "corpus.txt")), 12) > 0
    np.testing.assert_array_equal(np.unpackbits(bits, axis=1)[:, :12], signs)
    assert not np.unpackbits(bits, axis=1)[:, 12:].any()
    assert not os.path.exists(tmp_path / "bits.ranges.npy")


def test_a_ranges_file_is_written_with_its_codes_or_not_at_all(folder, tmp_path, monkeypatch):
    from cosent_tf.inference import parts

    arguments = ["encode", str(folder / "model"), str(folder / "queries.txt"), str(tmp_path / "codes.npy")]
    main([*arguments, "--vector-precision", "int8"])
    before = {name: (tmp_path / name).read_bytes() for name in ("codes.npy", "codes.ranges.npy")}
    real_save = parts.save_npy

    def fail_on_ranges(path, array):
        if array.shape[0] == 2 and array.dtype == np.float32:  # the ranges: after the codes were written
            raise OSError(28, "No space left on device")
        real_save(path, array)

    monkeypatch.setattr(parts, "save_npy", fail_on_ranges)
    with pytest.raises(SystemExit, match="No space left on device"):
        main([*arguments, "--vector-precision", "int8", "--overwrite", "--dim", "8"])
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert sorted(os.listdir(tmp_path)) == sorted(before)  # no temporary file left


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--dim", "17"], "--dim 17: .*model makes vectors of 16 dimensions; ask for at most 16"),
        (
            ["--int8-ranges", "{tmp}/r.npy"],
            "--int8-ranges gives the ranges of int8 codes: pass --vector-precision int8",
        ),
        (
            ["--vector-precision", "int8", "--int8-ranges", "{tmp}/wide.npy"],
            "--int8-ranges .*wide.npy: holds the ranges of vectors of 20 dimensions, but these have 16",
        ),
        (
            ["--vector-precision", "int8", "--int8-ranges", "{tmp}/flat.npy"],
            r"flat.npy: holds a float32 array of shape \(16,\), not int8 ranges",
        ),
        (
            ["--vector-precision", "int8", "--int8-ranges", "{tmp}/upside-down.npy"],
            "upside-down.npy: its ranges hold NaN or infinite values, or a minimum above its maximum",
        ),
        (
            ["--vector-precision", "int8", "--int8-ranges", "{tmp}/texts.npy"],
            "texts.npy: not a .npy array file",
        ),
    ],
)
def test_bad_encode_options_are_refused_and_nothing_is_written(folder, tmp_path, extra, message):
    np.save(tmp_path / "r.npy", np.zeros((2, 16), np.float32))
    np.save(tmp_path / "wide.npy", np.zeros((2, 20), np.float32))
    np.save(tmp_path / "flat.npy", np.zeros(16, np.float32))
    np.save(tmp_path / "upside-down.npy", np.stack([np.ones(16), np.zeros(16)]).astype(np.float32))
    (tmp_path / "texts.npy").write_text("not an array\n")
    before = sorted(os.listdir(tmp_path))
    output = tmp_path / "out.npy"
    with pytest.raises(SystemExit, match=message):
        main(
            ["encode", str(folder / "model"), str(folder / "queries.txt"), str(output)]
            + [a.format(tmp=tmp_path) for a in extra]
        )
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("command", [["encode", "m", "t.txt", "v.npy"], ["search", "query", "i", "q.txt", "h.jsonl"]])
def test_a_width_is_a_positive_integer(command, capsys):
    with pytest.raises(SystemExit) as stopped:
        main([*command, "--dim", "0"])
    assert stopped.value.code == 2 and "argument --dim: must be at least 1, got 0" in capsys.readouterr().err


def test_int8_to_a_stream_needs_the_ranges_it_cannot_write(folder, tmp_path):
    arguments = ["encode", str(folder / "model"), str(folder / "queries.txt"), os.devnull, "--vector-precision", "int8"]
    with pytest.raises(SystemExit, match="is a stream, and the int8 ranges fitted on the vectors need a file"):
        main(arguments)
    np.save(tmp_path / "r.npy", np.stack([-np.ones(16), np.ones(16)]).astype(np.float32))
    main([*arguments, "--int8-ranges", str(tmp_path / "r.npy")])


# --- similarity and evaluate ---------------------------------------------------------------------


def pair_texts(folder):
    rows = [line.split("\t") for line in lines(folder / "pairs.tsv")]
    return [r[0] for r in rows], [r[1] for r in rows], np.array([float(r[2]) for r in rows])


@pytest.mark.heavy
def test_similarity_at_a_width_scores_the_cut_vectors_without_the_full_width_threshold(folder, tmp_path, capsys):
    texts_a, texts_b, _ = pair_texts(folder)
    main(["similarity", str(folder / "model"), str(folder / "pairs.tsv"), str(tmp_path / "s.tsv"), "--dim", "8"])
    rows = [line.split("\t") for line in lines(tmp_path / "s.tsv")]
    expected = np.sum(cut(full_vectors(folder, texts_a), 8) * cut(full_vectors(folder, texts_b), 8), axis=1)
    assert all(len(row) == 4 for row in rows)  # the line's three fields and the score: no 0/1
    np.testing.assert_allclose([float(row[3]) for row in rows], expected, atol=1e-6)
    assert "no 0/1: the tuned threshold was fitted on full-width cosines" in capsys.readouterr().out
    main(["similarity", str(folder / "model"), texts_a[0], texts_b[0], "--dim", "8"])
    assert capsys.readouterr().out.strip() == f"{expected[0]:.6f}"
    with pytest.raises(SystemExit, match="--decide with --dim 8: .*model's match decision was fitted on the cosines"):
        main(["similarity", str(folder / "model"), texts_a[0], texts_b[0], "--dim", "8", "--decide"])
    with pytest.raises(
        SystemExit, match="--dim 8: .*scorer is an interaction model.*it has no sentence vectors to cut"
    ):
        main(["similarity", str(folder / "scorer"), texts_a[0], texts_b[0], "--dim", "8"])


def test_evaluate_at_a_width_measures_the_cut_vectors_at_the_files_own_threshold(folder, tmp_path, capsys):
    from cosent_tf.calibration import best_threshold

    texts_a, texts_b, labels = pair_texts(folder)
    main(["evaluate", str(folder / "model"), str(folder / "pairs.tsv"), "--dim", "8", "--retrieval"])
    captured = capsys.readouterr()
    metrics = json.loads(captured.out)
    cosines = np.sum(cut(full_vectors(folder, texts_a), 8) * cut(full_vectors(folder, texts_b), 8), axis=1)
    assert metrics["dim"] == 8
    assert metrics["spearman"] == pytest.approx(stats.spearmanr(cosines, labels).correlation, abs=1e-6)
    assert "accuracy" not in metrics and "threshold" not in metrics  # the shipped 0.5 is a full-width one
    threshold, accuracy = best_threshold(cosines, labels)
    assert metrics["decision"]["accuracy_oracle"] == pytest.approx(accuracy)
    assert metrics["decision"]["threshold_oracle"] == pytest.approx(threshold, abs=1e-6)
    assert "the shipped one was fitted on full-width cosines, so not applied" in captured.err
    assert "accuracy: no shipped threshold" in captured.err
    # Retrieval at the width: the corpus and queries cut alike.
    full = json.loads(
        (main(["evaluate", str(folder / "model"), str(folder / "pairs.tsv"), "--retrieval"]), capsys.readouterr())[
            1
        ].out
    )
    assert full["accuracy"] is not None and full["threshold"] == 0.5
    # A threshold given is the user's own, and is applied at the width.
    main(["evaluate", str(folder / "model"), str(folder / "pairs.tsv"), "--dim", "8", "--threshold", "0.9"])
    given = json.loads(capsys.readouterr().out)
    assert given["accuracy"] == pytest.approx(np.mean((cosines > 0.9) == labels))
    with pytest.raises(SystemExit, match="--dim 8: .*scorer is an interaction model"):
        main(["evaluate", str(folder / "scorer"), str(folder / "pairs.tsv"), "--dim", "8"])
    with pytest.raises(SystemExit, match="--reliability with --dim 8: the diagram draws the model's calibration map"):
        main(
            [
                "evaluate",
                str(folder / "model"),
                str(folder / "pairs.tsv"),
                "--dim",
                "8",
                "--reliability",
                str(tmp_path / "r.png"),
            ]
        )


def test_evaluate_retrieval_at_a_width_searches_the_cut_vectors(folder, capsys):
    from cosent_tf.evaluation import pair_retrieval_sets, retrieval_metrics

    texts_a, texts_b, labels = pair_texts(folder)
    main(["evaluate", str(folder / "model"), str(folder / "pairs.tsv"), "--dim", "4", "--retrieval"])
    metrics = json.loads(capsys.readouterr().out)
    queries, corpus, relevant = pair_retrieval_sets(texts_a, texts_b, labels == 1)
    expected = retrieval_metrics(
        cut(full_vectors(folder, queries), 4).astype(np.float32),
        cut(full_vectors(folder, corpus), 4).astype(np.float32),
        relevant,
    )
    # no first text of the file is also a second text: no query's own text to take out
    assert metrics["retrieval"] == pytest.approx({**expected, "own_text_excluded": 0, "own_text_only_left_out": 0})


# --- search --------------------------------------------------------------------------------------


def exact_top_k(query_vectors, corpus_vectors, top_k):
    scores = np.asarray(query_vectors, np.float64) @ np.asarray(corpus_vectors, np.float64).T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :top_k]
    return order, np.take_along_axis(scores, order, axis=1)


def query_hits(path):
    rows = [json.loads(line) for line in lines(path)]
    return (
        np.array([[hit["index"] for hit in row["hits"]] for row in rows]),
        np.array([[hit["score"] for hit in row["hits"]] for row in rows]),
    )


@pytest.fixture(scope="module")
def corpus_index(tmp_path_factory, folder):
    """``corpus_index(precision, kind)``: the folder of the model's index of the corpus, built by
    ``search build`` the first time a test asks for it; the tests only read it."""
    built = {}

    def index_of(precision, kind):
        if (precision, kind) not in built:
            index_dir = tmp_path_factory.mktemp(f"index-{precision}-{kind}") / "index"
            model, corpus = str(folder / "model"), str(folder / "corpus.txt")
            main(["search", "build", model, corpus, str(index_dir), "--vector-precision", precision, "--index", kind])
            built[precision, kind] = index_dir
        return built[precision, kind]

    return index_of


@pytest.mark.parametrize("precision", ["float32", "int8", "binary"])
@pytest.mark.parametrize("kind", ["exact", "hnsw", "ivf"])
def test_every_kind_of_index_may_be_read_by_others(corpus_index, precision, kind):
    # faiss's own writer and the memory-mapped vectors are written past the package's file writer
    assert not kept_from_others(corpus_index(precision, kind))


@pytest.mark.parametrize("precision", ["float32", "int8", "binary"])
@pytest.mark.parametrize("kind", ["exact", "hnsw", "ivf"])
def test_search_over_each_precision_and_kind_finds_the_exact_top_k_when_rescoring_covers_it(
    folder, corpus_index, tmp_path, precision, kind
):
    index_dir = corpus_index(precision, kind)
    index = VectorIndex.load(index_dir)
    assert (index.precision, index.kind, index.dimension, len(index)) == (precision, kind, WIDTH, 150)
    corpus_vectors = full_vectors(folder, lines(folder / "corpus.txt"))
    np.testing.assert_allclose(index.vectors, corpus_vectors, atol=1e-7)
    # 5 hits, 30 times as many candidates: the whole corpus of 150, re-scored exactly.
    rescoring = [] if precision == "float32" and kind == "exact" else ["--rescore-multiplier", "30"]
    main(
        ["search", "query", str(index_dir), str(folder / "queries.txt"), str(tmp_path / "hits.jsonl"), "--top-k", "5"]
        + rescoring
    )
    indices, scores = query_hits(tmp_path / "hits.jsonl")
    expected_indices, expected_scores = exact_top_k(full_vectors(folder, QUERIES), corpus_vectors, 5)
    np.testing.assert_array_equal(indices, expected_indices)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)


@pytest.mark.heavy
def test_search_build_at_a_width_and_query_at_the_index_width(folder, tmp_path, capsys):
    index_dir = tmp_path / "index"
    main(
        [
            "search",
            "build",
            str(folder / "model"),
            str(folder / "corpus.txt"),
            str(index_dir),
            "--dim",
            "8",
            "--vector-precision",
            "binary",
        ]
    )
    out = capsys.readouterr().out
    assert "150 vectors of dimension 8" in out and "sign bits, exact search, hits re-scored" in out
    index = VectorIndex.load(index_dir)
    corpus_vectors = cut(full_vectors(folder, lines(folder / "corpus.txt")), 8)
    np.testing.assert_allclose(index.vectors, corpus_vectors, atol=1e-6)
    hits = tmp_path / "hits.jsonl"
    main(["search", "query", str(index_dir), str(folder / "queries.txt"), str(hits), "--rescore-multiplier", "15"])
    indices, scores = query_hits(hits)
    expected_indices, expected_scores = exact_top_k(cut(full_vectors(folder, QUERIES), 8), corpus_vectors, 10)
    np.testing.assert_array_equal(indices, expected_indices)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)
    assert "binary" not in out and "15 times the hits asked for" in capsys.readouterr().out
    main(["search", "query", str(index_dir), str(folder / "queries.txt"), str(hits), "--dim", "8", "--overwrite"])
    with pytest.raises(SystemExit, match="--dim 16: .*index holds vectors of 8 dimensions; query it without --dim"):
        main(
            ["search", "query", str(index_dir), str(folder / "queries.txt"), str(tmp_path / "h2.jsonl"), "--dim", "16"]
        )
    assert not os.path.exists(tmp_path / "h2.jsonl")


@pytest.mark.heavy
def test_ann_settings_reach_the_index_and_its_search(folder, tmp_path, monkeypatch):
    arguments = ["search", "build", str(folder / "model"), str(folder / "corpus.txt")]
    main([*arguments, str(tmp_path / "hnsw"), "--index", "hnsw", "--hnsw-m", "8", "--ef-construction", "20"])
    assert VectorIndex.load(tmp_path / "hnsw").ann_settings == {"m": 8, "ef_construction": 20, "ef_search": 64}
    assert VectorIndex.load(tmp_path / "hnsw").ann.hnsw.efConstruction == 20  # faiss's own record
    main([*arguments, str(tmp_path / "ivf"), "--index", "ivf", "--nlist", "3", "--nprobe", "2"])
    assert VectorIndex.load(tmp_path / "ivf").ann.nlist == 3
    assert VectorIndex.load(tmp_path / "ivf").ann_settings == {"nlist": 3, "nprobe": 2}
    searched = []
    search = VectorIndex.search

    def spy(self, query_vectors, top_k=10, **settings):
        searched.append(settings)
        return search(self, query_vectors, top_k, **settings)

    monkeypatch.setattr(VectorIndex, "search", spy)
    query = ["search", "query", "{index}", str(folder / "queries.txt"), str(tmp_path / "hits.jsonl"), "--overwrite"]
    main([a.format(index=tmp_path / "hnsw") for a in query] + ["--ef-search", "99"])
    main([a.format(index=tmp_path / "ivf") for a in query] + ["--nprobe", "3", "--rescore-multiplier", "2"])
    assert searched == [
        {"rescore_multiplier": None, "ef_search": 99, "nprobe": None},
        {"rescore_multiplier": 2, "ef_search": None, "nprobe": 3},
    ]
    with pytest.raises(SystemExit, match="--nprobe is a setting of an ivf index, and this index is hnsw: drop it"):
        main([a.format(index=tmp_path / "hnsw") for a in query] + ["--nprobe", "3"])
    with pytest.raises(
        SystemExit, match="--hnsw-m is a setting of an hnsw index, and this index is exact: drop it, or"
    ):
        main([*arguments, str(tmp_path / "exact"), "--index", "exact", "--hnsw-m", "8"])
    assert not os.path.exists(tmp_path / "exact")


def test_rescoring_an_exact_float32_index_is_refused(folder, tmp_path):
    main(["search", "build", str(folder / "model"), str(folder / "queries.txt"), str(tmp_path / "index")])
    assert VectorIndex.load(tmp_path / "index").kind == "exact"  # chosen by size
    with pytest.raises(SystemExit, match="--rescore-multiplier: .*index is searched exactly over float32 vectors"):
        main(
            [
                "search",
                "query",
                str(tmp_path / "index"),
                str(folder / "queries.txt"),
                str(tmp_path / "hits.jsonl"),
                "--rescore-multiplier",
                "2",
            ]
        )
    assert not os.path.exists(tmp_path / "hits.jsonl")


def test_mine_still_searches_a_float32_index(folder, corpus_index, tmp_path):
    corpus = lines(folder / "corpus.txt")
    (tmp_path / "pairs.tsv").write_text("".join(f"{corpus[i]}\t{corpus[i + 1]}\n" for i in range(0, 20, 2)))
    # the search tests' exact float32 index: the kind --index leaves unsaid for 150 vectors (the
    # refusal test below shows that choice)
    index_dir = corpus_index("float32", "exact")
    main(
        [
            "mine",
            "--data",
            str(tmp_path / "pairs.tsv"),
            "--model",
            str(folder / "model"),
            "--corpus",
            str(index_dir),
            "--output",
            str(tmp_path / "mined.jsonl"),
            "--range",
            "2-6",
        ]
    )
    rows = [json.loads(line) for line in lines(tmp_path / "mined.jsonl")]
    assert rows and all(row["neg"] for row in rows)


# --- search build --from-index ------------------------------------------------------------------


def no_model_loaded(monkeypatch):
    """Make loading a model an error: --from-index must build from the earlier index's vectors alone."""

    def refuse(*args, **kwargs):
        raise AssertionError("search build --from-index loaded a model")

    monkeypatch.setattr(SentenceEncoder, "load", refuse)


def build_from(folder, earlier, index_dir, *extra, corpus="corpus.txt", model="model"):
    main(
        ["search", "build", str(folder / model), str(folder / corpus), str(index_dir), "--from-index", str(earlier)]
        + list(extra)
    )


def description(index_dir):
    """index.json without the paths, which name each index's own place."""
    with open(index_dir / "index.json", encoding="utf-8") as f:
        info = json.load(f)
    return {key: value for key, value in info.items() if key not in ("model_dir_from_index",)}


def same_hits(folder, first, second, dim=None, atol=0.0, **searched):
    """The two indexes find the same hits for the queries (their vectors, cut to ``dim``), the scores
    within ``atol``."""
    queries = full_vectors(folder, QUERIES)
    queries = queries if dim is None else cut(queries, dim).astype(np.float32)
    (first_scores, first_rows), (second_scores, second_rows) = (
        VectorIndex.load(index_dir).search(queries, 5, **searched) for index_dir in (first, second)
    )
    np.testing.assert_array_equal(first_rows, second_rows)
    np.testing.assert_allclose(first_scores, second_scores, rtol=0, atol=atol)


@pytest.mark.heavy
@pytest.mark.parametrize(
    "earlier, wanted",
    [(("float32", "exact"), ("int8", "hnsw")), (("binary", "hnsw"), ("float32", "exact"))],
)
def test_an_index_built_from_another_is_the_index_encoding_builds(
    folder, corpus_index, tmp_path, monkeypatch, capsys, earlier, wanted
):
    encoded, source = corpus_index(*wanted), corpus_index(*earlier)  # each built by encoding the corpus
    index_dir = tmp_path / "index"
    with monkeypatch.context() as patch:
        no_model_loaded(patch)
        build_from(folder, source, index_dir, "--vector-precision", wanted[0], "--index", wanted[1])
    described = {"float32": "float32", "int8": "int8 codes", "binary": "sign bits"}[wanted[0]]
    kind = {"exact": "exact search", "hnsw": "an HNSW graph"}[wanted[1]]
    rescored = "" if wanted == ("float32", "exact") else ", hits re-scored by float32 vectors"
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"{index_dir}: 150 vectors of dimension {WIDTH} from the vectors of {source} (no encoding), "
        f"{described}, {kind}{rescored}"
    )
    built, expected = VectorIndex.load(index_dir), VectorIndex.load(encoded)
    np.testing.assert_array_equal(built.vectors, expected.vectors)
    for codes in ("codes", "ranges"):
        if getattr(expected, codes) is None:
            assert getattr(built, codes) is None
        else:
            np.testing.assert_array_equal(getattr(built, codes), getattr(expected, codes))
    assert built.texts == expected.texts
    # the same model, fingerprint, width, precision, kind and settings
    assert description(index_dir) == description(encoded)
    # an approximate structure's threads may link a graph another way each build: its candidates are
    # the whole corpus here, re-scored
    same_hits(folder, index_dir, encoded, **({} if wanted[1] == "exact" else {"rescore_multiplier": 30}))


@pytest.mark.heavy
def test_an_index_built_from_another_at_a_width_is_the_index_encoding_at_it_builds(
    folder, corpus_index, tmp_path, monkeypatch, capsys
):
    model, corpus = str(folder / "model"), str(folder / "corpus.txt")
    earlier = corpus_index("float32", "exact")
    main(["search", "build", model, corpus, str(tmp_path / "encoded"), "--dim", "8", "--vector-precision", "binary"])
    warning = f"--dim 8: {model} was trained for its full width 16 only"
    assert warning in capsys.readouterr().err
    with monkeypatch.context() as patch:
        no_model_loaded(patch)
        cut_index = tmp_path / "cut"
        build_from(folder, earlier, cut_index, "--dim", "8", "--vector-precision", "binary")
        captured = capsys.readouterr()
        assert warning in captured.err  # check_dim's warning, as encoding at the width gives it
        assert f"{cut_index}: 150 vectors of dimension 8 from the vectors of " in captured.out
        # an index at a width, rebuilt without --dim: its own width, its vectors as they are
        build_from(folder, cut_index, tmp_path / "again", "--index", "hnsw")
        assert "--dim" not in capsys.readouterr().err
    built, encoded = VectorIndex.load(cut_index), VectorIndex.load(tmp_path / "encoded")
    assert (built.dimension, built.model_width) == (encoded.dimension, encoded.model_width) == (8, WIDTH)
    # the unit vectors cut and renormalised, where encoding cut the model's raw vectors: a float32 rounding apart
    np.testing.assert_allclose(built.vectors, encoded.vectors, rtol=0, atol=2.5e-7)
    np.testing.assert_allclose(built.vectors, cut(full_vectors(folder, lines(folder / "corpus.txt")), 8), atol=1e-6)
    np.testing.assert_array_equal(built.codes, encoded.codes)
    assert description(cut_index) == description(tmp_path / "encoded")
    same_hits(folder, cut_index, tmp_path / "encoded", dim=8, atol=1e-6, rescore_multiplier=30)
    again = VectorIndex.load(tmp_path / "again")
    assert (again.dimension, again.kind, again.precision) == (8, "hnsw", "float32")
    np.testing.assert_array_equal(again.vectors, built.vectors)
    with pytest.raises(
        SystemExit,
        match=re.escape(
            f"--dim 16: {cut_index} holds vectors of 8 dimensions (cut from the model's 16), and a cut keeps at most "
            "those: ask for at most 8, or leave --from-index out to encode the corpus at that width"
        ),
    ):
        build_from(folder, cut_index, tmp_path / "wider", "--dim", "16")
    assert not os.path.exists(tmp_path / "wider")


def _edited_corpus(folder, tmp_path, change):
    texts = lines(folder / "corpus.txt")
    change(texts)
    (tmp_path / "corpus.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    return tmp_path / "corpus.txt"


def _other_weights(folder, earlier, tmp_path):
    """A copy of the index whose recorded weights are not the model's: the model retrained since."""
    copy = shutil.copytree(earlier, tmp_path / "retrained")
    info = json.loads((copy / "index.json").read_text(encoding="utf-8"))
    info["model_fingerprint"] = "sha256:" + "0" * 64
    (copy / "index.json").write_text(json.dumps(info), encoding="utf-8")
    return copy


# Each refusal of --from-index: the arguments after MODEL_DIR (given the corpus's folder, the earlier
# index and the test's folder), and the message.
FROM_INDEX_REFUSALS = {
    "another corpus": (
        lambda root, earlier, tmp: [
            _edited_corpus(root, tmp, lambda texts: texts.__setitem__(6, "改了")),
            tmp / "index",
            "--from-index",
            earlier,
        ],
        lambda root, earlier, tmp: (
            f"{tmp / 'corpus.txt'}, line 7: '改了' differs from {earlier}'s text 7 "
            f"({lines(root / 'corpus.txt')[6]!r}): give the corpus {earlier} was built from, or leave --from-index "
            "out to encode this one"
        ),
    ),
    "a longer corpus": (
        lambda root, earlier, tmp: [
            _edited_corpus(root, tmp, lambda texts: texts.append("多一行")),
            tmp / "index",
            "--from-index",
            earlier,
        ],
        lambda root, earlier, tmp: (
            f"{tmp / 'corpus.txt'}: has 151 lines, but {earlier} holds 150 texts (its first 150 are these lines): "
            f"give the corpus {earlier} was built from, or leave --from-index out to encode this one"
        ),
    ),
    "the model retrained": (
        lambda root, earlier, tmp: [
            root / "corpus.txt",
            tmp / "index",
            "--from-index",
            _other_weights(root, earlier, tmp),
        ],
        lambda root, earlier, tmp: (
            f"{tmp / 'retrained'}: the model {root / 'model'} does not have the weights that built the index "
            "(retrained or replaced since: its weights fingerprint is not the recorded one); its vectors cannot be "
            f"compared with the index's: pass the model that built {tmp / 'retrained'}, or leave --from-index out to "
            "encode the corpus"
        ),
    ),
    "--dim above its width": (
        lambda root, earlier, tmp: [root / "corpus.txt", tmp / "index", "--from-index", earlier, "--dim", "17"],
        lambda root, earlier, tmp: (
            f"--dim 17: {earlier} holds vectors of 16 dimensions, and a cut keeps at most those: ask for at most 16, "
            "or leave --from-index out to encode the corpus at that width"
        ),
    ),
    "with --parts": (
        lambda root, earlier, tmp: [
            root / "corpus.txt",
            tmp / "index",
            "--from-index",
            earlier,
            "--parts",
            tmp / "part-0.npy",
        ],
        lambda root, earlier, tmp: (
            "--parts and --from-index: an index is built from the parts of encode --shard or from the vectors of an "
            "earlier index, not both; give one"
        ),
    ),
    "with --strategy": (
        lambda root, earlier, tmp: [
            root / "corpus.txt",
            tmp / "index",
            "--from-index",
            earlier,
            "--strategy",
            "mirrored",
        ],
        lambda root, earlier, tmp: (
            "--strategy mirrored encodes on several devices, but --from-index builds the index from vectors encoded "
            "already: drop --strategy"
        ),
    ),
    "with --precision": (
        lambda root, earlier, tmp: [root / "corpus.txt", tmp / "index", "--from-index", earlier, "--precision", "bf16"],
        lambda root, earlier, tmp: (
            "--precision bf16 is what the model computes in, but --from-index runs no model: drop it "
            "(--vector-precision says how the index stores its vectors)"
        ),
    ),
    "into itself": (
        lambda root, earlier, tmp: [root / "corpus.txt", earlier, "--from-index", earlier, "--overwrite"],
        lambda root, earlier, tmp: (
            f"{earlier}: the output folder would lie inside the input {earlier}; choose an output folder apart from "
            "the inputs"
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(FROM_INDEX_REFUSALS))
def test_an_index_that_does_not_fit_is_refused_before_anything_is_written(
    folder, corpus_index, tmp_path, monkeypatch, case
):
    arguments, message = FROM_INDEX_REFUSALS[case]
    earlier = corpus_index("float32", "exact")
    given = arguments(folder, earlier, tmp_path)
    before = {name: (earlier / name).read_bytes() for name in os.listdir(earlier)}
    no_model_loaded(monkeypatch)
    with pytest.raises(SystemExit) as stopped:
        main(["search", "build", str(folder / "model"), *map(str, given)])
    assert str(stopped.value) == f"error: {message(folder, earlier, tmp_path)}"
    assert not os.path.exists(tmp_path / "index")
    assert {name: (earlier / name).read_bytes() for name in os.listdir(earlier)} == before


def test_an_index_of_another_model_is_refused(folder, corpus_index, tmp_path, monkeypatch):
    earlier = corpus_index("float32", "exact")
    no_model_loaded(monkeypatch)
    with pytest.raises(SystemExit) as stopped:
        build_from(folder, earlier, tmp_path / "index", model="matryoshka")
    assert str(stopped.value) == (
        f"error: {earlier}: the index was built with the model {folder / 'model'}, not {folder / 'matryoshka'}; its "
        f"vectors cannot be compared with another model's: pass the model that built {earlier}, or leave "
        "--from-index out to encode the corpus"
    )
    assert not os.path.exists(tmp_path / "index")


# --- export --------------------------------------------------------------------------------------


@pytest.mark.parametrize("export_format", ["savedmodel", "hf", "onnx"])
def test_export_passes_its_width_to_the_export(folder, tmp_path, monkeypatch, export_format):
    from cosent_tf.export import huggingface, onnx_export, savedmodel

    received = {}

    def record(name, result):
        def export(*args, **kwargs):
            received[name] = kwargs.get("dim")
            return result

        return export

    monkeypatch.setattr(savedmodel, "export_saved_model", record("savedmodel", ["serving_default"]))
    monkeypatch.setattr(huggingface, "export_hf", record("hf", "sentence-transformers"))
    monkeypatch.setattr(
        onnx_export, "export_onnx", record("onnx", onnx_export.OnnxExport("hf", {"onnx/model.onnx": "float32"}))
    )
    main(["export", str(folder / "model"), str(tmp_path / "out"), "--format", export_format, "--dim", "8"])
    assert received == {export_format: 8}
