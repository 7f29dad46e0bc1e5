"""The entry points of the paper's scripts: the per-dataset training scripts (``scripts/*.py``,
over :func:`train_main`), the report over finished runs (:func:`report_main`) and the seeded
subsets of a task that the runs read, written as files for other commands (:func:`subset_main`).

A training script's options are RunConfig's own (:func:`cosent_tf.training.config.add_run_options`):
the task's data and the engine's, with the script's kind and loss fixed. ``cosent-tf train``
(:mod:`cosent_tf.cli`) trains through :func:`run_training` as well.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import signal
import sys
from collections.abc import Iterator, Sequence
from typing import Optional

import numpy as np

from ..console import VERBOSE_HELP, console_logging, errors_reported, tensorflow_start_up_shown
from ..errors import ConfigError, TrainingInterrupted
from ..io import (
    PathLike,
    check_can_write_in,
    check_not_in_tool_folder,
    check_output_file,
    is_inside,
    json_text,
    write_text,
)
from ..training.config import ENGINE, TASK_DATA, RunConfig, add_run_options, number_in_range, run_config


def output_kinds() -> tuple:
    """The folders this tool writes, by their :class:`cosent_tf.io.FolderKind`.

    No output of a command may land inside one, where it would be lost when the folder is
    replaced or make the folder look like someone else's.

    Returns:
        The kinds of a model folder, an index, a SavedModel, a Hugging Face export and a run.

    Example:
        >>> [kind.marker for kind in output_kinds()]  # doctest: +SKIP
    """
    from ..exports import HF_FOLDER, ONNX_FOLDER, SAVED_MODEL
    from ..inference.index import VectorIndex
    from ..models.spec import MODEL_FOLDER
    from ..training.run_rules import RUN_FOLDER

    # an ONNX export is a Hugging Face export with onnx/ in it: named before it, it is called what it is
    return MODEL_FOLDER, VectorIndex.FOLDER, SAVED_MODEL, ONNX_FOLDER, HF_FOLDER, RUN_FOLDER


@contextlib.contextmanager
def _stopped_by_signal() -> Iterator[None]:
    """A run stopped by SIGTERM or SIGINT (either Keras's): its message, and SystemExit(128 + the signal)."""
    try:
        yield
    except TrainingInterrupted as stopped:
        print(f"stopped: {stopped}", file=sys.stderr, flush=True)
        raise SystemExit(128 + stopped.signal_number) from None
    except KeyboardInterrupt:  # outside fit (reading data, testing): what is on disk is complete
        print("stopped: SIGINT received; run the same command again to carry on", file=sys.stderr, flush=True)
        raise SystemExit(128 + signal.SIGINT) from None


def run_training(cfg: RunConfig, overwrite: bool, print_config: bool = False) -> dict:
    """Train ``cfg`` and print the final metrics as JSON, the only line on stdout.

    The log and Keras's progress go to stderr; a signal becomes an exit status. The caller shows
    the log (:func:`~cosent_tf.console.console_logging`) and reports errors
    (:func:`~cosent_tf.console.errors_reported`).

    Args:
        cfg: the run's configuration.
        overwrite: train over a finished run (or one with other settings) in its folder.
        print_config: instead of training, print the resolved settings
            (:meth:`~cosent_tf.training.config.RunConfig.resolved`) as JSON; nothing is read
            but the model's config and vocabulary, and nothing is written.

    Returns:
        The run's metrics (:func:`cosent_tf.training.engine.train`), or with ``print_config``
        the resolved settings.

    Raises:
        SystemExit: 128 + the signal's number when SIGTERM or SIGINT stopped the run.

    Example:
        >>> run_training(RunConfig(task="BQ", output_dir="runs/bq"), overwrite=False)  # doctest: +SKIP
    """
    if cfg.keras == 3:
        # Nothing imported so far holds Keras 2 (cosent_tf.backend): importing cosent_tf.keras3 chooses
        # Keras 3 for the process, or refuses by name a process where Keras 2 was imported.
        import cosent_tf.keras3  # noqa: F401
    if print_config:
        settings = dataclasses.asdict(cfg.resolved())
        print(json_text(settings, indent=2, ensure_ascii=False))
        return settings
    from ..training import engine
    from ..training.run_results import printed_results

    with _stopped_by_signal(), contextlib.redirect_stdout(sys.stderr):  # Keras's epoch lines and progress bar too
        metrics = engine.train(cfg, overwrite)
    if "worker" in metrics:  # a multi-worker run's other worker: the chief has the results
        print(json_text(metrics))
    else:
        print(json_text(printed_results(metrics)))
    return metrics


def training_parser(
    kind: str = RunConfig.kind, loss: str = RunConfig.loss, task: Optional[str] = None
) -> argparse.ArgumentParser:
    """The options of a training script for ``kind`` models.

    Args:
        kind: the model kind the script trains (default: RunConfig's, a feature model).
        loss: the script's default loss (``--loss`` chooses among the kind's losses; default:
            RunConfig's, CoSENT).
        task: the task the script is fixed to; None makes it the first argument.

    Returns:
        The parser.

    Example:
        >>> training_parser("interaction", "ce").parse_args(["BQ"]).loss
        'ce'
    """
    from ..data.tasks import MATCHING_TASKS
    from ..losses import loss_names

    parser = argparse.ArgumentParser(
        description=f"Train a {kind} matcher ({loss}) and report Spearman on valid and test."
    )
    if task is None:
        parser.add_argument("task", choices=MATCHING_TASKS)
    choices = {"default": loss, "choices": loss_names(kind), "help": None}
    add_run_options(parser, "loss", TASK_DATA, ENGINE, overrides={"loss": choices}, overwrite=True)
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    return parser


def train_main(
    argv: Optional[Sequence[str]] = None,
    kind: str = RunConfig.kind,
    loss: str = RunConfig.loss,
    task: Optional[str] = None,
) -> dict:
    """Parse a training script's command line, train, and print the final metrics as JSON.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).
        kind: the model kind the script trains (default: RunConfig's, a feature model).
        loss: the script's default loss (default: RunConfig's, CoSENT).
        task: the task the script is fixed to (``NLI``); None makes it the first argument.

    Returns:
        The run's metrics.

    Raises:
        SystemExit: on bad input (one ``error: ...`` line), or when a signal stopped the run.

    Example:
        >>> train_main(["BQ", "--epochs", "1"], kind="feature", loss="cosent")  # doctest: +SKIP
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    verbose = "--verbose" in argv  # known before parsing, whose errors are reported too
    with errors_reported(verbose), tensorflow_start_up_shown(verbose):
        args = training_parser(kind, loss, task).parse_args(argv)
        fixed = {"kind": kind} if task is None else {"kind": kind, "task": task}
        with console_logging():
            return run_training(run_config(args, **fixed), args.overwrite, args.print_config)


def _check_report_folder(output_dir: str, runs: Sequence[str]) -> None:
    """The report's folder may not be, or lie inside, one of the runs it reads or any folder this
    tool writes (a run, a model folder): its files there would make a run look like someone else's."""
    for run in runs:
        if is_inside(output_dir, run):
            raise ConfigError(
                f"{output_dir}: lies inside the run {run}, an input of the report; nothing was written: "
                "choose another --output-dir"
            )
    check_not_in_tool_folder(output_dir, output_kinds(), start=output_dir)
    check_can_write_in(output_dir, output_dir)


def report_main(argv: Optional[Sequence[str]] = None) -> None:
    """``scripts/report.py``: tables and plots comparing finished runs.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``): run folders, ``--output-dir``, ``--preface``,
            ``--evaluations`` (the retrieval study's reranked evaluations) or ``--calibration``
            (the calibration study's report instead of the others).

    Raises:
        SystemExit: on bad input, with one ``error: ...`` line.

    Example:
        >>> report_main(["runs/cosent-BQ", "--output-dir", "docs/results"])  # doctest: +SKIP
    """
    from .report import write_calibration_report, write_report

    parser = report_parser()
    args = parser.parse_args(argv)
    if args.calibration and args.evaluations:
        parser.error("--evaluations are the retrieval study's; the calibration report (--calibration) reads none")
    with errors_reported(args.verbose):
        _check_report_folder(args.output_dir, args.runs)
        if args.calibration:
            written = write_calibration_report(args.runs, args.output_dir, args.preface)
        else:
            written = write_report(args.runs, args.output_dir, args.preface, args.evaluations)
        for path in written:
            print(path)


def report_parser() -> argparse.ArgumentParser:
    """The options of ``scripts/report.py`` (:func:`report_main`)."""
    parser = argparse.ArgumentParser(description="Tables and plots comparing finished runs.")
    parser.add_argument("runs", nargs="+", help="run folders (each with metrics.json)")
    parser.add_argument(
        "--evaluations",
        nargs="+",
        default=[],
        metavar="JSON",
        help="files of `cosent-tf evaluate MODEL FILE --retrieval --rerank DIR --output FILE.json`, each of the "
        "model of a retrieval study's run given: its reranked metrics become rows of the retrieval tables",
    )
    parser.add_argument(
        "--calibration",
        action="store_true",
        help="write the calibration study's report alone (calibration.md and calibration.png: each run's match "
        "decision on its binary task's test pairs) and no other file; the runs are each trained on ATEC, BQ, "
        "LCQMC or PAWSX, at most one per task and model",
    )
    parser.add_argument("--output-dir", default="docs/results")
    parser.add_argument("--preface", default="", help="text placed above the tables")
    parser.add_argument("--verbose", action="store_true", help="show the traceback of an error")
    return parser


def _label_text(label: float) -> str:
    # The shortest decimal that reads back as the same float32 label ("1", "3.8").
    return str(np.format_float_positional(np.float32(label), trim="-"))


def write_task_subset(
    data_dir: PathLike, task: str, split: str, count: int, seed: int, output: PathLike, overwrite: bool = False
) -> tuple[int, int]:
    """Write the pairs of a task's split that a run with ``--max-train-pairs`` (train) or
    ``--max-eval-pairs`` (valid, test) ``count`` and ``--seed`` ``seed`` reads, as the TSV file
    ``output`` (``text_a<TAB>text_b<TAB>label``, in file order), so that another command (``cosent-tf
    mine``, ``cosent-tf evaluate``) sees exactly the pairs the runs saw.

    Args:
        data_dir: the shared data root or its senteval_cn folder.
        task: one of the matching tasks.
        split: ``train``, ``valid`` or ``test``.
        count: how many pairs the run samples; a split of at most ``count`` pairs is written whole.
        seed: the run's seed.
        output: the file to write (atomically).
        overwrite: replace ``output`` if it exists (refused otherwise).

    Returns:
        (pairs written, pairs in the split).

    Raises:
        ConfigError: ``output`` exists (without ``overwrite``), is the split's file or lies in a
            folder this tool writes.
        DataError: the split's file is missing or damaged, as :func:`~cosent_tf.data.benchmarks.load_task` says.
        ValueError: the task has no senteval files, or the split is unknown.

    Example:
        >>> write_task_subset("../shared/data", "BQ", "test", 2000, 42, "runs/subsets/BQ.test.tsv")  # doctest: +SKIP
        (2000, 10000)
    """
    from ..data.benchmarks import load_task, senteval_dir, task_file

    folder = senteval_dir(data_dir)
    check_output_file(output, [task_file(folder, task, split)], output_kinds(), overwrite)
    pairs = load_task(folder, task, split)
    subset = pairs.sample(count, seed)
    write_text(
        output,
        "".join(
            f"{a}\t{b}\t{_label_text(label)}\n" for a, b, label in zip(subset.texts_a, subset.texts_b, subset.labels)
        ),
    )
    return len(subset), len(pairs)


def subset_parser() -> argparse.ArgumentParser:
    """The options of ``scripts/subset.py`` (:func:`subset_main`)."""
    from ..data.benchmarks import SPLITS
    from ..data.tasks import MATCHING_TASKS

    parser = argparse.ArgumentParser(
        description="Write the seeded subset of a task's split that a run with --max-train-pairs or "
        "--max-eval-pairs COUNT and --seed SEED reads, as a TSV file of text_a<TAB>text_b<TAB>label."
    )
    parser.add_argument("task", choices=MATCHING_TASKS)
    parser.add_argument("split", choices=SPLITS)
    parser.add_argument("--count", type=number_in_range(int, 1), required=True, help="the run's pairs of the split")
    parser.add_argument("--seed", type=int, default=RunConfig.seed, help="the run's seed (default: %(default)s)")
    parser.add_argument("--data-dir", default=RunConfig.data_dir, help="shared data root or a senteval_cn folder")
    parser.add_argument("--output", required=True, metavar="FILE.tsv")
    parser.add_argument("--overwrite", action="store_true", help="replace FILE.tsv if it exists (refused without)")
    parser.add_argument("--verbose", action="store_true", help="show the traceback of an error")
    return parser


def subset_main(argv: Optional[Sequence[str]] = None) -> None:
    """``scripts/subset.py``: a task's seeded subset as a file (:func:`write_task_subset`).

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).

    Raises:
        SystemExit: on bad input, with one ``error: ...`` line.

    Example:
        >>> subset_main(["BQ", "test", "--count", "2000", "--output", "runs/subsets/BQ.test.tsv"])  # doctest: +SKIP
    """
    args = subset_parser().parse_args(argv)
    with errors_reported(args.verbose):
        written, total = write_task_subset(
            args.data_dir, args.task, args.split, args.count, args.seed, args.output, args.overwrite
        )
        print(f"{args.output}: {written} of the {total} {args.task} {args.split} pairs (seed {args.seed})")
