"""Labelled sentence pairs and what every reader of a text file shares: bounded line reading,
the report of lines skipped or flagged, the one parser of a label cell, and the one test of
"the same text" (:func:`normalized_text`)."""

from __future__ import annotations

import codecs
import collections
import dataclasses
import logging
import math
import os
import re
import unicodedata
from collections.abc import Iterator, Sequence
from typing import IO, Literal, NamedTuple, Optional, Union, overload

import numpy as np

from ..errors import DataError, where

logger = logging.getLogger(__name__)

# Ordinal NLI labels: contradiction < neutral < entailment.
NLI_LABELS = {"contradiction": 0, "neutral": 1, "entailment": 2}

PathLike = Union[str, "os.PathLike[str]"]

NORMALIZATION = "NFKC, case-folded, without white space, punctuation and control characters"
# Unicode categories (their first letter) that normalisation drops: separators, punctuation, controls.
_DROPPED_CATEGORIES = frozenset("ZPC")


def normalized_text(text: str) -> str:
    """``text`` as texts are compared wherever two must not be the same text (mining's duplicate
    guards, a query's own text in a retrieval corpus): NFKC (full-width forms become ASCII), case
    folded, and without white space, punctuation and control or format characters (Unicode
    categories Z*, P* and C*).

    Args:
        text: any text.

    Returns:
        Its normalised form; two texts are the same text when their forms are equal.

    Example:
        >>> normalized_text("花呗 怎么还款？") == normalized_text("花呗怎么还款?")
        True
        >>> normalized_text("ＱＱ Number!")
        'qqnumber'
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in folded if unicodedata.category(c)[0] not in _DROPPED_CATEGORIES)


@dataclasses.dataclass
class PairData:
    """Aligned sentence pairs with one float label each.

    Attributes:
        texts_a: the first text of each pair.
        texts_b: the second text of each pair.
        labels: one float32 label per pair.
        source: the file (or files, comma-separated) the pairs were read from.
        skipped_lines: the line numbers the reader left out.
        label_words: the labels were NLI words (contradiction 0 < neutral 1 < entailment 2).

    Example:
        >>> data = PairData(["你好", "天气"], ["您好", "下雨"], np.array([1.0, 0.0], np.float32))
        >>> len(data), data.label_kind
        (2, 'binary')
    """

    texts_a: list[str]
    texts_b: list[str]
    labels: np.ndarray
    source: str = ""
    skipped_lines: list[int] = dataclasses.field(default_factory=list)
    label_words: bool = False

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, indices: Sequence[int] | np.ndarray) -> PairData:
        """The pairs at ``indices``, in that order.

        Args:
            indices: positions of the pairs to keep.

        Returns:
            A new :class:`PairData` of the same source.

        Example:
            >>> PairData(["a", "b"], ["c", "d"], np.array([0.0, 1.0], np.float32)).subset([1]).texts_a
            ['b']
        """
        positions = np.asarray(indices, dtype=np.int64)
        return PairData(
            [self.texts_a[i] for i in positions],
            [self.texts_b[i] for i in positions],
            self.labels[positions],
            self.source,
            list(self.skipped_lines),
            self.label_words,
        )

    def sample(self, count: Optional[int], seed: int) -> PairData:
        """A seeded random subset of ``count`` pairs, in file order.

        Args:
            count: how many pairs to keep; None, or at least ``len(self)``, keeps them all.
            seed: the seed of the draw, so that a run repeats it.

        Returns:
            The subset, or this object itself when every pair is kept.

        Example:
            >>> data = PairData(list("abcd"), list("efgh"), np.zeros(4, np.float32))
            >>> len(data.sample(2, seed=0))
            2
        """
        kept = sampled_rows(len(self), count, seed)
        return self if kept is None else self.subset(kept)

    @staticmethod
    def concat(parts: Sequence[PairData]) -> PairData:
        """The pairs of ``parts`` one after the other.

        Args:
            parts: the pair sets to join.

        Returns:
            One :class:`PairData` whose source names every part's; its labels are NLI words only
            when every part's are.

        Example:
            >>> one = PairData(["a"], ["b"], np.ones(1, np.float32))
            >>> len(PairData.concat([one, one]))
            2
        """
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


def sampled_rows(total: int, count: Optional[int], seed: int) -> Optional[np.ndarray]:
    """The rows of a seeded random subset of ``count`` of ``total`` rows, in file order; None when
    every row is kept (``count`` None or at least ``total``). Pairs and groups sample alike."""
    if count is None or count >= total:
        return None
    return np.sort(np.random.default_rng(seed).choice(total, size=count, replace=False))


# A longer line is not text (a binary file, /dev/zero): refused before it fills memory.
MAX_LINE_BYTES = 1 << 20


def decoded_lines(path: PathLike) -> Iterator[tuple[int, str]]:
    """The ``(line number, text)`` of each line of a UTF-8 file, newline kept, read a bounded line
    at a time: the one way a text file is read, by the data readers and the vocabulary reader.

    Args:
        path: the file.

    Returns:
        An iterator of (1-based line number, decoded line).

    Raises:
        DataError: the file cannot be opened or read, a line is longer than
            :data:`MAX_LINE_BYTES`, or a byte sequence is not UTF-8; it names the line, and
            the encoding the line reads as when it tells one (GBK/GB18030, UTF-16).

    Example:
        >>> for number, line in decoded_lines("pairs.tsv"):  # doctest: +SKIP
        ...     print(number, line.rstrip("\\n"))
    """
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
                raise DataError(
                    path,
                    f"not valid UTF-8 at byte {e.start} ({e.reason}){_likely_encoding(raw, number, e.start)}",
                    line=number,
                ) from e


# Excel saves "Unicode Text" as UTF-16, and a CSV on Chinese Windows as GBK (which GB18030 extends).
_UTF16_MARKS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
_CJK = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
# What else a Chinese text holds beyond ASCII: CJK punctuation, full-width forms, quotes and dashes.
_CHINESE = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef\u2010-\u2027\u00b7]")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _likely_encoding(raw: bytes, number: int, error_at: int) -> str:
    """The end of the message about a line that is not UTF-8: the encoding the line reads as, when
    it tells one. A line that reads as GB18030 text with Chinese characters is GBK unless UTF-8
    characters came before its first bad byte (then it is a UTF-8 line with a fault: GB18030 reads
    most byte pairs, so it would read UTF-8 Chinese as other Chinese characters), or it also reads
    as characters no Chinese text holds (Latin-1's accented letters can pair into a CJK one)."""
    if number == 1 and raw.startswith(_UTF16_MARKS):
        return (
            '; it starts with a UTF-16 byte-order mark (Excel\'s "Unicode Text"): re-save it as UTF-8, '
            "e.g. iconv -f UTF-16 -t UTF-8"
        )
    if not raw[:error_at].isascii():
        return ""
    try:
        text = raw.decode("gb18030")
    except UnicodeDecodeError:
        return ""
    beyond_ascii = [character for character in text if not character.isascii()]
    if _CJK.search(text) and all(map(_CHINESE.fullmatch, beyond_ascii)) and not _CONTROL.search(text):
        return (
            "; it reads as GBK/GB18030 (saved by Excel on Chinese Windows?): re-save it as UTF-8, "
            "e.g. iconv -f GB18030 -t UTF-8"
        )
    return ""


def _read_line(handle: IO[bytes], path: PathLike, number: int) -> bytes:
    try:
        return handle.readline(MAX_LINE_BYTES + 1)
    except OSError as e:  # a folder, or a device that fails
        raise DataError(path, f"cannot read ({e.strerror or e})", line=number) from e


def without_newline(line: str) -> str:
    return line.rstrip("\r\n")


class LineProblems:
    """Lines a reader skips or flags: warned about per kind at the end, or, with
    ``strict``, an error naming the file and line at the first one. ``benchmark``: the file
    is a published benchmark's, whose kept lines (repeated pairs, empty texts) are part of it,
    so those are logged at DEBUG level, out of the console; skipped lines are always warned about."""

    def __init__(self, path: str, strict: bool, benchmark: bool = False) -> None:
        self.path, self.strict, self.benchmark = path, strict, benchmark
        self.by_kind: dict[str, list[int]] = {}
        self.skipped: list[int] = []
        self.skipping_kinds: set[str] = set()
        # What a TSV reader's skipped lines look like, (field count, shape) -> lines, and the fields
        # of the header line it left out: what tells the likely cause when no line is a pair.
        self.layouts: collections.Counter[tuple[int, str]] = collections.Counter()
        self.header: Optional[list[str]] = None

    def add(self, number: int, kind: str, detail: str = "", skipped: bool = False) -> None:
        if self.strict:
            raise DataError(self.path, f"{kind}{detail} (an error under --strict)", line=number)
        self.by_kind.setdefault(kind, []).append(number)
        if skipped:
            self.skipped.append(number)
            self.skipping_kinds.add(kind)

    def report(self) -> None:
        for kind, numbers in self.by_kind.items():
            shown = ", ".join(str(n) for n in numbers[:5]) + (" ..." if len(numbers) > 5 else "")
            level = logging.DEBUG if self.benchmark and kind not in self.skipping_kinds else logging.WARNING
            logger.log(level, "%s: %d line(s) %s (lines %s)", self.path, len(numbers), kind, shown)


def check_texts(problems: LineProblems, number: int, texts: Sequence[str], seen: dict[tuple[str, ...], int]) -> None:
    """Flag a pair with an empty text, or one that repeats an earlier line's (``seen``: pair -> first line)."""
    if not all(t.strip() for t in texts):
        problems.add(number, "with an empty text, kept")
    first = seen.setdefault(tuple(texts), number)
    if first != number:
        problems.add(number, "repeating an earlier pair, kept", f": the pair of line {first}")


def pair_data(
    path: str,
    texts_a: list[str],
    texts_b: list[str],
    labels: list[float],
    problems: LineProblems,
    label_words: bool = False,
    why_none: str = "",
) -> PairData:
    """The pairs a reader kept, once its line problems are reported; none kept is an error, which
    ``why_none`` ends (the likely cause, as the reader tells it)."""
    problems.report()
    if not labels:
        raise DataError(path, f"no usable pairs in this file{why_none}")
    return PairData(
        texts_a, texts_b, np.asarray(labels, dtype=np.float32), path, problems.skipped, label_words=label_words
    )


# ---------------------------------------------------------------- labels

# Python's float() also reads "0_5" (as 5.0) and "１" (full-width digits): labels must be plain.
PLAIN_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", re.ASCII)

# Labels are stored as float32: a larger number would become infinite there.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def finite_label(path: PathLike, number: Optional[int], value: Union[str, int, float], what: str = "label") -> float:
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


def _shown(value: object, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters, for a message about a 400-digit label."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class Label(NamedTuple):
    """A parsed label cell: its value, and whether it was an NLI word."""

    value: float
    word: bool = False


@overload
def parse_label(path: PathLike, number: int, value: object, nli_words: Literal[False] = False) -> Label: ...


@overload
def parse_label(path: PathLike, number: int, value: object, nli_words: Literal[True]) -> Optional[Label]: ...


def parse_label(path: PathLike, number: int, value: object, nli_words: bool = False) -> Optional[Label]:
    """The label of line ``number``: a plain decimal number (a text, or a JSON number) that float32
    holds as a finite number. With ``nli_words`` it may also be an NLI word, in any case, or NLI's
    ``-`` (no agreement), which gives None: the line is to be left out. Anything else is an error
    naming the file and line; without ``nli_words`` it says which test the text failed."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise _not_a_label(path, number, value)
    if not isinstance(value, str):
        return Label(finite_label(path, number, value))
    text = value.strip()
    if nli_words and text.lower() in NLI_LABELS:
        return Label(float(NLI_LABELS[text.lower()]), word=True)
    if nli_words and text == "-":
        return None
    if PLAIN_DECIMAL.fullmatch(text):
        return Label(finite_label(path, number, text if nli_words else value))
    if nli_words:
        raise _not_a_label(path, number, value)
    try:
        float(value)
    except ValueError:
        raise DataError(path, f"label {value!r} is not a number", line=number) from None
    finite_label(path, number, value)  # a NaN or an overflow is named as such
    raise DataError(path, f"label {value!r} is not a plain decimal number", line=number)


def _not_a_label(path: PathLike, number: int, value: object) -> DataError:
    return DataError(
        path, f"label {_shown(value)} is not a number or an NLI word ({'/'.join(NLI_LABELS)})", line=number
    )


def looks_like_label(text: str) -> bool:
    """Whether a first line's third cell is a pair's label rather than a header's column name.
    Whatever reads as a number is a label, even one refused later (1e39, nan): taken for a header,
    its line would be left out without a word."""
    text = text.strip()
    if text.lower() in NLI_LABELS or text == "-" or PLAIN_DECIMAL.fullmatch(text):
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True
