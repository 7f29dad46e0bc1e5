"""A user's own pair files (TSV, CSV, JSONL) and plain text lines."""

import logging

import pytest

from cosent_tf import DataError
from cosent_tf.data.files import PairFileFormat, read_lines, read_pair_file, read_pair_lines


def test_read_lines_keeps_line_numbers_aligned(tmp_path, caplog):
    path = tmp_path / "texts.txt"
    path.write_bytes("一\r\n\n三\t3\n".encode())
    assert read_lines(path) == ["一", "", "三\t3"]
    assert "1 line(s) empty, kept as empty texts (lines 2)" in caplog.text


def test_read_pair_lines_carries_extra_fields(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("甲\t乙\t1\n丙\t\n", encoding="utf-8")
    assert read_pair_lines(path) == (["甲", "丙"], ["乙", ""], ["甲\t乙\t1", "丙\t"])
    path.write_text("甲\t乙\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="pairs.tsv, line 2: expected two tab-separated texts .* found an empty line"):
        read_pair_lines(path)


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_tsv_with_or_without_a_header_and_any_label_kind(tmp_path, caplog):
    with caplog.at_level(logging.INFO):
        data = read_pair_file(write(tmp_path / "a.tsv", "q1\tq2\tlabel\n你好\t您好\t1\n天气\t下雨\t0\n"))
    assert (data.texts_a, list(data.labels), data.label_kind) == (["你好", "天气"], [1.0, 0.0], "binary")
    assert "line 1 is a header" in caplog.text
    graded = read_pair_file(write(tmp_path / "b.txt", "\ufeff一\t二\t3.5\n三\t四\t-1\n"))
    assert (graded.texts_a, list(graded.labels), graded.label_kind) == (["一", "三"], [3.5, -1.0], "graded")
    words = read_pair_file(write(tmp_path / "c.tsv", "一\t二\tEntailment\n三\t四\tcontradiction\n五\t六\t-\n"))
    assert (list(words.labels), words.label_kind, words.skipped_lines) == ([2.0, 0.0], "nli", [3])


def test_csv_quoting_fields_and_jsonl_fields(tmp_path):
    csv_file = write(tmp_path / "a.csv", 'label,first,second\n1,"你好，世界","say ""hi""\n again"\n0,甲,乙\n')
    data = read_pair_file(csv_file, PairFileFormat(text_a_field="first", text_b_field="second"))
    assert data.texts_a == ["你好，世界", "甲"] and data.texts_b == ['say "hi"\n again', "乙"]
    jsonl = write(
        tmp_path / "cnsd.json",
        '{"s1": "一", "s2": "二", "gold_label": "neutral"}\n\n{"s1": "三", "s2": "四", "gold_label": "entailment"}\n',
    )
    data = read_pair_file(jsonl, PairFileFormat(text_a_field="s1", text_b_field="s2", label_field="gold_label"))
    assert (list(data.labels), data.label_kind, data.skipped_lines) == ([1.0, 2.0], "nli", [2])
    numbers = write(tmp_path / "n.data", '{"sentence1": "一", "sentence2": "二", "label": 0.5}\n')
    assert list(read_pair_file(numbers, PairFileFormat(format="jsonl")).labels) == [0.5]


@pytest.mark.parametrize(
    "name, text, options, message",
    [
        ("a.tsv", "一\t二\t1\n三\t四\tyes\n", {}, r"a.tsv, line 2: label 'yes' is not a number or an NLI word"),
        (
            "a.tsv",
            "一\t二\t1\n三\t四\tneutral\n",
            {},
            r"line 2: label 'neutral' is an NLI word, but line 1's '1' is a number: use one kind of label",
        ),
        ("a.tsv", "一\t二\t1\n三\t四\tnan\n", {}, r"line 2: label 'nan' is not a number"),
        ("a.jsonl", '{"sentence1": "一", "sentence2": "二", "label": 1e999}\n', {}, r"line 1: label inf is not finite"),
        (
            "a.csv",
            "sentence1,sentence2,label\n一,二,1\n三,四\n",
            {},
            r"a.csv, line 3: a row of 2 fields under a header of 3",
        ),
        (
            "a.csv",
            "text_a,text_b,label\n一,二,1\n",
            {},
            r"a.csv, line 1: no column 'sentence1', 'sentence2'; the header has 'text_a', 'text_b', 'label'",
        ),
        ("a.csv", 'sentence1,sentence2,label\n"一,二,1\n', {}, r"a.csv, line \d+: not valid CSV"),
        (
            "a.jsonl",
            '{"sentence1": "一", "label": 1}\n',
            {},
            r"a.jsonl, line 1: no field 'sentence2'; this line has 'sentence1', 'label'",
        ),
        ("a.jsonl", '{"sentence1": "一", "sentence2": 2, "label": 1}\n', {}, r"line 1: sentence2 must be a string"),
        ("a.jsonl", '{"sentence1": "一", "sentence2": "二", "label": true}\n', {}, r"label True is not a number"),
        ("a.jsonl", "[1, 2]\n", {}, r"line 1: expected a JSON object"),
        ("a.tsv", "", {}, r"a.tsv: no usable pairs in this file"),
        ("a.xlsx", "一\t二\t1\n", {}, r"a.xlsx: cannot tell the format from the extension '.xlsx'"),
        (
            "a.tsv",
            "一\t二\t1\n一\t二\t0\n",
            {"strict": True},
            r"line 2: repeating an earlier pair, kept: the pair of line 1 \(an error under --strict\)",
        ),
        ("a.tsv", "一\t二\t1\n三\t四\n", {"strict": True}, r"line 2: without exactly 3 tab-separated fields"),
    ],
)
def test_bad_pair_files_name_the_file_line_and_fault(tmp_path, name, text, options, message):
    with pytest.raises(DataError, match=message):
        read_pair_file(write(tmp_path / name, text), **options)


@pytest.mark.parametrize("label", ["1e39", "nan", "-inf", "1_0"])
def test_a_first_line_whose_label_reads_as_a_refused_number_is_an_error_not_a_header(tmp_path, label):
    path = tmp_path / "pairs.tsv"
    path.write_text(f"a\tb\t{label}\nc\td\t0\ne\tf\t1\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"pairs.tsv, line 1: label"):
        read_pair_file(str(path))


def test_a_first_line_naming_its_columns_is_a_header(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("text_a\ttext_b\tlabel\nc\td\t0\ne\tf\t1\n", encoding="utf-8")
    assert list(read_pair_file(str(path)).labels) == [0, 1]
