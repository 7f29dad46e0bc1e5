"""Readers for the senteval_cn matching files, CNSD NLI jsonl, and plain text inputs."""

import dataclasses
import fnmatch
import json
import logging
import math
import os
import re

import numpy as np

from .errors import DataError
from .tasks import MATCHING_TASKS, SENTEVAL, Task, get_task

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")
# Ordinal NLI labels: contradiction < neutral < entailment.
NLI_LABELS = {"contradiction": 0, "neutral": 1, "entailment": 2}


@dataclasses.dataclass
class PairData:
    """Aligned sentence pairs with one float label each."""

    texts_a: list
    texts_b: list
    labels: np.ndarray
    source: str = ""
    skipped_lines: list = dataclasses.field(default_factory=list)

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
        )


def _decoded_lines(path):
    """Yield (line number, text) of a UTF-8 file; a bad byte sequence names its line."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 (a with block follows; only the open may fail here)
    except OSError as e:
        raise DataError(path, f"cannot open ({e.strerror})") from e
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(path, f"not valid UTF-8 at byte {e.start} ({e.reason})", line=number) from e


# Python's float() also reads "0_5" (as 5.0) and "１" (full-width digits): labels must be plain.
PLAIN_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", re.ASCII)


class _LineProblems:
    """Lines a reader skips or flags: warned about per kind at the end, or, with
    ``strict``, an error naming the file and line at the first one."""

    def __init__(self, path, strict):
        self.path, self.strict = path, strict
        self.by_kind = {}
        self.skipped = []

    def add(self, number, kind, detail="", skipped=False):
        if self.strict:
            raise DataError(self.path, f"{kind}{detail} (an error under --strict)", line=number)
        self.by_kind.setdefault(kind, []).append(number)
        if skipped:
            self.skipped.append(number)

    def report(self):
        for kind, numbers in self.by_kind.items():
            shown = ", ".join(str(n) for n in numbers[:5]) + (" ..." if len(numbers) > 5 else "")
            logger.warning("%s: %d line(s) %s (lines %s)", self.path, len(numbers), kind, shown)


def _check_texts(problems, number, texts, seen):
    if not all(t.strip() for t in texts):
        problems.add(number, "with an empty text, kept")
    first = seen.setdefault(tuple(texts), number)
    if first != number:
        problems.add(number, "repeating an earlier pair, kept", f": the pair of line {first}")


def read_senteval(path, strict: bool = False, task=None) -> PairData:
    """Read ``text1<TAB>text2<TAB>label`` lines, as the original experiments do.

    Lines that do not split into exactly 3 fields are skipped, counted in
    ``skipped_lines`` and reported in a warning; empty texts and repeated pairs are kept
    and reported. With ``strict`` each of these is an error naming the file and line.
    A label that is not a finite number is always an error, and so is one that does not
    fit ``task`` (a :class:`~cosent_tf.tasks.Task` or its name): outside its label range,
    or not 0 or 1 for a binary task.
    """
    path = os.fspath(path)
    task = None if task is None else get_task(task)
    texts_a, texts_b, labels, seen = [], [], [], {}
    problems = _LineProblems(path, strict)
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


def _label(path, number, text, task: Task):
    try:
        label = float(text)
    except ValueError:
        raise DataError(path, f"label {text!r} is not a number", line=number) from None
    if not math.isfinite(label):
        raise DataError(path, f"label {text!r} is not finite", line=number)
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
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(path, f"not valid JSON ({e.msg})", line=number) from None
        if not isinstance(record, dict):
            raise DataError(path, "expected a JSON object", line=number)
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
    """A task's split, with its labels checked against the task's."""
    path = task_file(data_dir, task, split)
    if not os.path.exists(path):
        raise DataError(path, f"the {task} {split} split is not here (file does not exist)")
    return read_senteval(path, strict, task)


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
