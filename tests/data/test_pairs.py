"""Pairs and what every reader shares: line decoding, line problems, the label parser."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cosent_tf import DataError, PairData, read_nli, read_senteval
from cosent_tf.data.files import read_lines, read_pair_lines
from cosent_tf.data.pairs import Label, parse_label
from tests.data.fuzz import FUZZ


def test_sample_is_seeded_and_concat_keeps_everything():
    data = PairData([str(i) for i in range(100)], [str(-i) for i in range(100)], np.arange(100, dtype=np.float32))
    a, b, c = data.sample(10, seed=1), data.sample(10, seed=1), data.sample(10, seed=2)
    assert a.texts_a == b.texts_a and a.texts_a != c.texts_a
    assert all(int(x) == -int(y) == int(label) for x, y, label in zip(a.texts_a, a.texts_b, a.labels))
    assert data.sample(500, seed=1) is data
    assert len(PairData.concat([a, c])) == 20


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


@pytest.mark.parametrize("label", ["yes", "", "nan", "inf"])
def test_unparsable_label_names_file_and_line(tmp_path, label):
    path = tmp_path / "bad.data"
    path.write_text(f"a\tb\t1\nc\td\t{label}x\n".replace("x\n", "\n"), encoding="utf-8")
    with pytest.raises(DataError, match=rf"bad.data, line 2: label '{label}' is not"):
        read_senteval(path)


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


@pytest.mark.parametrize(
    "value, expected",
    [("1", Label(1.0)), (" 0.5 ", Label(0.5)), (3, Label(3.0)), ("Neutral", Label(1.0, word=True)), ("-", None)],
)
def test_one_label_parser_reads_numbers_and_with_nli_words_the_words(value, expected):
    assert parse_label("a.tsv", 1, value, nli_words=True) == expected
    if expected is not None and not expected.word:
        assert parse_label("a.tsv", 1, value) == expected


@pytest.mark.parametrize(
    "value, plain, with_words",
    [
        ("yes", "label 'yes' is not a number", "label 'yes' is not a number or an NLI word"),
        ("0_1", "label '0_1' is not a plain decimal number", "label '0_1' is not a number or an NLI word"),
        ("nan", "label 'nan' is not finite", "label 'nan' is not a number or an NLI word"),
        ("neutral", "label 'neutral' is not a number", None),
        ("1e39", "label '1e39' is not finite", "label '1e39' is not finite"),
    ],
)
def test_the_label_parser_names_what_is_wrong(value, plain, with_words):
    with pytest.raises(DataError, match=f"a.tsv, line 3: {plain}"):
        parse_label("a.tsv", 3, value)
    if with_words is not None:
        with pytest.raises(DataError, match=f"a.tsv, line 3: {with_words}"):
            parse_label("a.tsv", 3, value, nli_words=True)


# Property-based: whatever the bytes, the readers return data or raise DataError.


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
