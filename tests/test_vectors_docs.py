"""The guide's section on smaller vectors (docs/guide.md, 'Smaller vectors and search past exact') and
the README's quickstart of it, run as they are written.

Every line of their ``sh`` blocks runs, in order, in a folder laid out like a clone: ``cosent-tf``
lines in this process, the others (``cut``, ``sort``) by bash. The guide's block reads BQ from
``../shared/data``, which here holds tiny made-up BQ files and a made-up vocabulary of the shared
one's size, so its commands train a random BERT of the small random BERT's 312 dimensions for a
few steps; the README's reads ``pairs.tsv``, ``sentences.txt``, ``corpus.txt`` and ``queries.txt``
made here. Where the commands name no model, they train the bundled small random config; here that
default is a lighter config of the same width and vocabulary (one layer, a narrow feed-forward
block: ``LIGHT_312``), since nothing checked depends on the model's depth: the pages' figures are
matched as numbers, and their widths (312, 128, 64, 32) are the model's width and the options.
That made the sections' commands (about 15 model loads, their first encodes, a training run,
two exports) about three times cheaper than on the L4/H312 model.
What the commands write is checked against computations made here: NumPy's truncation,
quantisation and brute-force search, the model folder's own vectors, and sentence-transformers
(in .venv-reference) on the export at a width.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess

import numpy as np
import pytest

from cosent_tf.cli import main as cosent_tf
from tests.helpers import distinct_texts, reference_python, tiny_pairs, write_config, write_vocab
from tests.test_serving_docs import blocks, read_page, section

GUIDE_HEADING = "## Smaller vectors and search past exact"
README_HEADING = "## Quickstart: smaller vectors and approximate search"
GUIDE = section(read_page("docs/guide.md"), GUIDE_HEADING)
README = section(read_page("README.md"), README_HEADING)
TOLERANCE = 1e-5
BQ = os.path.join("..", "shared", "data", "senteval_cn", "BQ")
# The tiny BQ files: enough test pairs that a query's candidates (4 x top 10) are a part of the corpus
# (test_the_binary_index_returns_exact_search_over_its_candidates checks it), and no more, as every
# command of the section encodes the test file's texts.
BQ_PAIRS = {"train": 200, "valid": 40, "test": 200}


# The small random BERT's width, heads and vocabulary (cosent_tf/configs/bert-small-random.json),
# one layer instead of four and a feed-forward block of 64 instead of 1248.
LIGHT_312 = dict(
    vocab_size=21128,
    hidden=312,
    layers=1,
    heads=12,
    intermediate=64,
    max_position=512,
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    initializer_range=0.02,
)


def lines_of(text):
    """The lines of ``text``'s sh blocks, a line continued by ``\\`` joined to the next, without
    comments and blank lines."""
    found = []
    for block in blocks(text, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                found.append(line)
    return found


def commands(text):
    """The ``cosent-tf`` lines of ``text``'s sh blocks, each as its arguments (comments dropped)."""
    return [shlex.split(line, comments=True)[1:] for line in lines_of(text) if line.startswith("cosent-tf ")]


def run_lines(text, folder):
    """Run the lines of ``text``'s sh blocks in ``folder``, in order; {the command line: (stdout,
    stderr)} for the cosent-tf lines. A command that names no model trains ``LIGHT_312``, written
    beside ``folder``, in place of the bundled small random config."""
    from cosent_tf.models import sources

    with open(sources.SMALL_RANDOM_CONFIG, encoding="utf-8") as f:
        bundled = json.load(f)
    # the width and vocabulary the pages' commands and this module's data are for
    assert (bundled["hidden_size"], bundled["vocab_size"]) == (LIGHT_312["hidden"], LIGHT_312["vocab_size"])
    light = write_config(folder.parent / "light-312.json", **LIGHT_312)
    printed = {}
    with contextlib.chdir(folder), pytest.MonkeyPatch.context() as patch:
        patch.setattr(sources, "SMALL_RANDOM_CONFIG", str(light))
        for line in lines_of(text):
            if not line.startswith("cosent-tf "):
                # a shell line (cut, sort, a pipe): run by a shell, as the page's reader runs it
                subprocess.run(["bash", "-c", line], check=True)
                continue
            args = shlex.split(line, comments=True)[1:]
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = cosent_tf(args)
            assert status in (None, 0), f"cosent-tf {shlex.join(args)}: exit status {status}\n{err.getvalue()}"
            printed[shlex.join(args)] = (out.getvalue(), err.getvalue())
    return printed


def said(printed, *words):
    """What the one command line holding every one of ``words`` printed: (stdout, stderr)."""
    (found,) = [out for line, out in printed.items() if all(word in shlex.split(line) for word in words)]
    return found


def write_pairs(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{a}\t{b}\t{label}\n" for a, b, label in rows), encoding="utf-8")


def lay_out_shared_data(root):
    """``root/shared/data`` as the guide's commands read it: tiny BQ files, and a vocabulary of the
    shared one's size (the small random BERT's config names 21128 tokens)."""
    rng = np.random.default_rng(0)
    for split, count in BQ_PAIRS.items():
        write_pairs(root / "shared" / "data" / "senteval_cn" / "BQ" / f"BQ.{split}.data", tiny_pairs(rng, count, False))
    (root / "shared" / "data" / "vocab").mkdir(parents=True)
    write_vocab(root / "shared" / "data" / "vocab" / "bert-base-chinese-vocab.txt")


@pytest.fixture(scope="module")
def guide_clone(tmp_path_factory):
    """A clone where the guide section's lines have run: (its folder, what each command printed)."""
    root = tmp_path_factory.mktemp("vectors-guide")
    lay_out_shared_data(root)
    (root / "clone").mkdir()
    return root / "clone", run_lines(GUIDE, root / "clone")


@pytest.fixture(scope="module")
def readme_clone(tmp_path_factory):
    """A clone where the README quickstart's lines have run: (its folder, what each command printed)."""
    root = tmp_path_factory.mktemp("vectors-readme")
    lay_out_shared_data(root)
    clone = root / "clone"
    write_pairs(clone / "pairs.tsv", tiny_pairs(np.random.default_rng(1), 200, False))
    texts = distinct_texts(2, 260)
    (clone / "sentences.txt").write_text("\n".join(texts[:20]) + "\n", encoding="utf-8")
    (clone / "corpus.txt").write_text("\n".join(texts[20:220]) + "\n", encoding="utf-8")
    (clone / "queries.txt").write_text("\n".join(texts[220:]) + "\n", encoding="utf-8")
    return clone, run_lines(README, clone)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


_VECTORS = {}


def vectors_of(model, texts):
    """The model folder's own full vectors of ``texts``, computed once per list: several tests check
    files against the same corpus and queries, and loading the 312-wide model costs more than
    encoding them. One list is one call, as the commands encode a file."""
    from cosent_tf import SentenceEncoder

    key = (str(model), tuple(texts))
    if key not in _VECTORS:
        _VECTORS[key] = SentenceEncoder.load(str(model)).encode(list(texts))
        _VECTORS[key].setflags(write=False)
    return _VECTORS[key]


def cut(vectors, dim):
    """The first ``dim`` dimensions of each row, renormalised: computed here, not by cosent_tf."""
    vectors = np.asarray(vectors, np.float64)[:, :dim]
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_the_section_shows_each_step_the_issue_asks_for():
    """The lines these tests run are there: a failure here means a page changed, not the code."""
    guide = commands(GUIDE)
    assert any(args[0] == "train" and "--matryoshka-dims" in args for args in guide)
    assert any(args[0] == "encode" and {"--dim", "128"} <= set(args) for args in guide)
    for precision in ("int8", "binary"):
        assert any(args[0] == "encode" and precision in args for args in guide)
    assert any(args[:2] == ["search", "build"] and {"--dim", "binary"} <= set(args) for args in guide)
    assert any(args[:2] == ["search", "query"] and "--rescore-multiplier" in args for args in guide)
    assert any(args[:2] == ["search", "build"] and "--parts" in args for args in guide)
    assert any(args[:2] == ["search", "build"] and {"--from-index", "--dim"} <= set(args) for args in guide)
    assert any("--shard" in args for args in guide) and any("mirrored" in args for args in guide)
    assert any(args[0] == "export" and "--dim" in args for args in guide)
    readme = commands(README)
    assert 3 <= len(lines_of(README)) <= 6
    assert [args[0] for args in readme] == ["train", "encode", "search", "search"]
    assert "docs/guide.md#smaller-vectors-and-search-past-exact" in README


def test_the_table_of_sizes_is_arithmetic():
    table = GUIDE[GUIDE.index("| width | float32 | int8 | binary |") :].split("\n\n")[0]
    rows = [line.strip("|").split("|") for line in table.splitlines()[2:]]
    assert rows
    for width, float32, int8, binary in ([int(cell) for cell in row] for row in rows):
        assert (float32, int8, binary) == (4 * width, width, -(-width // 8))


# Output lines in the guide stand for what varies with the data (counts, figures) by their numbers,
# and for what they leave out by "..." and "/.../".
NUMBER = r"-?\d+(?:\.\d+)?(?:e-?\d+)?"


def output_pattern(shown):
    parts = re.split(r"(/\.\.\./|\.\.\.|-?\d+(?:\.\d+)?)", shown)
    return "".join(
        ".*" if part in ("...", "/.../") else NUMBER if re.fullmatch(r"-?\d+(?:\.\d+)?", part) else re.escape(part)
        for part in parts
    )


def shown_outputs(text):
    """(the cosent-tf command line, the output lines the page shows under it) for each command of
    ``text``'s sh blocks that has some: the comment lines right after it."""
    found = []
    for block in blocks(text, "sh"):
        command = None
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith("cosent-tf "):
                command = shlex.join(shlex.split(line, comments=True)[1:])
            elif line.startswith("# ") and command is not None:
                found.append((command, line[2:]))
            else:
                command = None
    return found


@pytest.mark.slow
def test_what_the_guide_shows_under_each_command_is_what_it_prints(guide_clone):
    _, printed = guide_clone
    shown = shown_outputs(GUIDE)
    assert len(shown) >= 12
    for command, line in shown:
        out, err = printed[command]
        texts = [out, err]
        with contextlib.suppress(ValueError):
            texts.append(json.dumps(json.loads(out)))  # a JSON result, as one line
        assert any(re.search(output_pattern(line), text) for text in texts), f"{command}\nshows: {line}\n{out}{err}"


@pytest.mark.slow
def test_the_matryoshka_run_records_its_widths_and_evaluates_at_128(guide_clone):
    from scipy.stats import spearmanr

    clone, printed = guide_clone
    with open(clone / "runs" / "mat-bq" / "model" / "cosent_model.json", encoding="utf-8") as f:
        assert json.load(f)["matryoshka_dims"] == [312, 128, 64, 32]
    out, _ = said(printed, "evaluate", "--dim")
    metrics = json.loads(out)
    assert metrics["dim"] == 128 and "accuracy" not in metrics  # no threshold fitted at full width
    rows = [line.split("\t") for line in read_lines(os.path.join(clone, BQ, "BQ.test.data"))]
    model = clone / "runs" / "mat-bq" / "model"
    firsts, seconds = (cut(vectors_of(model, [row[i] for row in rows]), 128) for i in (0, 1))
    expected = spearmanr((firsts * seconds).sum(axis=1), [float(row[2]) for row in rows]).statistic
    # a random model's cosines lie close together, so a rounding difference may swap a few ranks
    assert metrics["spearman"] == pytest.approx(expected, abs=2e-3)


@pytest.mark.slow
def test_another_width_is_warned_about_in_the_words_the_guide_quotes(guide_clone, capsys):
    clone, _ = guide_clone
    quote = re.search(r"`(--dim 100: .*?)`", GUIDE, flags=re.DOTALL).group(1)
    with contextlib.chdir(clone):
        assert cosent_tf(["encode", "runs/mat-bq/model", "corpus.txt", "width-100.npy", "--dim", "100"]) in (None, 0)
    assert re.search(output_pattern(" ".join(quote.split())), capsys.readouterr().err)
    assert np.load(clone / "width-100.npy").shape[1] == 100


def ranges_and_steps(vectors):
    low, high = vectors.min(axis=0), vectors.max(axis=0)
    return low, high, (high - low) / 255


@pytest.mark.slow
def test_the_encoded_files_are_the_cut_vectors_in_each_precision(guide_clone):
    clone, _ = guide_clone
    model = clone / "runs" / "mat-bq" / "model"
    corpus = cut(vectors_of(model, read_lines(clone / "corpus.txt")), 128)
    written = np.load(clone / "corpus-128.npy")
    assert written.dtype == np.float32
    np.testing.assert_allclose(written, corpus, atol=TOLERANCE)

    # int8: each dimension's 256 steps between its minimum and maximum over the file's vectors
    low, high, step = ranges_and_steps(corpus)
    ranges = np.load(clone / "corpus-128-int8.ranges.npy")
    np.testing.assert_allclose(ranges, np.stack([low, high]), atol=TOLERANCE)
    codes = np.load(clone / "corpus-128-int8.npy")
    assert codes.dtype == np.int8 and codes.shape == corpus.shape
    assert np.all(np.abs(low + (codes.astype(np.float64) + 128) * step - corpus) <= step / 2 + TOLERANCE)

    # queries quantised in the corpus's ranges (clipped to them), which their own ranges file repeats
    queries = cut(vectors_of(model, read_lines(clone / "queries.txt")), 128)
    np.testing.assert_array_equal(np.load(clone / "queries-128-int8.ranges.npy"), ranges)
    query_codes = np.load(clone / "queries-128-int8.npy").astype(np.float64)
    clipped = np.clip(queries, ranges[0], ranges[1])
    assert np.all(np.abs(ranges[0] + (query_codes + 128) * step - clipped) <= step / 2 + TOLERANCE)

    # binary: the sign bits, first dimension highest, 16 bytes a vector (a value within rounding
    # of 0 may fall either way)
    bits = np.load(clone / "corpus-128-bits.npy")
    assert bits.dtype == np.uint8 and bits.shape == (len(corpus), 16)
    sure = np.abs(corpus) > TOLERANCE
    np.testing.assert_array_equal(np.unpackbits(bits, axis=1)[sure], (corpus > 0)[sure])


def read_hits(path, corpus_texts):
    """Each query's hits as (corpus rows, scores)."""
    row_of = {text: row for row, text in enumerate(corpus_texts)}
    found = []
    for line in read_lines(path):
        hits = json.loads(line)["hits"]
        found.append((np.array([row_of[hit["text"]] for hit in hits]), np.array([hit["score"] for hit in hits])))
    return found


@pytest.mark.slow
def test_the_binary_index_returns_exact_search_over_its_candidates(guide_clone):
    """The two stages, computed here: the 4 x 10 candidates nearest by Hamming distance, re-scored
    by exact cosine. Hamming ties make the candidates' edge uncertain, so each query checks that
    every hit could be a candidate, and that every exact top-10 row that must be one is a hit."""
    clone, printed = guide_clone
    index_dir = clone / "runs" / "mat-bq-index"
    with open(index_dir / "index.json", encoding="utf-8") as f:
        info = json.load(f)
    assert (info["dimension"], info["precision"], info["kind"]) == (128, "binary", "exact")
    corpus_vectors = np.load(clone / "corpus-128.npy").astype(np.float64)
    np.testing.assert_allclose(np.load(index_dir / "vectors.npy"), corpus_vectors, atol=TOLERANCE)
    np.testing.assert_array_equal(np.load(index_dir / "codes.npy"), np.load(clone / "corpus-128-bits.npy"))

    queries = cut(vectors_of(clone / "runs" / "mat-bq" / "model", read_lines(clone / "queries.txt")), 128)
    corpus_bits = np.unpackbits(np.load(index_dir / "codes.npy"), axis=1).astype(bool)
    cosines = queries @ corpus_vectors.T
    top_k, candidates = 10, 4 * 10
    assert len(corpus_vectors) > 2 * candidates  # the first stage leaves rows out
    hits = read_hits(clone / "hits.jsonl", read_lines(clone / "corpus.txt"))
    assert len(hits) == len(queries)
    for query, scores_row, (rows, scores) in zip(queries, cosines, hits, strict=True):
        assert len(rows) == top_k
        np.testing.assert_allclose(scores, scores_row[rows], atol=TOLERANCE)
        assert np.all(np.diff(scores) <= TOLERANCE)
        unsure = int((np.abs(query) <= TOLERANCE).sum())  # bits of the query that rounding may flip
        distance = ((query > 0)[None, :] != corpus_bits).sum(axis=1)
        for row in rows:  # a hit is a row that may be among the candidates
            assert (distance < distance[row] - 2 * unsure).sum() < candidates
        order = np.argsort(-scores_row, kind="stable")
        tenth_best_margin = scores_row[order[top_k - 1]] - scores_row[order[top_k]]
        for row in order[:top_k]:
            surely_candidate = (distance <= distance[row] + 2 * unsure).sum() - 1 < candidates
            if surely_candidate and tenth_best_margin > TOLERANCE:
                assert row in rows


def check_hits_are_exact_cosines(hits, corpus_vectors, queries, top_k=10):
    """Each query's hits (:func:`read_hits`): ``top_k`` corpus rows, each with its exact cosine, best first."""
    assert len(hits) == len(queries)
    for query, (rows, scores) in zip(queries, hits, strict=True):
        assert len(rows) == top_k == len(set(rows.tolist()))
        np.testing.assert_allclose(scores, corpus_vectors[rows] @ query, atol=TOLERANCE)
        assert np.all(np.diff(scores) <= TOLERANCE)


@pytest.mark.slow
def test_the_hnsw_index_holds_a_graph_of_the_same_vectors(guide_clone):
    clone, _ = guide_clone
    index_dir = clone / "runs" / "mat-bq-hnsw"
    with open(index_dir / "index.json", encoding="utf-8") as f:
        info = json.load(f)
    assert (info["dimension"], info["precision"], info["kind"]) == (128, "binary", "hnsw")
    assert os.path.getsize(index_dir / "ann.faiss") > 0
    corpus_vectors = np.load(clone / "corpus-128.npy").astype(np.float64)
    np.testing.assert_allclose(np.load(index_dir / "vectors.npy"), corpus_vectors, atol=TOLERANCE)
    queries = cut(vectors_of(clone / "runs" / "mat-bq" / "model", read_lines(clone / "queries.txt")), 128)
    corpus_texts = read_lines(clone / "corpus.txt")
    check_hits_are_exact_cosines(read_hits(clone / "hits-hnsw.jsonl", corpus_texts), corpus_vectors, queries)


@pytest.mark.slow
def test_the_indexes_from_another_index_hold_its_vectors(guide_clone):
    clone, _ = guide_clone
    earlier = np.load(clone / "runs" / "mat-bq-index" / "vectors.npy")
    for name, precision, dim in (("mat-bq-int8", "int8", 128), ("mat-bq-64", "float32", 64)):
        with open(clone / "runs" / name / "index.json", encoding="utf-8") as f:
            info = json.load(f)
        assert (info["dimension"], info["precision"], info["model_width"]) == (dim, precision, 312)
    np.testing.assert_array_equal(np.load(clone / "runs" / "mat-bq-int8" / "vectors.npy"), earlier)
    np.testing.assert_allclose(np.load(clone / "runs" / "mat-bq-64" / "vectors.npy"), cut(earlier, 64), atol=TOLERANCE)


@pytest.mark.slow
def test_the_shards_make_the_index_one_build_makes(guide_clone):
    import hashlib

    clone, _ = guide_clone
    corpus = read_lines(clone / "corpus.txt")
    digest = hashlib.sha256((clone / "corpus.txt").read_bytes()).hexdigest()
    first = 0
    for shard in (0, 1):
        with open(clone / f"part-{shard}.part.json", encoding="utf-8") as f:
            record = json.load(f)
        lines = (shard + 1) * len(corpus) // 2 - first
        assert (record["shard"], record["shards"], record["first_line"], record["lines"]) == (shard, 2, first, lines)
        assert record["dim"] == 128 and record["texts_sha256"].endswith(digest)
        whole = np.load(clone / "corpus-128.npy")[first : first + lines]
        np.testing.assert_allclose(np.load(clone / f"part-{shard}.npy"), whole, atol=TOLERANCE)
        first += lines
    one, parts = clone / "runs" / "mat-bq-index", clone / "runs" / "mat-bq-parts"
    np.testing.assert_allclose(np.load(parts / "vectors.npy"), np.load(one / "vectors.npy"), atol=TOLERANCE)
    np.testing.assert_array_equal(np.load(parts / "codes.npy"), np.load(one / "codes.npy"))
    assert read_lines(parts / "texts.jsonl") == read_lines(one / "texts.jsonl")
    # every local device: here the one CPU, whose vectors are those of the plain command
    np.testing.assert_allclose(
        np.load(clone / "corpus-all-devices.npy"), np.load(clone / "corpus-128.npy"), atol=TOLERANCE
    )


@pytest.mark.slow
def test_the_exports_at_128_give_the_cut_vectors(guide_clone):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the string export's WordPiece op)

    clone, _ = guide_clone
    texts = read_lines(clone / "queries.txt")[:12]
    expected = cut(vectors_of(clone / "runs" / "mat-bq" / "model", texts), 128)

    served = tf.saved_model.load(str(clone / "exports" / "mat-bq-128")).signatures["serving_default"]
    vectors = served(sentences=tf.constant(texts))["embeddings"].numpy()
    np.testing.assert_allclose(vectors, expected, atol=TOLERANCE)

    code = (
        "import json, sys\n"
        "from sentence_transformers import SentenceTransformer\n"
        "model = SentenceTransformer(sys.argv[1], device='cpu')\n"
        "print(json.dumps(model.encode(json.loads(sys.argv[2])).tolist()))\n"
    )
    env = {**os.environ, "PYTHONPATH": ""}
    # sentence-transformers lives in the reference environment (torch, no TensorFlow): another interpreter
    completed = subprocess.run(
        [
            reference_python("this test loads the export"),
            "-c",
            code,
            str(clone / "exports" / "mat-bq-128-hf"),
            json.dumps(texts),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    st_vectors = np.array(json.loads(completed.stdout.strip().splitlines()[-1]))
    np.testing.assert_allclose(st_vectors, expected, atol=TOLERANCE)


@pytest.mark.slow
def test_the_readme_quickstart_writes_what_it_says(readme_clone):
    clone, printed = readme_clone
    with open(clone / "runs" / "mat" / "model" / "cosent_model.json", encoding="utf-8") as f:
        assert json.load(f)["matryoshka_dims"] == [312, 128, 64]
    model = clone / "runs" / "mat" / "model"

    sentences = cut(vectors_of(model, read_lines(clone / "sentences.txt")), 128)
    codes = np.load(clone / "vectors.npy")
    assert codes.dtype == np.int8 and codes.shape == sentences.shape  # 128 bytes a vector
    low, _, step = ranges_and_steps(sentences)
    assert np.all(np.abs(low + (codes.astype(np.float64) + 128) * step - sentences) <= step / 2 + TOLERANCE)

    with open(clone / "runs" / "mat-index" / "index.json", encoding="utf-8") as f:
        info = json.load(f)
    assert (info["dimension"], info["precision"], info["kind"]) == (128, "binary", "hnsw")
    corpus_texts = read_lines(clone / "corpus.txt")
    corpus_vectors = cut(vectors_of(model, corpus_texts), 128)
    queries = cut(vectors_of(model, read_lines(clone / "queries.txt")), 128)
    check_hits_are_exact_cosines(read_hits(clone / "hits.jsonl", corpus_texts), corpus_vectors, queries)
    out, _ = said(printed, "query")
    assert "4 times the hits asked for as candidates" in out
