"""Training examples for in-batch negatives: an anchor, its positive and its hard negatives.

An in-batch loss (``--loss mnrl``, ``cosent-ibn``) scores each anchor against its own positive,
its hard negatives and every other example's texts of the batch. :func:`read_group_file` reads
the files such a loss trains on: rows of (anchor, positive, negative ...) in TSV, CSV or JSONL
(FlagEmbedding's ``query``/``pos``/``neg`` layout or sentence-transformers' ``anchor``/
``positive``/``negative`` columns), pairs without labels (each a positive pair), or labelled
pairs, which :func:`groups_from_pairs` turns into examples.

Examples may have different numbers of hard negatives. They are never padded by repeating a
negative (a repeated text counts twice in the softmax): :meth:`GroupData.group_size` takes the
fewest any example has, or refuses a group size that some example cannot fill.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any, Callable, Optional, Union

import numpy as np

from ..errors import DataError
from .files import TSV_LAYOUT, PairFileFormat, csv_rows, jsonl_objects, read_pair_file, require_fields
from .pairs import (
    LineProblems,
    PairData,
    PathLike,
    decoded_lines,
    looks_like_label,
    sampled_rows,
    without_newline,
)
from .tasks import Task

logger = logging.getLogger(__name__)

# An example as a reader gives it: (anchor, positive, hard negatives).
Example = tuple[str, str, list[str]]

ROW_LAYOUT = "anchor<TAB>positive<TAB>negative_1 ... negative_k"
UNLABELLED_LAYOUT = "text_a<TAB>text_b"

_PAIR_FORMAT = PairFileFormat()

# Draws of a random negative before the pool is searched for the texts allowed.
_RANDOM_DRAWS = 16


@dataclasses.dataclass
class GroupData:
    """Training examples for in-batch negatives: an anchor, its positive, and its hard negatives.

    Attributes:
        anchors: each example's anchor (a query).
        positives: each example's positive (the text that matches its anchor).
        negatives: each example's hard negatives, any number (none allowed); the batches take
            ``group_size - 2`` of them per example (see :meth:`group_size`).
        source: the file (or files) the examples were read from.
        lines: the file line of each example; None when they were built from pairs.
        notes: what the reader decided (the layout, how many examples, the negatives drawn), for
            the run's notes.

    Example:
        >>> data = GroupData(["怎么还款", "花呗额度"], ["如何还钱", "额度多少"], [["天气"], ["下雨"]])
        >>> len(data), data.group_size()
        (2, 3)
    """

    anchors: list[str]
    positives: list[str]
    negatives: list[list[str]]
    source: str = ""
    lines: Optional[list[int]] = None
    notes: list[str] = dataclasses.field(default_factory=list)

    def __len__(self) -> int:
        return len(self.anchors)

    def subset(self, indices: Union[Sequence[int], np.ndarray]) -> GroupData:
        """The examples at ``indices``, in that order.

        Args:
            indices: positions of the examples to keep.

        Returns:
            A new :class:`GroupData` of the same source and notes, its lines kept aligned.

        Example:
            >>> GroupData(["a", "b"], ["c", "d"], [[], ["e"]], lines=[3, 4]).subset([1]).lines
            [4]
        """
        positions = [int(i) for i in np.asarray(indices, dtype=np.int64)]
        return GroupData(
            [self.anchors[i] for i in positions],
            [self.positives[i] for i in positions],
            [list(self.negatives[i]) for i in positions],
            self.source,
            None if self.lines is None else [self.lines[i] for i in positions],
            list(self.notes),
        )

    def sample(self, count: Optional[int], seed: int) -> GroupData:
        """A seeded random subset of ``count`` examples, in file order.

        Args:
            count: how many examples to keep; None, or at least ``len(self)``, keeps them all.
            seed: the seed of the draw, so that a run repeats it.

        Returns:
            The subset, or this object itself when every example is kept.

        Example:
            >>> len(GroupData(list("abcd"), list("efgh"), [[]] * 4).sample(2, seed=0))
            2
        """
        kept = sampled_rows(len(self), count, seed)
        return self if kept is None else self.subset(kept)

    def group_size(self, requested: Optional[int] = None) -> int:
        """The rows each example takes in a batch: its anchor, its positive and ``size - 2`` hard
        negatives.

        An example with more negatives than that is fine: the batches draw ``size - 2`` of them
        afresh every epoch. One with fewer is refused rather than padded by repeating one of its
        negatives, which would count that text twice in the softmax.

        Args:
            requested: the size asked for (``--group-size``); None: 2 plus the fewest negatives
                any example has, so that nothing is padded or invented.

        Returns:
            The group size.

        Raises:
            DataError: ``requested`` is below 2, or some example has fewer than ``requested - 2``
                negatives; it names the file, the first such line, how many examples have too
                few, and the largest size the file allows.

        Example:
            >>> data = GroupData(["a", "b"], ["c", "d"], [["e"], ["f", "g"]])
            >>> data.group_size(), data.group_size(2)
            (3, 2)
        """
        counts = np.array([len(negatives) for negatives in self.negatives], dtype=np.int64)
        fewest = int(counts.min()) if counts.size else 0
        if requested is None:
            return 2 + fewest
        if requested < 2:
            raise DataError(
                self.source,
                f"group size {requested}: a group is an anchor, its positive and its hard negatives, so at "
                "least 2; pass --group-size 2 or more",
            )
        short = np.flatnonzero(counts < requested - 2)
        if short.size == 0:
            return requested
        first = int(short[0])
        where = (
            "this line's example" if self.lines is not None else f"example {first + 1} (anchor {self.anchors[first]!r})"
        )
        raise DataError(
            self.source,
            f"group size {requested} takes {requested - 2} hard negative(s) per example, but {where} has "
            f"{counts[first]} ({short.size} of {len(self)} examples have fewer): pass --group-size {2 + fewest} "
            "or less, or give those lines more negatives (a row is not padded by repeating a negative, which "
            "would count twice in the softmax)",
            line=None if self.lines is None else self.lines[first],
        )

    def negatives_note(self, group_size: int) -> Optional[str]:
        """What a run should say when some examples have more negatives than ``group_size`` takes
        (those draw theirs afresh every epoch), or None when every example has just that many.

        Args:
            group_size: the run's group size (:meth:`group_size`).

        Returns:
            The note, or None.

        Example:
            >>> note = GroupData(["a", "b"], ["c", "d"], [["e"], ["f", "g"]], source="q.jsonl").negatives_note(3)
            >>> note[:60]
            'q.jsonl: examples have 1 to 2 hard negatives and each takes '
        """
        counts = np.array([len(negatives) for negatives in self.negatives], dtype=np.int64)
        taken, fewest, most = (
            group_size - 2,
            int(counts.min()) if counts.size else 0,
            int(counts.max()) if counts.size else 0,
        )
        if most <= taken:
            return None
        said = f"{self.source}: examples have {fewest} to {most} hard negatives and each takes {taken}"
        if fewest == taken:
            said += f" ({int(np.sum(counts == fewest))} of {len(counts)} examples have {fewest})"
        said += ", drawn afresh every epoch from its own"
        return said + ("; to take more, give the others more and pass --group-size" if fewest == taken else "")

    def labelled_pairs(self, seed: int) -> PairData:
        """Binary pairs to validate or test on: (anchor, positive, 1), and (anchor, negative, 0)
        for each hard negative.

        An example without negatives gets one (anchor, another example's positive, 0), drawn
        seeded among the positives that are neither its anchor nor any positive of its anchor.

        Args:
            seed: the seed of those draws.

        Returns:
            The pairs, of this data's source.

        Raises:
            DataError: no dissimilar pair can be made (every positive is a positive of every anchor).

        Example:
            >>> pairs = GroupData(["a", "b"], ["c", "d"], [["e"], []]).labelled_pairs(seed=0)
            >>> list(zip(pairs.texts_a, pairs.texts_b, pairs.labels.tolist()))
            [('a', 'c', 1.0), ('a', 'e', 0.0), ('b', 'd', 1.0), ('b', 'c', 0.0)]
        """
        rng = np.random.default_rng(seed)
        positives_of: dict[str, set[str]] = collections.defaultdict(set)
        for anchor, positive in zip(self.anchors, self.positives):
            positives_of[anchor].add(positive)
        pool = list(dict.fromkeys(self.positives))
        texts_a: list[str] = []
        texts_b: list[str] = []
        labels: list[float] = []
        for anchor, positive, negatives in zip(self.anchors, self.positives, self.negatives):
            if not negatives:
                drawn = _draw(rng, pool, positives_of[anchor] | {anchor})
                negatives = [] if drawn is None else [drawn]
            for text, label in [(positive, 1.0), *((negative, 0.0) for negative in negatives)]:
                texts_a.append(anchor)
                texts_b.append(text)
                labels.append(label)
        if 0.0 not in labels:
            raise DataError(
                self.source,
                "no dissimilar pair can be made to validate on: no example has a negative, and every positive is "
                "its anchor's; give the examples hard negatives, or validate on a labelled pair file",
            )
        return PairData(texts_a, texts_b, np.asarray(labels, dtype=np.float32), self.source)

    def check_in_batch(self) -> None:
        """Refuse examples an in-batch loss cannot learn from: an anchor's in-batch negatives are
        the other examples' texts of its batch, so there must be other examples, of other anchors.

        Raises:
            DataError: there are fewer than 2 examples, or every anchor is the same text (each
                anchor's in-batch negatives would all be its own positives).

        Example:
            >>> GroupData(["a", "b"], ["c", "d"], [[], []]).check_in_batch()
            >>> GroupData(["a", "a"], ["c", "d"], [[], []], "train.tsv").check_in_batch()  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            cosent_tf.errors.DataError: train.tsv: every anchor is the same text ('a'): ...
        """
        if len(self) < 2:
            raise DataError(
                self.source,
                f"{len(self)} example(s): an in-batch loss takes each anchor's negatives from the other examples "
                "of its batch, so it needs at least 2; give more examples, or train a pair loss (--loss cosent)",
                line=self.lines[0] if self.lines else None,
            )
        if len(set(self.anchors)) == 1:
            raise DataError(
                self.source,
                f"every anchor is the same text ({self.anchors[0]!r}): its in-batch negatives, the other "
                "examples' positives, would all be its own positives; give examples of different anchors, or "
                "train a pair loss (--loss cosent)",
            )


def _draw(rng: np.random.Generator, pool: Sequence[str], forbidden: set[str]) -> Optional[str]:
    """A seeded random text of ``pool`` not in ``forbidden``; None when every text is. A few draws
    find one in a pool of many texts; only after those is the pool searched for the texts allowed."""
    if not pool:
        return None
    for _ in range(_RANDOM_DRAWS):
        text = pool[int(rng.integers(len(pool)))]
        if text not in forbidden:
            return text
    allowed = [text for text in pool if text not in forbidden]
    return allowed[int(rng.integers(len(allowed)))] if allowed else None


# ---------------------------------------------------------------- examples from labelled pairs


def groups_from_pairs(pairs: PairData, task: Task, hard_negatives: bool, seed: int) -> GroupData:
    """The examples an in-batch loss trains on from labelled pairs: one per positive pair.

    Each pair that ``task`` marks as a match (:meth:`~cosent_tf.data.tasks.Task.positive`) is an
    example, its first text the anchor and its second the positive. With ``hard_negatives``
    (``--hard-negatives-from-labels``), an anchor's hard negatives are the texts paired with it,
    either way round, by the pairs the task marks as dissimilar
    (:meth:`~cosent_tf.data.tasks.Task.negative`: NLI's contradictions); an anchor without any
    gets one seeded random text of the pairs that is neither the anchor nor one of its positives,
    an easy negative as the in-batch ones are.

    Args:
        pairs: the labelled pairs.
        task: the task whose labels they are.
        hard_negatives: take the anchors' dissimilar pairs as their hard negatives.
        seed: the seed of the random negatives.

    Returns:
        The examples; their notes say how many pairs were kept and how many anchors got a random
        negative.

    Raises:
        DataError: no pair is labelled as a match; it names the file.

    Example:
        >>> from cosent_tf.data.tasks import TASKS
        >>> pairs = PairData(["猫", "猫", "狗"], ["小猫", "汽车", "小狗"], np.array([2, 0, 2], np.float32))
        >>> data = groups_from_pairs(pairs, TASKS["NLI"], hard_negatives=True, seed=0)
        >>> data.anchors, data.positives, data.negatives[0]
        (['猫', '狗'], ['小猫', '小狗'], ['汽车'])
    """
    positive = np.asarray(task.positive(pairs.labels), dtype=bool)
    if not positive.any():
        raise DataError(
            pairs.source,
            f"no pair is labelled as a match (label above {task.positive_above:g}): in-batch negatives train on "
            "the positive pairs; give pairs labelled as matches, or train a pair loss (--loss cosent)",
        )
    kept = np.flatnonzero(positive)
    anchors = [pairs.texts_a[i] for i in kept]
    positives = [pairs.texts_b[i] for i in kept]
    notes = [
        f"{pairs.source}: {len(kept)} of {len(pairs)} pairs are labelled as matches (label above "
        f"{task.positive_above:g}): one example each, its first text the anchor"
    ]
    if not hard_negatives:
        return GroupData(anchors, positives, [[] for _ in anchors], pairs.source, None, notes)
    positives_of: dict[str, set[str]] = collections.defaultdict(set)
    for pair in kept:
        positives_of[pairs.texts_a[pair]].add(pairs.texts_b[pair])
        positives_of[pairs.texts_b[pair]].add(pairs.texts_a[pair])
    partners: dict[str, dict[str, None]] = collections.defaultdict(dict)  # an ordered set each
    for pair in np.flatnonzero(np.asarray(task.negative(pairs.labels), dtype=bool)):
        partners[pairs.texts_a[pair]][pairs.texts_b[pair]] = None
        partners[pairs.texts_b[pair]][pairs.texts_a[pair]] = None
    negatives = [
        [text for text in partners.get(anchor, {}) if text != anchor and text not in positives_of[anchor]]
        for anchor in anchors
    ]
    without = [i for i, own in enumerate(negatives) if not own]
    notes.append(
        f"{len(anchors) - len(without)} of {len(anchors)} anchors have labelled negatives, the texts their pairs "
        f"label {_negative_labels(task)}, which become their hard negatives"
    )
    if without:
        rng = np.random.default_rng(seed)
        pool = list(dict.fromkeys(pairs.texts_a + pairs.texts_b))
        for example in without:
            drawn = _draw(rng, pool, positives_of[anchors[example]] | {anchors[example]})
            negatives[example] = [] if drawn is None else [drawn]
        notes.append(
            f"{len(without)} of {len(anchors)} anchors have no labelled negative: each got a random text of the "
            "file as its negative"
        )
    return GroupData(anchors, positives, negatives, pairs.source, None, notes)


def _negative_labels(task: Task) -> str:
    if task.negative_at_most is None:
        return f"{task.positive_above:g} or below"
    return f"{task.negative_at_most:g} or below"


# ---------------------------------------------------------------- files


def read_group_file(
    path: PathLike, file_format: PairFileFormat = _PAIR_FORMAT, strict: bool = False
) -> Union[GroupData, PairData]:
    """Read a file an in-batch loss may train on, and say which kind it was by what it returns.

    The layout is decided from the first line (after a header), and every later line must fit it:

    - JSONL in FlagEmbedding's layout, ``{"query": str, "pos": [str, ...], "neg": [str, ...]}``
      (``pos`` and ``neg`` may be one string; no ``neg`` is no negatives): one example per
      (query, positive), so every positive is used every epoch, each with all of its line's
      negatives.
    - JSONL in sentence-transformers' columns: ``anchor``, ``positive``, and ``negative`` or
      ``negative_1`` ... ``negative_k``.
    - TSV rows ``anchor<TAB>positive<TAB>negative_1 ... negative_k`` (the last field of the first
      row is no label), and CSV whose header has no label column: columns ``anchor``,
      ``positive``, ``negative``/``negative_N`` by name, or else by position. Rows may have
      different numbers of negatives (in CSV, empty cells at a row's end).
    - Pairs without labels (JSONL lines and CSV columns with the two text fields and no label
      field, TSV lines of two fields): positive pairs, examples without hard negatives.
    - Labelled pairs: returned as :func:`~cosent_tf.data.files.read_pair_file` reads them, as
      :class:`~cosent_tf.data.pairs.PairData` (see :func:`groups_from_pairs`).

    A TSV file's line 1 is a header when every field is a column name (``query``, ``pos``,
    ``anchor``, ``negative_2``, the named fields ...), or when it has three fields, the last no
    label, and the next line's last is one (a pair file's header). Empty negatives, repeated ones
    and those equal to their anchor or positive are left out, blank lines skipped, examples with an
    empty text or repeating an earlier one kept: each is reported (an error under ``strict``).

    Args:
        path: the file.
        file_format: its format and the pair fields' names; the format defaults to the
            extension's.
        strict: make every skipped or flagged line an error.

    Returns:
        :class:`GroupData` for rows and unlabelled pairs (its ``notes`` say which layout was read),
        :class:`~cosent_tf.data.pairs.PairData` for labelled pairs.

    Raises:
        DataError: naming the file and line: a line that does not fit the first line's layout (a
            field count, a missing field), a text that is not a string, an empty ``pos`` list under
            ``strict``, a label-first TSV, no example at all.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "train.jsonl")
        >>> with open(path, "w", encoding="utf-8") as file:
        ...     _ = file.write('{"query": "怎么还款", "pos": ["如何还钱", "还款方式"], "neg": ["天气"]}\\n')
        >>> data = read_group_file(path)
        >>> data.anchors, data.positives, data.negatives, data.lines
        (['怎么还款', '怎么还款'], ['如何还钱', '还款方式'], [['天气'], ['天气']], [1, 1])
    """
    path = os.fspath(path)
    file_kind = file_format.format_of(path)
    return _READERS[file_kind](path, dataclasses.replace(file_format, format=file_kind), strict)


class _Examples:
    """The examples a reader keeps, with the problems of their lines."""

    def __init__(self, path: str, problems: LineProblems) -> None:
        self.path, self.problems = path, problems
        self.anchors: list[str] = []
        self.positives: list[str] = []
        self.negatives: list[list[str]] = []
        self.lines: list[int] = []
        self.seen: dict[tuple[str, ...], int] = {}

    def add(self, number: int, anchor: str, positive: str, negatives: Sequence[str]) -> None:
        own = {anchor, positive}
        if not all(text.strip() for text in negatives):
            self.problems.add(number, "with an empty negative, left out")
        if any(text in own for text in negatives if text.strip()):
            self.problems.add(number, "with a negative that is its anchor or positive, left out")
        kept = [text for text in negatives if text.strip() and text not in own]
        if len(set(kept)) < len(kept):
            self.problems.add(number, "with a repeated negative, left out")
        kept = list(dict.fromkeys(kept))
        if not (anchor.strip() and positive.strip()):
            self.problems.add(number, "with an empty anchor or positive, kept")
        first = self.seen.setdefault((anchor, positive, *kept), number)
        if first != number:
            self.problems.add(number, "repeating an earlier example, kept", f": the example of line {first}")
        self.anchors.append(anchor)
        self.positives.append(positive)
        self.negatives.append(kept)
        self.lines.append(number)

    def done(self, layout: str) -> GroupData:
        self.problems.report()
        if not self.anchors:
            raise DataError(self.path, "no usable examples in this file")
        counts = [len(negatives) for negatives in self.negatives]
        spread = str(min(counts)) if min(counts) == max(counts) else f"{min(counts)} to {max(counts)}"
        note = (
            f"{self.path}: read as {layout}: {len(self.anchors)} examples from {len(set(self.lines))} lines, "
            f"with {spread} hard negative(s) each"
        )
        return GroupData(self.anchors, self.positives, self.negatives, self.path, self.lines, [note])


# -- JSONL

_FLAG_FIELDS = ("query", "pos")
_SENTENCE_TRANSFORMERS_FIELDS = ("anchor", "positive")
_NEGATIVE_COLUMN = re.compile(r"negative(?:_(\d+))?")


def _read_jsonl(path: str, file_format: PairFileFormat, strict: bool) -> Union[GroupData, PairData]:
    problems = LineProblems(path, strict)
    objects = jsonl_objects(path, (), problems)
    first = next(objects, None)
    if first is None:
        problems.report()
        raise DataError(path, "no usable examples in this file")
    first_line, record = first
    text_a, text_b, label = file_format.fields
    parse: Callable[[int, dict[str, Any]], list[Example]]
    if set(_FLAG_FIELDS) <= set(record):
        fields, layout = _FLAG_FIELDS, "FlagEmbedding's JSON lines (query, pos, neg): one example per (query, positive)"
        parse = lambda number, record: _flag_examples(path, problems, number, record)  # noqa: E731
    elif set(_SENTENCE_TRANSFORMERS_FIELDS) <= set(record):
        fields, layout = _SENTENCE_TRANSFORMERS_FIELDS, "sentence-transformers' JSON lines (anchor, positive, negative)"
        parse = lambda number, record: [_sentence_transformers_example(path, number, record)]  # noqa: E731
    elif text_a in record and text_b in record:
        if label in record:
            return read_pair_file(path, file_format, strict)
        fields, layout = (text_a, text_b), f"JSON lines of pairs without labels ({text_a}, {text_b}): positive pairs"
        parse = lambda number, record: [_unlabelled_example(path, number, record, file_format, first_line)]  # noqa: E731
    else:
        raise DataError(
            path,
            f"no layout of training examples; this line has {', '.join(map(repr, record)) or 'no fields'}: give "
            f"'query', 'pos' (and 'neg'), or 'anchor', 'positive' (and 'negative'), or the pair fields "
            f"{text_a!r}, {text_b!r} (and {label!r}) (name those with --text-a-field, --text-b-field and "
            "--label-field)",
            line=first_line,
        )
    hint = f": line {first_line} has {', '.join(map(repr, fields))}, and every line must have its layout's fields"
    examples = _Examples(path, problems)
    for number, line_record in itertools.chain([first], objects):
        require_fields(path, number, line_record, fields, hint)
        for anchor, positive, negatives in parse(number, line_record):
            examples.add(number, anchor, positive, negatives)
    return examples.done(layout)


def _string(path: str, number: int, record: dict[str, Any], name: str) -> str:
    value = record[name]
    if not isinstance(value, str):
        raise DataError(path, f"field {name!r} must be a string, not {_json_type(value)}", line=number)
    return value


def _strings(path: str, number: int, record: dict[str, Any], name: str) -> list[str]:
    value = record[name]
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(text, str) for text in value):
        raise DataError(
            path, f"field {name!r} must be a string or a list of strings, not {_json_type(value)}", line=number
        )
    return value


def _json_type(value: object) -> str:
    if isinstance(value, list):
        odd = [item for item in value if not isinstance(item, str)]
        return f"a list holding {_json_type(odd[0])}" if odd else "a list"
    names = {bool: "true/false", int: "a number", float: "a number", dict: "an object", type(None): "null"}
    return names.get(type(value), "a string")


def _flag_examples(path: str, problems: LineProblems, number: int, record: dict[str, Any]) -> list[Example]:
    query = _string(path, number, record, "query")
    positives = _strings(path, number, record, "pos")
    negatives = _strings(path, number, record, "neg") if "neg" in record else []
    if not positives:
        problems.add(number, "with an empty 'pos' list, skipped", skipped=True)
    return [(query, positive, list(negatives)) for positive in positives]


def _sentence_transformers_example(path: str, number: int, record: dict[str, Any]) -> Example:
    numbered = []
    for name in record:
        match = _NEGATIVE_COLUMN.fullmatch(name)
        if match:
            numbered.append((int(match.group(1) or 0), name))
    negatives = [_string(path, number, record, name) for _, name in sorted(numbered)]
    return _string(path, number, record, "anchor"), _string(path, number, record, "positive"), negatives


def _unlabelled_example(
    path: str, number: int, record: dict[str, Any], file_format: PairFileFormat, first_line: int
) -> Example:
    if file_format.label_field in record:
        raise DataError(
            path,
            f"a label field {file_format.label_field!r}, but line {first_line} has none: label every line (pairs "
            "with labels) or none (positive pairs)",
            line=number,
        )
    return (
        _string(path, number, record, file_format.text_a_field),
        _string(path, number, record, file_format.text_b_field),
        [],
    )


# -- TSV

# What a header line's fields are called: FlagEmbedding's and sentence-transformers' columns and the pairs'.
_COLUMN_NAME = re.compile(
    r"(query|pos|neg|anchor|positive|negative|hard_negative|text|text_a|text_b|sentence|label|score)(_?\d+)?",
    re.IGNORECASE,
)


def _tsv_lines(path: str, problems: LineProblems) -> Iterator[tuple[int, list[str]]]:
    """(line number, tab-separated fields) of each line that is not blank."""
    for number, line in decoded_lines(path):
        text = without_newline(line)
        if number == 1:
            text = text.lstrip("\ufeff")
        if not text.strip():
            problems.add(number, "blank, skipped", skipped=True)
            continue
        yield number, text.split("\t")


def _is_header(fields: Sequence[str], following: Optional[Sequence[str]], file_format: PairFileFormat) -> bool:
    names = {name.lower() for name in file_format.fields}
    if all(_COLUMN_NAME.fullmatch(field.strip()) or field.strip().lower() in names for field in fields):
        return True
    return (
        len(fields) == 3
        and not looks_like_label(fields[2])
        and following is not None
        and len(following) == 3
        and looks_like_label(following[2])
    )


def _read_tsv(path: str, file_format: PairFileFormat, strict: bool) -> Union[GroupData, PairData]:
    problems = LineProblems(path, strict)
    lines = _tsv_lines(path, problems)
    head = list(itertools.islice(lines, 2))
    if head and head[0][0] == 1 and _is_header(head[0][1], head[1][1] if len(head) > 1 else None, file_format):
        logger.info("%s: line 1 is a header (%s), not an example", path, " | ".join(head[0][1]))
        header_note = " (line 1, a header, left out)"
        head = head[1:]
    else:
        header_note = ""
    if not head:
        problems.report()
        raise DataError(path, "no usable examples in this file")
    first_line, fields = head[0]
    count = len(fields)
    if count == 1:
        raise DataError(path, f"no tab: expected {ROW_LAYOUT}, {UNLABELLED_LAYOUT} or {TSV_LAYOUT}", line=first_line)
    if count == 3 and looks_like_label(fields[2]):
        return read_pair_file(path, file_format, strict)
    if count == 3 and looks_like_label(fields[0]):
        raise DataError(
            path,
            f"the first field {fields[0]!r} is a label and the last {fields[2]!r} is not: is this file label-first? "
            f"cosent-tf reads {TSV_LAYOUT}, or rows {ROW_LAYOUT}, in that order",
            line=first_line,
        )
    if count > 3 and looks_like_label(fields[-1]):
        raise DataError(
            path,
            f"the last of {count} fields, {fields[-1]!r}, reads as a label, which rows of {ROW_LAYOUT} do not have: "
            f"is there an extra column (an id?) in a pair file? cosent-tf reads {TSV_LAYOUT}",
            line=first_line,
        )
    examples = _Examples(path, problems)
    for number, row in itertools.chain(head, lines):
        fits = len(row) == 2 if count == 2 else len(row) >= 3
        if not fits:
            expected = (
                f"the file is read as pairs without labels ({UNLABELLED_LAYOUT}), positive pairs: give every line "
                "two fields"
                if count == 2
                else f"the file is read as rows {ROW_LAYOUT}: give every row its anchor, its positive and at "
                "least one negative"
            )
            raise DataError(
                path, f"{len(row)} tab-separated field(s), but line {first_line} has {count}: {expected}", line=number
            )
        examples.add(number, row[0], row[1], row[2:])
    layout = f"pairs without labels ({UNLABELLED_LAYOUT}): positive pairs" if count == 2 else f"rows of {ROW_LAYOUT}"
    return examples.done(layout + header_note)


# -- CSV


def _read_csv(path: str, file_format: PairFileFormat, strict: bool) -> Union[GroupData, PairData]:
    problems = LineProblems(path, strict)
    rows = csv_rows(path, problems)
    first = next(rows, None)
    if first is None:
        problems.report()
        raise DataError(path, "no usable examples in this file")
    header = first[1]
    text_a, text_b, label = file_format.fields
    numbered = sorted(
        (int(match.group(1) or 0), column)
        for column, name in enumerate(header)
        if (match := _NEGATIVE_COLUMN.fullmatch(name))
    )
    if text_a in header and text_b in header:
        if label in header:
            return read_pair_file(path, file_format, strict)
        columns, negative_columns = [header.index(text_a), header.index(text_b)], []
        layout = f"CSV pairs without labels (columns {text_a}, {text_b}): positive pairs"
    elif set(_SENTENCE_TRANSFORMERS_FIELDS) <= set(header):
        columns = [header.index(name) for name in _SENTENCE_TRANSFORMERS_FIELDS]
        negative_columns = [column for _, column in numbered]
        layout = "CSV rows by column name (anchor, positive, negative ...)"
    else:
        if any("\t" in cell for cell in header):
            raise DataError(
                path, "line 1 has tabs: is it tab-separated? name the format with --format tsv", line=first[0]
            )
        if any(looks_like_label(cell) for cell in header if cell.strip()):
            raise DataError(
                path,
                "line 1 reads as a row, not a header: a CSV file starts with a line naming its columns",
                line=first[0],
            )
        if len(header) < 2:
            raise DataError(
                path,
                f"one column ({header[0]!r}): an example needs an anchor and a positive; name the format with "
                "--format if this is not CSV",
                line=first[0],
            )
        columns, negative_columns = [0, 1], list(range(2, len(header)))
        layout = (
            "CSV pairs without labels, columns by position: positive pairs"
            if len(header) == 2
            else "CSV rows (anchor, positive, negative ...), columns by position"
        )
    examples = _Examples(path, problems)
    for number, row in rows:
        negatives = [row[column] for column in negative_columns]
        while negatives and not negatives[-1].strip():  # a row of fewer negatives than the header has columns
            negatives.pop()
        examples.add(number, row[columns[0]], row[columns[1]], negatives)
    return examples.done(layout)


_READERS: dict[str, Callable[[str, PairFileFormat, bool], Union[GroupData, PairData]]] = {
    "tsv": _read_tsv,
    "csv": _read_csv,
    "jsonl": _read_jsonl,
}
