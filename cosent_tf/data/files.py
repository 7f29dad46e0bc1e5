"""Readers for the senteval_cn matching files, CNSD NLI jsonl, and plain text inputs."""

import csv
import dataclasses
import fnmatch
import json
import logging
import math
import os
import re

import numpy as np

from ..errors import DataError, where
from .tasks import MATCHING_TASKS, SENTEVAL, Task, get_task

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")
# Ordinal NLI labels: contradiction < neutral < entailment.
NLI_LABELS = {"contradiction": 0, "neutral": 1, "entailment": 2}


@dataclasses.dataclass
class PairData:
    """Aligned sentence pairs with one float label each.

    ``label_words``: the labels were NLI words (contradiction 0 < neutral 1 < entailment 2).
    """

    texts_a: list
    texts_b: list
    labels: np.ndarray
    source: str = ""
    skipped_lines: list = dataclasses.field(default_factory=list)
    label_words: bool = False

    def __len__(self):
        return len(self.labels)

    def subset(self, indices) -> "PairData":
        indices = np.asarray(indices, dtype=np.int64)
        return PairData(
            [self.texts_a[i] for i in indices],
            [self.texts_b[i] for i in indices],
            self.labels[indices],
            self.source,
            list(self.skipped_lines),
            self.label_words,
        )

    def sample(self, count: int, seed: int) -> "PairData":
        """A seeded random subset of ``count`` pairs (all pairs if there are fewer), in file order."""
        if count is None or count >= len(self):
            return self
        rng = np.random.default_rng(seed)
        return self.subset(np.sort(rng.choice(len(self), size=count, replace=False)))

    @staticmethod
    def concat(parts) -> "PairData":
        return PairData(
            [t for p in parts for t in p.texts_a],
            [t for p in parts for t in p.texts_b],
            np.concatenate([p.labels for p in parts]).astype(np.float32),
            ", ".join(p.source for p in parts),
            [],
            all(p.label_words for p in parts),
        )

    @property
    def label_kind(self) -> str:
        """``nli`` (NLI words), ``binary`` (numbers, all 0 or 1) or ``graded`` (other numbers)."""
        if self.label_words:
            return "nli"
        return "binary" if set(np.unique(self.labels)) <= {0.0, 1.0} else "graded"


# A longer line is not text (a binary file, /dev/zero): refused before it fills memory.
MAX_LINE_BYTES = 1 << 20


def _decoded_lines(path):
    """Yield (line number, text) of a UTF-8 file, reading at most MAX_LINE_BYTES a line; a bad
    byte sequence or a longer line names its line."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 (a with block follows; only the open may fail here)
    except OSError as e:
        raise DataError(where(path) if isinstance(e, FileNotFoundError) else path, f"cannot open ({e.strerror})") from e
    with handle:
        number = 0
        while raw := _read_line(handle, path, number + 1):
            number += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise DataError(
                    path, f"line {number} is longer than {MAX_LINE_BYTES >> 20} MB; is this a text file?", line=number
                )
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(path, f"not valid UTF-8 at byte {e.start} ({e.reason})", line=number) from e


def _read_line(handle, path, number):
    try:
        return handle.readline(MAX_LINE_BYTES + 1)
    except OSError as e:  # a folder, or a device that fails
        raise DataError(path, f"cannot read ({e.strerror or e})", line=number) from e


# Python's float() also reads "0_5" (as 5.0) and "１" (full-width digits): labels must be plain.
PLAIN_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", re.ASCII)


class _LineProblems:
    """Lines a reader skips or flags: warned about per kind at the end, or, with
    ``strict``, an error naming the file and line at the first one. ``benchmark``: the file
    is a published benchmark's, whose kept lines (repeated pairs, empty texts) are part of it,
    so those are logged at DEBUG level, out of the console; skipped lines are always warned about."""

    def __init__(self, path, strict, benchmark=False):
        self.path, self.strict, self.benchmark = path, strict, benchmark
        self.by_kind = {}
        self.skipped = []
        self.skipping_kinds = set()

    def add(self, number, kind, detail="", skipped=False):
        if self.strict:
            raise DataError(self.path, f"{kind}{detail} (an error under --strict)", line=number)
        self.by_kind.setdefault(kind, []).append(number)
        if skipped:
            self.skipped.append(number)
            self.skipping_kinds.add(kind)

    def report(self):
        for kind, numbers in self.by_kind.items():
            shown = ", ".join(str(n) for n in numbers[:5]) + (" ..." if len(numbers) > 5 else "")
            level = logging.DEBUG if self.benchmark and kind not in self.skipping_kinds else logging.WARNING
            logger.log(level, "%s: %d line(s) %s (lines %s)", self.path, len(numbers), kind, shown)


def _check_texts(problems, number, texts, seen):
    if not all(t.strip() for t in texts):
        problems.add(number, "with an empty text, kept")
    first = seen.setdefault(tuple(texts), number)
    if first != number:
        problems.add(number, "repeating an earlier pair, kept", f": the pair of line {first}")


def read_senteval(path, strict: bool = False, task=None, benchmark: bool = False) -> PairData:
    """Read ``text1<TAB>text2<TAB>label`` lines, as the original experiments do.

    Lines that do not split into exactly 3 fields are skipped, counted in
    ``skipped_lines`` and reported in a warning; empty texts and repeated pairs are kept
    and reported. With ``strict`` each of these is an error naming the file and line.
    A label that is not a finite number is always an error, and so is one that does not
    fit ``task`` (a :class:`~cosent_tf.data.tasks.Task` or its name): outside its label range,
    or not 0 or 1 for a binary task. ``benchmark``: a published benchmark's own file, whose
    kept lines are noted rather than warned about (see :func:`load_task`).
    """
    path = os.fspath(path)
    task = None if task is None else get_task(task)
    texts_a, texts_b, labels, seen = [], [], [], {}
    problems = _LineProblems(path, strict, benchmark)
    for number, line in _decoded_lines(path):
        fields = _without_newline(line).split("\t")
        if len(fields) != 3:
            problems.add(
                number, "without exactly 3 tab-separated fields, skipped", f": found {len(fields)}", skipped=True
            )
            continue
        labels.append(_label(path, number, fields[2], task))
        _check_texts(problems, number, fields[:2], seen)
        texts_a.append(fields[0])
        texts_b.append(fields[1])
    problems.report()
    if not labels:
        raise DataError(path, "no usable pairs in this file")
    return PairData(texts_a, texts_b, np.asarray(labels, dtype=np.float32), path, problems.skipped)


# Labels are stored as float32: a larger number would become infinite there.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def _finite_label(path, number, value, what="label"):
    """``value`` (a number, or a text float() reads) as a float, refused unless float32, the type
    labels are stored in, holds it as a finite number. Every label and score is checked here."""
    try:
        label = float(value)
    except OverflowError:  # an integer beyond every float
        label = math.inf
    if not abs(label) <= FLOAT32_MAX:  # NaN fails this too
        raise DataError(
            path,
            f"{what} {_shown(value)} is not finite as a 32-bit float, which labels are stored in (±3.4e38 at most)",
            line=number,
        )
    return label


def _shown(value, limit=40):
    """``repr(value)`` cut to ``limit`` characters, for a message about a 400-digit label."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _label(path, number, text, task: Task):
    try:
        float(text)
    except ValueError:
        raise DataError(path, f"label {text!r} is not a number", line=number) from None
    label = _finite_label(path, number, text)
    if not PLAIN_DECIMAL.fullmatch(text.strip()):
        raise DataError(path, f"label {text!r} is not a plain decimal number", line=number)
    if task is None:
        return label
    if task.binary and label not in (0.0, 1.0):
        raise DataError(path, f"label {text!r} is not 0 or 1", line=number)
    low, high = task.label_range
    if not low <= label <= high:
        raise DataError(path, f"label {text!r} is outside {low:g}-{high:g}", line=number)
    return label


def read_nli(path, strict: bool = False) -> PairData:
    """Read CNSD jsonl (``sentence1``, ``sentence2``, ``gold_label``) with ordinal labels.

    Lines whose gold label is not one of the three classes (e.g. ``-``) and blank lines
    are skipped and reported, as in the original; empty texts and repeated pairs are kept
    and reported; with ``strict`` all of these are errors. Malformed JSON, a missing
    field or a sentence that is not a string is always an error naming the file and line.
    """
    path = os.fspath(path)
    texts_a, texts_b, labels, seen = [], [], [], {}
    problems = _LineProblems(path, strict)
    for number, line in _decoded_lines(path):
        if not line.strip():
            problems.add(number, "blank, skipped", skipped=True)
            continue
        record = _json_object(path, number, line)
        missing = [k for k in ("sentence1", "sentence2", "gold_label") if k not in record]
        if missing:
            raise DataError(path, f"missing field(s) {', '.join(missing)}", line=number)
        texts = [record["sentence1"], record["sentence2"]]
        wrong = [k for k, t in zip(("sentence1", "sentence2"), texts) if not isinstance(t, str)]
        if wrong:
            raise DataError(path, f"{' and '.join(wrong)} must be a string", line=number)
        if not isinstance(record["gold_label"], str) or record["gold_label"] not in NLI_LABELS:
            problems.add(
                number,
                "with a gold_label outside " + "/".join(NLI_LABELS) + ", skipped",
                f": {record['gold_label']!r}",
                skipped=True,
            )
            continue
        _check_texts(problems, number, texts, seen)
        texts_a.append(texts[0])
        texts_b.append(texts[1])
        labels.append(NLI_LABELS[record["gold_label"]])
    problems.report()
    if not labels:
        raise DataError(path, "no usable pairs in this file")
    return PairData(texts_a, texts_b, np.asarray(labels, dtype=np.float32), path, problems.skipped)


def task_file(data_dir, task: str, split: str) -> str:
    """Path of ``TASK/TASK.split.data`` under ``data_dir`` (the senteval_cn folder)."""
    if get_task(task).data != SENTEVAL:
        raise ValueError(f"task {task!r} has no senteval files; choose one of {', '.join(MATCHING_TASKS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    return os.path.join(os.fspath(data_dir), task, f"{task}.{split}.data")


def load_task(data_dir, task: str, split: str, strict: bool = False) -> PairData:
    """A task's split, with its labels checked against the task's. The published files repeat
    some pairs (STS-B does): those are logged at DEBUG level, not shown."""
    path = task_file(data_dir, task, split)
    if not os.path.exists(path):
        raise DataError(path, f"the {task} {split} split is not here (file does not exist)")
    return read_senteval(path, strict, task, benchmark=True)


def _without_newline(line):
    return line.rstrip("\r\n")


def read_lines(path, strict: bool = False) -> list:
    """The lines of a UTF-8 text file, one text each (for encode, index and search input).

    Line i of the file is text i: empty lines are kept as empty texts so outputs stay
    aligned with the input, and reported in a warning (an error with ``strict``).
    Carriage returns are dropped.
    """
    path = os.fspath(path)
    problems = _LineProblems(path, strict)
    texts = []
    for number, line in _decoded_lines(path):
        texts.append(_without_newline(line))
        if not texts[-1].strip():
            problems.add(number, "empty, kept as empty texts")
    problems.report()
    return texts


def read_pair_lines(path, strict: bool = False) -> tuple:
    """``text_a<TAB>text_b[<TAB>anything else]`` lines: (texts_a, texts_b, the raw lines).

    Extra fields (a label, say) are carried through untouched in the raw lines; a line
    with fewer than two fields is an error naming the file and line. Empty texts are
    kept and reported (an error with ``strict``).
    """
    path = os.fspath(path)
    texts_a, texts_b, lines = [], [], []
    problems = _LineProblems(path, strict)
    for number, line in _decoded_lines(path):
        line = _without_newline(line)
        fields = line.split("\t")
        if len(fields) < 2:
            raise DataError(
                path,
                "expected two tab-separated texts (text_a<TAB>text_b), "
                f"found {'an empty line' if not line else 'no tab'}",
                line=number,
            )
        if not (fields[0].strip() and fields[1].strip()):
            problems.add(number, "with an empty text, kept")
        texts_a.append(fields[0])
        texts_b.append(fields[1])
        lines.append(line)
    problems.report()
    return texts_a, texts_b, lines


def senteval_dir(data_dir) -> str:
    """Accept either the shared data root (holding senteval_cn/) or the senteval_cn folder."""
    nested = os.path.join(data_dir, "senteval_cn")
    return nested if os.path.isdir(nested) else os.fspath(data_dir)


SHARED_VOCAB = os.path.join("vocab", "bert-base-chinese-vocab.txt")


def shared_vocab(data_dir, default_root=None) -> str:
    """The Chinese BERT vocabulary of a data folder: ``data_dir/vocab/...``; when ``data_dir`` is a
    senteval_cn folder, its parent's; else ``default_root``'s (the default data root), so that
    pointing --data-dir at other pair files keeps the shared vocabulary. The first of these
    that exists, or (none does) the first, which the run's checks then name."""
    data_dir = os.fspath(data_dir)
    candidates = [os.path.join(data_dir, SHARED_VOCAB)]
    if os.path.basename(os.path.normpath(data_dir)) == "senteval_cn":
        candidates.append(os.path.join(os.path.dirname(os.path.abspath(data_dir)), SHARED_VOCAB))
    if default_root is not None:
        candidates.append(os.path.join(os.fspath(default_root), SHARED_VOCAB))
    return next((path for path in candidates if os.path.isfile(path)), candidates[0])


def nli_files(data_dir) -> list:
    """Every ``cnsd-*/*.jsonl`` below ``data_dir``, each real folder read once.

    Links to folders are followed, but a folder reached twice (a link back up the tree,
    ``x -> .``) is not read again: that would repeat the training data, or never end.
    """
    paths, seen = [], set()
    for folder, subfolders, files in os.walk(data_dir, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            subfolders.clear()
            continue
        seen.add(real)
        subfolders.sort()
        if fnmatch.fnmatchcase(os.path.basename(folder), "cnsd-*"):
            paths.extend(os.path.join(folder, name) for name in files if name.endswith(".jsonl"))
    return sorted(paths)


# ---------------------------------------------------------------- a user's own pair files

FILE_FORMATS = ("tsv", "csv", "jsonl")
EXTENSION_FORMATS = {".tsv": "tsv", ".txt": "tsv", ".data": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}


@dataclasses.dataclass(frozen=True)
class PairFileFormat:
    """How to read a pair file: the format (None: from the extension), and for CSV and JSONL
    the names of the two text fields and the label field."""

    format: str = None
    text_a_field: str = "sentence1"
    text_b_field: str = "sentence2"
    label_field: str = "label"

    def format_of(self, path) -> str:
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
    def fields(self) -> tuple:
        return self.text_a_field, self.text_b_field, self.label_field


_SKIP = object()  # a label that marks a line to leave out, as NLI's "-"


def _file_label(path, number, value):
    """(label, is an NLI word) of a label cell, or _SKIP for NLI's '-'."""
    not_a_label = DataError(
        path, f"label {_shown(value)} is not a number or an NLI word ({'/'.join(NLI_LABELS)})", line=number
    )
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise not_a_label
    if isinstance(value, (int, float)):
        return _finite_label(path, number, value), False
    text = value.strip()
    if text.lower() in NLI_LABELS:
        return float(NLI_LABELS[text.lower()]), True
    if text == "-":
        return _SKIP
    if not PLAIN_DECIMAL.fullmatch(text):
        raise not_a_label
    return _finite_label(path, number, text), False


def _is_label(text):
    """Whether line 1's third cell is a pair's label rather than a header's column name. Whatever
    reads as a number is a label, even one refused later (1e39, nan): taken for a header, its
    line would be left out without a word."""
    text = text.strip()
    if text.lower() in NLI_LABELS or text == "-" or PLAIN_DECIMAL.fullmatch(text):
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


def _tsv_records(path, problems, file_format):
    for number, line in _decoded_lines(path):
        fields = _without_newline(line).lstrip("\ufeff" if number == 1 else "").split("\t")
        if len(fields) != 3:
            problems.add(
                number, "without exactly 3 tab-separated fields, skipped", f": found {len(fields)}", skipped=True
            )
            continue
        if number == 1 and not _is_label(fields[2]):
            logger.info("%s: line 1 is a header (%s), not a pair", path, " | ".join(fields))
            continue
        yield number, fields[0], fields[1], fields[2]


def _csv_records(path, problems, file_format):
    lines = (line.lstrip("\ufeff") if number == 1 else line for number, line in _decoded_lines(path))
    reader = csv.reader(lines, strict=True)
    try:
        header = next(reader, None)
        if header is None:
            return
        missing = [name for name in file_format.fields if name not in header]
        if missing:
            raise DataError(
                path,
                f"no column {', '.join(map(repr, missing))}; the header has "
                f"{', '.join(map(repr, header))} (name the columns with --text-a-field, "
                "--text-b-field and --label-field)",
                line=1,
            )
        columns = [header.index(name) for name in file_format.fields]
        start = reader.line_num + 1
        for row in reader:
            number, start = start, reader.line_num + 1
            if not row:
                problems.add(number, "blank, skipped", skipped=True)
                continue
            if len(row) != len(header):
                raise DataError(path, f"a row of {len(row)} fields under a header of {len(header)}", line=number)
            yield number, *(row[c] for c in columns)
    except csv.Error as e:
        raise DataError(path, f"not valid CSV ({e})", line=reader.line_num) from None


def _jsonl_records(path, problems, file_format):
    text_fields = file_format.fields[:2]
    hint = " (name the fields with --text-a-field, --text-b-field and --label-field)"
    for number, record in _jsonl_objects(path, file_format.fields, problems, hint):
        wrong = [name for name in text_fields if not isinstance(record[name], str)]
        if wrong:
            raise DataError(path, f"{' and '.join(wrong)} must be a string", line=number)
        yield number, record[text_fields[0]], record[text_fields[1]], record[file_format.label_field]


_RECORDS = {"tsv": _tsv_records, "csv": _csv_records, "jsonl": _jsonl_records}


def read_pair_file(path, file_format: PairFileFormat = PairFileFormat(), strict: bool = False) -> PairData:
    """Read a user's pair file: TSV (``text_a<TAB>text_b<TAB>label``, an optional header line),
    CSV with a header, or JSONL, one object a line.

    Labels are numbers (0/1, or graded scores of any range) or the NLI words
    (contradiction 0 < neutral 1 < entailment 2, any case), the same kind on every line;
    a ``-`` label (NLI's "no agreement") leaves its line out. Skipped and flagged lines are
    reported as by :func:`read_senteval` (errors with ``strict``); everything else that
    is wrong is an error naming the file and line.
    """
    path = os.fspath(path)
    records = _RECORDS[file_format.format_of(path)]
    texts_a, texts_b, labels, seen, first_kind = [], [], [], {}, None
    problems = _LineProblems(path, strict)
    for number, text_a, text_b, raw_label in records(path, problems, file_format):
        label = _file_label(path, number, raw_label)
        if label is _SKIP:
            problems.add(number, "with the label '-', skipped", skipped=True)
            continue
        value, is_word = label
        if first_kind is None:
            first_kind = (number, is_word, raw_label)
        elif is_word != first_kind[1]:
            kinds = ("an NLI word", "a number")
            raise DataError(
                path,
                f"label {raw_label!r} is {kinds[not is_word]}, but line {first_kind[0]}'s "
                f"{first_kind[2]!r} is {kinds[not first_kind[1]]}: use one kind of label",
                line=number,
            )
        _check_texts(problems, number, [text_a, text_b], seen)
        texts_a.append(text_a)
        texts_b.append(text_b)
        labels.append(value)
    problems.report()
    if not labels:
        raise DataError(path, "no usable pairs in this file")
    return PairData(
        texts_a, texts_b, np.asarray(labels, dtype=np.float32), path, problems.skipped, label_words=bool(first_kind[1])
    )


def _json_object(path, number, line):
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


def _jsonl_objects(path, fields, problems=None, hint=""):
    """(line number, object) of a JSONL file whose objects all have ``fields``; blank lines are
    left out (and reported to ``problems`` when given)."""
    for number, line in _decoded_lines(path):
        if not line.strip():
            if problems is not None:
                problems.add(number, "blank, skipped", skipped=True)
            continue
        record = _json_object(path, number, line.lstrip("\ufeff"))
        missing = [name for name in fields if name not in record]
        if missing:
            raise DataError(
                path,
                f"no field {', '.join(map(repr, missing))}; this line has "
                f"{', '.join(map(repr, record)) or 'no fields'}{hint}",
                line=number,
            )
        yield number, record


def _retrieval_id(path, number, record, earlier, what):
    """A record's ``_id`` as the qrels file writes it; a repeated one is an error, not a silent choice."""
    value = record["_id"]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(path, f"_id must be a string or an integer, not {_json_type(value)}", line=number)
    key = str(value)
    if key in earlier:
        raise DataError(path, f"_id {key!r} repeats an earlier {what}", line=number)
    return key


def _retrieval_text(path, number, record, field, optional=False):
    value = record.get(field)
    if value is None and optional:
        return ""
    if not isinstance(value, str):
        raise DataError(path, f"{field} must be a string, not {_json_type(value)}", line=number)
    return value


def _json_type(value):
    names = {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "true/false",
        int: "a number",
        float: "a number",
    }
    return names.get(type(value), "null")


def read_retrieval_files(queries_path, corpus_path, qrels_path) -> tuple:
    """A retrieval test in the BEIR/MTEB layout: ``(queries, corpus, relevant)``.

    ``queries.jsonl`` holds ``{"_id", "text"}`` objects, ``corpus.jsonl`` ``{"_id", "text"}``
    with an optional ``title`` (put before the text), and the qrels TSV holds
    ``query-id<TAB>corpus-id<TAB>score`` lines (a header line is allowed); a score above 0
    marks a relevant text. Queries without a relevant text are left out. ``relevant[i]`` is
    the set of corpus indices relevant to query i.
    """
    query_text, corpus_index, corpus = {}, {}, []
    for number, record in _jsonl_objects(queries_path, ("_id", "text")):
        key = _retrieval_id(queries_path, number, record, query_text, "query")
        query_text[key] = _retrieval_text(queries_path, number, record, "text")
    for number, record in _jsonl_objects(corpus_path, ("_id", "text")):
        key = _retrieval_id(corpus_path, number, record, corpus_index, "document")
        text = _retrieval_text(corpus_path, number, record, "text")
        title = _retrieval_text(corpus_path, number, record, "title", optional=True).strip()
        corpus_index[key] = len(corpus)
        corpus.append(f"{title} {text}" if title else text)
    relevant = {}
    for number, line in _decoded_lines(qrels_path):
        fields = _without_newline(line).split("\t")
        if number == 1 and fields[:2] == ["query-id", "corpus-id"]:
            continue
        if not line.strip():
            continue
        if len(fields) != 3:
            raise DataError(
                qrels_path, f"expected query-id<TAB>corpus-id<TAB>score, found {len(fields)} field(s)", line=number
            )
        query, document, score = fields
        if query not in query_text:
            raise DataError(qrels_path, f"query-id {query!r} is not in {queries_path}", line=number)
        if document not in corpus_index:
            raise DataError(qrels_path, f"corpus-id {document!r} is not in {corpus_path}", line=number)
        if not PLAIN_DECIMAL.fullmatch(score.strip()):
            raise DataError(qrels_path, f"score {score!r} is not a number", line=number)
        if _finite_label(qrels_path, number, score.strip(), "score") > 0:
            relevant.setdefault(query, set()).add(corpus_index[document])
    if not relevant:
        raise DataError(qrels_path, "no relevant (score > 0) query-document pair in this file")
    return [query_text[q] for q in relevant], corpus, list(relevant.values())
