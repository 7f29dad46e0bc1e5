"""Issue 33, reading data files: every data file that is not what it should be is an error naming
the file and line and the fault, never a traceback, a silent wrong value, or a read that fills memory."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from cosent_tf import DataError, read_nli, read_senteval
from cosent_tf.data.files import PairFileFormat, read_lines, read_pair_file, read_pair_lines
from cosent_tf.data.pairs import MAX_LINE_BYTES
from cosent_tf.data.retrieval import read_retrieval_files
from tests.helpers import ROOT

NLI_LINE = '{"sentence1": "一", "sentence2": "二", "gold_label": "neutral"}'

PAIR_JSONL_LINE = '{"sentence1": "一", "sentence2": "二", "label": 1}'


def write(path, content):
    (path.write_bytes if isinstance(content, bytes) else lambda text: path.write_text(text, encoding="utf-8"))(content)
    return str(path)


def retrieval(tmp_path, queries=None, corpus=None, qrels=None):
    """read_retrieval_files over these file contents (good ones where None)."""
    return read_retrieval_files(
        write(tmp_path / "queries.jsonl", queries or '{"_id": "q1", "text": "怎么还款"}\n'),
        write(tmp_path / "corpus.jsonl", corpus or '{"_id": "d1", "text": "还款方法"}\n'),
        write(tmp_path / "qrels.tsv", qrels or "q1\td1\t1\n"),
    )


# Every reader of a text file, with the name of the file it reads and a good line of it.
READERS = {
    "read_lines": ("a.txt", "一二", read_lines),
    "read_pair_lines": ("a.txt", "一\t二", read_pair_lines),
    "read_senteval": ("a.data", "一\t二\t1", read_senteval),
    "read_nli": ("a.jsonl", NLI_LINE, read_nli),
    "read_pair_file tsv": ("a.tsv", "一\t二\t1", read_pair_file),
    "read_pair_file csv": ("a.csv", "sentence1,sentence2,label", read_pair_file),
    "read_pair_file jsonl": ("a.jsonl", PAIR_JSONL_LINE, read_pair_file),
    "retrieval queries": ("queries.jsonl", '{"_id": "q1", "text": "怎么还款"}', None),
    "retrieval corpus": ("corpus.jsonl", '{"_id": "d1", "text": "还款方法"}', None),
    "retrieval qrels": ("qrels.tsv", "q1\td1\t1", None),
}


def read_with(tmp_path, reader_name, content):
    name, _, reader = READERS[reader_name]
    if reader is None:
        return retrieval(tmp_path, **{name.split(".")[0]: content})
    return reader(write(tmp_path / name, content))


# -- F-1: a line is read with a bound -----------------------------------------------------------


@pytest.mark.parametrize("reader_name", READERS)
@pytest.mark.parametrize("good_lines", [0, 1])
def test_a_line_longer_than_1_mb_is_refused_quickly_naming_its_line(tmp_path, reader_name, good_lines):
    good = READERS[reader_name][1]
    content = (good + "\n") * good_lines + "x" * (3 * MAX_LINE_BYTES)  # 3 MB, no newline
    start = time.monotonic()
    with pytest.raises(DataError, match=rf", line {good_lines + 1}: line {good_lines + 1} is longer than 1 MB; is "):
        read_with(tmp_path, reader_name, content)
    assert time.monotonic() - start < 10


def test_a_line_of_exactly_1_mb_is_still_text(tmp_path):
    text = "x" * MAX_LINE_BYTES
    assert read_lines(write(tmp_path / "a.txt", text + "\n" + text)) == [text, text]
    with pytest.raises(DataError, match=r"a.txt, line 2: line 2 is longer than 1 MB"):
        read_lines(write(tmp_path / "a.txt", text + "\n" + text + "y\n"))


@pytest.mark.parametrize("reader", ["read_lines", "read_pair_lines", "read_senteval", "read_nli"])
def test_dev_zero_is_refused_in_bounded_memory(reader):
    """A file that never ends (/dev/zero) gives the error at once, in a process that may not
    grow past 2 GB (without a bound the reader would reach it)."""
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
        f"from cosent_tf import data; data.{reader}('/dev/zero')"
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )
    assert "DataError: /dev/zero, line 1: line 1 is longer than 1 MB; is this a text file?" in result.stderr, (
        result.stderr[-2000:]
    )


# -- C-4: JSON lines that json reads but Python cannot use --------------------------------------

JSONL_READERS = {
    "read_nli": lambda path: read_nli(path),
    "read_pair_file gold_label": lambda path: read_pair_file(path, PairFileFormat(label_field="gold_label")),
}


@pytest.mark.parametrize("reader", JSONL_READERS)
@pytest.mark.parametrize(
    "bad_line, message",
    [
        ('{"sentence1": ' + "[" * 100000 + "]" * 100000 + "}", r"not usable JSON \(nested too deeply\)"),
        ('{"sentence1": "a", "x": ' + "9" * 5000 + "}", r"not usable JSON \(.*digits"),
        ('{"a": {"b": ' + "[" * 100000 + "]" * 100000 + "}}", r"not usable JSON \(nested too deeply\)"),
    ],
)
def test_jsonl_too_deep_or_too_long_a_number_names_the_line(tmp_path, reader, bad_line, message):
    path = write(tmp_path / "a.jsonl", NLI_LINE + "\n" + bad_line + "\n")
    with pytest.raises(DataError, match=rf"a.jsonl, line 2: {message}"):
        JSONL_READERS[reader](path)


@pytest.mark.parametrize("which", ["queries", "corpus"])
def test_retrieval_jsonl_too_deep_names_the_line(tmp_path, which):
    deep = '{"_id": "x", "text": ' + "[" * 100000 + "]" * 100000 + "}\n"
    with pytest.raises(DataError, match=rf"{which}.jsonl, line 1: not usable JSON \(nested too deeply\)"):
        retrieval(tmp_path, **{which: deep})


# -- D-2 (and C-4's 400-digit label): labels are checked as the float32 they are stored in -------

BEYOND_FLOAT32 = ["1e39", "-1e39", "3.5e38", "1" + "0" * 400, "1e400"]


@pytest.mark.parametrize("label", BEYOND_FLOAT32)
@pytest.mark.parametrize(
    "name, line",
    [
        ("a.tsv", "一\t二\t{}\n"),
        ("a.csv", "sentence1,sentence2,label\n一,二,{}\n"),
        ("a.jsonl", '{{"sentence1": "一", "sentence2": "二", "label": "{}"}}\n'),  # as a JSON string
        ("a.jsonl", '{{"sentence1": "一", "sentence2": "二", "label": {}}}\n'),  # as a JSON number
    ],
)
def test_a_label_beyond_float32_is_refused_in_every_pair_format(tmp_path, label, name, line):
    first_line = {"a.tsv": "甲\t乙\t1\n", "a.csv": "", "a.jsonl": PAIR_JSONL_LINE + "\n"}[name]
    path = write(tmp_path / name, first_line + line.format(label))
    with pytest.raises(DataError, match=rf"{name}, line 2: label .* is not finite as a 32-bit float"):
        read_pair_file(path)


@pytest.mark.parametrize("label", BEYOND_FLOAT32)
def test_a_senteval_label_beyond_float32_is_refused(tmp_path, label):
    with pytest.raises(DataError, match=r"a.data, line 2: label .* is not finite as a 32-bit float"):
        read_senteval(write(tmp_path / "a.data", f"甲\t乙\t1\n一\t二\t{label}\n"))


def test_the_largest_float32_labels_are_kept_and_stay_finite(tmp_path):
    data = read_pair_file(write(tmp_path / "a.tsv", "一\t二\t3e38\n三\t四\t-3.4e38\n"))
    assert np.isfinite(data.labels).all() and data.labels[0] == np.float32(3e38)


def test_a_qrels_score_beyond_float32_is_refused(tmp_path):
    with pytest.raises(DataError, match=r"qrels.tsv, line 1: score '1e39' is not finite as a 32-bit float"):
        retrieval(tmp_path, qrels="q1\td1\t1e39\n")


# -- D-8: BEIR texts must be strings, ids unique -------------------------------------------------


NOT_STRINGS = [("null", "null"), ('{"a": 1}', "an object"), ("[1]", "an array"), ("3", "a number")]


@pytest.mark.parametrize(
    "which, field, value, shown",
    [(which, "text", *bad) for which in ("queries", "corpus") for bad in NOT_STRINGS]
    + [("corpus", "title", *bad) for bad in NOT_STRINGS[1:]],  # a null title is no title
)
def test_a_retrieval_text_that_is_not_a_string_names_the_line(tmp_path, which, field, value, shown):
    good = {"queries": '{"_id": "q1", "text": "怎么还款"}', "corpus": '{"_id": "d1", "text": "还款方法"}'}[which]
    record = json.loads(good)
    record["_id"], record[field] = "second", "@"
    bad = json.dumps(record, ensure_ascii=False).replace('"@"', value)
    with pytest.raises(DataError, match=rf"{which}.jsonl, line 2: {field} must be a string, not {shown}"):
        retrieval(tmp_path, **{which: good + "\n" + bad + "\n"})


def test_a_null_title_is_no_title(tmp_path):
    corpus = '{"_id": "d1", "title": null, "text": "还款方法"}\n'
    assert retrieval(tmp_path, corpus=corpus)[1] == ["还款方法"]


@pytest.mark.parametrize("which", ["queries", "corpus"])
@pytest.mark.parametrize("first, second", [('"a"', '"a"'), ("7", '"7"')])
def test_a_repeated_retrieval_id_names_the_line(tmp_path, which, first, second):
    lines = "".join(f'{{"_id": {key}, "text": "文{i}"}}\n' for i, key in enumerate((first, second)))
    with pytest.raises(DataError, match=rf"{which}.jsonl, line 2: _id '\w' repeats an earlier"):
        retrieval(tmp_path, **{which: lines})


@pytest.mark.parametrize("key", ["null", "[1]", "true", "1.5"])
def test_a_retrieval_id_that_is_not_a_string_or_integer_names_the_line(tmp_path, key):
    with pytest.raises(DataError, match=r"queries.jsonl, line 1: _id must be a string or an integer"):
        retrieval(tmp_path, queries=f'{{"_id": {key}, "text": "文"}}\n')
