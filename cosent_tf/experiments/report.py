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
* ``retrieval.md`` and ``retrieval.png``: the retrieval study, when runs of the retrieval
  objectives (MNRL, AnglE, the CoSENT + in-batch + angle mix) are among the inputs: test
  Spearman and the retrieval metrics (MRR@10, Recall@1, Recall@10, nDCG@10) of those runs and
  of CoSENT in the same settings, the loss that led on each metric said in a sentence, and
  bars of Spearman and MRR@10 per loss and task. Those runs stay out of ``results.md``, and a
  report of the study's runs alone writes no ``results.md``.

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
from typing import Any, Callable, Optional

import numpy as np

from ..data.tasks import BINARY_TASKS, MATCHING_TASKS
from ..errors import ConfigError
from ..evaluation import RANK_CUTOFF
from ..io import atomic_path, json_field, read_json, write_text
from ..layers import POOLING_MODES
from ..losses import get_loss
from ..models.kinds import FEATURE
from ..plotting import new_figure, save_png
from ..training.run_folder import METRICS
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


# The retrieval study (issue 36): the objectives it compares with CoSENT, and the retrieval
# metrics its tables show (keys of a task's test["retrieval"] in metrics.json, and their titles).
RETRIEVAL_LOSSES = ("mnrl", "angle", "cosent-ibn")
RETRIEVAL_METRICS = {
    f"mrr@{RANK_CUTOFF}": f"MRR@{RANK_CUTOFF}",
    "recall@1": "Recall@1",
    "recall@10": "Recall@10",
    f"ndcg@{RANK_CUTOFF}": f"nDCG@{RANK_CUTOFF}",
}
_HEADLINE_METRIC = f"mrr@{RANK_CUTOFF}"  # shown next to test Spearman, in the first table and the plot
_MIX_WEIGHT_KEYS = ("cosine_weight", "ibn_weight", "angle_weight")


def _is_retrieval_objective(run: Run) -> bool:
    return run["config"]["kind"] == FEATURE.name and run["config"]["loss"] in RETRIEVAL_LOSSES


def _settings_apart(run: Run, others: list[Run]) -> int:
    """How many settings of ``run``'s config differ from each of ``others``', summed."""
    config = run["config"]
    return sum(
        sum(config.get(key) != other["config"].get(key) for key in config.keys() | other["config"].keys())
        for other in others
    )


def retrieval_study_runs(runs: list[Run]) -> list[Run]:
    """The runs of the retrieval study among ``runs``: every feature run of a retrieval objective
    (:data:`RETRIEVAL_LOSSES`) and, for each task and pooling they were trained at, the CoSENT
    run at that task and pooling whose other settings differ least from theirs (so that a study
    reported next to the paper's runs compares CoSENT trained as the study trained it).

    Args:
        runs: runs from :func:`~cosent_tf.experiments.runs.load_runs`.

    Returns:
        The study's runs, CoSENT first, then the objectives in :data:`RETRIEVAL_LOSSES` order;
        empty when no run trained a retrieval objective.

    Raises:
        ConfigError: two CoSENT runs are equally near one setting of the study, so the report
            cannot tell which of them the study compares.

    Example:
        >>> [run["method"] for run in retrieval_study_runs(load_runs(folders))]
        ['BERT + CoSENT', 'BERT + MNRL', 'BERT + AnglE']
    """
    objectives = [run for run in runs if _is_retrieval_objective(run)]
    compared: list[Run] = []
    for task, pooling in dict.fromkeys((r["config"]["task"], pooling_of(r["config"])) for r in objectives):
        setting = [r for r in objectives if (r["config"]["task"], pooling_of(r["config"])) == (task, pooling)]
        candidates = [
            r
            for r in runs
            if r["config"]["kind"] == FEATURE.name
            and r["config"]["loss"] == "cosent"
            and (r["config"]["task"], pooling_of(r["config"])) == (task, pooling)
        ]
        apart = [_settings_apart(r, setting) for r in candidates]
        nearest = [r for r, distance in zip(candidates, apart) if distance == min(apart, default=0)]
        if len(nearest) > 1:
            raise ConfigError(
                f"{nearest[0]['dir']} and {nearest[1]['dir']}: two CoSENT runs on {task} at {pooling} pooling fit "
                "the retrieval study's runs equally well, so the report cannot tell which one it compares; "
                "give the report one of them"
            )
        compared += nearest
    order = ("cosent", *RETRIEVAL_LOSSES)
    return sorted(
        compared + objectives,
        key=lambda r: (
            order.index(r["config"]["loss"]),
            bool(r["config"].get("hard_negatives_from_labels")),
            bool(r["config"].get("symmetric")),
        ),
    )


def _retrieval_label(run: Run, with_pooling: bool) -> str:
    """A study run's row name: its method, and what tells it from a run of the same loss."""
    config = run["config"]
    notes = []
    if config.get("hard_negatives_from_labels"):
        notes.append("hard negatives from labels")
    if config.get("symmetric"):
        notes.append("symmetric")
    defaults = get_loss(config["kind"], config["loss"]).mix_weights
    if defaults is not None:
        weights = tuple(
            default if config.get(key) is None else config[key] for key, default in zip(_MIX_WEIGHT_KEYS, defaults)
        )
        if weights != defaults:
            notes.append("weights " + "/".join(f"{weight:g}" for weight in weights))
    if with_pooling:
        notes.append(f"{POOLING_MODES[pooling_of(config)]} pooling")
    return run["method"] + (f" ({', '.join(notes)})" if notes else "")


def run_retrieval(run: Run) -> dict[str, dict[str, float]]:
    """The run's test retrieval metrics per task, as its metrics.json records them under each
    task's ``test["retrieval"]`` (a task without them maps to an empty dict).

    Args:
        run: a run from :func:`~cosent_tf.experiments.runs.load_runs`.

    Returns:
        ``{task: {metric: value}}`` for the metrics of :data:`RETRIEVAL_METRICS` present.

    Raises:
        ConfigError: metrics.json cannot be read, or a retrieval metric is not a number from 0 to 1
            (the message names the file and the field).

    Example:
        >>> run_retrieval(load_runs(["runs/retrieval-mnrl-BQ"])[0])["BQ"]["mrr@10"]
        0.31
    """
    if "retrieval" in run:
        return run["retrieval"]
    path = os.path.join(run["dir"], METRICS)
    recorded = read_json(path, "a training run's metrics")["tasks"]
    results: dict[str, dict[str, float]] = {}
    for task in run["metrics"]["tasks"]:
        where = f"tasks[{task!r}]['test']['retrieval']"
        retrieval = json_field(recorded[task]["test"], "retrieval", dict, path, what=where) or {}
        values = {}
        for key in RETRIEVAL_METRICS:
            value = json_field(retrieval, key, (int, float), path, what=f"{where}[{key!r}]")
            if value is None:
                continue
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{path}: {where}[{key!r}] is {value}, outside 0 to 1")
            values[key] = float(value)
        results[task] = values
    run["retrieval"] = results
    return results


def _study_rows(runs: list[Run], metric: str, with_pooling: bool) -> dict[str, dict[str, tuple[float, bool]]]:
    """{row: {task: (value, comparable)}} of test Spearman (``metric`` "spearman") or a retrieval metric."""
    rows: dict[str, dict[str, tuple[float, bool]]] = {}
    for run in runs:
        row = rows.setdefault(_retrieval_label(run, with_pooling), {})
        comparable = run["metrics"].get("comparable", True)
        for task, result in run["metrics"]["tasks"].items():
            value = result["test"]["spearman"] if metric == "spearman" else run_retrieval(run)[task].get(metric)
            if value is not None:
                row[task] = (value, comparable)
    return rows


def _leaders(tables_rows: dict[str, dict[str, dict[str, tuple[float, bool]]]], tasks: Sequence[str]) -> str:
    """A sentence per metric on which row led on average, over the tasks every row has."""
    lines = []
    leader_of = {}
    for title, rows in tables_rows.items():
        shared = [task for task in tasks if all(task in values for values in rows.values())]
        means = {row: float(np.mean([values[t][0] for t in shared])) for row, values in rows.items()} if shared else {}
        finite = {row: mean for row, mean in means.items() if math.isfinite(mean)}
        if not finite:
            lines.append(f"- {title}: no task has it recorded for every loss")
            continue
        best = max(round(100 * mean, 2) for mean in finite.values())
        leaders = [row for row, mean in finite.items() if round(100 * mean, 2) == best]
        leader_of[title] = leaders
        if len(leaders) == 1:
            named = leaders[0]
        else:
            named = "every loss, tied" if len(leaders) == len(rows) else f"{' and '.join(leaders)} (tied)"
        lines.append(f"- {title}: {named}, {best:.2f} on average over {', '.join(shared)}")
    text = "Which loss led on average:\n\n" + "\n".join(lines)
    spearman, retrieval = leader_of.get("test Spearman"), leader_of.get(RETRIEVAL_METRICS[_HEADLINE_METRIC])
    if spearman and retrieval:
        headline = RETRIEVAL_METRICS[_HEADLINE_METRIC]
        if spearman == retrieval:
            text += f"\n\n{' and '.join(spearman)} led on both test Spearman and {headline}."
        else:
            text += (
                f"\n\n{' and '.join(spearman)} led on test Spearman but {' and '.join(retrieval)} on {headline}: "
                "the loss that scores labelled pairs best is not the one that retrieves best here."
            )
    return text


def _study_groups(study: list[Run]) -> list[tuple[str, list[Run], list[str]]]:
    """(heading, runs, tasks as columns): the study's runs trained on each task, and those trained on NLI."""
    per_task = [r for r in study if r["config"]["task"] in MATCHING_TASKS]
    nli = [r for r in study if r["config"]["task"] not in MATCHING_TASKS]
    groups = []
    if per_task:
        groups.append(("feature models trained on each task", per_task, trained_tasks(per_task)))
    if nli:
        groups.append(("feature models trained on NLI", nli, tested_tasks(nli)))
    return groups


def retrieval_tables(runs: list[Run]) -> Optional[str]:
    """The markdown of the retrieval study among ``runs`` (:func:`retrieval_study_runs`): for the
    runs trained on each task and for those trained on NLI, test Spearman × 100 and MRR@10 × 100,
    then Recall@1, Recall@10 and nDCG@10 × 100, a row per loss and a column per task with
    their average; and which loss led on each metric on average, said in a sentence.

    Args:
        runs: runs from :func:`~cosent_tf.experiments.runs.load_runs`.

    Returns:
        The tables, or None when no run trained a retrieval objective.

    Raises:
        ConfigError: as :func:`retrieval_study_runs` and :func:`run_retrieval` say.

    Example:
        >>> print(retrieval_tables(load_runs(["runs/retrieval-cosent-BQ", "runs/retrieval-mnrl-BQ"])))
    """
    study = retrieval_study_runs(runs)
    if not study:
        return None
    poolings = list(dict.fromkeys(pooling_of(r["config"]) for r in study))
    setting = ", ".join(f"{POOLING_MODES[p]} pooling" for p in poolings)
    sections = []
    for heading, grouped, tasks in _study_groups(study):
        metrics = {"test Spearman": "spearman", **{title: key for key, title in RETRIEVAL_METRICS.items()}}
        rows = {title: _study_rows(grouped, key, len(poolings) > 1) for title, key in metrics.items()}
        sections.append(f"### Retrieval study: {heading} ({setting}), test metrics × 100")
        sections += [f"#### {title}\n\n" + _table(rows[title], tasks) for title in metrics]
        sections.append(_leaders(rows, tasks))
    notes = (
        "† the run records itself as not comparable with published numbers (its metrics.json notes say why; "
        "LCQMC: trained on a seeded part of valid, no train split being available).  \n"
        "* Avg over the tasks present only."
    )
    return "\n\n".join(sections) + "\n\n" + notes + "\n"


def _mean_over(values: dict[str, tuple[float, bool]], columns: list[str]) -> float:
    """100 × the mean of ``values`` over ``columns``; NaN (no bar) unless every column has one."""
    if not columns or any(column not in values for column in columns):
        return math.nan
    return 100 * float(np.mean([values[column][0] for column in columns]))


def plot_retrieval(runs: list[Run], path: str) -> bool:
    """Bars of test Spearman and MRR@10 per loss of the retrieval study, a panel per task it
    trained on (runs trained on NLI: one panel of their averages over the tasks they were all
    tested on), written to ``path``.

    Args:
        runs: runs from :func:`~cosent_tf.experiments.runs.load_runs`.
        path: the PNG to write.

    Returns:
        False (nothing drawn) when no run trained a retrieval objective.

    Example:
        >>> plot_retrieval(load_runs(folders), "retrieval.png")
    """
    study = retrieval_study_runs(runs)
    if not study:
        return False
    with_pooling = len({pooling_of(r["config"]) for r in study}) > 1
    labels = list(dict.fromkeys(_retrieval_label(r, with_pooling) for r in study))
    # (title, [Spearman rows, MRR@10 rows], the tasks a bar averages)
    panels: list[tuple[str, list[dict[str, dict[str, tuple[float, bool]]]], list[str]]] = []
    for _, grouped, tasks in _study_groups(study):
        scores = [_study_rows(grouped, metric, with_pooling) for metric in ("spearman", _HEADLINE_METRIC)]
        if grouped[0]["config"]["task"] in MATCHING_TASKS:
            panels += [(task, scores, [task]) for task in tasks]
        else:
            shared = [t for t in tasks if all(t in values for rows in scores for values in rows.values())]
            panels.append((f"trained on NLI: mean over {len(shared)} tasks", scores, shared))
    figure, axes = new_figure(1, len(panels), figsize=(3.6 * len(panels) + 1.0, 3.6), squeeze=False)
    width = 0.8 / len(labels)
    for axis, (title, scores, columns) in zip(axes[0], panels):
        for number, label in enumerate(labels):
            heights = [_mean_over(rows.get(label, {}), columns) for rows in scores]
            axis.bar(np.arange(2) + (number - (len(labels) - 1) / 2) * width, heights, width, label=label)
        axis.set_xticks(np.arange(2), ["test Spearman", RETRIEVAL_METRICS[_HEADLINE_METRIC]])
        axis.set(title=title, ylabel="× 100")
        axis.axhline(0, color="black", linewidth=0.5)
        axis.grid(axis="y", alpha=0.3)
    handles, names = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, names, loc="lower center", ncol=min(len(labels), 3), fontsize=7)
    figure.tight_layout(rect=(0, 0.08 * math.ceil(len(labels) / 3), 1, 1))
    save_png(figure, path)
    return True


def tables(runs: list[Run]) -> str:
    """The markdown of all tables for ``runs``.

    Runs of the retrieval objectives are left out: they are the retrieval study's
    (:func:`retrieval_tables`).

    Args:
        runs: runs from :func:`~cosent_tf.experiments.runs.load_runs`.

    Returns:
        The tables, each under a heading, with the notes on their marks.

    Example:
        >>> print(tables(load_runs(["runs/bq-cosent", "runs/bq-sbert"])))
    """
    runs = [run for run in runs if not _is_retrieval_objective(run)]
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
    with CoSENT runs at several batch sizes, batch_size.png; with runs of the retrieval
    objectives, retrieval.md and retrieval.png (:func:`retrieval_tables`, :func:`plot_retrieval`).
    results.md and its plots are written only when runs outside the retrieval study are among
    the inputs, so that a report of the study's runs alone leaves a results.md beside it as it is.

    Everything is made in a scratch folder first and moved into ``output_dir`` only once all of
    it was made: a damaged run (see :func:`load_runs`) stops the report with nothing written.

    Args:
        run_dirs: run folders; unfinished runs are left out with a warning.
        output_dir: the folder to write the report into (made if missing).
        preface: markdown put before the tables of each markdown file written.

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
    study = retrieval_study_runs(runs)
    outside_study = [run for run in runs if all(run is not studied for studied in study)]
    paper = [run for run in runs if not _is_retrieval_objective(run)]
    groups = group_runs(paper)
    before = preface + "\n\n" if preface else ""
    with tempfile.TemporaryDirectory(prefix="cosent-report-") as scratch:
        made = []
        if outside_study:
            made.append("results.md")
            write_text(os.path.join(scratch, "results.md"), before + tables(paper))
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
        retrieval = retrieval_tables(runs)
        if retrieval is not None:
            write_text(os.path.join(scratch, "retrieval.md"), before + retrieval)
            made.append("retrieval.md")
            if plot_retrieval(runs, os.path.join(scratch, "retrieval.png")):
                made.append("retrieval.png")
        written = [os.path.join(output_dir, name) for name in made]
        for name, path in zip(made, written):
            with atomic_path(path) as tmp:
                shutil.copyfile(os.path.join(scratch, name), tmp)
    return written
