"""Compare finished runs: markdown tables in the layout of the published ones, and plots.

* ``results.md``: test Spearman x 100 (methods as rows; ATEC, BQ, LCQMC, PAWSX, STS-B, Avg
  as columns) for feature models trained per task, for models trained on NLI, and for
  interaction models; test accuracy x 100 at the threshold tuned on valid.
* ``convergence.png``: valid Spearman against training steps, one line per method and a
  panel per task (the paper's Figure 3); ``convergence-POOLING.png`` the same for the runs
  at another pooling that compare losses.
* ``cosine_density.png``: density of test cosines for positive and negative pairs, per
  feature-model loss and task (the paper's Figure 5); ``epsilon_density.png`` the same for
  the Table I sweep.

Besides the published tables, ``results.md`` holds the journal paper's studies when their
runs are present: Table I (contrastive runs, one per ε), the pooling comparison (CoSENT runs
at more than one pooling) and convergence (steps to a target valid Spearman); and CoSENT
at several global batch sizes. Reading and grouping the runs is :mod:`.runs`; drawing the
plots, :mod:`.plots`.
"""

from __future__ import annotations

import collections
import math
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any, Callable

import numpy as np

from ..data.tasks import BINARY_TASKS, MATCHING_TASKS
from ..errors import ConfigError
from ..io import atomic_path, write_text
from ..layers import POOLING_MODES
from .plots import plot_batch_sizes, plot_convergence, plot_cosine_density
from .runs import (
    Run,
    batch_size_runs,
    convergence_groups,
    group_runs,
    load_runs,
    pooling_of,
    run_history,
    table_one_runs,
    tested_tasks,
    trained_tasks,
)


def _cell(value: float | np.floating | None, comparable: bool = True) -> str:
    return "–" if value is None else f"{100 * value:.2f}" + ("" if comparable else "†")


def _table(rows: dict[str, dict[str, tuple[float, bool]]], columns: Sequence[str], average: bool = True) -> str:
    """rows: {method: {column: (value, comparable)}}; an Avg column over the present values."""
    header = ["method", *columns] + (["Avg"] if average else [])
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for method, values in rows.items():
        present = [values[c][0] for c in columns if c in values]
        cells = [_cell(*values[c]) if c in values else "–" for c in columns]
        if average:
            mark = "" if len(present) == len(columns) else "*"
            cells.append(_cell(np.mean(present) if present else None) + mark)
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _test_results(
    runs: list[Run], row_name: Callable[[Run], str] = lambda run: run["method"], metric: str = "spearman"
) -> dict[str, dict[str, tuple[float, bool]]]:
    """{row: {task: (test metric, comparable)}} over ``runs``."""
    rows: dict[str, dict[str, tuple[float, bool]]] = {}
    for run in runs:
        comparable = run["metrics"].get("comparable", True)
        for task, result in run["metrics"]["tasks"].items():
            if metric in result["test"]:
                rows.setdefault(row_name(run), {})[task] = (result["test"][metric], comparable)
    return rows


def _epsilon_table(groups: dict[str, Any]) -> str:
    runs = table_one_runs(groups)
    tasks = tested_tasks(runs)
    return _table(_test_results(runs), tasks, average=len(tasks) > 1)


def _pooling_table(groups: dict[str, Any]) -> str | None:
    """CoSENT under each pooling, on the tasks trained with more than one pooling."""
    cosent = [r for r in groups["per_task"] + groups["pooling"] if r["config"]["loss"] == "cosent"]
    poolings = collections.defaultdict(set)
    for run in cosent:
        poolings[run["config"]["task"]].add(pooling_of(run["config"]))
    tasks = [t for t in MATCHING_TASKS if len(poolings[t]) > 1]
    if not tasks:
        return None
    order = list(POOLING_MODES)
    studied = sorted(
        (r for r in cosent if r["config"]["task"] in tasks), key=lambda r: order.index(pooling_of(r["config"]))
    )
    return _table(
        _test_results(studied, lambda r: f"{POOLING_MODES[pooling_of(r['config'])]} ({pooling_of(r['config'])})"), tasks
    )


def _batch_label(config: dict[str, Any]) -> str:
    micro = config.get("micro_batch_size")
    size = "batch size not recorded" if config.get("batch_size") is None else f"{config['batch_size']} pairs"
    return size + (f" (micro-batches of {micro})" if micro else "")


def _batch_size_table(groups: dict[str, Any]) -> str | None:
    studied = batch_size_runs(groups)
    if not studied:
        return None
    several_poolings = len({pooling_of(r["config"]) for r in studied}) > 1

    def label(run):
        text = _batch_label(run["config"])
        return f"{text}, {POOLING_MODES[pooling_of(run['config'])]} pooling" if several_poolings else text

    return _table(_test_results(studied, label), tested_tasks(studied))


# Convergence: the first step at which valid Spearman reaches this fraction of a target.
CONVERGENCE_FRACTION = 0.9


def _first_step(history: list[dict[str, Any]], target: float) -> int | None:
    return next((row["step"] for row in history if row["spearman"] >= target), None)


def convergence_tables(runs: list[Run], fraction: float = CONVERGENCE_FRACTION) -> str:
    """From each run's valid_metrics.csv: the steps until valid Spearman first reaches
    ``fraction`` of the run's own best; and, as the paper compares convergence, the steps each
    other method took to its best and the steps CoSENT took to reach that same value.

    Args:
        runs: runs from :func:`~cosent_tf.experiments.runs.load_runs`, one per method and task.
        fraction: of each run's own best valid Spearman, the target of the first table.

    Returns:
        The markdown of the two tables.

    Raises:
        DataError: a run's validation history is missing or damaged.

    Example:
        >>> print(convergence_tables(load_runs(["runs/bq-cosent", "runs/bq-sbert"])))
    """
    histories = {id(r): run_history(r) for r in runs}
    tasks = trained_tasks(runs)
    best = {  # NaN (constant scores) is no run's best
        id(r): max((row["spearman"] for row in histories[id(r)] if not math.isnan(row["spearman"])), default=None)
        for r in runs
    }
    cosent = {r["config"]["task"]: r for r in runs if r["config"]["loss"] == "cosent"}
    own_rows: dict[str, dict[str, int | None]] = {}
    versus_rows: dict[str, dict[str, str]] = {}
    for run in runs:
        task, history, run_best = run["config"]["task"], histories[id(run)], best[id(run)]
        own = _first_step(history, fraction * run_best) if run_best is not None and run_best > 0 else None
        own_rows.setdefault(run["method"], {})[task] = own
        if run["config"]["loss"] != "cosent" and run_best is not None:
            reference = cosent.get(task)
            by_cosent = _first_step(histories[id(reference)], run_best) if reference else None
            versus_rows.setdefault(run["method"], {})[task] = f"{_first_step(history, run_best)} / {by_cosent or '–'}"

    def steps_table(rows):
        lines = ["| method | " + " | ".join(tasks) + " |", "|---" * (len(tasks) + 1) + "|"]
        for method, values in rows.items():
            cells = ["–" if values.get(t) is None else str(values[t]) for t in tasks]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    text = f"#### Steps until valid Spearman first reaches {100 * fraction:g}% of the run's own best\n\n"
    text += steps_table(own_rows)
    if versus_rows:
        text += (
            "\n\n#### Steps each method took to its best valid Spearman / steps CoSENT took to reach the "
            "same value (– never)\n\n" + steps_table(versus_rows)
        )
    return text


def tables(runs: list[Run]) -> str:
    """The markdown of all tables for ``runs``.

    Args:
        runs: runs from :func:`~cosent_tf.experiments.runs.load_runs`.

    Returns:
        The tables, each under a heading, with the notes on their marks.

    Example:
        >>> print(tables(load_runs(["runs/bq-cosent", "runs/bq-sbert"])))
    """
    groups = group_runs(runs)
    setting = f"{POOLING_MODES.get(groups['usual_pooling'], groups['usual_pooling'])} pooling"
    if groups["usual_batch_size"]:
        setting += f", {groups['usual_batch_size']} pairs a batch"
    sections = []
    if groups["per_task"]:
        sections.append(
            f"### Feature models trained on each task ({setting}): test Spearman × 100\n\n"
            + _table(_test_results(groups["per_task"]), MATCHING_TASKS)
        )
    if groups["nli"]:
        sections.append(
            "### Feature models trained on NLI: test Spearman × 100\n\n"
            + _table(_test_results(groups["nli"]), MATCHING_TASKS)
        )
    if groups["interaction"]:
        sections.append(
            "### Interaction models: test Spearman × 100\n\n"
            + _table(_test_results(groups["interaction"]), BINARY_TASKS)
        )
    accuracy_runs = groups["per_task"] + groups["interaction"]
    accuracy = _test_results(accuracy_runs, lambda r: f"{r['method']} ({r['config']['kind']})", metric="accuracy")
    if accuracy:
        sections.append("### Test accuracy × 100 at the threshold tuned on valid\n\n" + _table(accuracy, BINARY_TASKS))
    if groups["epsilon"]:
        poolings = ", ".join(sorted({POOLING_MODES[pooling_of(r["config"])] for r in groups["epsilon"]}))
        sections.append(
            "### Contrastive loss that pushes negatives down to a threshold ε, next to CoSENT (the paper's "
            f"Table I; {poolings} pooling): test Spearman × 100\n\n" + _epsilon_table(groups)
        )
    pooling = _pooling_table(groups)
    if pooling:
        sections.append("### Pooling with CoSENT (the paper's pooling comparison): test Spearman × 100\n\n" + pooling)
    batch_sizes = _batch_size_table(groups)
    if batch_sizes:
        poolings = ", ".join(sorted({POOLING_MODES[pooling_of(r["config"])] for r in groups["batch_size"]}))
        sections.append(
            f"### CoSENT at several global batch sizes ({poolings} pooling): test Spearman × 100\n\n" + batch_sizes
        )
    for pooling, compared in convergence_groups(groups).items():
        title = POOLING_MODES[pooling]
        if pooling != groups["usual_pooling"]:  # the usual pooling's test results are the first table
            sections.append(
                f"### Feature models trained on each task, {title} pooling: test Spearman × 100\n\n"
                + _table(_test_results(compared), tested_tasks(compared))
            )
        sections.append(
            f"### Convergence of the feature models trained on each task, {title} pooling\n\n"
            + convergence_tables(compared)
        )
    notes = (
        "† trained on a seeded part of valid (no train split available); not comparable with "
        "published numbers.  \n* Avg over the tasks present only."
    )
    return "\n\n".join(sections) + "\n\n" + notes + "\n"


def write_report(run_dirs: Iterable[str | os.PathLike[str]], output_dir: str, preface: str = "") -> list[str]:
    """Write results.md and the plots: convergence.png (valid Spearman against steps, the
    paper's Figure 3), cosine_density.png (test cosines of positive and negative pairs, its
    Figure 5) and, with a Table I sweep, epsilon_density.png (the same for each ε and CoSENT),
    with CoSENT runs at several batch sizes, batch_size.png.

    Everything is made in a scratch folder first and moved into ``output_dir`` only once all of
    it was made: a damaged run (see :func:`load_runs`) stops the report with nothing written.

    Args:
        run_dirs: run folders; unfinished runs are left out with a warning.
        output_dir: the folder to write the report into (made if missing).
        preface: markdown put before the tables.

    Returns:
        The written paths.

    Raises:
        ConfigError: ``output_dir`` is a file, no finished run is among ``run_dirs``, or a run
            is damaged (as :func:`load_runs` says).

    Example:
        >>> write_report(["runs/bq-cosent", "runs/bq-sbert"], "report")
        ['report/results.md', 'report/convergence.png', 'report/cosine_density.png']
    """
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ConfigError(f"{output_dir}: exists and is not a folder; give a folder for the report")
    runs = load_runs(run_dirs)
    if not runs:
        raise ConfigError(
            "no finished runs (folders with metrics.json and config.json) among: " + ", ".join(map(str, run_dirs))
        )
    groups = group_runs(runs)
    with tempfile.TemporaryDirectory(prefix="cosent-report-") as scratch:
        made = ["results.md"]
        write_text(os.path.join(scratch, "results.md"), (preface + "\n\n" if preface else "") + tables(runs))
        extra = {p: runs for p, runs in convergence_groups(groups).items() if p != groups["usual_pooling"]}
        plots = (
            ("convergence.png", plot_convergence, groups["per_task"] + groups["interaction"]),
            *((f"convergence-{pooling}.png", plot_convergence, runs) for pooling, runs in extra.items()),
            ("cosine_density.png", plot_cosine_density, groups["per_task"]),
            ("epsilon_density.png", plot_cosine_density, table_one_runs(groups) if groups["epsilon"] else []),
            ("batch_size.png", plot_batch_sizes, batch_size_runs(groups)),
        )
        for name, plot, plotted in plots:
            if plot(plotted, os.path.join(scratch, name)):
                made.append(name)
        written = [os.path.join(output_dir, name) for name in made]
        for name, path in zip(made, written):
            with atomic_path(path) as tmp:
                shutil.copyfile(os.path.join(scratch, name), tmp)
    return written
