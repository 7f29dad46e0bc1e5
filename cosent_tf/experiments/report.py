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
at several global batch sizes.
"""

import collections
import logging
import math
import os
import shutil
import tempfile
import zipfile

import numpy as np

from ..callbacks import read_history
from ..data.tasks import BINARY_TASKS, CNSD, MATCHING_TASKS, TASKS, get_task
from ..errors import ConfigError, DataError
from ..io import atomic_path, json_field, read_json, write_text
from ..layers import POOLING_MODES
from ..losses import get_loss

logger = logging.getLogger(__name__)

# The test metrics the tables and plots read, and the range each must lie in (or be NaN, which
# the engine writes as null: an undefined correlation of constant scores).
METRIC_RANGES = {"spearman": (-1.0, 1.0), "pearson": (-1.0, 1.0), "accuracy": (0.0, 1.0)}
KINDS = ("feature", "interaction")


def load_runs(run_dirs) -> list:
    """The finished runs among ``run_dirs``, each read and checked whole.

    A folder of an unfinished run (config.json without metrics.json), or of no run at all, is
    left out with a warning naming it. A damaged finished run stops the report: a ConfigError
    or DataError names the folder's file and what is wrong with it, rather than a table that
    quietly lacks or misreads the run.
    """
    runs = []
    for folder in run_dirs:
        folder = os.fspath(folder)
        if not os.path.isdir(folder):
            raise ConfigError(
                f"{folder}: {'is not a folder' if os.path.exists(folder) else 'no such run folder'}; "
                "give the folders of finished training runs"
            )
        metrics_path, config_path = os.path.join(folder, "metrics.json"), os.path.join(folder, "config.json")
        if not os.path.exists(metrics_path):
            why = "a run not finished (no metrics.json)" if os.path.exists(config_path) else "not a training run"
            logger.warning("%s: %s; left out of the report", folder, why)
            continue
        if not os.path.exists(config_path):
            raise ConfigError(
                f"{config_path}: missing beside {metrics_path}: the run's settings are lost, so the report cannot "
                "place it; restore config.json or leave this folder out"
            )
        config = _checked_config(read_json(config_path, "a training run's config"), config_path)
        if config is None:
            logger.warning("%s: trained on its own files (train_file), not a benchmark task; left out", folder)
            continue
        metrics = _checked_metrics(read_json(metrics_path, "a training run's metrics"), metrics_path)
        if config["task"] in MATCHING_TASKS and config["task"] not in metrics["tasks"]:
            raise ConfigError(f"{metrics_path}: no test metrics of the run's own task {config['task']} (in 'tasks')")
        runs.append({"dir": folder, "metrics": metrics, "config": config, "method": method_name(config)})
    return runs


def _checked_config(config, path):
    """The fields of config.json the report reads, checked; None for a run on its own files."""
    if json_field(config, "train_file", str, path) is not None:
        return None
    for key in ("task", "kind", "loss"):
        if json_field(config, key, str, path) is None:
            raise ConfigError(f"{path}: {key!r} is missing; the report needs the run's task, kind and loss")
    if config["task"] not in TASKS:
        raise ConfigError(f"{path}: 'task' {config['task']!r} is not one of the benchmark tasks ({', '.join(TASKS)})")
    if config["kind"] not in KINDS:
        raise ConfigError(f"{path}: 'kind' {config['kind']!r} is not one of {', '.join(KINDS)}")
    try:
        get_loss(config["kind"], config["loss"])
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
    if json_field(config, "architecture", str, path) is None and json_field(config, "model", str, path) is None:
        raise ConfigError(f"{path}: 'architecture' is missing")
    pooling = json_field(config, "pooling", (str, type(None)), path)
    if pooling is not None and pooling not in POOLING_MODES:
        raise ConfigError(f"{path}: 'pooling' {pooling!r} is not one of {', '.join(POOLING_MODES)}")
    for key in ("batch_size", "micro_batch_size"):
        value = json_field(config, key, (int, type(None)), path)
        if value is not None and value < 1:
            raise ConfigError(f"{path}: {key!r} is {value}; a batch holds at least one pair")
    if config["loss"] == "contrastive":
        epsilon = json_field(config, "epsilon", (int, float), path)
        if epsilon is None or not math.isfinite(epsilon):
            raise ConfigError(f"{path}: 'epsilon' must be a finite number for a contrastive run, not {epsilon}")
    return config


def _checked_metrics(metrics, path):
    """metrics.json with what the report reads checked: ``comparable``, and for each task its test
    metrics (numbers in range, or null, read as NaN)."""
    json_field(metrics, "comparable", bool, path)
    tasks = json_field(metrics, "tasks", dict, path)
    if not tasks:
        raise ConfigError(f"{path}: 'tasks' is missing or empty; a finished run records each task's test metrics")
    checked = {}
    for task, result in tasks.items():
        where = f"tasks[{task!r}]"
        if task not in TASKS:
            raise ConfigError(f"{path}: {where}: not one of the benchmark tasks ({', '.join(TASKS)})")
        if not isinstance(result, dict):
            raise ConfigError(f"{path}: {where} must be a JSON object")
        test = json_field(result, "test", dict, path, what=f"{where}['test']")
        if test is None:
            raise ConfigError(f"{path}: {where}['test'] is missing")
        values = {}
        for metric, (low, high) in METRIC_RANGES.items():
            value = json_field(test, metric, (int, float, type(None)), path, what=f"{where}['test'][{metric!r}]")
            if metric not in test:
                continue
            value = math.nan if value is None else float(value)
            if not (math.isnan(value) or low <= value <= high):
                raise ConfigError(f"{path}: {where}['test'][{metric!r}] is {value}, outside {low:g} to {high:g}")
            values[metric] = value
        if "spearman" not in values:
            raise ConfigError(f"{path}: {where}['test']['spearman'] is missing")
        checked[task] = {**result, "test": values}
    return {**metrics, "tasks": checked}


def _history(run) -> list:
    """The run's valid_metrics.csv rows; a DataError naming the file (and line) if it is missing
    or damaged: cut off, a row of other fields than the header's, a value that is no number, a
    Spearman outside -1 to 1 (NaN, of constant scores, is one the engine writes)."""
    if "history" in run:
        return run["history"]
    path = os.path.join(run["dir"], "valid_metrics.csv")
    try:
        rows = read_history(path, columns=("step", "spearman"))
    except FileNotFoundError:
        raise DataError(path, "missing: a finished run's validation history") from None
    for number, row in enumerate(rows, 2):
        spearman = row["spearman"]
        if not (math.isnan(spearman) or -1.0 <= spearman <= 1.0) or row["step"] < 0:
            raise DataError(path, f"step {row['step']}, spearman {spearman}: not a validation result", line=number)
    run["history"] = rows
    return rows


def _test_scores(run, task):
    """(scores, labels) of ``task`` from the run's test_scores.npz; a DataError naming the file
    if it is missing or damaged."""
    path = os.path.join(run["dir"], "test_scores.npz")
    try:
        with np.load(path) as saved:
            scores, labels = saved[f"{task}.scores"], saved[f"{task}.labels"]
    except FileNotFoundError:
        raise DataError(path, "missing: a finished run's test scores") from None
    except KeyError:
        raise DataError(path, f"holds no {task}.scores and {task}.labels") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:
        raise DataError(path, f"not readable as the run's test scores ({error})") from None
    if scores.ndim != 1 or scores.shape != labels.shape or not scores.size:
        raise DataError(path, f"{task}.scores and {task}.labels are not two lists of the same length")
    if not (np.issubdtype(scores.dtype, np.number) and np.isfinite(scores).all()):
        raise DataError(path, f"{task}.scores holds values that are not finite numbers")
    if not np.issubdtype(labels.dtype, np.number):
        raise DataError(path, f"{task}.labels holds values that are not numbers")
    return scores, labels


def _trained_on_nli(config):
    return get_task(config["task"]).data == CNSD


def _pooling(config):
    return config.get("pooling") or "cls"  # runs that did not record it pooled [CLS]


def method_name(config):
    architecture = config.get("architecture") or config["model"]  # runs before 0.2 called it "model"
    name = f"{architecture.upper()} + {get_loss(config['kind'], config['loss']).title}"
    if config["loss"] == "contrastive":
        name += f" (ε={config['epsilon']:g})"
    return name


# Which table a run belongs to. A per-task feature run at the usual pooling and batch size is
# "per_task"; one at another batch size only feeds the batch-size table, one at another
# pooling the pooling table, a contrastive one only Table I.
STUDIES = ("per_task", "nli", "interaction", "epsilon", "pooling", "batch_size")


def _batch_size(config):
    return config.get("batch_size")


def _usual(runs, setting):
    counts = collections.Counter(setting(run["config"]) for run in runs).most_common(1)
    return counts[0][0] if counts else None


def group_runs(runs) -> dict:
    """{study: runs} for :data:`STUDIES`, and the usual pooling and batch size: the ones most
    per-task feature runs used (the others are the pooling and batch-size studies)."""
    feature = [
        r
        for r in runs
        if r["config"]["kind"] == "feature"
        and not _trained_on_nli(r["config"])
        and r["config"]["loss"] != "contrastive"
    ]
    usual_pooling, usual_batch = _usual(feature, _pooling), _usual(feature, _batch_size)
    groups = {study: [] for study in STUDIES}
    for run in runs:
        config = run["config"]
        if _trained_on_nli(config):
            study = "nli"
        elif config["kind"] == "interaction":
            study = "interaction"
        elif config["loss"] == "contrastive":
            study = "epsilon"
        elif _batch_size(config) != usual_batch:
            study = "batch_size"
        elif _pooling(config) != usual_pooling:
            study = "pooling"
        else:
            study = "per_task"
        groups[study].append(run)
    groups["usual_pooling"], groups["usual_batch_size"] = usual_pooling, usual_batch
    return groups


def _cell(value, comparable=True):
    return "–" if value is None else f"{100 * value:.2f}" + ("" if comparable else "†")


def _table(rows, columns, average=True):
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


def _test_results(runs, row_name=lambda run: run["method"], metric="spearman") -> dict:
    """{row: {task: (test metric, comparable)}} over ``runs``."""
    rows = {}
    for run in runs:
        comparable = run["metrics"].get("comparable", True)
        for task, result in run["metrics"]["tasks"].items():
            if metric in result["test"]:
                rows.setdefault(row_name(run), {})[task] = (result["test"][metric], comparable)
    return rows


def _tasks_of(runs):
    """The tasks the runs were tested on, in table order."""
    return [t for t in MATCHING_TASKS if any(t in r["metrics"]["tasks"] for r in runs)]


def _trained_tasks(runs):
    """The tasks the runs were trained on, in table order."""
    return [t for t in MATCHING_TASKS if any(r["config"]["task"] == t for r in runs)]


def table_one_runs(groups) -> list:
    """The paper's Table I: the contrastive runs by ε, then CoSENT on the same tasks at the
    same pooling."""
    contrastive = sorted(groups["epsilon"], key=lambda run: run["config"]["epsilon"])
    tasks, poolings = _tasks_of(contrastive), {_pooling(r["config"]) for r in contrastive}
    cosent = [
        r
        for r in groups["per_task"] + groups["pooling"]
        if r["config"]["loss"] == "cosent" and r["config"]["task"] in tasks and _pooling(r["config"]) in poolings
    ]
    return contrastive + cosent


def _epsilon_table(groups):
    runs = table_one_runs(groups)
    tasks = _tasks_of(runs)
    return _table(_test_results(runs), tasks, average=len(tasks) > 1)


def _pooling_table(groups):
    """CoSENT under each pooling, on the tasks trained with more than one pooling."""
    cosent = [r for r in groups["per_task"] + groups["pooling"] if r["config"]["loss"] == "cosent"]
    poolings = collections.defaultdict(set)
    for run in cosent:
        poolings[run["config"]["task"]].add(_pooling(run["config"]))
    tasks = [t for t in MATCHING_TASKS if len(poolings[t]) > 1]
    if not tasks:
        return None
    order = list(POOLING_MODES)
    studied = sorted(
        (r for r in cosent if r["config"]["task"] in tasks), key=lambda r: order.index(_pooling(r["config"]))
    )
    return _table(
        _test_results(studied, lambda r: f"{POOLING_MODES[_pooling(r['config'])]} ({_pooling(r['config'])})"), tasks
    )


def _batch_label(config):
    micro = config.get("micro_batch_size")
    size = "batch size not recorded" if config.get("batch_size") is None else f"{config['batch_size']} pairs"
    return size + (f" (micro-batches of {micro})" if micro else "")


def _batch_size_runs(groups):
    """CoSENT runs at other batch sizes and, at the same pooling and tasks, at the usual one;
    smallest batch first."""
    studied = [r for r in groups["batch_size"] if r["config"]["loss"] == "cosent"]
    settings = {(_pooling(r["config"]), r["config"]["task"]) for r in studied}
    usual = [
        r
        for r in groups["per_task"] + groups["pooling"]
        if r["config"]["loss"] == "cosent" and (_pooling(r["config"]), r["config"]["task"]) in settings
    ]
    return sorted(usual + studied, key=lambda r: (_batch_size(r["config"]) is None, _batch_size(r["config"]) or 0))


def _batch_size_table(groups):
    studied = _batch_size_runs(groups)
    if not studied:
        return None
    several_poolings = len({_pooling(r["config"]) for r in studied}) > 1

    def label(run):
        text = _batch_label(run["config"])
        return f"{text}, {POOLING_MODES[_pooling(run['config'])]} pooling" if several_poolings else text

    return _table(_test_results(studied, label), _tasks_of(studied))


# Convergence: the first step at which valid Spearman reaches this fraction of a target.
CONVERGENCE_FRACTION = 0.9


def _first_step(history, target):
    return next((row["step"] for row in history if row["spearman"] >= target), None)


def convergence_tables(runs, fraction=CONVERGENCE_FRACTION) -> str:
    """From each run's valid_metrics.csv: the steps until valid Spearman first reaches
    ``fraction`` of the run's own best; and, as the paper compares convergence, the steps each
    other method took to its best and the steps CoSENT took to reach that same value."""
    histories = {id(r): _history(r) for r in runs}
    tasks = _trained_tasks(runs)
    best = {  # NaN (constant scores) is no run's best
        id(r): max((row["spearman"] for row in histories[id(r)] if not math.isnan(row["spearman"])), default=None)
        for r in runs
    }
    cosent = {r["config"]["task"]: r for r in runs if r["config"]["loss"] == "cosent"}
    own_rows, versus_rows = {}, {}
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


def convergence_groups(groups) -> dict:
    """{pooling: runs} of the per-task feature runs (contrastive left out) on the tasks where
    more than one loss was trained at that pooling, poolings in their table's order."""
    compared = collections.defaultdict(list)
    for run in groups["per_task"] + groups["pooling"]:
        compared[_pooling(run["config"])].append(run)
    result = {}
    for pooling in POOLING_MODES:
        runs = compared.get(pooling, [])
        losses = collections.defaultdict(set)
        for run in runs:
            losses[run["config"]["task"]].add(run["config"]["loss"])
        kept = [r for r in runs if len(losses[r["config"]["task"]]) > 1]
        if kept:
            result[pooling] = kept
    return result


def tables(runs):
    """The markdown of all tables for ``runs``."""
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
        poolings = ", ".join(sorted({POOLING_MODES[_pooling(r["config"])] for r in groups["epsilon"]}))
        sections.append(
            "### Contrastive loss that pushes negatives down to a threshold ε, next to CoSENT (the paper's "
            f"Table I; {poolings} pooling): test Spearman × 100\n\n" + _epsilon_table(groups)
        )
    pooling = _pooling_table(groups)
    if pooling:
        sections.append("### Pooling with CoSENT (the paper's pooling comparison): test Spearman × 100\n\n" + pooling)
    batch_sizes = _batch_size_table(groups)
    if batch_sizes:
        poolings = ", ".join(sorted({POOLING_MODES[_pooling(r["config"])] for r in groups["batch_size"]}))
        sections.append(
            f"### CoSENT at several global batch sizes ({poolings} pooling): test Spearman × 100\n\n" + batch_sizes
        )
    for pooling, compared in convergence_groups(groups).items():
        title = POOLING_MODES[pooling]
        if pooling != groups["usual_pooling"]:  # the usual pooling's test results are the first table
            sections.append(
                f"### Feature models trained on each task, {title} pooling: test Spearman × 100\n\n"
                + _table(_test_results(compared), _tasks_of(compared))
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


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(figure, path):
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=110)


def plot_valid_curve(history, path, title):
    """One run's valid Spearman against steps, epoch ends marked."""
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.plot([r["step"] for r in history], [r["spearman"] for r in history], marker=".")
    ends = [r for r in history if r["end_of_epoch"]]
    axes.scatter([r["step"] for r in ends], [r["spearman"] for r in ends], color="C3", zorder=3, label="epoch end")
    axes.set(xlabel="training step", ylabel="valid Spearman", title=title)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    _save(figure, path)
    plt.close(figure)


def plot_convergence(runs, path):
    """Valid Spearman against steps, a panel per task, a line per method."""
    plt = _pyplot()
    tasks = _trained_tasks(runs)
    if not tasks:
        return False
    figure, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.6), squeeze=False)
    for axis, task in zip(axes[0], tasks):
        for run in (r for r in runs if r["config"]["task"] == task):
            history = _history(run)
            kind = " (interaction)" if run["config"]["kind"] == "interaction" else ""
            axis.plot(
                [h["step"] for h in history], [h["spearman"] for h in history], marker=".", label=run["method"] + kind
            )
        axis.set(title=task, xlabel="training step", ylabel="valid Spearman")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    _save(figure, path)
    plt.close(figure)
    return True


def plot_cosine_density(runs, path):
    """Histogram densities of test cosines for positive and negative pairs: a row per method,
    a column per task (feature models trained on that task)."""
    if not runs:
        return False
    plt = _pyplot()
    methods = list(dict.fromkeys(r["method"] for r in runs))
    tasks = _trained_tasks(runs)
    figure, axes = plt.subplots(len(methods), len(tasks), figsize=(3.4 * len(tasks), 2.6 * len(methods)), squeeze=False)
    for run in runs:
        axis = axes[methods.index(run["method"])][tasks.index(run["config"]["task"])]
        task = run["config"]["task"]
        scores, labels = _test_scores(run, task)
        positive = get_task(task).positive(labels)
        # Bin over the scores' own range: a weak model's cosines can sit in a narrow band.
        low, high = np.percentile(scores, [0.5, 99.5])
        bins = np.linspace(low, high, 61) if high > low else np.linspace(low - 1e-3, high + 1e-3, 3)
        axis.hist(scores[positive], bins=bins, density=True, histtype="step", label="positive")
        axis.hist(scores[~positive], bins=bins, density=True, histtype="step", label="negative")
        axis.set_title(f"{run['method']} · {task}", fontsize=9)
        axis.legend(fontsize=7)
    for axis in axes[-1]:
        axis.set_xlabel("test cosine")
    figure.tight_layout()
    _save(figure, path)
    plt.close(figure)
    return True


def plot_batch_sizes(runs, path):
    """Test Spearman against the global batch size (log scale), a line per task."""
    if not runs:
        return False
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(5, 3.6))
    for task in _tasks_of(runs):
        points = sorted(
            (_batch_size(r["config"]), r["metrics"]["tasks"][task]["test"]["spearman"])
            for r in runs
            if r["config"]["task"] == task and _batch_size(r["config"]) is not None
        )
        axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=task)
    axis.set_xscale("log", base=2)
    axis.set(xlabel="global batch size (pairs)", ylabel="test Spearman", title="CoSENT, one epoch")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    _save(figure, path)
    plt.close(figure)
    return True


def write_report(run_dirs, output_dir: str, preface: str = "") -> list:
    """Write results.md and the plots: convergence.png (valid Spearman against steps, the
    paper's Figure 3), cosine_density.png (test cosines of positive and negative pairs, its
    Figure 5) and, with a Table I sweep, epsilon_density.png (the same for each ε and CoSENT),
    with CoSENT runs at several batch sizes, batch_size.png.
    Returns the written paths.

    Everything is made in a scratch folder first and moved into ``output_dir`` only once all of
    it was made: a damaged run (see :func:`load_runs`) stops the report with nothing written.
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
            ("batch_size.png", plot_batch_sizes, _batch_size_runs(groups)),
        )
        for name, plot, plotted in plots:
            if plot(plotted, os.path.join(scratch, name)):
                made.append(name)
        written = [os.path.join(output_dir, name) for name in made]
        for name, path in zip(made, written):
            with atomic_path(path) as tmp:
                shutil.copyfile(os.path.join(scratch, name), tmp)
    return written
