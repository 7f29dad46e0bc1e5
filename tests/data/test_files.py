import json
import logging
import os

import numpy as np
import pytest

from cosent_tf import DataError, PairData, load_task, read_nli, read_senteval
from cosent_tf.data.files import read_pair_file, task_file
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


@pytest.mark.parametrize("label", ["yes", "", "nan", "inf"])
def test_unparsable_label_names_file_and_line(tmp_path, label):
    path = tmp_path / "bad.data"
    path.write_text(f"a\tb\t1\nc\td\t{label}x\n".replace("x\n", "\n"), encoding="utf-8")
    with pytest.raises(DataError, match=rf"bad.data, line 2: label '{label}' is not"):
        read_senteval(path)


def test_bad_utf8_missing_and_empty_files(tmp_path):
    path = tmp_path / "latin1.data"
    path.write_bytes(b"a\tb\t1\n" + "caf\xe9\tb\t0\n".encode("latin-1"))
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
    with pytest.raises(DataError, match="line 1: missing field.s. sentence2"):
        read_nli(path)


def test_sample_is_seeded_and_concat_keeps_everything():
    data = PairData([str(i) for i in range(100)], [str(-i) for i in range(100)], np.arange(100, dtype=np.float32))
    a, b, c = data.sample(10, seed=1), data.sample(10, seed=1), data.sample(10, seed=2)
    assert a.texts_a == b.texts_a and a.texts_a != c.texts_a
    assert all(int(x) == -int(y) == int(label) for x, y, label in zip(a.texts_a, a.texts_b, a.labels))
    assert data.sample(500, seed=1) is data
    assert len(PairData.concat([a, c])) == 20


def test_read_lines_keeps_line_numbers_aligned(tmp_path, caplog):
    from cosent_tf.data.files import read_lines

    path = tmp_path / "texts.txt"
    path.write_bytes("一\r\n\n三\t3\n".encode())
    assert read_lines(path) == ["一", "", "三\t3"]
    assert "1 line(s) empty, kept as empty texts (lines 2)" in caplog.text


def test_read_pair_lines_carries_extra_fields(tmp_path):
    from cosent_tf.data.files import read_pair_lines

    path = tmp_path / "pairs.tsv"
    path.write_text("甲\t乙\t1\n丙\t\n", encoding="utf-8")
    assert read_pair_lines(path) == (["甲", "丙"], ["乙", ""], ["甲\t乙\t1", "丙\t"])
    path.write_text("甲\t乙\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="pairs.tsv, line 2: expected two tab-separated texts .* found an empty line"):
        read_pair_lines(path)


# Property-based: whatever the bytes, the readers return data or raise DataError, and a
# well-formed line is never dropped.
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cosent_tf.data.files import read_lines, read_pair_lines  # noqa: E402

FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# Texts: anything but tabs and line breaks (any character str.splitlines or a binary
# file's line iteration would split at).
text = st.text(st.characters(blacklist_characters="\t\n\r", blacklist_categories=("Cs",)), max_size=12)
good_line = st.tuples(text, text, st.sampled_from(["0", "1", "1.0", " 0", "0 "]))
bad_line = st.lists(text, min_size=0, max_size=5).filter(lambda fields: len(fields) != 3).map("\t".join)


@FUZZ
@given(st.binary(max_size=300))
def test_readers_survive_arbitrary_bytes(tmp_path, content):
    path = tmp_path / "fuzz.data"
    path.write_bytes(content)
    for reader in (
        read_senteval,
        read_nli,
        read_lines,
        read_pair_lines,
        lambda p: read_senteval(p, strict=True),
        lambda p: read_nli(p, strict=True),
    ):
        try:
            reader(path)
        except DataError as error:
            assert str(error).startswith(str(path))


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


def test_empty_texts_and_repeated_pairs_are_kept_reported_or_strict_errors(tmp_path, caplog):
    path = tmp_path / "pairs.data"
    path.write_text("甲\t乙\t1\n\t乙\t0\n甲\t乙\t0\n", encoding="utf-8")
    data = read_senteval(path)
    assert data.texts_a == ["甲", "", "甲"] and data.skipped_lines == []
    assert "1 line(s) with an empty text, kept (lines 2)" in caplog.text
    assert "1 line(s) repeating an earlier pair, kept (lines 3)" in caplog.text
    with pytest.raises(DataError, match=r"line 2: with an empty text, kept \(an error under --strict\)"):
        read_senteval(path, strict=True)
    path.write_text("甲\t乙\t1\n甲\t乙\t0\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 2: repeating an earlier pair, kept: the pair of line 1"):
        read_senteval(path, strict=True)


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


# ---------------------------------------------------------------- a user's own pair files


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_tsv_with_or_without_a_header_and_any_label_kind(tmp_path, caplog):
    from cosent_tf.data.files import read_pair_file

    with caplog.at_level(logging.INFO):
        data = read_pair_file(write(tmp_path / "a.tsv", "q1\tq2\tlabel\n你好\t您好\t1\n天气\t下雨\t0\n"))
    assert (data.texts_a, list(data.labels), data.label_kind) == (["你好", "天气"], [1.0, 0.0], "binary")
    assert "line 1 is a header" in caplog.text
    graded = read_pair_file(write(tmp_path / "b.txt", "\ufeff一\t二\t3.5\n三\t四\t-1\n"))
    assert (graded.texts_a, list(graded.labels), graded.label_kind) == (["一", "三"], [3.5, -1.0], "graded")
    words = read_pair_file(write(tmp_path / "c.tsv", "一\t二\tEntailment\n三\t四\tcontradiction\n五\t六\t-\n"))
    assert (list(words.labels), words.label_kind, words.skipped_lines) == ([2.0, 0.0], "nli", [3])


def test_csv_quoting_fields_and_jsonl_fields(tmp_path):
    from cosent_tf.data.files import PairFileFormat, read_pair_file

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
    from cosent_tf.data.files import read_pair_file

    with pytest.raises(DataError, match=message):
        read_pair_file(write(tmp_path / name, text), **options)


def test_retrieval_files_in_the_beir_layout(tmp_path):
    from cosent_tf.data.files import read_retrieval_files

    queries = write(tmp_path / "queries.jsonl", '{"_id": "q1", "text": "怎么还款"}\n{"_id": "q2", "text": "没用"}\n')
    corpus = write(
        tmp_path / "corpus.jsonl", '{"_id": "d1", "title": "花呗", "text": "还款方法"}\n{"_id": 2, "text": "开通"}\n'
    )
    qrels = write(tmp_path / "qrels.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\t2\t0\n")
    assert read_retrieval_files(queries, corpus, qrels) == (["怎么还款"], ["花呗 还款方法", "开通"], [{0}])
    write(qrels, "q1\td9\t1\n")
    with pytest.raises(DataError, match=r"qrels.tsv, line 1: corpus-id 'd9' is not in"):
        read_retrieval_files(queries, corpus, qrels)


def test_a_benchmarks_own_repeated_pairs_are_noted_not_warned_but_skipped_lines_are(tmp_path, caplog):
    folder = tmp_path / "STS-B"
    folder.mkdir()
    (folder / "STS-B.train.data").write_text("甲\t乙\t1\n甲\t乙\t2\nbroken line\n", encoding="utf-8")
    with caplog.at_level(logging.DEBUG, logger="cosent_tf.data.files"):
        load_task(tmp_path, "STS-B", "train")
    levels = {record.getMessage().split(" (lines")[0].split(": ", 1)[1]: record.levelno for record in caplog.records}
    assert levels == {
        "1 line(s) repeating an earlier pair, kept": logging.DEBUG,
        "1 line(s) without exactly 3 tab-separated fields, skipped": logging.WARNING,
    }
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="cosent_tf.data.files"):
        read_senteval(folder / "STS-B.train.data")  # the same lines from a user: both warned about
    assert {record.levelno for record in caplog.records} == {logging.WARNING}


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
