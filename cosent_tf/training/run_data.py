"""What a training run reads: its data (a benchmark task's files, NLI, or a user's own pair files),
the hold-outs carved from them, the label checks, and the list of every input file.

:func:`check_inputs` checks what can be checked before any data is read; :func:`load_run_data`
assembles the :class:`RunData`; :func:`run_inputs` lists every file the run depends on, whose
fingerprints decide whether an interrupted run may resume (:mod:`cosent_tf.training.run_folder`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
from typing import Optional, Union

import numpy as np

from ..data.benchmarks import load_task, nli_files, read_nli, senteval_dir, task_file
from ..data.files import PairFileFormat, read_pair_file
from ..data.groups import GroupData, groups_from_pairs, read_group_file
from ..data.pairs import PairData
from ..data.tasks import CNSD, FILES, MATCHING_TASKS, Task, get_task
from ..environment import check_weights_may_change
from ..errors import CheckpointError, DataError, where
from ..losses.registry import GROUPS, LossEntry, get_loss
from ..models.sources import ModelSource
from .config import RunConfig

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class RunData:
    """What a run trains and tests on: train pairs (or, for a loss that trains on groups, the
    examples of an anchor, its positive and its hard negatives), (valid, test) pairs per evaluated
    task and the :class:`~cosent_tf.data.tasks.Task` of each, the task train's labels belong to,
    notes for the user (recorded in metrics.json; each makes the results not comparable with
    published ones), the data files read, the texts per example of a group loss
    (:meth:`~cosent_tf.data.groups.GroupData.group_size`), and what the group reader made of the
    data (``data_notes``, said and recorded too)."""

    train: Union[PairData, GroupData]
    evaluation: dict
    tasks: dict
    task: Task
    notes: list
    files: list = dataclasses.field(default_factory=list)  # every data file read
    group_size: Optional[int] = None
    data_notes: list = dataclasses.field(default_factory=list)  # how groups were made; no caveat


def check_inputs(cfg: RunConfig, source: Optional[ModelSource] = None) -> None:
    """What a run reads that can be checked at once, before any data is read: the data folder
    (or the user's files), the config, the vocabulary and the checkpoint. Errors name the path
    (and, when it is relative, the folder it is relative to). Also that this process can train at
    all (:func:`cosent_tf.environment.check_weights_may_change`).

    ``source`` is the run's model source (:meth:`RunConfig.model_source`), which keeps what it
    reads for the rest of the run; None opens it here."""
    source = check_input_files(cfg, source)
    if not source.weights_in_memory:
        source.variables()  # a Google checkpoint's variable list: cheap, and it must be readable


def check_input_files(cfg: RunConfig, source: Optional[ModelSource] = None) -> ModelSource:
    """:func:`check_inputs` but the checkpoint's variable list, which only the Keras 2 engine reads
    through TensorFlow's reader (the Keras 3 route reads the arrays when it loads its backbone);
    the model source, opened here when ``source`` is None."""
    check_weights_may_change()
    if cfg.train_file:
        for option, path in (("--train", cfg.train_file), ("--valid", cfg.valid_file), ("--test", cfg.test_file)):
            if path is not None and not os.path.exists(path):
                raise DataError(where(path), "file not found")
            if path is not None and not os.path.isfile(path):
                raise DataError(
                    where(path),
                    f"{option} is {_file_kind(path)}, not a regular file: a run reads its files again (to check, "
                    "before resuming, that they have not changed); save the data to a file and pass that",
                )
    elif not os.path.isdir(cfg.data_dir):
        raise DataError(
            where(cfg.data_dir),
            "data folder not found; pass --data-dir: the shared data root (with senteval_cn/, cnsd/ and vocab/) "
            "or a senteval_cn folder",
        )
    # The paths and maxlen are set once the configuration is resolved (RunConfig.resolved).
    assert cfg.config is not None and cfg.vocab is not None and cfg.maxlen is not None, "an unresolved RunConfig"
    if source is None:
        source = cfg.model_source()  # reads and checks the config
    if not os.path.isfile(cfg.vocab):
        raise DataError(
            where(cfg.vocab),
            "vocabulary not found; pass --vocab (a checkpoint folder brings its own), or a --data-dir with vocab/",
        )
    source.check_vocab()
    source.check_maxlen(cfg.architecture, cfg.maxlen)
    if cfg.checkpoint and not os.path.exists(cfg.checkpoint) and not os.path.exists(cfg.checkpoint + ".index"):
        raise CheckpointError(f"{where(cfg.checkpoint)}: checkpoint not found")
    return source


def _file_kind(path):
    mode = os.stat(path).st_mode
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO), which can be read only once"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket or other special file"


def run_inputs(cfg: RunConfig, data: RunData, source: Optional[ModelSource] = None) -> list:
    """Every file a run reads: its data files, the model config, the vocabulary and the
    checkpoint's weights (:meth:`~cosent_tf.models.sources.ModelSource.weight_files`).
    ``source`` is as :func:`check_inputs`'."""
    if source is None:
        source = cfg.model_source()
    return [*data.files, cfg.config, cfg.vocab, *source.weight_files()]


def load_run_data(cfg: RunConfig) -> RunData:
    """The data of a configuration: a benchmark task's files, NLI, or the user's own files.

    A loss that trains on groups (``--loss mnrl``) gets them from labelled pairs by
    :func:`~cosent_tf.data.groups.groups_from_pairs` (after ``max_train_pairs`` has sampled the
    pairs, so that it sees the pairs a pair loss would), or as the file gives them."""
    loss = get_loss(cfg.kind, cfg.loss)
    data = _load_files(cfg, loss) if cfg.train_file else _load_benchmark(cfg)
    data.train = data.train.sample(cfg.max_train_pairs, cfg.seed)
    data.evaluation = {
        t: (v.sample(cfg.max_eval_pairs, cfg.seed), s.sample(cfg.max_eval_pairs, cfg.seed))
        for t, (v, s) in data.evaluation.items()
    }
    if loss.examples == GROUPS:
        if isinstance(data.train, PairData):
            data.train = groups_from_pairs(data.train, data.task, bool(cfg.hard_negatives_from_labels), cfg.seed)
        data.train.check_in_batch()
        data.group_size = data.train.group_size(cfg.group_size)
        # What the reader made of the data: said and recorded, but no caveat on the results.
        data.data_notes += data.train.notes
        drawn = data.train.negatives_note(data.group_size)
        if drawn:
            data.data_notes.append(drawn)
    elif data.task.data == FILES:
        if not cfg.allow_single_label:
            _require_two_labels(
                data.train,
                "there is nothing to rank, so CoSENT would learn nothing (pass --allow-single-label to train anyway)",
            )
    elif loss.ranks_labels:
        _require_two_labels(data.train, f"{loss.title} ranks pairs by their labels, so every step's loss would be 0")
    for valid, _ in data.evaluation.values():
        _require_two_labels(valid, "Spearman is undefined on them, so no epoch could be chosen as the best")
    return data


def _load_benchmark(cfg):
    folder, notes, task, files = senteval_dir(cfg.data_dir), [], get_task(cfg.task), []
    if task.data == CNSD:
        files = nli_files(cfg.data_dir)
        if not files:
            raise DataError(cfg.data_dir, "no cnsd-*/*.jsonl NLI files under this folder")
        train = PairData.concat([read_nli(p, cfg.strict) for p in files])
        tasks = MATCHING_TASKS
    else:
        tasks = (cfg.task,)
    evaluation = {
        t: (load_task(folder, t, "valid", cfg.strict), load_task(folder, t, "test", cfg.strict)) for t in tasks
    }
    files += [task_file(folder, t, split) for t in tasks for split in ("valid", "test")]
    if task.data != CNSD:
        train_path = task_file(folder, cfg.task, "train")
        if os.path.exists(train_path):
            train = load_task(folder, cfg.task, "train", cfg.strict)
            files.append(train_path)
        elif cfg.train_from_valid:
            valid, test = evaluation[cfg.task]
            train, valid = _hold_out(valid, cfg.train_from_valid, cfg.seed, "--train-from-valid", "trained on")
            evaluation[cfg.task] = (valid, test)
            notes.append(
                f"{train_path} does not exist: trained on a seeded {cfg.train_from_valid:.0%} "
                f"of valid ({len(train)} pairs) and validated on the rest; NOT comparable "
                "with published numbers"
            )
        else:
            raise DataError(
                train_path,
                f"the {cfg.task} train split is not here (file does not exist); "
                "pass --train-from-valid FRACTION to train on a seeded part of valid instead",
            )
    return RunData(train, evaluation, {t: get_task(t) for t in evaluation}, task, notes, files)


def _hold_out(data, fraction, seed, option, taken):
    """(a seeded ``fraction`` of ``data``, the rest), each in file order; a DataError naming the
    file if either part would be empty. ``option`` sets the fraction; ``taken``: what the fraction is.

    Examples read from a file are held out by whole lines: the examples of one line (a query with
    several positives) on one side, so that no query is validated on what it was trained on."""
    lines = data.lines if isinstance(data, GroupData) else None
    units = np.asarray(lines) if lines is not None else np.arange(len(data))
    distinct = np.unique(units)
    order = np.random.default_rng(seed).permutation(len(distinct))
    cut = int(round(len(distinct) * fraction))
    if not 0 < cut < len(distinct):
        what = "line" if lines is not None else "example" if isinstance(data, GroupData) else "pair"
        what += "s" * (len(distinct) != 1) + " of examples" * (lines is not None)
        other = "validated on" if taken == "trained on" else "trained on"
        raise DataError(
            data.source,
            f"{len(distinct)} {what}: {option} {fraction:g} leaves {cut} to be {taken} and "
            f"{len(distinct) - cut} to be {other}, and a run needs both; use a larger file, another {option}"
            + (", or pass --valid FILE" if option == "--valid-fraction" else ""),
        )
    held = np.isin(units, distinct[order[:cut]])
    return data.subset(np.flatnonzero(held)), data.subset(np.flatnonzero(~held))


def _load_files(cfg, loss: LossEntry):
    file_format = PairFileFormat(cfg.file_format, cfg.text_a_field, cfg.text_b_field, cfg.label_field)
    # A group loss also reads files of groups (query, positives, negatives) and unlabelled positive
    # pairs; its valid and test files are scored as labelled pairs all the same.
    read = read_group_file if loss.examples == GROUPS else read_pair_file
    train = read(cfg.train_file, file_format, cfg.strict)
    notes = []
    if isinstance(train, GroupData):
        if cfg.hard_negatives_from_labels:
            raise DataError(
                train.source,
                "has no labels to take hard negatives from (its rows are an anchor, its positive and any "
                "negatives): leave out --hard-negatives-from-labels, or give labelled pairs",
            )
        # The whole file first: a file no in-batch loss can learn from is said as such, not as a
        # hold-out without a dissimilar pair (load_run_data checks the trained part again).
        train.check_in_batch()
        unit = "examples"
        logger.info("%s: %d examples of an anchor, its positive and its negatives", cfg.train_file, len(train))
    else:
        low, high = float(train.labels.min()), float(train.labels.max())
        task = Task.for_labels(cfg.task, train.label_kind, low, high)
        unit = "pairs"
        logger.info("%s: %d pairs, %s labels from %g to %g", cfg.train_file, len(train), train.label_kind, low, high)
    if cfg.valid_file:
        valid = _as_pairs(read(cfg.valid_file, file_format, cfg.strict), cfg.seed)
    else:
        held_out, train = _hold_out(train, cfg.valid_fraction, cfg.seed, "--valid-fraction", "held out as valid")
        valid = _as_pairs(held_out, cfg.seed)
        notes.append(
            f"no --valid file: a seeded {cfg.valid_fraction:.0%} of {cfg.train_file} ({len(held_out)} {unit}) "
            f"is held out as valid; {len(train)} {unit} are trained on"
            + (", and each held-out example is scored as labelled pairs" if unit == "examples" else "")
        )
    if cfg.test_file:
        test = _as_pairs(read(cfg.test_file, file_format, cfg.strict), cfg.seed)
    else:
        test = valid
        notes.append(
            "no --test file: the test metrics are the valid ones, measured on the data the best epoch "
            "(and the threshold) were chosen on, so they flatter the model"
        )
    if isinstance(train, PairData):
        for other in (valid, test):
            _require_same_kind(train, other)
    else:
        # Examples carry no labels: the pairs they are validated on say what a label means, so a
        # graded or NLI valid file is not scored as binary pairs, and the test pairs must agree.
        _require_same_kind(valid, test, "the valid pairs")
        low, high = float(valid.labels.min()), float(valid.labels.max())
        task = Task.for_labels(cfg.task, valid.label_kind, low, high)
    files = [path for path in (cfg.train_file, cfg.valid_file, cfg.test_file) if path]
    return RunData(train, {cfg.task: (valid, test)}, {cfg.task: task}, task, notes, files)


def _as_pairs(data: Union[PairData, GroupData], seed: int) -> PairData:
    """Validation and testing score labelled pairs: groups are scored as their anchor-positive (1)
    and anchor-negative (0) pairs (:meth:`~cosent_tf.data.groups.GroupData.labelled_pairs`)."""
    return data.labelled_pairs(seed) if isinstance(data, GroupData) else data


def _require_same_kind(train, other, role="the train file"):
    kinds = (train.label_kind, other.label_kind)
    if train.label_words != other.label_words or (kinds[0] == "binary" and kinds[1] != "binary"):
        raise DataError(
            other.source,
            f"its labels are {kinds[1]} but those of {role} {train.source} are "
            f"{kinds[0]}: the files must label pairs the same way",
        )


def _require_two_labels(pairs, consequence):
    if not len(pairs):
        raise DataError(pairs.source, "holds no pairs")
    if len(np.unique(pairs.labels)) < 2:
        raise DataError(
            pairs.source,
            f"all {len(pairs)} pairs (after any sampling) have the label {pairs.labels[0]:g}: {consequence}",
        )
