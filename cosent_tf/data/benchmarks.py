"""The published benchmarks' files: the senteval_cn matching tasks (``TASK/TASK.split.data``),
the CNSD NLI jsonl files, and the shared data folder's layout around them."""

from __future__ import annotations

import fnmatch
import os
from typing import Optional, Union

from ..errors import DataError
from .files import jsonl_records, label_first_hint, tsv_layout_cause, tsv_records
from .pairs import NLI_LABELS, LineProblems, PairData, PathLike, check_texts, pair_data, parse_label
from .tasks import MATCHING_TASKS, SENTEVAL, Task, get_task

SPLITS = ("train", "valid", "test")


def read_senteval(
    path: PathLike, strict: bool = False, task: Optional[Union[Task, str]] = None, benchmark: bool = False
) -> PairData:
    """Read ``text1<TAB>text2<TAB>label`` lines, as the original experiments do.

    Lines that do not split into exactly 3 fields are skipped, counted in ``skipped_lines``
    and reported in a warning; empty texts and repeated pairs are kept and reported.

    Args:
        path: the file.
        strict: make each skipped or flagged line an error naming the file and line.
        task: a :class:`~cosent_tf.data.tasks.Task` or its name, whose labels these must be.
        benchmark: the file is a published benchmark's own, whose kept lines are noted at DEBUG
            level rather than warned about (see :func:`load_task`).

    Returns:
        The pairs, with float32 labels.

    Raises:
        DataError: naming the file and line, for a label that is not a plain decimal number
            finite as float32, one that does not fit ``task`` (outside its label range, or not
            0 or 1 for a binary task), a file that is not UTF-8 text, or no pair at all.

    Example:
        >>> data = read_senteval("senteval_cn/STS-B/STS-B.valid.data", task="STS-B")  # doctest: +SKIP
        >>> data.label_kind  # doctest: +SKIP
        'graded'
    """
    path = os.fspath(path)
    task = None if task is None else get_task(task)
    texts_a: list[str] = []
    texts_b: list[str] = []
    labels: list[float] = []
    seen: dict[tuple[str, ...], int] = {}
    problems = LineProblems(path, strict, benchmark)
    for number, text_a, text_b, text in tsv_records(path, problems):
        with label_first_hint(path, number, text_a, text):
            label = parse_label(path, number, text).value
        labels.append(_task_label(path, number, text, label, task))
        check_texts(problems, number, [text_a, text_b], seen)
        texts_a.append(text_a)
        texts_b.append(text_b)
    return pair_data(path, texts_a, texts_b, labels, problems, why_none=tsv_layout_cause(path, problems, senteval=True))


def _task_label(path: str, number: int, text: str, label: float, task: Optional[Task]) -> float:
    if task is None:
        return label
    if task.binary and label not in (0.0, 1.0):
        raise DataError(path, f"label {text!r} is not 0 or 1", line=number)
    low, high = task.label_range
    if not low <= label <= high:
        raise DataError(path, f"label {text!r} is outside {low:g}-{high:g}", line=number)
    return label


_NLI_FIELDS = ("sentence1", "sentence2", "gold_label")


def read_nli(path: PathLike, strict: bool = False) -> PairData:
    """Read CNSD jsonl (``sentence1``, ``sentence2``, ``gold_label``) with ordinal labels,
    contradiction 0 < neutral 1 < entailment 2.

    Lines whose gold label is not one of the three classes (e.g. ``-``) and blank lines are
    skipped and reported, as in the original; empty texts and repeated pairs are kept and
    reported.

    Args:
        path: the file.
        strict: make each skipped or flagged line an error naming the file and line.

    Returns:
        The pairs, with labels 0, 1 or 2.

    Raises:
        DataError: naming the file and line, for a line that is not a JSON object, a missing
            field, a sentence that is not a string, a file that is not UTF-8 text, or no pair.

    Example:
        >>> data = read_nli("cnsd/cnsd-snli/dev.jsonl")  # doctest: +SKIP
        >>> sorted(set(data.labels))  # doctest: +SKIP
        [0.0, 1.0, 2.0]
    """
    path = os.fspath(path)
    texts_a: list[str] = []
    texts_b: list[str] = []
    labels: list[float] = []
    seen: dict[tuple[str, ...], int] = {}
    problems = LineProblems(path, strict)
    for number, text_a, text_b, gold_label in jsonl_records(path, problems, _NLI_FIELDS):
        if not isinstance(gold_label, str) or gold_label not in NLI_LABELS:
            problems.add(
                number,
                "with a gold_label outside " + "/".join(NLI_LABELS) + ", skipped",
                f": {gold_label!r}",
                skipped=True,
            )
            continue
        check_texts(problems, number, [text_a, text_b], seen)
        texts_a.append(text_a)
        texts_b.append(text_b)
        labels.append(NLI_LABELS[gold_label])
    return pair_data(path, texts_a, texts_b, labels, problems)


def task_file(data_dir: PathLike, task: str, split: str) -> str:
    """The path of a matching task's split, ``TASK/TASK.split.data`` under the senteval_cn folder.

    Args:
        data_dir: the senteval_cn folder.
        task: one of the matching tasks (:data:`~cosent_tf.data.tasks.MATCHING_TASKS`).
        split: ``train``, ``valid`` or ``test``.

    Returns:
        The path (which need not exist).

    Raises:
        ValueError: the task has no senteval files, or the split is unknown.

    Example:
        >>> task_file("/d", "STS-B", "valid")
        '/d/STS-B/STS-B.valid.data'
    """
    if get_task(task).data != SENTEVAL:
        raise ValueError(f"task {task!r} has no senteval files; choose one of {', '.join(MATCHING_TASKS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    return os.path.join(os.fspath(data_dir), task, f"{task}.{split}.data")


def load_task(data_dir: PathLike, task: str, split: str, strict: bool = False) -> PairData:
    """A task's split, with its labels checked against the task's.

    The published files repeat some pairs (STS-B does): those are logged at DEBUG level, not shown.

    Args:
        data_dir: the senteval_cn folder.
        task: one of the matching tasks.
        split: ``train``, ``valid`` or ``test``.
        strict: as for :func:`read_senteval`.

    Returns:
        The split's pairs.

    Raises:
        DataError: the file is not there, or as :func:`read_senteval` raises.
        ValueError: as :func:`task_file` raises.

    Example:
        >>> data = load_task(senteval_dir("/data"), "LCQMC", "test")  # doctest: +SKIP
    """
    path = task_file(data_dir, task, split)
    if not os.path.exists(path):
        raise DataError(path, f"the {task} {split} split is not here (file does not exist)")
    return read_senteval(path, strict, task, benchmark=True)


def senteval_dir(data_dir: PathLike) -> str:
    """Accept either the shared data root (holding senteval_cn/) or the senteval_cn folder.

    Args:
        data_dir: either folder.

    Returns:
        The senteval_cn folder.

    Example:
        >>> senteval_dir("/no/such/folder")
        '/no/such/folder'
    """
    nested = os.path.join(data_dir, "senteval_cn")
    return nested if os.path.isdir(nested) else os.fspath(data_dir)


SHARED_VOCAB = os.path.join("vocab", "bert-base-chinese-vocab.txt")


def shared_vocab(data_dir: PathLike, default_root: Optional[PathLike] = None) -> str:
    """The Chinese BERT vocabulary of a data folder.

    The candidates are ``data_dir/vocab/...``; when ``data_dir`` is a senteval_cn folder, its
    parent's; then ``default_root``'s (the default data root), so that pointing --data-dir at
    other pair files keeps the shared vocabulary.

    Args:
        data_dir: the data folder of a run.
        default_root: the default data root, tried last.

    Returns:
        The first candidate that exists, or (none does) the first, which the run's checks then name.

    Example:
        >>> shared_vocab("/no/data")
        '/no/data/vocab/bert-base-chinese-vocab.txt'
    """
    data_dir = os.fspath(data_dir)
    candidates = [os.path.join(data_dir, SHARED_VOCAB)]
    if os.path.basename(os.path.normpath(data_dir)) == "senteval_cn":
        candidates.append(os.path.join(os.path.dirname(os.path.abspath(data_dir)), SHARED_VOCAB))
    if default_root is not None:
        candidates.append(os.path.join(os.fspath(default_root), SHARED_VOCAB))
    return next((path for path in candidates if os.path.isfile(path)), candidates[0])


def nli_files(data_dir: PathLike) -> list[str]:
    """Every ``cnsd-*/*.jsonl`` below ``data_dir``, each real folder read once.

    Links to folders are followed, but a folder reached twice (a link back up the tree,
    ``x -> .``) is not read again: that would repeat the training data, or never end.

    Args:
        data_dir: the folder to search.

    Returns:
        The files' paths, sorted.

    Example:
        >>> nli_files("/no/data")
        []
    """
    paths: list[str] = []
    seen: set[str] = set()
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
