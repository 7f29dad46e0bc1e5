"""A user's own files: pair files in TSV, CSV or JSONL, and plain text lines for the command line.

The TSV and JSONL line readers here also read the benchmarks' files (:mod:`.benchmarks`) and the
retrieval files (:mod:`.retrieval`), so that one fault reads the same in every format.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import dataclasses
import json
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any, Callable, Optional, Union

from ..errors import DataError
from .pairs import (
    LineProblems,
    PairData,
    PathLike,
    check_texts,
    decoded_lines,
    looks_like_label,
    pair_data,
    parse_label,
    without_newline,
)

logger = logging.getLogger(__name__)

FILE_FORMATS = ("tsv", "csv", "jsonl")
EXTENSION_FORMATS = {".tsv": "tsv", ".txt": "tsv", ".data": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}

# A pair line as the format readers give it: (line number, text_a, text_b, the raw label).
Record = tuple[int, str, str, Any]

# The end of a missing field's message: a text, or a function of the line's object that tells it.
Hint = Union[str, Callable[[dict[str, Any]], str]]

# The likely cause of a pair file that holds the rows an in-batch loss reads (cosent_tf.data.groups).
NTUPLE_HINT = (
    "this looks like (anchor, positive, negative ...) rows for in-batch negatives: train it with --loss mnrl, "
    "or give pairs with a label"
)
# The fields and columns that name such rows: FlagEmbedding's and sentence-transformers'.
NTUPLE_FIELDS = (("query", "pos"), ("anchor", "positive"))


@dataclasses.dataclass(frozen=True)
class PairFileFormat:
    """How to read a pair file.

    Attributes:
        format: ``tsv``, ``csv`` or ``jsonl``; None: from the file's extension
            (:data:`EXTENSION_FORMATS`).
        text_a_field: the CSV column / JSON field of the first text.
        text_b_field: the CSV column / JSON field of the second text.
        label_field: the CSV column / JSON field of the label.

    Example:
        >>> PairFileFormat(label_field="gold_label").format_of("dev.json")
        'jsonl'
    """

    format: Optional[str] = None
    text_a_field: str = "sentence1"
    text_b_field: str = "sentence2"
    label_field: str = "label"

    def format_of(self, path: PathLike) -> str:
        """The format ``path`` is read in: the one named, or the one its extension stands for.

        Args:
            path: the pair file.

        Returns:
            One of :data:`FILE_FORMATS`.

        Raises:
            DataError: the named format is unknown, or the extension names none.

        Example:
            >>> PairFileFormat().format_of("train.tsv")
            'tsv'
        """
        if self.format is not None:
            if self.format not in FILE_FORMATS:
                raise DataError(path, f"unknown format {self.format!r}; choose one of {', '.join(FILE_FORMATS)}")
            return self.format
        extension = os.path.splitext(os.fspath(path))[1].lower()
        if extension not in EXTENSION_FORMATS:
            raise DataError(
                path,
                f"cannot tell the format from the extension {extension!r}; name it with "
                f"--format ({', '.join(FILE_FORMATS)})",
            )
        return EXTENSION_FORMATS[extension]

    @property
    def fields(self) -> tuple[str, str, str]:
        """The names of the first text's, the second text's and the label's field."""
        return self.text_a_field, self.text_b_field, self.label_field


# ---------------------------------------------------------------- line formats


TSV_LAYOUT = "text_a<TAB>text_b<TAB>label"


def tsv_records(path: str, problems: LineProblems, header: bool = False) -> Iterator[Record]:
    """The ``text_a<TAB>text_b<TAB>label`` lines of a TSV file; a line of another field count is
    skipped and reported (and its layout kept in ``problems.layouts``). ``header``: line 1 may
    start with a byte-order mark, and is left out when its third cell is no label (a header naming
    the columns)."""
    for number, line in decoded_lines(path):
        text = without_newline(line)
        if header and number == 1:
            text = text.lstrip("\ufeff")
        fields = text.split("\t")
        if len(fields) != 3:
            problems.add(
                number, "without exactly 3 tab-separated fields, skipped", f": found {len(fields)}", skipped=True
            )
            if text.strip():
                problems.layouts[len(fields), _shape(text)] += 1
            continue
        if header and number == 1 and not looks_like_label(fields[2]):
            logger.info("%s: line 1 is a header (%s), not a pair", path, " | ".join(fields))
            problems.header = fields
            continue
        yield number, fields[0], fields[1], fields[2]


def _shape(text: str) -> str:
    """What a line without three tab-separated fields looks like: a JSON object, comma-separated
    values, or neither."""
    stripped = text.lstrip("\ufeff").strip()
    return "json" if stripped.startswith("{") else "comma" if "," in stripped else ""


def tsv_layout_cause(path: str, problems: LineProblems, senteval: bool = False) -> str:
    """The likely cause of a TSV file with no pair, when its skipped lines tell one: they all have
    one field count other than 3 (blank lines apart). ``senteval``: the file was given to
    :func:`~cosent_tf.data.benchmarks.read_senteval`, which reads TSV only. The text ends the
    message "no usable pairs in this file"; it is empty when the lines tell nothing."""
    counts = {count for count, _ in problems.layouts}
    header = problems.header
    if len(counts) > 1 and min(counts) > 3 and not senteval:  # rows of varying numbers of negatives
        return f": every line has more than 3 tab-separated fields, expected 3 ({TSV_LAYOUT}): {NTUPLE_HINT}"
    if not counts and header is not None and looks_like_label(header[0]):
        return (
            f": line 1 was read as a header, but its first field {header[0]!r} is a label: is this file "
            f"label-first? cosent-tf reads {TSV_LAYOUT}, in that order"
        )
    if len(counts) != 1:
        return ""
    (count,) = counts
    shapes = {shape for _, shape in problems.layouts}
    if count == 1:
        extension = os.path.splitext(path)[1].lower()
        if senteval and (shapes <= {"comma", "json"} or extension in (".csv", ".json", ".jsonl")):
            return (
                f": no line has a tab; read_senteval reads the SentEval layout {TSV_LAYOUT}: read CSV and JSONL "
                "files with cosent_tf.read_pair_file (cosent-tf train --format csv or --format jsonl)"
            )
        cause = f": no line has a tab, expected {TSV_LAYOUT}"
        if not senteval and shapes == {"comma"}:
            cause += ": is it comma-separated? name the format with --format csv"
        elif not senteval and shapes == {"json"}:
            cause += ": is it JSON lines? name the format with --format jsonl"
        return cause
    lines = "every line after the header" if header is not None else "every line"
    question = {2: "is the label column missing?", 4: "is there an extra column (an id?)"}
    return (
        f": {lines} has {count} tab-separated fields, expected 3 ({TSV_LAYOUT})"
        f"{': ' + question[count] if count in question else ''}"
        f"{'; or ' + NTUPLE_HINT if count > 3 and not senteval else ''}"
    )


@contextlib.contextmanager
def label_first_hint(
    path: str, number: int, text_a: str, raw_label: object, first_pair: bool = False
) -> Iterator[None]:
    """Around the parsing of a TSV line's label: a label that is no number, after a first field
    that is one, is an error that asks whether the file puts the label first. ``first_pair``: no
    line before read as a pair (line 1, a header, or a row like this one, was left out), so a
    text where the label should be tells a file of (anchor, positive, negative) rows."""
    try:
        yield
    except DataError as error:
        if not (isinstance(raw_label, str) and not looks_like_label(raw_label)):
            raise
        if looks_like_label(text_a):
            raise DataError(
                path,
                f"{error.reason}; the first field {text_a!r} is a label: is this file label-first? "
                f"cosent-tf reads {TSV_LAYOUT}, in that order",
                line=number,
            ) from None
        if not first_pair:
            raise
        raise DataError(path, f"{error.reason}; {NTUPLE_HINT}", line=number) from None


def json_object(path: PathLike, number: int, line: str) -> dict[str, Any]:
    """The JSON object on a line; anything else (not JSON, nested too deep, a number Python
    cannot convert, another JSON type) is a DataError naming the line."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataError(path, f"not valid JSON ({e.msg})", line=number) from None
    except RecursionError:
        raise DataError(path, "not usable JSON (nested too deeply)", line=number) from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise DataError(path, f"not usable JSON ({e})", line=number) from None
    if not isinstance(record, dict):
        raise DataError(path, "expected a JSON object", line=number)
    return record


def jsonl_objects(
    path: PathLike, fields: Sequence[str], problems: Optional[LineProblems] = None, hint: Hint = ""
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of a JSONL file whose objects all have ``fields``; blank lines are
    left out (and reported to ``problems`` when given). ``hint`` ends the message of a missing field.
    A file that is one JSON array of objects (a ``.json`` file often is) is an error that says so,
    whatever its first line's fault was (not JSON, not an object, longer than a line may be)."""
    first_line: Optional[int] = None
    try:
        for number, line in decoded_lines(path):
            if not line.strip():
                if problems is not None:
                    problems.add(number, "blank, skipped", skipped=True)
                continue
            first_line = number if first_line is None else first_line
            record = _checked_object(path, number, line.lstrip("\ufeff"), fields, hint)
            yield number, record
    except DataError as error:
        if error.line is not None and first_line in (None, error.line) and _starts_json_array(path):
            raise DataError(
                path,
                "holds one JSON array, not JSON lines: write one object per line (JSONL), e.g. with jq -c '.[]'",
            ) from None
        raise


def _checked_object(path: PathLike, number: int, line: str, fields: Sequence[str], hint: Hint) -> dict[str, Any]:
    record = json_object(path, number, line)
    require_fields(path, number, record, fields, hint)
    return record


def require_fields(path: PathLike, number: int, record: dict[str, Any], fields: Sequence[str], hint: Hint = "") -> None:
    """A DataError naming the line and the fields it has when the JSON object ``record`` lacks
    one of ``fields``; ``hint`` (or what it gives for the object) ends the message."""
    missing = [name for name in fields if name not in record]
    if missing:
        raise DataError(
            path,
            f"no field {', '.join(map(repr, missing))}; this line has "
            f"{', '.join(map(repr, record)) or 'no fields'}{hint if isinstance(hint, str) else hint(record)}",
            line=number,
        )


def _starts_json_array(path: PathLike) -> bool:
    """Whether a regular file starts (after a byte-order mark and white space) with ``[`` and an
    object, or is an empty array. Only its first bytes are read."""
    if not os.path.isfile(path):
        return False
    try:
        with open(path, "rb") as handle:
            start = handle.read(4096)
    except OSError:
        return False
    start = start.removeprefix(codecs.BOM_UTF8).lstrip()
    return start.startswith(b"[") and start[1:].lstrip()[:1] in (b"{", b"]")


def jsonl_records(path: str, problems: LineProblems, fields: Sequence[str], hint: Hint = "") -> Iterator[Record]:
    """The pairs of a JSONL file, one object a line with the text fields and the label field
    ``fields``; a text that is not a string is an error naming the line."""
    text_fields = fields[:2]
    for number, record in jsonl_objects(path, fields, problems, hint):
        wrong = [name for name in text_fields if not isinstance(record[name], str)]
        if wrong:
            raise DataError(path, f"{' and '.join(wrong)} must be a string", line=number)
        yield number, record[text_fields[0]], record[text_fields[1]], record[fields[2]]


def csv_rows(path: str, problems: LineProblems) -> Iterator[tuple[int, list[str]]]:
    """(line number, row) of a CSV file, its header first (a byte-order mark left out); a blank
    row is skipped and reported, a row of another length than the header's is an error, as is
    anything that is not valid CSV."""
    lines = (line.lstrip("\ufeff") if number == 1 else line for number, line in decoded_lines(path))
    reader = csv.reader(lines, strict=True)
    try:
        header = next(reader, None)
        if header is None:
            return
        yield 1, header
        start = reader.line_num + 1
        for row in reader:
            number, start = start, reader.line_num + 1
            if not row:
                problems.add(number, "blank, skipped", skipped=True)
                continue
            if len(row) != len(header):
                raise DataError(path, f"a row of {len(row)} fields under a header of {len(header)}", line=number)
            yield number, row
    except csv.Error as e:
        raise DataError(path, f"not valid CSV ({e})", line=reader.line_num) from None


def _csv_records(path: str, problems: LineProblems, file_format: PairFileFormat) -> Iterator[Record]:
    rows = csv_rows(path, problems)
    first = next(rows, None)
    if first is None:
        return
    header = first[1]
    missing = [name for name in file_format.fields if name not in header]
    if missing:
        raise DataError(
            path,
            f"no column {', '.join(map(repr, missing))}; the header has "
            f"{', '.join(map(repr, header))} (name the columns with --text-a-field, "
            f"--text-b-field and --label-field){_csv_header_cause(header)}",
            line=1,
        )
    columns = [header.index(name) for name in file_format.fields]
    for number, row in rows:
        yield number, row[columns[0]], row[columns[1]], row[columns[2]]


def _csv_header_cause(header: Sequence[str]) -> str:
    """The likely cause of a CSV header without the columns asked for, when it tells one: tabs (a
    TSV file), or a cell that reads as a label (no header: line 1 is a pair)."""
    if any("\t" in cell for cell in header):
        return "; line 1 has tabs: is it tab-separated? name the format with --format tsv"
    if any(set(names) <= set(header) for names in NTUPLE_FIELDS):
        return f"; {NTUPLE_HINT}"
    if any(looks_like_label(cell) for cell in header if cell.strip()):
        return "; line 1 reads as a pair, not a header: a CSV file starts with a line naming its columns"
    return ""


_FIELD_HINT = " (name the fields with --text-a-field, --text-b-field and --label-field)"


def _pair_field_hint(record: dict[str, Any]) -> str:
    """The end of a pair line's missing-field message: the likely cause, when its fields name one."""
    if any(set(names) <= set(record) for names in NTUPLE_FIELDS):
        return f"{_FIELD_HINT}; {NTUPLE_HINT}"
    return _FIELD_HINT


_RECORDS: dict[str, Callable[[str, LineProblems, PairFileFormat], Iterator[Record]]] = {
    "tsv": lambda path, problems, _: tsv_records(path, problems, header=True),
    "csv": _csv_records,
    "jsonl": lambda path, problems, file_format: jsonl_records(path, problems, file_format.fields, _pair_field_hint),
}


# ---------------------------------------------------------------- pair files


def read_pair_file(path: PathLike, file_format: PairFileFormat = PairFileFormat(), strict: bool = False) -> PairData:
    """Read a user's pair file: TSV, CSV with a header, or JSONL, one object a line.

    TSV lines are ``text_a<TAB>text_b<TAB>label``, after an optional header line. Labels are
    numbers (0/1, or graded scores of any range) or the NLI words (contradiction 0 < neutral 1 <
    entailment 2, any case), the same kind on every line; a ``-`` label (NLI's "no agreement")
    leaves its line out. Skipped and flagged lines are reported as by
    :func:`~cosent_tf.data.benchmarks.read_senteval`.

    Args:
        path: the file.
        file_format: its format and field names; the format defaults to the extension's.
        strict: make every skipped or flagged line (wrong field count, blank line, ``-`` label,
            empty text, repeated pair) an error.

    Returns:
        The pairs; ``label_words`` is set when the labels were NLI words.

    Raises:
        DataError: naming the file and line, for anything wrong that is not skipped: a label
            that is no number or NLI word, or not finite as float32, labels of both kinds, bad
            CSV or JSON (one JSON array rather than JSON lines), a missing column or field, a
            text that is not a string, no pair at all. Where the file tells the likely cause (the
            label first, no label column, a comma-separated TSV, a CSV without a header, GBK
            text), the message asks about it.

    Example:
        >>> data = read_pair_file("train.csv", PairFileFormat(text_a_field="q1", text_b_field="q2"))  # doctest: +SKIP
        >>> data.label_kind  # doctest: +SKIP
        'binary'
    """
    path = os.fspath(path)
    file_kind = file_format.format_of(path)
    records = _RECORDS[file_kind]
    texts_a: list[str] = []
    texts_b: list[str] = []
    labels: list[float] = []
    seen: dict[tuple[str, ...], int] = {}
    first_kind: Optional[tuple[int, bool, Any]] = None
    problems = LineProblems(path, strict)
    for number, text_a, text_b, raw_label in records(path, problems, file_format):
        hint = label_first_hint(path, number, text_a, raw_label, first_pair=first_kind is None)
        with hint if file_kind == "tsv" else contextlib.nullcontext():
            label = parse_label(path, number, raw_label, nli_words=True)
        if label is None:
            problems.add(number, "with the label '-', skipped", skipped=True)
            continue
        if first_kind is None:
            first_kind = (number, label.word, raw_label)
        elif label.word != first_kind[1]:
            kinds = ("an NLI word", "a number")
            raise DataError(
                path,
                f"label {raw_label!r} is {kinds[not label.word]}, but line {first_kind[0]}'s "
                f"{first_kind[2]!r} is {kinds[not first_kind[1]]}: use one kind of label",
                line=number,
            )
        check_texts(problems, number, [text_a, text_b], seen)
        texts_a.append(text_a)
        texts_b.append(text_b)
        labels.append(label.value)
    return pair_data(
        path,
        texts_a,
        texts_b,
        labels,
        problems,
        label_words=first_kind is not None and bool(first_kind[1]),
        why_none=tsv_layout_cause(path, problems) if file_kind == "tsv" else "",
    )


# ---------------------------------------------------------------- plain text lines


def read_lines(path: PathLike, strict: bool = False) -> list[str]:
    """The lines of a UTF-8 text file, one text each (for encode, index and search input).

    Line i of the file is text i: empty lines are kept as empty texts so that outputs stay
    aligned with the input, and reported in a warning. Carriage returns are dropped.

    Args:
        path: the file.
        strict: make an empty line an error.

    Returns:
        One text per line.

    Raises:
        DataError: the file cannot be read as UTF-8 text, or (``strict``) a line is empty.

    Example:
        >>> texts = read_lines("queries.txt")  # doctest: +SKIP
    """
    path = os.fspath(path)
    problems = LineProblems(path, strict)
    texts = []
    for number, line in decoded_lines(path):
        texts.append(without_newline(line))
        if not texts[-1].strip():
            problems.add(number, "empty, kept as empty texts")
    problems.report()
    return texts


def read_pair_lines(
    path: PathLike, strict: bool = False, file_format: Optional[PairFileFormat] = None
) -> tuple[list[str], list[str], list[str]]:
    """The pairs of a file to score, labelled or not, each with the start of its output line.

    A TSV file's lines are ``text_a<TAB>text_b[<TAB>anything else]``, carried through whole
    (extra fields, a label say, untouched). A CSV or JSONL file is read as
    :func:`read_pair_file` reads it, without its label field; its output lines start with the
    two texts, a tab or line break inside a text made a space. Empty texts are kept and reported.

    Args:
        path: the file.
        strict: make an empty text an error.
        file_format: the format and the texts' field names; the format defaults to the
            extension's, and is TSV for an extension that names none.

    Returns:
        ``(texts_a, texts_b, the output lines' starts)``.

    Raises:
        DataError: naming the file and line, for a TSV line with fewer than two fields, bad CSV
            or JSON, a missing text field, a file that is not UTF-8 text, or (``strict``) an
            empty text.

    Example:
        >>> texts_a, texts_b, lines = read_pair_lines("pairs.tsv")  # doctest: +SKIP
    """
    path = os.fspath(path)
    file_format = file_format or PairFileFormat()
    extension = os.path.splitext(path)[1].lower()
    if (file_format.format or EXTENSION_FORMATS.get(extension, "tsv")) != "tsv":
        return _unlabelled_pairs(path, strict, file_format)
    texts_a, texts_b, lines = [], [], []
    problems = LineProblems(path, strict)
    for number, line in decoded_lines(path):
        text = without_newline(line)
        fields = text.split("\t")
        if len(fields) < 2:
            raise DataError(
                path,
                "expected two tab-separated texts (text_a<TAB>text_b), "
                f"found {'an empty line' if not text else 'no tab'}",
                line=number,
            )
        if not (fields[0].strip() and fields[1].strip()):
            problems.add(number, "with an empty text, kept")
        texts_a.append(fields[0])
        texts_b.append(fields[1])
        lines.append(text)
    problems.report()
    return texts_a, texts_b, lines


def _unlabelled_pairs(path: str, strict: bool, file_format: PairFileFormat) -> tuple[list[str], list[str], list[str]]:
    # The label field is named as the first text's: a field every pair has, labelled or not.
    unlabelled = dataclasses.replace(file_format, label_field=file_format.text_a_field)
    problems = LineProblems(path, strict)
    texts_a, texts_b, lines = [], [], []
    for number, text_a, text_b, _ in _RECORDS[unlabelled.format_of(path)](path, problems, unlabelled):
        if not (text_a.strip() and text_b.strip()):
            problems.add(number, "with an empty text, kept")
        texts_a.append(text_a)
        texts_b.append(text_b)
        lines.append(f"{_one_line(text_a)}\t{_one_line(text_b)}")
    problems.report()
    return texts_a, texts_b, lines


def _one_line(text: str) -> str:
    # A CSV cell may hold a tab or a line break, which would split a TSV output line.
    return " ".join(text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", "\n").split("\n"))
