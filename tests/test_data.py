import json
import logging
import os

import numpy as np
import pytest

from cosent_tf import DataError, PairData, load_task, read_nli, read_senteval, task_file

from conftest import SHARED_DATA, requires_shared_data

# Line counts stated in ../shared/data/README.md.
SENTEVAL_COUNTS = {
    ("STS-B", "train"): 5231, ("STS-B", "valid"): 1458, ("STS-B", "test"): 1361,
    ("BQ", "train"): 100000, ("BQ", "valid"): 10000, ("BQ", "test"): 10000,
    ("ATEC", "train"): 38467, ("ATEC", "valid"): 20000, ("ATEC", "test"): 20000,
    ("LCQMC", "valid"): 8802, ("LCQMC", "test"): 12500,
    ("PAWSX", "valid"): 2000, ("PAWSX", "test"): 2000,
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
    path.write_text("a\tb\t1\nonly two\tfields\na\tb\tc\t1\n\n\"q\"\"x\"\tb\t0\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        data = read_senteval(path)
    assert data.texts_a == ["a", '"q""x"'] and list(data.labels) == [1.0, 0.0]
    assert data.skipped_lines == [2, 3, 4]
    assert "skipped 3 line(s)" in caplog.text and "lines 2, 3, 4" in caplog.text and str(path) in caplog.text


@pytest.mark.parametrize("label", ["yes", "", "nan", "inf"])
def test_unparsable_label_names_file_and_line(tmp_path, label):
    path = tmp_path / "bad.data"
    path.write_text(f"a\tb\t1\nc\td\t{label}x\n".replace("x\n", "\n"), encoding="utf-8")
    if label == "":  # "c<TAB>d<TAB>" strips to two fields: skipped, as the original does
        assert read_senteval(path).skipped_lines == [2]
        return
    with pytest.raises(DataError, match=rf"bad.data, line 2: label '{label}' is not"):
        read_senteval(path)


def test_bad_utf8_missing_and_empty_files(tmp_path):
    path = tmp_path / "latin1.data"
    path.write_bytes("a\tb\t1\n".encode() + "caf\xe9\tb\t0\n".encode("latin-1"))
    with pytest.raises(DataError, match="latin1.data, line 2: not valid UTF-8"):
        read_senteval(path)
    with pytest.raises(DataError, match="absent.data: cannot open"):
        read_senteval(tmp_path / "absent.data")
    (tmp_path / "empty.data").write_text("")
    with pytest.raises(DataError, match="empty.data: no usable pairs"):
        read_senteval(tmp_path / "empty.data")


def test_missing_split_names_the_file(tmp_path):
    with pytest.raises(DataError, match=r"LCQMC/LCQMC.train.data: the LCQMC train split is not here"):
        load_task(tmp_path, "LCQMC", "train")
    assert task_file("/d", "STS-B", "valid") == "/d/STS-B/STS-B.valid.data"
    with pytest.raises(ValueError, match="unknown task"):
        task_file("/d", "MRPC", "train")


def test_nli_reader(tmp_path):
    rows = [{"sentence1": "a", "sentence2": "b", "gold_label": "entailment"},
            {"sentence1": "c", "sentence2": "d", "gold_label": "-"},
            {"sentence1": "e", "sentence2": "f", "gold_label": "contradiction"},
            {"sentence1": "g", "sentence2": "h", "gold_label": "neutral"}]
    path = tmp_path / "dev.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    data = read_nli(path)
    assert list(data.labels) == [2.0, 0.0, 1.0] and data.texts_b == ["b", "f", "h"]
    assert data.skipped_lines == [2, 5]
    path.write_text(json.dumps(rows[0]) + "\n{broken\n")
    with pytest.raises(DataError, match="dev.jsonl, line 2: not valid JSON"):
        read_nli(path)
    path.write_text('{"sentence1": "a", "gold_label": "neutral"}\n')
    with pytest.raises(DataError, match="line 1: missing field.s. sentence2"):
        read_nli(path)


def test_sample_is_seeded_and_concat_keeps_everything():
    data = PairData([str(i) for i in range(100)], [str(-i) for i in range(100)], np.arange(100, dtype=np.float32))
    a, b, c = data.sample(10, seed=1), data.sample(10, seed=1), data.sample(10, seed=2)
    assert a.texts_a == b.texts_a and a.texts_a != c.texts_a
    assert all(int(x) == -int(y) == int(label) for x, y, label in zip(a.texts_a, a.texts_b, a.labels))
    assert data.sample(500, seed=1) is data
    assert len(PairData.concat([a, c])) == 20


def test_binarised_splits_only_sts_b_scores():
    from cosent_tf import binarised

    np.testing.assert_array_equal(binarised([0, 2.5, 3, 5], "STS-B"), [0, 0, 1, 1])
    np.testing.assert_array_equal(binarised([0, 1, 1], "BQ"), [0, 1, 1])


def test_read_lines_keeps_line_numbers_aligned(tmp_path, caplog):
    from cosent_tf.data import read_lines

    path = tmp_path / "texts.txt"
    path.write_bytes("一\r\n\n三\t3\n".encode())
    assert read_lines(path) == ["一", "", "三\t3"]
    assert "1 empty line(s) kept as empty texts (lines 2)" in caplog.text


def test_read_pair_lines_carries_extra_fields(tmp_path):
    from cosent_tf.data import read_pair_lines

    path = tmp_path / "pairs.tsv"
    path.write_text("甲\t乙\t1\n丙\t\n", encoding="utf-8")
    assert read_pair_lines(path) == (["甲", "丙"], ["乙", ""], ["甲\t乙\t1", "丙\t"])
    path.write_text("甲\t乙\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="pairs.tsv, line 2: expected two tab-separated texts .* found an empty line"):
        read_pair_lines(path)
