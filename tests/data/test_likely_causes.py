"""Issue 35, point 8 and 4b: a pair file in a layout the readers do not take is an error that names
the likely cause (label-first, no label column, GBK or UTF-16 from Excel, a JSON array, a CSV or
JSONL file given to the SentEval reader), told from the file, while what is accepted is unchanged.
Each message is also a row of the guide's bad-input table."""

import json
import os
import re

import pytest

from cosent_tf import DataError, read_nli, read_senteval
from cosent_tf.data.files import PairFileFormat, read_lines, read_pair_file, read_pair_lines
from cosent_tf.data.retrieval import read_retrieval_files

PAIR = {"sentence1": "你好", "sentence2": "您好", "label": 1}


@pytest.fixture(autouse=True)
def _in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the messages name the files as given: relative to here


def write(path, content):
    """Write ``content`` to ``path`` (in the test's folder); its name relative to that folder."""
    (path.write_bytes if isinstance(content, bytes) else lambda text: path.write_text(text, encoding="utf-8"))(content)
    return os.path.relpath(path)


def raised(action, *args, **kwargs):
    with pytest.raises(DataError) as error:
        action(*args, **kwargs)
    return str(error.value)


# -- label-first TSV -----------------------------------------------------------------------------

LABEL_FIRST = "1\t你好\t您好\n0\t天气\t下雨\n"
EXPECTED_LAYOUT = "is this file label-first? cosent-tf reads text_a<TAB>text_b<TAB>label, in that order"


def test_a_label_first_tsv_is_named_as_such_by_the_own_file_reader(tmp_path):
    # line 1 reads as a header (its third field is no label), so line 2 is the first pair read
    message = raised(read_pair_file, write(tmp_path / "a.tsv", LABEL_FIRST))
    assert message.startswith("a.tsv, line 2: label '下雨' is not a number or an NLI word")
    assert message.endswith(f"; the first field '0' is a label: {EXPECTED_LAYOUT}")


def test_a_label_first_tsv_of_one_line_is_named_as_such(tmp_path):
    # the one line reads as a header: no pair is left
    assert raised(read_pair_file, write(tmp_path / "a.tsv", "1\t你好\t您好\n")) == (
        f"a.tsv: no usable pairs in this file: line 1 was read as a header, but its first field '1' is a label: "
        f"{EXPECTED_LAYOUT}"
    )
    assert raised(read_pair_file, write(tmp_path / "b.tsv", "q1\tq2\tlabel\n")) == "b.tsv: no usable pairs in this file"


def test_a_label_first_tsv_is_named_as_such_by_the_senteval_reader(tmp_path):
    message = raised(read_senteval, write(tmp_path / "a.data", "entailment\t你好\t您好\n"))
    assert (
        message
        == f"a.data, line 1: label '您好' is not a number; the first field 'entailment' is a label: {EXPECTED_LAYOUT}"
    )


@pytest.mark.parametrize(
    "content",
    [
        "你好\t您好\tyes\n",  # the first field is text: only the label is wrong
        "1\t您好\t1e39\n",  # the label reads as a number, refused for its size
        "1\t您好\tnan\n",
    ],
)
def test_a_wrong_label_after_a_text_is_not_called_label_first(tmp_path, content):
    assert "label-first" not in raised(read_senteval, write(tmp_path / "a.data", content))
    assert "label-first" not in raised(read_pair_file, write(tmp_path / "a.tsv", "x\ty\t1\n" + content))


def test_a_numeric_first_text_is_still_read(tmp_path):
    data = read_pair_file(write(tmp_path / "a.tsv", "1\t您好\t1\n2\t天气\t0\n"))
    assert data.texts_a == ["1", "2"] and list(data.labels) == [1.0, 0.0]


# -- field counts --------------------------------------------------------------------------------


@pytest.mark.parametrize("reader, name", [(read_pair_file, "a.tsv"), (read_senteval, "a.data")])
def test_a_two_column_file_asks_about_the_label_column(tmp_path, reader, name):
    message = raised(reader, write(tmp_path / name, "你好\t您好\n\n天气\t下雨\n"))  # a blank line does not count
    assert message == (
        f"{name}: no usable pairs in this file: every line has 2 tab-separated fields, expected 3 "
        "(text_a<TAB>text_b<TAB>label): is the label column missing?"
    )


def test_a_two_column_file_after_a_header_says_so(tmp_path):
    message = raised(read_pair_file, write(tmp_path / "a.tsv", "q1\tq2\tlabel\n你好\t您好\n天气\t下雨\n"))
    assert "every line after the header has 2 tab-separated fields, expected 3" in message


def test_an_id_column_is_suspected_when_every_line_has_4_fields(tmp_path):
    message = raised(read_senteval, write(tmp_path / "a.data", "7\t你好\t您好\t1\n8\t天气\t下雨\t0\n"))
    assert message.endswith(
        "every line has 4 tab-separated fields, expected 3 (text_a<TAB>text_b<TAB>label): "
        "is there an extra column (an id?)"
    )


def test_mixed_field_counts_keep_the_plain_message(tmp_path):
    message = raised(read_senteval, write(tmp_path / "a.data", "你好\t您好\n天气\t下雨\t0\t1\n"))
    assert message == "a.data: no usable pairs in this file"


def test_unlabelled_pairs_are_still_read_for_scoring(tmp_path):
    # similarity's two-text lines: the labels-optional reader is not the pair-file reader
    assert read_pair_lines(write(tmp_path / "a.tsv", "你好\t您好\n"))[:2] == (["你好"], ["您好"])


def test_two_column_lines_among_pairs_are_still_skipped_with_a_warning(tmp_path):
    data = read_pair_file(write(tmp_path / "a.tsv", "你好\t您好\t1\n天气\t下雨\n"))
    assert data.skipped_lines == [2] and len(data) == 1


@pytest.mark.parametrize("name", ["a.csv", "a.jsonl", "a.json"])
def test_read_senteval_on_a_csv_or_jsonl_file_names_the_reader_that_takes_it(tmp_path, name):
    content = "sentence1,sentence2,label\n你好,您好,1\n" if name == "a.csv" else json.dumps(PAIR) + "\n"
    message = raised(read_senteval, write(tmp_path / name, content))
    assert message == (
        f"{name}: no usable pairs in this file: no line has a tab; read_senteval reads the SentEval layout "
        "text_a<TAB>text_b<TAB>label: read CSV and JSONL files with cosent_tf.read_pair_file "
        "(cosent-tf train --format csv or --format jsonl)"
    )


def test_the_reader_the_senteval_message_names_is_public_and_reads_csv(tmp_path):
    import cosent_tf

    message = raised(read_senteval, write(tmp_path / "a.csv", "sentence1,sentence2,label\n你好,您好,1\n"))
    named = message.split("with cosent_tf.")[1].split()[0]
    assert list(getattr(cosent_tf, named)("a.csv").labels) == [1.0]


def test_read_senteval_on_one_text_a_line_says_no_tab(tmp_path):
    message = raised(read_senteval, write(tmp_path / "a.data", "你好\n天气\n"))
    assert message == "a.data: no usable pairs in this file: no line has a tab, expected text_a<TAB>text_b<TAB>label"


def test_a_comma_separated_tsv_suggests_the_csv_format(tmp_path):
    message = raised(read_pair_file, write(tmp_path / "a.tsv", "你好,您好,1\n天气,下雨,0\n"))
    assert message == (
        "a.tsv: no usable pairs in this file: no line has a tab, expected text_a<TAB>text_b<TAB>label: "
        "is it comma-separated? name the format with --format csv"
    )


# -- CSV headers ---------------------------------------------------------------------------------


def test_a_csv_without_a_header_says_line_1_is_a_pair(tmp_path):
    message = raised(read_pair_file, write(tmp_path / "a.csv", "你好,您好,1\n天气,下雨,0\n"))
    assert message.startswith("a.csv, line 1: no column 'sentence1', 'sentence2', 'label'; the header has '你好'")
    assert message.endswith("; line 1 reads as a pair, not a header: a CSV file starts with a line naming its columns")


def test_a_tab_separated_csv_suggests_the_tsv_format(tmp_path):
    message = raised(read_pair_file, write(tmp_path / "a.csv", "sentence1\tsentence2\tlabel\n你好\t您好\t1\n"))
    assert message.endswith("; line 1 has tabs: is it tab-separated? name the format with --format tsv")


def test_a_csv_header_of_other_names_keeps_its_message(tmp_path):
    message = raised(read_pair_file, write(tmp_path / "a.csv", "q1,q2,label\n你好,您好,1\n"))
    assert message.endswith("(name the columns with --text-a-field, --text-b-field and --label-field)")


# -- encodings -----------------------------------------------------------------------------------

GBK_HINT = (
    "it reads as GBK/GB18030 (saved by Excel on Chinese Windows?): re-save it as UTF-8, e.g. iconv -f GB18030 -t UTF-8"
)


@pytest.mark.parametrize("reader, name", [(read_pair_file, "a.tsv"), (read_senteval, "a.data"), (read_lines, "a.txt")])
def test_a_gbk_file_is_named_as_gbk(tmp_path, reader, name):
    content = b"a\tb\t1\n" + "你好\t您好\t1\n".encode("gb18030")
    message = raised(reader, write(tmp_path / name, content))
    assert message.startswith(f"{name}, line 2: not valid UTF-8 at byte 0 (")
    assert message.endswith(f"; {GBK_HINT}")


def test_a_gbk_json_line_is_named_as_gbk(tmp_path):
    content = json.dumps(PAIR, ensure_ascii=False).encode("gb18030") + b"\n"
    assert raised(read_pair_file, write(tmp_path / "a.jsonl", content)).endswith(GBK_HINT)


@pytest.mark.parametrize(
    "content",
    [
        "caf\xe9\tb\t0\n".encode("latin-1"),  # Latin-1: not GB18030 either
        "\xa7\xa7 f\xfcr Stra\xdfe\tb\t0\n".encode("latin-1"),  # Latin-1 that GB18030 reads, as CJK and Cyrillic
        "你好\t您好\t1\n".encode()[:-5] + b"\xff\t1\n",  # UTF-8 Chinese with a bad byte: UTF-8 before it
        b"\xff\x00\x01\x02\x80\x81\t\x00\n",  # binary bytes
    ],
)
def test_bytes_that_are_not_gbk_text_get_no_gbk_hint(tmp_path, content):
    message = raised(read_senteval, write(tmp_path / "a.data", b"a\tb\t1\n" + content))
    assert "line 2: not valid UTF-8" in message and "GBK" not in message


def test_a_utf16_file_is_named_as_utf16(tmp_path):
    content = "\ufeff你好\t您好\t1\r\n".encode("utf-16-le")
    message = raised(read_pair_file, write(tmp_path / "a.tsv", content))
    assert message.startswith("a.tsv, line 1: not valid UTF-8 at byte 0 (")
    assert message.endswith(
        '; it starts with a UTF-16 byte-order mark (Excel\'s "Unicode Text"): re-save it as UTF-8, '
        "e.g. iconv -f UTF-16 -t UTF-8"
    )


# -- a JSON array --------------------------------------------------------------------------------

ARRAY_MESSAGE = "holds one JSON array, not JSON lines: write one object per line (JSONL), e.g. with jq -c '.[]'"


@pytest.mark.parametrize(
    "content",
    [
        json.dumps([PAIR, PAIR], ensure_ascii=False),  # on one line
        json.dumps([PAIR, PAIR], ensure_ascii=False, indent=2),  # pretty-printed
        "\ufeff  [\n" + json.dumps(PAIR) + "\n]\n",  # a byte-order mark and spaces first
        json.dumps([PAIR] * 40000, ensure_ascii=False),  # one line longer than the 1 MB a line may have
    ],
)
def test_a_json_array_file_says_so_and_how_to_make_json_lines(tmp_path, content):
    message = raised(read_pair_file, write(tmp_path / "a.json", content))
    assert message == f"a.json: {ARRAY_MESSAGE}"


def test_every_jsonl_reader_names_a_json_array(tmp_path):
    nli = write(tmp_path / "dev.json", json.dumps([{"sentence1": "a", "sentence2": "b", "gold_label": "neutral"}]))
    assert raised(read_nli, nli) == f"{nli}: {ARRAY_MESSAGE}"
    queries = write(tmp_path / "queries.jsonl", json.dumps([{"_id": "q1", "text": "怎么还款"}], indent=1))
    corpus = write(tmp_path / "corpus.jsonl", '{"_id": "d1", "text": "还款方法"}\n')
    qrels = write(tmp_path / "qrels.tsv", "q1\td1\t1\n")
    assert raised(read_retrieval_files, queries, corpus, qrels) == f"{queries}: {ARRAY_MESSAGE}"


@pytest.mark.parametrize(
    "content, message",
    [
        ("[1, 2]\n", "a.json, line 1: expected a JSON object"),  # an array, but not of objects
        ('{"sentence1": "a"\n', "a.json, line 1: not valid JSON"),
    ],
)
def test_other_json_faults_keep_their_messages(tmp_path, content, message):
    assert raised(read_pair_file, write(tmp_path / "a.json", content)).startswith(message)


def test_json_lines_in_a_json_file_are_still_read(tmp_path):
    data = read_pair_file(write(tmp_path / "a.json", json.dumps(PAIR) + "\n" + json.dumps(PAIR) + "\n"))
    assert len(data) == 2
    assert read_pair_file(write(tmp_path / "b.txt", "[1]\t[2]\t1\n"), PairFileFormat()).texts_a == ["[1]"]


# -- the guide's table ---------------------------------------------------------------------------


def guide_cases(tmp_path):
    yield (
        "PATH, line N: label 'b' is not a number; the first field '1' is a label: is this file label-first? "
        "cosent-tf reads text_a<TAB>text_b<TAB>label, in that order",
        lambda: read_senteval(write(tmp_path / "l.data", "1\ta\tb\n")),
    )
    yield (
        "PATH: no usable pairs in this file: every line has 2 tab-separated fields, expected 3 "
        "(text_a<TAB>text_b<TAB>label): is the label column missing?",
        lambda: read_pair_file(write(tmp_path / "two.tsv", "a\tb\n")),
    )
    yield (
        "PATH, line N: not valid UTF-8 at byte B (...); it reads as GBK/GB18030 (saved by Excel on Chinese "
        "Windows?): re-save it as UTF-8, e.g. iconv -f GB18030 -t UTF-8",
        lambda: read_pair_file(write(tmp_path / "gbk.tsv", "你好\t您好\t1\n".encode("gb18030"))),
    )
    yield (
        "PATH: holds one JSON array, not JSON lines: write one object per line (JSONL), e.g. with jq -c '.[]'",
        lambda: read_pair_file(write(tmp_path / "a.json", json.dumps([PAIR], indent=2))),
    )
    yield (
        "PATH: no usable pairs in this file: no line has a tab; read_senteval reads the SentEval layout "
        "text_a<TAB>text_b<TAB>label: read CSV and JSONL files with cosent_tf.read_pair_file (...)",
        lambda: read_senteval(write(tmp_path / "a.csv", "sentence1,sentence2,label\na,b,1\n")),
    )
    yield (
        "PATH, line 1: no column ...; line 1 reads as a pair, not a header: a CSV file starts with a line naming "
        "its columns",
        lambda: read_pair_file(write(tmp_path / "h.csv", "a,b,1\n")),
    )


def test_the_guide_quotes_each_likely_cause(tmp_path):
    from tests.test_readme import TABLE, quote_pattern  # the table and its placeholders, as that test reads them

    for quote, action in guide_cases(tmp_path):
        assert f"`{quote}" in TABLE, f"docs/guide.md's bad-input table does not quote: {quote}"
        printed = raised(action)
        assert re.search(quote_pattern(quote), printed), f"docs/guide.md: {quote}\nprinted: {printed}"


# -- rows for in-batch negatives given to a pair loss (issue 36) ---------------------------------

NTUPLE_HINT = (
    "this looks like (anchor, positive, negative ...) rows for in-batch negatives: train it with --loss mnrl, "
    "or give pairs with a label"
)


@pytest.mark.parametrize(
    "content, start",
    [
        # three fields: line 1 reads as a header, line 2's negative as a label that is no number
        ("怎么还款\t如何还钱\t天气好\n花呗额度\t额度多少\t下雨了\n", "a.tsv, line 2: label '下雨了' is not a number"),
        # four fields on every line: none is a pair
        (
            "怎么还款\t如何还钱\t天气好\t下雨\n花呗\t额度\t下雨了\t晴\n",
            "a.tsv: no usable pairs in this file: every line has 4",
        ),
        # rows of varying numbers of negatives
        ("怎么还款\t如何还钱\t天气好\t下雨\n花呗\t额度\t下雨了\t晴\t阴\n", "a.tsv: no usable pairs in this file"),
    ],
)
def test_a_tsv_of_anchor_positive_negative_rows_given_to_a_pair_reader_names_in_batch_losses(tmp_path, content, start):
    message = raised(read_pair_file, write(tmp_path / "a.tsv", content))
    assert message.startswith(start) and message.endswith(NTUPLE_HINT)


@pytest.mark.parametrize(
    "record",
    [
        {"query": "怎么还款", "pos": ["如何还钱"], "neg": ["天气好"]},  # FlagEmbedding's layout
        {"anchor": "怎么还款", "positive": "如何还钱", "negative": "天气好"},  # sentence-transformers' columns
    ],
)
def test_a_jsonl_of_queries_with_positives_given_to_a_pair_reader_names_in_batch_losses(tmp_path, record):
    message = raised(read_pair_file, write(tmp_path / "a.jsonl", json.dumps(record, ensure_ascii=False) + "\n"))
    assert message.startswith("a.jsonl, line 1: no field 'sentence1', 'sentence2', 'label'; this line has")
    assert message.endswith(f"(name the fields with --text-a-field, --text-b-field and --label-field); {NTUPLE_HINT}")


def test_a_csv_of_anchor_positive_negative_columns_given_to_a_pair_reader_names_in_batch_losses(tmp_path):
    message = raised(read_pair_file, write(tmp_path / "a.csv", "anchor,positive,negative\n怎么还款,如何还钱,天气好\n"))
    assert message.startswith("a.csv, line 1: no column 'sentence1', 'sentence2', 'label'")
    assert message.endswith(NTUPLE_HINT)


@pytest.mark.parametrize(
    "action",
    [
        lambda tmp_path: read_pair_file(write(tmp_path / "a.tsv", "x\ty\t1\n你好\t您好\tyes\n")),  # after a pair
        lambda tmp_path: read_senteval(write(tmp_path / "a.data", "怎么还款\t如何还钱\t天气好\t下雨\n")),  # a benchmark
        lambda tmp_path: read_pair_file(write(tmp_path / "a.jsonl", json.dumps({"text": "你好"}) + "\n")),
        lambda tmp_path: read_pair_file(write(tmp_path / "a.csv", "q1,q2,label\n你好,您好,1\n")),
    ],
)
def test_other_faults_do_not_name_in_batch_losses(tmp_path, action):
    with pytest.raises(DataError) as error:
        action(tmp_path)
    assert "--loss mnrl" not in str(error.value)
