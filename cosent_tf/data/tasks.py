"""The tasks the engine trains and tests on: one entry each, read by the data readers, the
training engine, its command line and the result tables.

A task says what its labels are (range; 0/1 or graded; which count as similar), where
its files are, and the original experiments' defaults for it (maxlen, batch size,
epochs). Adding a task is one entry in :data:`TASKS`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

import numpy as np

from ..errors import ConfigError, lookup

SENTEVAL = "senteval"  # TASK/TASK.{train,valid,test}.data, text1<TAB>text2<TAB>label
CNSD = "cnsd"  # cnsd-*/*.jsonl NLI files; validated and tested on every senteval task
FILES = "files"  # a user's own train (valid, test) files: see Task.for_labels


@dataclasses.dataclass(frozen=True)
class Task:
    """One task: its labels, its files and its default settings.

    Attributes:
        name: as on the command line and in reports.
        label_range: (lowest, highest) label; a label outside it is an error.
        binary: labels are exactly 0 or 1; accuracy is then reported at the threshold
            that is best on valid.
        graded: labels are graded scores (STS-B's 0-5); a loss that needs classes gets
            ``label > positive_above``. Otherwise labels already are classes (0/1, or
            NLI's ranks 0 < 1 < 2).
        positive_above: a label above this marks a similar pair.
        data: the file layout, :data:`SENTEVAL`, :data:`CNSD` or :data:`FILES`.
        maxlen, interaction_maxlen: token limits of a feature and an interaction model.
        batch_size: pairs per batch.
        epochs: passes (or ``steps_per_epoch`` batches) of training.
        steps_per_epoch: batches per epoch; None: one pass over train.
        negative_at_most: a label at or below this marks a dissimilar pair, the hard negative
            an in-batch loss may take from the labels; None: every pair that is not similar.
        hard_negatives_from_labels: whether in-batch losses take an anchor's dissimilar pairs
            as its hard negatives by default (``--hard-negatives-from-labels``).

    Example:
        >>> TASKS["STS-B"].label_range, TASKS["STS-B"].graded
        ((0.0, 5.0), True)
        >>> Task("MY-TASK", maxlen=32).binary
        True
    """

    name: str
    label_range: tuple[float, float] = (0.0, 1.0)
    binary: bool = True
    graded: bool = False
    positive_above: float = 0.5
    data: str = SENTEVAL
    maxlen: int = 64
    interaction_maxlen: int = 128
    batch_size: int = 32
    epochs: int = 5
    steps_per_epoch: Optional[int] = None
    negative_at_most: Optional[float] = None
    hard_negatives_from_labels: bool = False

    @property
    def max_label(self) -> float:
        """The highest label, which a loss that compares cosines with labels divides by."""
        return self.label_range[1]

    def classes(self, labels: np.ndarray) -> np.ndarray:
        """Class labels for a classification loss: graded scores split at ``positive_above``.

        Args:
            labels: the task's labels.

        Returns:
            float32 classes: ``label > positive_above`` for graded labels, else the labels.

        Example:
            >>> TASKS["STS-B"].classes([1.0, 4.0])
            array([0., 1.], dtype=float32)
        """
        labels = np.asarray(labels, dtype=np.float32)
        return (labels > self.positive_above).astype(np.float32) if self.graded else labels

    def positive(self, labels: np.ndarray) -> np.ndarray:
        """Whether each pair counts as similar.

        Args:
            labels: the task's labels.

        Returns:
            A boolean array, ``label > positive_above``.

        Example:
            >>> TASKS["NLI"].positive([0.0, 1.0, 2.0])
            array([False, False,  True])
        """
        return np.asarray(labels) > self.positive_above

    def negative(self, labels: np.ndarray) -> np.ndarray:
        """Whether each pair counts as dissimilar: a hard negative for an in-batch loss.

        Args:
            labels: the task's labels.

        Returns:
            A boolean array: ``label <= negative_at_most``, or, where that is None, every pair
            that is not :meth:`positive`.

        Example:
            >>> TASKS["NLI"].negative([0.0, 1.0, 2.0])  # contradiction only, not neutral
            array([ True, False, False])
            >>> TASKS["STS-B"].negative([1.0, 2.5, 4.0])
            array([ True,  True, False])
        """
        if self.negative_at_most is None:
            return ~self.positive(labels)
        return np.asarray(labels) <= self.negative_at_most

    @classmethod
    def for_labels(cls, name: str, kind: str, low: float = 0.0, high: float = 1.0) -> Task:
        """A task of a user's own files, from what its train labels are.

        Defaults are the benchmark tasks' (maxlen 64, interaction 128, batch 32, 5 epochs).

        Args:
            name: the task's name in reports.
            kind: ``binary`` (0/1), ``nli`` (ranks 0-2 from NLI words) or ``graded`` (scores in
                ``low``-``high``, similar above the middle of the range).
            low: the lowest graded score.
            high: the highest graded score.

        Returns:
            The task, whose ``data`` is :data:`FILES`.

        Raises:
            ConfigError: ``kind`` is none of the three.

        Example:
            >>> Task.for_labels("mine", "graded", 0, 10).positive_above
            5.0
        """
        if kind == "binary":
            return cls(name, data=FILES)
        if kind == "nli":
            return cls(
                name,
                label_range=(0.0, 2.0),
                binary=False,
                positive_above=1.0,
                data=FILES,
                negative_at_most=0.0,
                hard_negatives_from_labels=True,
            )
        if kind == "graded":
            return cls(
                name,
                label_range=(float(low), float(high)),
                binary=False,
                graded=True,
                positive_above=(float(low) + float(high)) / 2,
                data=FILES,
            )
        raise ConfigError(f"unknown label kind {kind!r}; choose binary, nli or graded")


# Every task by name: the senteval_cn matching tasks and CNSD NLI.
TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task("ATEC"),
        Task("BQ"),
        Task("LCQMC"),
        Task("PAWSX", maxlen=128, interaction_maxlen=256),  # long sentences
        # Scores 0-5, split into similar / dissimilar above 2.5 as the original does.
        Task("STS-B", label_range=(0.0, 5.0), binary=False, graded=True, positive_above=2.5),
        # Ordinal NLI labels: contradiction 0 < neutral 1 < entailment 2. Its hard negatives are the
        # contradictions only, as in supervised SimCSE's (premise, entailment, contradiction) triples.
        Task(
            "NLI",
            label_range=(0.0, 2.0),
            binary=False,
            positive_above=1.0,
            data=CNSD,
            batch_size=64,
            epochs=10,
            steps_per_epoch=5000,
            negative_at_most=0.0,
            hard_negatives_from_labels=True,
        ),
    )
}
MATCHING_TASKS = tuple(name for name, task in TASKS.items() if task.data == SENTEVAL)
BINARY_TASKS = tuple(name for name in MATCHING_TASKS if TASKS[name].binary)


def get_task(name: Union[str, Task]) -> Task:
    """The :class:`Task` called ``name``.

    Args:
        name: a task's name, or a :class:`Task` (returned as it is).

    Returns:
        The task.

    Raises:
        ConfigError: no task has this name; the message lists the choices.

    Example:
        >>> get_task("LCQMC").maxlen
        64
    """
    if isinstance(name, Task):
        return name
    return lookup(TASKS, name, "task")
