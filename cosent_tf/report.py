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
import json
import os

import numpy as np

from .callbacks import read_history
from .io import atomic_path, write_text
from .layers import POOLING_MODES
from .losses import get_loss
from .tasks import BINARY_TASKS, CNSD, MATCHING_TASKS, get_task


def load_runs(run_dirs) -> list:
    """Finished runs (folders holding metrics.json and config.json); others are ignored."""
    runs = []
    for folder in run_dirs:
        metrics_path, config_path = os.path.join(folder, "metrics.json"), os.path.join(folder, "config.json")
        if not (os.path.exists(metrics_path) and os.path.exists(config_path)):
            continue
        with open(metrics_path, encoding="utf-8") as f:
            metrics = json.load(f)
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
        runs.append({"dir": folder, "metrics": metrics, "config": config, "method": method_name(config)})
    return runs


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
    return f"{config['batch_size']} pairs" + (f" (micro-batches of {micro})" if micro else "")


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
    return sorted(usual + studied, key=lambda r: _batch_size(r["config"]))


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
    histories = {id(r): read_history(os.path.join(r["dir"], "valid_metrics.csv")) for r in runs}
    tasks = _trained_tasks(runs)
    best = {id(r): max((row["spearman"] for row in histories[id(r)]), default=None) for r in runs}
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
            history = read_history(os.path.join(run["dir"], "valid_metrics.csv"))
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
        saved = np.load(os.path.join(run["dir"], "test_scores.npz"))
        scores, labels = saved[f"{task}.scores"], saved[f"{task}.labels"]
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
            if r["config"]["task"] == task
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
    Returns the written paths."""
    runs = load_runs(run_dirs)
    if not runs:
        raise ValueError("no finished runs (folders with metrics.json and config.json) among: " + ", ".join(run_dirs))
    groups = group_runs(runs)
    os.makedirs(output_dir, exist_ok=True)
    written = [os.path.join(output_dir, "results.md")]
    write_text(written[0], (preface + "\n\n" if preface else "") + tables(runs))
    extra = {p: runs for p, runs in convergence_groups(groups).items() if p != groups["usual_pooling"]}
    plots = (
        ("convergence.png", plot_convergence, groups["per_task"] + groups["interaction"]),
        *((f"convergence-{pooling}.png", plot_convergence, runs) for pooling, runs in extra.items()),
        ("cosine_density.png", plot_cosine_density, groups["per_task"]),
        ("epsilon_density.png", plot_cosine_density, table_one_runs(groups) if groups["epsilon"] else []),
        ("batch_size.png", plot_batch_sizes, _batch_size_runs(groups)),
    )
    for name, plot, plotted in plots:
        if plot(plotted, os.path.join(output_dir, name)):
            written.append(os.path.join(output_dir, name))
    return written
