"""The benchmarks' files: senteval_cn matching tasks and CNSD NLI jsonl."""

import json
import logging
import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cosent_tf import DataError, load_task, read_nli, read_senteval
from cosent_tf.data.benchmarks import task_file
from tests.data.fuzz import FUZZ, bad_line, good_line, text
from tests.helpers import SHARED_DATA, requires_shared_data

# Line counts stated in ../shared/data/README.md.
SENTEVAL_COUNTS = {
    ("STS-B", "train"): 5231,
    ("STS-B", "valid"): 1458,
    ("STS-B", "test"): 1361,
    ("BQ", "train"): 100000,
    ("BQ", "valid"): 10000,
    ("BQ", "test"): 10000,
    ("ATEC", "train"): 38467,
    ("ATEC", "valid"): 20000,
    ("ATEC", "test"): 20000,
    ("LCQMC", "valid"): 8802,
    ("LCQMC", "test"): 12500,
    ("PAWSX", "valid"): 2000,
    ("PAWSX", "test"): 2000,
}

NLI_COUNTS = {"cnsd-snli/dev.jsonl": 9314, "cnsd-snli/test.jsonl": 9176, "cnsd-mnli/dev.jsonl": 12241}


@requires_shared_data
@pytest.mark.parametrize("task,split", sorted(SENTEVAL_COUNTS))
def test_shared_senteval_files_have_readme_counts(task, split):
    data = load_task(os.path.join(SHARED_DATA, "senteval_cn"), task, split)
    assert len(data) == SENTEVAL_COUNTS[task, split]
    assert data.skipped_lines == []
    assert len(data.texts_a) == len(data.texts_b) == len(data)
    expected_labels = set(range(6)) if task == "STS-B" else {0, 1}
    assert set(np.unique(data.labels).astype(int)) == expected_labels


@requires_shared_data
@pytest.mark.parametrize("name", sorted(NLI_COUNTS))
def test_shared_nli_files_have_readme_counts(name):
    data = read_nli(os.path.join(SHARED_DATA, "cnsd", name))
    assert len(data) == NLI_COUNTS[name]
    assert set(np.unique(data.labels)) == {0.0, 1.0, 2.0}


def test_wrong_field_counts_are_skipped_counted_and_reported(tmp_path, caplog):
    path = tmp_path / "X.train.data"
    path.write_text('a\tb\t1\nonly two\tfields\na\tb\tc\t1\n\n"q""x"\tb\t0\n', encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        data = read_senteval(path)
    assert data.texts_a == ["a", '"q""x"'] and list(data.labels) == [1.0, 0.0]
    assert data.skipped_lines == [2, 3, 4]
    assert f"{path}: 3 line(s) without exactly 3 tab-separated fields, skipped (lines 2, 3, 4)" in caplog.text


def test_missing_split_names_the_file(tmp_path):
    with pytest.raises(DataError, match=r"LCQMC/LCQMC.train.data: the LCQMC train split is not here"):
        load_task(tmp_path, "LCQMC", "train")
    assert task_file("/d", "STS-B", "valid") == "/d/STS-B/STS-B.valid.data"
    with pytest.raises(ValueError, match="unknown task"):
        task_file("/d", "MRPC", "train")


def test_nli_reader(tmp_path):
    rows = [
        {"sentence1": "a", "sentence2": "b", "gold_label": "entailment"},
        {"sentence1": "c", "sentence2": "d", "gold_label": "-"},
        {"sentence1": "e", "sentence2": "f", "gold_label": "contradiction"},
        {"sentence1": "g", "sentence2": "h", "gold_label": "neutral"},
    ]
    path = tmp_path / "dev.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    data = read_nli(path)
    assert list(data.labels) == [2.0, 0.0, 1.0] and data.texts_b == ["b", "f", "h"]
    assert data.skipped_lines == [2, 5]
    path.write_text(json.dumps(rows[0]) + "\n{broken\n")
    with pytest.raises(DataError, match="dev.jsonl, line 2: not valid JSON"):
        read_nli(path)
    path.write_text('{"sentence1": "a", "gold_label": "neutral"}\n')
    with pytest.raises(DataError, match="line 1: no field 'sentence2'; this line has 'sentence1', 'gold_label'"):
        read_nli(path)


@FUZZ
@given(
    st.lists(
        st.one_of(good_line.map(lambda f: ("good", f)), bad_line.map(lambda f: ("bad", f))), min_size=1, max_size=30
    )
)
def test_senteval_keeps_every_well_formed_line_and_reports_the_rest(tmp_path, lines):
    path = tmp_path / "fuzz.data"
    raw = ["\t".join(item) if kind == "good" else item for kind, item in lines]
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("".join(line + "\n" for line in raw))
    good = [item for kind, item in lines if kind == "good"]
    bad_numbers = [n for n, (kind, _) in enumerate(lines, start=1) if kind == "bad"]
    if not good:
        with pytest.raises(DataError, match="no usable pairs"):
            read_senteval(path)
        return
    data = read_senteval(path, task="BQ")
    assert data.texts_a == [a for a, _, _ in good] and data.texts_b == [b for _, b, _ in good]
    assert list(data.labels) == [float(label) for _, _, label in good]
    assert data.skipped_lines == bad_numbers
    if bad_numbers:  # strict stops at the first flagged line: this one, or an earlier empty or repeated pair
        with pytest.raises(DataError) as raised:
            read_senteval(path, strict=True)
        assert raised.value.line <= bad_numbers[0] and "(an error under --strict)" in str(raised.value)


@FUZZ
@given(
    st.lists(
        st.tuples(text, text, st.sampled_from(["entailment", "neutral", "contradiction", "-", 7, None])),
        min_size=1,
        max_size=20,
    )
)
def test_nli_keeps_every_labelled_record(tmp_path, records):
    path = tmp_path / "fuzz.jsonl"
    path.write_text(
        "".join(json.dumps({"sentence1": a, "sentence2": b, "gold_label": g}) + "\n" for a, b, g in records),
        encoding="utf-8",
    )
    kept = [(a, b, g) for a, b, g in records if g in ("entailment", "neutral", "contradiction")]
    if not kept:
        with pytest.raises(DataError, match="no usable pairs"):
            read_nli(path)
        return
    data = read_nli(path)
    assert list(zip(data.texts_a, data.texts_b)) == [(a, b) for a, b, _ in kept]
    assert len(data.skipped_lines) == len(records) - len(kept)


@pytest.mark.parametrize(
    "line, message",
    [
        ("甲\t乙\t2", "label '2' is not 0 or 1"),
        ("甲\t乙\t0.5", "label '0.5' is not 0 or 1"),
        ("甲\t乙\tnan", "label 'nan' is not finite"),
        ("甲\t乙\tyes", "label 'yes' is not a number"),
        ("甲\t乙\t0_1", "label '0_1' is not a plain decimal number"),
        ("甲\t乙\t１", "label '１' is not a plain decimal number"),
    ],
)
def test_out_of_range_labels_are_errors_for_binary_tasks(tmp_path, line, message):
    folder = tmp_path / "BQ"
    folder.mkdir()
    (folder / "BQ.train.data").write_text("甲\t丙\t1\n" + line + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=f"BQ.train.data, line 2: {message}"):
        load_task(tmp_path, "BQ", "train")


def test_sts_b_scores_must_lie_between_0_and_5(tmp_path):
    folder = tmp_path / "STS-B"
    folder.mkdir()
    (folder / "STS-B.test.data").write_text("甲\t丙\t4.5\n甲\t乙\t5.5\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 2: label '5.5' is outside 0-5"):
        load_task(tmp_path, "STS-B", "test")


def test_nli_strict_refuses_unlabelled_records(tmp_path):
    path = tmp_path / "nli.jsonl"
    path.write_text(
        json.dumps({"sentence1": "甲", "sentence2": "乙", "gold_label": "neutral"})
        + "\n"
        + json.dumps({"sentence1": "甲", "sentence2": "丙", "gold_label": "-"})
        + "\n",
        encoding="utf-8",
    )
    assert len(read_nli(path)) == 1
    with pytest.raises(DataError, match="line 2: with a gold_label outside .*, skipped: '-'"):
        read_nli(path, strict=True)
    path.write_text(json.dumps({"sentence1": 3, "sentence2": "乙", "gold_label": "neutral"}) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 1: sentence1 must be a string"):
        read_nli(path)


def test_a_benchmarks_own_repeated_pairs_are_noted_not_warned_but_skipped_lines_are(tmp_path, caplog):
    folder = tmp_path / "STS-B"
    folder.mkdir()
    (folder / "STS-B.train.data").write_text("甲\t乙\t1\n甲\t乙\t2\nbroken line\n", encoding="utf-8")
    with caplog.at_level(logging.DEBUG, logger="cosent_tf.data"):
        load_task(tmp_path, "STS-B", "train")
    levels = {record.getMessage().split(" (lines")[0].split(": ", 1)[1]: record.levelno for record in caplog.records}
    assert levels == {
        "1 line(s) repeating an earlier pair, kept": logging.DEBUG,
        "1 line(s) without exactly 3 tab-separated fields, skipped": logging.WARNING,
    }
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="cosent_tf.data"):
        read_senteval(folder / "STS-B.train.data")  # the same lines from a user: both warned about
    assert {record.levelno for record in caplog.records} == {logging.WARNING}
