"""Hard negatives mined from one's own files: for each (anchor, positive), texts of a corpus that the
encoder ranks close to the anchor, but that nothing says are its matches.

Each distinct anchor is searched once over the corpus by exact cosine (ties to the lower corpus
index); the texts ranked ``lo`` to ``hi`` among all corpus texts are its candidates. Guards then drop
the candidates likely to be false negatives, in this order, each counted under the first that drops
it (:data:`GUARDS`):

1. ``anchor_itself``: the anchor again, exactly or after :func:`normalized_text`;
2. ``labelled_positive``: a text that a pair of the data marks as a match of the anchor, either way
   round, other than the example's own positive;
3. ``duplicate_of_positive``: the example's own positive, exactly or normalised;
4. ``margin``: a cosine with the anchor above the positive's minus ``margin``;
5. ``rescore``: an interaction model's score of (anchor, text) at or above the positive's minus
   ``rescore_margin``.

An empty text, and a text already met among the anchor's candidates (a corpus may repeat a text),
is never a candidate (counted apart, in ``counts``). The negatives are the best-ranked survivors
or a seeded draw among them; an example with fewer survivors than asked is left out and counted.
The result writes the n-tuple JSON lines ``cosent-tf train --loss mnrl`` reads, or labelled pairs,
with a summary beside them (:func:`summary_paths`).

A corpus of texts is encoded a chunk at a time into a memory-mapped temporary file, and anchors are
searched a block at a time, so memory stays bounded by the chunk and block sizes.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import io
import json
import math
import os
import tempfile
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np

from .data.files import EXTENSION_FORMATS
from .data.groups import GroupData
from .data.pairs import NORMALIZATION, PairData, normalized_text
from .data.tasks import Task
from .errors import ConfigError, DataError
from .inference.index import VectorIndex
from .io import PathLike, check_output_file, write_json, write_text
from .plotting import new_figure, save_png

if TYPE_CHECKING:
    from .inference.matchers import PairScorer, SentenceEncoder

# The guards, in the order they are applied: the keys of MinedNegatives.removed.
GUARDS = ("anchor_itself", "labelled_positive", "duplicate_of_positive", "margin", "rescore")
SAMPLINGS = ("top", "random")
OUTPUT_FORMATS = ("tuples", "pairs")
# The "format" of the summary file, which reports find it by.
SUMMARY_FORMAT = "cosent-tf-mining"
# Corpus texts encoded at a time into the memory-mapped vectors.
CORPUS_CHUNK = 16384
# What the score statistics hold, in the summary and its table.
STATISTICS = ("count", "mean", "min", "p5", "p25", "median", "p75", "p95", "max")


def summary_paths(output: PathLike) -> tuple[str, str]:
    """The summary files written beside a mining output: ``(JSON summary, PNG of the scores)``.

    Args:
        output: the mined file's path.

    Returns:
        The output's path without its extension, plus ``.summary.json`` and ``.scores.png``.

    Example:
        >>> summary_paths("runs/mined.jsonl")
        ('runs/mined.summary.json', 'runs/mined.scores.png')
    """
    root = os.path.splitext(os.fspath(output))[0]
    return root + ".summary.json", root + ".scores.png"


def check_output_name(output: PathLike, output_format: str = "tuples") -> str:
    """The file format a mining output is written in, from its extension, so that the readers
    (which go by the extension) read it back.

    Args:
        output: the output's path.
        output_format: ``tuples`` (JSON lines of query, pos, neg) or ``pairs`` (labelled pairs).

    Returns:
        ``jsonl``, ``tsv`` or ``csv``.

    Raises:
        ConfigError: an unknown ``output_format``, tuples to a name other than ``.jsonl``/``.json``,
            or pairs to a name of no pair format.

    Example:
        >>> check_output_name("mined.tsv", "pairs")
        'tsv'
    """
    if output_format not in OUTPUT_FORMATS:
        raise ConfigError(f"unknown output format {output_format!r}; choose one of {', '.join(OUTPUT_FORMATS)}")
    extension = os.path.splitext(os.fspath(output))[1].lower()
    file_format = EXTENSION_FORMATS.get(extension)
    if output_format == "tuples" and file_format != "jsonl":
        raise ConfigError(
            f"{output}: tuples are written as JSON lines ({{query, pos, neg}}), which the readers know by a .jsonl "
            "or .json name; give the output such a name, or write labelled pairs (--output-format pairs)"
        )
    if file_format is None:
        raise ConfigError(
            f"{output}: pairs are written as TSV (.tsv .txt .data), CSV (.csv) or JSON lines (.jsonl .json), told "
            "by the name's extension; give the output one of these"
        )
    return file_format


def rank_window(rank_range: tuple[int, int], corpus_size: int) -> tuple[int, int, Optional[str]]:
    """The ranks a corpus of ``corpus_size`` texts can give for ``rank_range``.

    Args:
        rank_range: ``(lo, hi)``, 1-based ranks among all corpus texts, both included.
        corpus_size: how many texts the corpus has.

    Returns:
        ``(lo, hi, note)``: ``hi`` cut to the corpus size where the corpus is smaller, and a note
        saying so (None when nothing was cut).

    Raises:
        ConfigError: ``lo`` below 1, ``hi`` below ``lo``, or a corpus of fewer than ``lo`` texts.

    Example:
        >>> rank_window((10, 50), 30)
        (10, 30, "the corpus has 30 texts, fewer than the rank window's end 50: candidates are ranks 10-30")
    """
    if any(isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) for rank in rank_range):
        raise ConfigError(f"rank window {rank_range!r}: the ranks must be whole numbers, such as (10, 50)")
    lo, hi = (int(rank) for rank in rank_range)
    if lo < 1 or hi < lo:
        raise ConfigError(
            f"rank window {lo}-{hi}: ranks start at 1 and the window's end may not come before its start; "
            "give LO-HI with 1 <= LO <= HI, such as 10-50"
        )
    if corpus_size < lo:
        raise ConfigError(
            f"the corpus has {corpus_size} texts, fewer than the rank window's start {lo}: give a larger corpus, "
            f"or a window that starts at {max(corpus_size, 1)} or lower"
        )
    if corpus_size < hi:
        return (
            lo,
            corpus_size,
            (
                f"the corpus has {corpus_size} texts, fewer than the rank window's end {hi}: candidates are ranks "
                f"{lo}-{corpus_size}"
            ),
        )
    return lo, hi, None


def default_corpus(data: Union[GroupData, PairData]) -> list[str]:
    """The corpus mined when none is given: every distinct second text of ``data`` in the order of
    first appearance (a pair's second text; an example's positive, then its own negatives).

    Example:
        >>> default_corpus(GroupData(["a", "b"], ["c", "c"], [["d"], ["e", "d"]]))
        ['c', 'd', 'e']
    """
    if isinstance(data, GroupData):
        return list(
            dict.fromkeys(text for positive, own in zip(data.positives, data.negatives) for text in [positive, *own])
        )
    return list(dict.fromkeys(data.texts_b))


def check_index_model(index: VectorIndex, model_dir: Optional[str]) -> None:
    """Refuse an index built by another model than ``model_dir`` (when both are known and the
    index's model is still there), in the terms of mining (:meth:`VectorIndex.check_model`).

    Raises:
        ConfigError: naming the index, its model and ``model_dir``.
    """
    index.check_model(
        model_dir,
        "mine with that model, give the corpus as texts, or build an index with this model (cosent-tf search build)",
    )


def score_statistics(values: Any) -> dict[str, Optional[float]]:
    """Count, mean, min, 5th/25th/50th/75th/95th percentiles and max of ``values`` (None but the
    count when there are none).

    Example:
        >>> score_statistics([0.0, 1.0])["median"]
        0.5
    """
    flat = np.asarray(values, dtype=np.float64).ravel()
    if flat.size == 0:
        return {"count": 0, **dict.fromkeys(STATISTICS[1:])}
    p5, p25, median, p75, p95 = (float(x) for x in np.percentile(flat, [5, 25, 50, 75, 95]))
    return {
        "count": int(flat.size),
        "mean": float(flat.mean()),
        "min": float(flat.min()),
        "p5": p5,
        "p25": p25,
        "median": median,
        "p75": p75,
        "p95": p95,
        "max": float(flat.max()),
    }


@dataclasses.dataclass
class MinedNegatives:
    """The result of :func:`mine_hard_negatives`: the examples with their mined negatives, and what
    happened on the way.

    Attributes:
        examples: ``(anchor, positive, negatives)`` of each example that got enough negatives, in the
            data's order.
        positive_cosines: each example's cosine of its anchor and positive, shape (examples,).
        negative_cosines: the cosines of its anchor and each chosen negative, shape (examples, k).
        negative_ranks: each chosen negative's 1-based rank among all corpus texts by cosine with the
            anchor (before any guard), shape (examples, k).
        positive_scores: the interaction model's score of (anchor, positive); None unless rescored.
        negative_scores: its scores of (anchor, negative), (examples, k); None unless rescored.
        counts: ``examples_read``, ``anchors``, ``anchors_without_positive``, ``examples_mined``,
            ``examples_short`` (left out: too few survivors), ``anchors_short`` (distinct anchors of
            those), ``corpus_size``, ``candidates_empty`` and ``candidates_repeated`` (never candidates).
        removed: candidates each guard removed, by the names of :data:`GUARDS`.
        settings: what the mining was asked (window, margins, sampling, seed, models, data, corpus).
        notes: what it decided (a window cut to the corpus, which pairs were positives).

    Example:
        >>> mined = mine_hard_negatives(encoder, read_group_file("train.jsonl"), rank_range=(5, 30))  # doctest: +SKIP
        >>> mined.write("mined.jsonl")  # doctest: +SKIP
        ('mined.jsonl', 'mined.summary.json', 'mined.scores.png')
    """

    examples: list[tuple[str, str, list[str]]]
    positive_cosines: np.ndarray
    negative_cosines: np.ndarray
    negative_ranks: np.ndarray
    positive_scores: Optional[np.ndarray]
    negative_scores: Optional[np.ndarray]
    counts: dict[str, int]
    removed: dict[str, int]
    settings: dict[str, Any]
    notes: list[str] = dataclasses.field(default_factory=list)

    def __len__(self) -> int:
        return len(self.examples)

    def as_group_data(self) -> GroupData:
        """The mined examples as training examples for an in-batch loss (``--loss mnrl``).

        Example:
            >>> data = mined.as_group_data()  # doctest: +SKIP
            >>> data.group_size() == 2 + mined.settings["num_negatives"]  # doctest: +SKIP
            True
        """
        return GroupData(
            [anchor for anchor, _, _ in self.examples],
            [positive for _, positive, _ in self.examples],
            [list(negatives) for _, _, negatives in self.examples],
            source=str(self.settings.get("data") or ""),
            notes=list(self.notes),
        )

    def summary(self) -> dict[str, Any]:
        """What the mining did, as JSON-able values: ``format`` (:data:`SUMMARY_FORMAT`),
        ``settings``, ``counts``, ``removed``, ``notes`` and ``scores``: the statistics
        (:func:`score_statistics`) of the positives' and the chosen negatives' cosines, and, when
        rescored, of their interaction scores.

        Example:
            >>> mined.summary()["scores"]["cosine"]["negatives"]["median"]  # doctest: +SKIP
            0.8123
        """
        scores: dict[str, Any] = {
            "cosine": {
                "positives": score_statistics(self.positive_cosines),
                "negatives": score_statistics(self.negative_cosines),
            }
        }
        if self.positive_scores is not None:
            scores["interaction"] = {
                "positives": score_statistics(self.positive_scores),
                "negatives": score_statistics(self.negative_scores),
            }
        return {
            "format": SUMMARY_FORMAT,
            "settings": dict(self.settings),
            "counts": dict(self.counts),
            "removed": dict(self.removed),
            "scores": scores,
            "notes": list(self.notes),
        }

    def summary_table(self) -> str:
        """The summary as a text table to print: the counts, the candidates each guard removed and
        the score statistics.

        Example:
            >>> print(mined.summary_table())  # doctest: +SKIP
        """
        counts, settings = self.counts, self.settings
        lo, hi = settings["rank_window"]
        wanted = settings["num_negatives"]
        lines = [
            f"mined {counts['examples_mined']} of {counts['examples_read']} examples ({wanted} negative(s) each), "
            f"of {counts['anchors']} anchors, from a corpus of {counts['corpus_size']} texts, ranks {lo}-{hi}",
            f"  anchors without a positive, skipped: {counts['anchors_without_positive']}",
            f"  examples with fewer than {wanted} candidate(s) left, left out: {counts['examples_short']} "
            f"(of {counts['anchors_short']} anchors)",
        ]
        if counts["candidates_empty"] or counts["candidates_repeated"]:
            lines.append(
                f"  corpus texts passed over: {counts['candidates_empty']} empty, "
                f"{counts['candidates_repeated']} repeating an earlier candidate"
            )
        lines.append("candidates removed by each guard, in order:")
        active = {"margin": settings["margin"] is not None, "rescore": settings["rescore_model"] is not None}
        for guard in GUARDS:
            lines.append(f"  {guard:<24}{self.removed[guard] if active.get(guard, True) else '-':>8}")
        lines.append(f"{'scores':<24}" + "".join(f"{name:>8}" for name in STATISTICS))
        for kind, by_side in self.summary()["scores"].items():
            for side, statistics in by_side.items():
                cells = [
                    f"{statistics[name]:>8}" if name == "count" else _cell(statistics[name]) for name in STATISTICS
                ]
                lines.append(f"{kind + ' ' + side:<24}" + "".join(cells))
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)

    def plot(self, path: str) -> None:
        """Write histograms of the positives' and the chosen negatives' cosines (and interaction
        scores, when rescored) to the PNG ``path``.

        Example:
            >>> mined.plot("mined.scores.png")  # doctest: +SKIP
        """
        panels = [("cosine with the anchor", self.positive_cosines, self.negative_cosines)]
        if self.positive_scores is not None and self.negative_scores is not None:
            panels.append(("interaction score with the anchor", self.positive_scores, self.negative_scores))
        figure, axes = new_figure(1, len(panels), figsize=(5.0 * len(panels), 3.6), squeeze=False)
        for axis, (label, positives, negatives) in zip(axes[0], panels):
            positives, negatives = np.ravel(positives), np.ravel(negatives)
            values = np.concatenate([positives, negatives])
            low, high = (float(values.min()), float(values.max())) if values.size else (0.0, 1.0)
            bins = np.linspace(low, high, 41) if high > low else np.linspace(low - 1e-3, high + 1e-3, 3)
            # Densities: there are k negatives to each positive.
            axis.hist(positives, bins=bins, density=True, histtype="step", label=f"positives ({positives.size})")
            axis.hist(negatives, bins=bins, density=True, histtype="step", label=f"negatives ({negatives.size})")
            axis.set(xlabel=label, ylabel="density")
            axis.legend(fontsize=7)
        lo, hi = self.settings["rank_window"]
        figure.suptitle(f"mined negatives: ranks {lo}-{hi}, {self.settings['sampling']}", fontsize=9)
        figure.tight_layout()
        save_png(figure, path)

    def write(self, path: PathLike, output_format: str = "tuples", overwrite: bool = False) -> tuple[str, str, str]:
        """Write the examples, and the summary JSON and PNG beside them (:func:`summary_paths`), each
        whole or not at all; the output itself last, so that its presence means all three are there.

        ``tuples``: one JSON line per example, ``{"query": anchor, "pos": [positive], "neg":
        [negatives]}``, as ``cosent-tf train --loss mnrl`` reads. ``pairs``: (anchor, positive, 1) and
        (anchor, negative, 0), each pair once, in the format of the name's extension (TSV
        ``a<TAB>b<TAB>label``, CSV with the header sentence1,sentence2,label, or JSON lines of
        sentence1, sentence2, label), as ``cosent-tf train`` reads.

        Args:
            path: the output file.
            output_format: ``tuples`` or ``pairs``.
            overwrite: replace files that exist (refused otherwise, before anything is written).

        Returns:
            The paths written: (output, summary JSON, PNG).

        Raises:
            ConfigError: a name the format cannot be written to (:func:`check_output_name`), an
                existing file without ``overwrite``, no example mined, or (TSV) a text holding a tab
                or line break, which a TSV line cannot hold; nothing is written then.

        Example:
            >>> mined.write("mined.tsv", "pairs")  # doctest: +SKIP
            ('mined.tsv', 'mined.summary.json', 'mined.scores.png')
        """
        path = os.fspath(path)
        file_format = check_output_name(path, output_format)
        if not self.examples:
            raise ConfigError(
                f"{path}: no example got {self.settings['num_negatives']} negative(s), so nothing was written: "
                "widen the rank window, ask for fewer negatives, relax the margins or give a larger corpus"
            )
        text = self._tuples_text() if output_format == "tuples" else self._pairs_text(path, file_format)
        json_path, png_path = summary_paths(path)
        for target in (path, json_path, png_path):
            check_output_file(target, overwrite=overwrite)
        write_json(json_path, self.summary())
        self.plot(png_path)
        write_text(path, text)
        return path, json_path, png_path

    def _tuples_text(self) -> str:
        return "".join(
            json.dumps({"query": anchor, "pos": [positive], "neg": negatives}, ensure_ascii=False) + "\n"
            for anchor, positive, negatives in self.examples
        )

    def _pairs_text(self, path: str, file_format: str) -> str:
        rows = dict.fromkeys(
            (anchor, text, label)
            for anchor, positive, negatives in self.examples
            for text, label in [(positive, 1), *((negative, 0) for negative in negatives)]
        )
        if file_format == "tsv":
            for number, (anchor, positive, negatives) in enumerate(self.examples, start=1):
                for text in (anchor, positive, *negatives):
                    if "\t" in text or "\n" in text:
                        raise ConfigError(
                            f"{path}: example {number} (anchor {anchor!r:.60}) has the text {text!r:.60}, which holds "
                            "a tab or line break that a TSV line cannot; nothing was written: write .jsonl or .csv"
                        )
            return "".join(f"{a}\t{b}\t{label}\n" for a, b, label in rows)
        if file_format == "csv":
            buffer = io.StringIO()
            writer = csv.writer(buffer, lineterminator="\n")
            writer.writerow(["sentence1", "sentence2", "label"])
            writer.writerows(rows)
            return buffer.getvalue()
        return "".join(
            json.dumps({"sentence1": a, "sentence2": b, "label": label}, ensure_ascii=False) + "\n"
            for a, b, label in rows
        )


def _cell(value: Optional[float]) -> str:
    return f"{'-':>8}" if value is None else f"{value:>8.4f}"


@dataclasses.dataclass
class _Examples:
    """The (anchor, positive) examples of the data and the texts it marks as each anchor's matches."""

    anchors: list[str]
    positives: list[str]
    matches_of: dict[str, set[str]]  # normalised text -> the normalised texts labelled as its matches
    anchors_without_positive: int
    notes: list[str]
    positive_above: Optional[float] = None


def _examples_of(data: Union[GroupData, PairData]) -> _Examples:
    if not isinstance(data, (GroupData, PairData)):
        raise TypeError(f"data must be a GroupData or a PairData (read_group_file's result), not {type(data).__name__}")
    source = data.source or "the data"
    if len(data) == 0:
        raise DataError(source, "no examples to mine negatives for")
    notes = list(data.notes) if isinstance(data, GroupData) else []
    positive_above = None
    if isinstance(data, GroupData):
        anchors, positives, without = list(data.anchors), list(data.positives), 0
    else:
        task = Task.for_labels("pairs", data.label_kind, float(data.labels.min()), float(data.labels.max()))
        kept = np.flatnonzero(np.asarray(task.positive(data.labels), dtype=bool))
        positive_above = task.positive_above
        if kept.size == 0:
            raise DataError(
                source,
                f"no pair is labelled as a match (label above {positive_above:g}): mining needs each anchor's "
                "positive; give pairs labelled as matches",
            )
        anchors = [data.texts_a[i] for i in kept]
        positives = [data.texts_b[i] for i in kept]
        without = len(set(data.texts_a) - set(anchors))
        notes.append(
            f"{source}: {kept.size} of {len(data)} pairs are labelled as matches (label above {positive_above:g}): "
            f"one example each, its first text the anchor; {without} first text(s) without a match skipped"
        )
    matches_of: dict[str, set[str]] = collections.defaultdict(set)
    for anchor, positive in zip(anchors, positives):
        anchor_key, positive_key = normalized_text(anchor), normalized_text(positive)
        matches_of[anchor_key].add(positive_key)
        matches_of[positive_key].add(anchor_key)
    return _Examples(anchors, positives, dict(matches_of), without, notes, positive_above)


def _check_settings(
    rank_range: tuple[int, int],
    margin: Optional[float],
    num_negatives: int,
    sampling: str,
    seed: int,
    rescorer: Any,
    rescore_margin: float,
    anchor_block: int,
) -> None:
    if len(tuple(rank_range)) != 2:
        raise ConfigError(f"rank_range must be (lo, hi), got {rank_range!r}")
    if isinstance(num_negatives, bool) or not isinstance(num_negatives, (int, np.integer)) or num_negatives < 1:
        raise ConfigError(f"num_negatives must be a whole number, at least 1, got {num_negatives!r}")
    if sampling not in SAMPLINGS:
        raise ConfigError(f"unknown sampling {sampling!r}; choose one of {', '.join(SAMPLINGS)}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed must be a whole number, at least 0, got {seed!r}")
    if isinstance(anchor_block, bool) or not isinstance(anchor_block, (int, np.integer)) or anchor_block < 1:
        raise ConfigError(f"anchor_block must be a whole number, at least 1, got {anchor_block!r}")
    for name, value in (("margin", margin), ("rescore_margin", rescore_margin)):
        if value is not None and not math.isfinite(float(value)):
            raise ConfigError(f"{name} must be a finite number, got {value!r}")
    if rescorer is None and rescore_margin:
        raise ConfigError("rescore_margin is the margin of the rescore guard: give a rescorer (--rescore) with it")


def _check_matchers(encoder: Any, rescorer: Any) -> None:
    from .inference.matchers import PairScorer, SentenceEncoder

    if not isinstance(encoder, SentenceEncoder):
        what = "an interaction model's PairScorer" if isinstance(encoder, PairScorer) else type(encoder).__name__
        raise ConfigError(
            f"the encoder is {what}: candidates are ranked by sentence vectors, so it must be a SentenceEncoder "
            "(a feature model); an interaction model may rescore them (rescorer=)"
        )
    if rescorer is not None and not isinstance(rescorer, PairScorer):
        what = "a feature model's SentenceEncoder" if isinstance(rescorer, SentenceEncoder) else type(rescorer).__name__
        raise ConfigError(f"the rescorer is {what}: it must be a PairScorer (an interaction model)")


def _encoded_corpus(
    encoder: SentenceEncoder, texts: list[str], folder: str, batch_size: int, show_progress: bool
) -> VectorIndex:
    """The corpus's vectors in a memory-mapped file of ``folder``, encoded :data:`CORPUS_CHUNK` texts at
    a time, so that only one chunk's vectors are held in memory."""
    vectors: Optional[np.memmap] = None
    for start in range(0, len(texts), CORPUS_CHUNK):
        chunk = encoder.encode(texts[start : start + CORPUS_CHUNK], batch_size, True, show_progress)
        if vectors is None:
            vectors = np.lib.format.open_memmap(
                os.path.join(folder, "corpus.npy"), mode="w+", dtype=np.float32, shape=(len(texts), chunk.shape[1])
            )
        vectors[start : start + len(chunk)] = chunk
    assert vectors is not None  # the corpus has at least the window's start of texts
    vectors.flush()
    return VectorIndex(vectors, texts, model_dir=encoder.path)


def mine_hard_negatives(
    encoder: SentenceEncoder,
    data: Union[GroupData, PairData],
    corpus: Union[Sequence[str], VectorIndex, None] = None,
    *,
    rank_range: tuple[int, int] = (10, 50),
    margin: Optional[float] = None,
    num_negatives: int = 3,
    sampling: str = "top",
    seed: int = 42,
    rescorer: Optional[PairScorer] = None,
    rescore_margin: float = 0.0,
    batch_size: int = 64,
    show_progress: Optional[bool] = None,
    anchor_block: int = 1024,
) -> MinedNegatives:
    """Mine hard negatives for each (anchor, positive) of ``data`` from ``corpus`` (see the module's
    description for the ranking and the guards).

    Args:
        encoder: the feature model that ranks the corpus for each anchor.
        data: :func:`~cosent_tf.data.groups.read_group_file`'s result: a GroupData (one example per
            (anchor, positive); its own negatives are not chosen from, but its positives guard), or
            labelled pairs (one example per pair the labels mark as a match; a first text without any
            is skipped and counted).
        corpus: the texts to mine from, or a :class:`~cosent_tf.inference.index.VectorIndex` of this
            encoder's (used as it is); None: every distinct second text of ``data``
            (:func:`default_corpus`).
        rank_range: ``(lo, hi)``: the candidates are the texts ranked lo to hi (1-based, both
            included) among all corpus texts by cosine with the anchor; cut to a smaller corpus.
        margin: drop a candidate whose cosine is above the positive's minus ``margin``; None: no
            margin guard.
        num_negatives: negatives per example; an example with fewer survivors is left out.
        sampling: ``top``, the best-ranked survivors, or ``random``, a uniform draw among them by
            ``numpy.random.default_rng([seed, example index])``, kept in rank order.
        seed: the seed of ``random`` sampling.
        rescorer: an interaction model; drops a candidate scored at or above the positive's score
            minus ``rescore_margin``.
        rescore_margin: the rescore guard's margin (needs ``rescorer``).
        batch_size: texts (pairs) per model batch.
        show_progress: progress bars while encoding and rescoring; None: for large inputs.
        anchor_block: distinct anchors searched (and rescored) at a time: it bounds the memory held.

    Returns:
        The :class:`MinedNegatives`.

    Raises:
        ConfigError: a setting out of range, a matcher of the wrong kind, an index of another model,
            or a corpus of fewer texts than the rank window's start.
        DataError: labelled pairs of which none is a match, or no examples.

    Example:
        >>> encoder = SentenceEncoder.load("runs/bq-cosent/model")  # doctest: +SKIP
        >>> data = read_group_file("train.tsv")  # doctest: +SKIP
        >>> mined = mine_hard_negatives(encoder, data, rank_range=(10, 50), margin=0.05)  # doctest: +SKIP
        >>> mined.write("mined.jsonl")  # doctest: +SKIP
        ('mined.jsonl', 'mined.summary.json', 'mined.scores.png')
    """
    _check_matchers(encoder, rescorer)
    _check_settings(rank_range, margin, num_negatives, sampling, seed, rescorer, rescore_margin, anchor_block)
    examples = _examples_of(data)
    if isinstance(corpus, VectorIndex):
        check_index_model(corpus, encoder.path)
        corpus_size, described = len(corpus), corpus.directory or f"an index of {len(corpus)} texts"
    else:
        from .inference.texts import check_texts

        if corpus is None:
            corpus, described = default_corpus(data), "the data's distinct second texts"
        else:
            corpus = check_texts(corpus, "corpus")
            described = f"{len(corpus)} texts given"
        corpus_size = len(corpus)
    lo, hi, cut = rank_window(rank_range, corpus_size)
    from .inference.matchers import PROGRESS_FROM

    show = corpus_size >= PROGRESS_FROM if show_progress is None else bool(show_progress)
    settings = {
        "model": encoder.path,
        "rescore_model": None if rescorer is None else (rescorer.path or "a PairScorer in memory"),
        "data": data.source,
        "corpus": described,
        "rank_range": [int(rank) for rank in rank_range],
        "rank_window": [lo, hi],
        "margin": None if margin is None else float(margin),
        "num_negatives": int(num_negatives),
        "sampling": sampling,
        "seed": int(seed),
        "rescore_margin": None if rescorer is None else float(rescore_margin),
        "normalization": NORMALIZATION,
        "positive_label_above": examples.positive_above,
    }
    with tempfile.TemporaryDirectory(prefix="cosent-tf-mining-") as folder:
        index = (
            corpus if isinstance(corpus, VectorIndex) else _encoded_corpus(encoder, corpus, folder, batch_size, show)
        )
        miner = _Miner(encoder, rescorer, examples, index, lo, hi, margin, rescore_margin, batch_size, show_progress)
        distinct = list(dict.fromkeys(examples.anchors))
        for start in range(0, len(distinct), anchor_block):
            miner.mine_block(distinct[start : start + anchor_block], int(num_negatives), sampling, int(seed))
        return miner.result(int(num_negatives), settings, examples.notes + ([cut] if cut else []))


class _Miner:
    """The candidates of each example, block by block of anchors, and the negatives chosen from them.

    A block's candidates are dropped once its negatives are chosen, so that what is held between
    blocks is the chosen negatives alone, not every example's window of candidates."""

    # A chosen or surviving candidate: (corpus index, rank, cosine, interaction score or NaN).
    Candidate = tuple[int, int, float, float]

    def __init__(
        self,
        encoder: SentenceEncoder,
        rescorer: Optional[PairScorer],
        examples: _Examples,
        index: VectorIndex,
        lo: int,
        hi: int,
        margin: Optional[float],
        rescore_margin: float,
        batch_size: int,
        show_progress: Optional[bool],
    ) -> None:
        self.encoder, self.rescorer, self.examples, self.index = encoder, rescorer, examples, index
        self.lo, self.hi, self.margin, self.rescore_margin = lo, hi, margin, rescore_margin
        self.batch_size, self.show_progress = batch_size, show_progress
        self.examples_of: dict[str, list[int]] = collections.defaultdict(list)
        for number, anchor in enumerate(examples.anchors):
            self.examples_of[anchor].append(number)
        count = len(examples.anchors)
        self.positive_cosines = np.zeros(count, dtype=np.float32)
        self.positive_scores = np.full(count, np.nan, dtype=np.float32)
        # Per example: its chosen negatives, or None when too few candidates survived the guards.
        self.chosen: list[Optional[list[_Miner.Candidate]]] = [None] * count
        self.removed = dict.fromkeys(GUARDS, 0)
        self.empty = self.repeated = 0

    def mine_block(self, anchors: list[str], wanted: int, sampling: str, seed: int) -> None:
        anchor_vectors = self.encoder.encode(anchors, self.batch_size, True, self.show_progress)
        cosines, indices = self.index.search(anchor_vectors, self.hi)
        cosines, indices = cosines[:, self.lo - 1 :], indices[:, self.lo - 1 :]
        numbers = [number for anchor in anchors for number in self.examples_of[anchor]]
        positives = list(dict.fromkeys(self.examples.positives[number] for number in numbers))
        positive_vectors = self.encoder.encode(positives, self.batch_size, True, self.show_progress)
        positive_row = {text: row for row, text in enumerate(positives)}
        keys = {int(i): normalized_text(self.index.texts[i]) for i in np.unique(indices)}
        survivors: dict[int, list[_Miner.Candidate]] = {}
        for row, anchor in enumerate(anchors):
            for number in self.examples_of[anchor]:
                positive = self.examples.positives[number]
                self.positive_cosines[number] = anchor_vectors[row] @ positive_vectors[positive_row[positive]]
                survivors[number] = self._guarded(number, anchor, cosines[row], indices[row], keys)
        if self.rescorer is not None:
            self._rescore(survivors)
        for number, kept in survivors.items():
            self.chosen[number] = self._choose(number, kept, wanted, sampling, seed)

    @staticmethod
    def _choose(
        number: int, survivors: list[_Miner.Candidate], wanted: int, sampling: str, seed: int
    ) -> Optional[list[_Miner.Candidate]]:
        """The negatives of example ``number``: the best-ranked survivors, or a draw among them by the
        example's own seed (so the choice does not depend on the blocks); None when too few survived."""
        if len(survivors) < wanted:
            return None
        if sampling == "top":
            return survivors[:wanted]
        drawn = np.random.default_rng([seed, number]).choice(len(survivors), size=wanted, replace=False)
        return [survivors[i] for i in sorted(drawn.tolist())]

    def _guarded(
        self, number: int, anchor: str, cosines: np.ndarray, indices: np.ndarray, keys: dict[int, str]
    ) -> list[_Miner.Candidate]:
        """The candidates of one example that pass the guards before the rescore."""
        anchor_key = normalized_text(anchor)
        positive_key = normalized_text(self.examples.positives[number])
        matches = self.examples.matches_of.get(anchor_key, set())
        floor = None if self.margin is None else float(self.positive_cosines[number]) - self.margin
        seen: set[str] = set()
        kept = []
        for position, (cosine, index) in enumerate(zip(cosines.tolist(), indices.tolist())):
            text = self.index.texts[index]
            if not text.strip():
                self.empty += 1
                continue
            if text in seen:
                self.repeated += 1
                continue
            seen.add(text)
            key = keys[index]
            if key == anchor_key:
                self.removed["anchor_itself"] += 1
            elif key in matches and key != positive_key:
                self.removed["labelled_positive"] += 1
            elif key == positive_key:
                self.removed["duplicate_of_positive"] += 1
            elif floor is not None and cosine > floor:
                self.removed["margin"] += 1
            else:
                kept.append((index, self.lo + position, cosine, math.nan))
        return kept

    def _rescore(self, survivors: dict[int, list[_Miner.Candidate]]) -> None:
        """Score every distinct (anchor, text) pair of the block once, in one batched call, and drop
        the candidates that score within the margin of their positive."""
        assert self.rescorer is not None
        texts = self.index.texts
        pairs = dict.fromkeys(
            [(self.examples.anchors[number], self.examples.positives[number]) for number in survivors]
            + [
                (self.examples.anchors[number], texts[index])
                for number, kept in survivors.items()
                for index, _, _, _ in kept
            ]
        )
        scored = self.rescorer.similarity(
            [a for a, _ in pairs], [b for _, b in pairs], self.batch_size, self.show_progress
        )
        score_of = dict(zip(pairs, scored.tolist()))
        for number, candidates in survivors.items():
            anchor = self.examples.anchors[number]
            positive_score = score_of[anchor, self.examples.positives[number]]
            self.positive_scores[number] = positive_score
            kept = []
            for index, rank, cosine, _ in candidates:
                score = score_of[anchor, texts[index]]
                if score >= positive_score - self.rescore_margin:
                    self.removed["rescore"] += 1
                else:
                    kept.append((index, rank, cosine, score))
            survivors[number] = kept

    def result(self, wanted: int, settings: dict[str, Any], notes: list[str]) -> MinedNegatives:
        examples: list[tuple[str, str, list[str]]] = []
        kept_numbers, chosen = [], []
        short_anchors: set[str] = set()
        for number, picked in enumerate(self.chosen):
            anchor, positive = self.examples.anchors[number], self.examples.positives[number]
            if picked is None:
                short_anchors.add(anchor)
                continue
            examples.append((anchor, positive, [self.index.texts[index] for index, _, _, _ in picked]))
            kept_numbers.append(number)
            chosen.append(picked)
        rescored = self.rescorer is not None
        read = len(self.chosen)
        counts = {
            "examples_read": read,
            "anchors": len(self.examples_of),
            "anchors_without_positive": self.examples.anchors_without_positive,
            "examples_mined": len(examples),
            "examples_short": read - len(examples),
            "anchors_short": len(short_anchors),
            "corpus_size": len(self.index),
            "candidates_empty": self.empty,
            "candidates_repeated": self.repeated,
        }
        return MinedNegatives(
            examples=examples,
            positive_cosines=self.positive_cosines[kept_numbers],
            negative_cosines=np.array([[c for _, _, c, _ in row] for row in chosen], dtype=np.float32).reshape(
                -1, wanted
            ),
            negative_ranks=np.array([[r for _, r, _, _ in row] for row in chosen], dtype=np.int64).reshape(-1, wanted),
            positive_scores=self.positive_scores[kept_numbers] if rescored else None,
            negative_scores=(
                np.array([[s for _, _, _, s in row] for row in chosen], dtype=np.float32).reshape(-1, wanted)
                if rescored
                else None
            ),
            counts=counts,
            removed=dict(self.removed),
            settings=settings,
            notes=notes,
        )
