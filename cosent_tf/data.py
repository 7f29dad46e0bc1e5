"""Readers for the senteval_cn matching files and CNSD NLI jsonl."""
import dataclasses
import json
import logging
import math
import os

import numpy as np

from .errors import DataError

logger = logging.getLogger(__name__)

TASKS = ("ATEC", "BQ", "LCQMC", "PAWSX", "STS-B")
BINARY_TASKS = ("ATEC", "BQ", "LCQMC", "PAWSX")
# STS-B scores (0-5) are split into similar / dissimilar above this, as the original does.
STS_B_POSITIVE_ABOVE = 2.5
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

    def subset(self, indices):
        indices = np.asarray(indices, dtype=np.int64)
        return PairData([self.texts_a[i] for i in indices], [self.texts_b[i] for i in indices],
                        self.labels[indices], self.source, list(self.skipped_lines))

    def sample(self, count, seed):
        """A seeded random subset of ``count`` pairs (all pairs if there are fewer), in file order."""
        if count is None or count >= len(self):
            return self
        rng = np.random.default_rng(seed)
        return self.subset(np.sort(rng.choice(len(self), size=count, replace=False)))

    @staticmethod
    def concat(parts):
        return PairData(
            [t for p in parts for t in p.texts_a], [t for p in parts for t in p.texts_b],
            np.concatenate([p.labels for p in parts]).astype(np.float32),
            ", ".join(p.source for p in parts), [])


def _decoded_lines(path):
    """Yield (line number, text) of a UTF-8 file; a bad byte sequence names its line."""
    try:
        handle = open(path, "rb")
    except OSError as e:
        raise DataError(path, f"cannot open ({e.strerror})") from e
    with handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(path, f"not valid UTF-8 at byte {e.start} ({e.reason})", line=number) from e


def _report_skipped(path, skipped, why):
    if skipped:
        shown = ", ".join(str(n) for n in skipped[:5]) + (" ..." if len(skipped) > 5 else "")
        logger.warning("%s: skipped %d line(s) %s (lines %s)", path, len(skipped), why, shown)


def read_senteval(path):
    """Read ``text1<TAB>text2<TAB>label`` lines, as the original experiments do.

    Lines that do not split into exactly 3 fields after stripping are skipped, counted in
    ``skipped_lines`` and reported in a warning. A label that is not a finite number is an
    error naming the file and line.
    """
    path = os.fspath(path)
    texts_a, texts_b, labels, skipped = [], [], [], []
    for number, line in _decoded_lines(path):
        fields = line.strip().split("\t")
        if len(fields) != 3:
            skipped.append(number)
            continue
        try:
            label = float(fields[2])
        except ValueError:
            raise DataError(path, f"label {fields[2]!r} is not a number", line=number) from None
        if not math.isfinite(label):
            raise DataError(path, f"label {fields[2]!r} is not finite", line=number)
        texts_a.append(fields[0])
        texts_b.append(fields[1])
        labels.append(label)
    _report_skipped(path, skipped, "without exactly 3 tab-separated fields")
    if not labels:
        raise DataError(path, "no usable pairs in this file")
    return PairData(texts_a, texts_b, np.asarray(labels, dtype=np.float32), path, skipped)


def read_nli(path):
    """Read CNSD jsonl (``sentence1``, ``sentence2``, ``gold_label``) with ordinal labels.

    Lines whose gold label is not one of the three classes (e.g. ``-``) and blank lines
    are skipped and reported, as in the original; malformed JSON or a missing field is an
    error naming the file and line.
    """
    path = os.fspath(path)
    texts_a, texts_b, labels, skipped = [], [], [], []
    for number, line in _decoded_lines(path):
        if not line.strip():
            skipped.append(number)
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
        if record["gold_label"] not in NLI_LABELS:
            skipped.append(number)
            continue
        texts_a.append(str(record["sentence1"]))
        texts_b.append(str(record["sentence2"]))
        labels.append(NLI_LABELS[record["gold_label"]])
    _report_skipped(path, skipped, "that are blank or have a gold_label outside "
                    + "/".join(NLI_LABELS))
    if not labels:
        raise DataError(path, "no usable pairs in this file")
    return PairData(texts_a, texts_b, np.asarray(labels, dtype=np.float32), path, skipped)


def binarised(labels, task):
    """0/1 classes for a loss that needs them: STS-B scores split at 2.5, others unchanged."""
    labels = np.asarray(labels, dtype=np.float32)
    return (labels > STS_B_POSITIVE_ABOVE).astype(np.float32) if task == "STS-B" else labels


def task_file(data_dir, task, split):
    """Path of ``TASK/TASK.split.data`` under ``data_dir`` (the senteval_cn folder)."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    return os.path.join(os.fspath(data_dir), task, f"{task}.{split}.data")


def load_task(data_dir, task, split):
    path = task_file(data_dir, task, split)
    if not os.path.exists(path):
        raise DataError(path, f"the {task} {split} split is not here (file does not exist)")
    return read_senteval(path)


def _without_newline(line):
    return line.rstrip("\r\n")


def read_lines(path):
    """The lines of a UTF-8 text file, one text each (for encode, index and search input).

    Line i of the file is text i: empty lines are kept as empty texts so outputs stay
    aligned with the input, and reported in a warning. Carriage returns are dropped.
    """
    path = os.fspath(path)
    texts = [_without_newline(line) for _, line in _decoded_lines(path)]
    empty = [n for n, t in enumerate(texts, start=1) if not t.strip()]
    if empty:
        logger.warning("%s: %d empty line(s) kept as empty texts (lines %s)", path, len(empty),
                       ", ".join(str(n) for n in empty[:5]) + (" ..." if len(empty) > 5 else ""))
    return texts


def read_pair_lines(path):
    """``text_a<TAB>text_b[<TAB>anything else]`` lines: (texts_a, texts_b, the raw lines).

    Extra fields (a label, say) are carried through untouched in the raw lines; a line
    with fewer than two fields is an error naming the file and line.
    """
    path = os.fspath(path)
    texts_a, texts_b, lines = [], [], []
    for number, line in _decoded_lines(path):
        line = _without_newline(line)
        fields = line.split("\t")
        if len(fields) < 2:
            raise DataError(path, "expected two tab-separated texts (text_a<TAB>text_b), "
                                  f"found {'an empty line' if not line else 'no tab'}", line=number)
        texts_a.append(fields[0])
        texts_b.append(fields[1])
        lines.append(line)
    return texts_a, texts_b, lines
