"""Compare finished runs: markdown tables in the layout of the published ones, and plots.

* ``results.md``: test Spearman x 100 (methods as rows; ATEC, BQ, LCQMC, PAWSX, STS-B, Avg
  as columns) for feature models trained per task, for models trained on NLI, and for
  interaction models; test accuracy x 100 at the threshold tuned on valid.
* ``convergence.png``: valid Spearman against training steps, one line per method and a
  panel per task (the paper's Figure 3).
* ``cosine_density.png``: density of test cosines for positive and negative pairs, per
  feature-model loss and task (the paper's Figure 5).
"""

import json
import os

import numpy as np

from .callbacks import read_history
from .io import atomic_path, write_text
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


def method_name(config):
    architecture = config.get("architecture") or config["model"]  # runs before 0.2 called it "model"
    name = f"{architecture.upper()} + {get_loss(config['kind'], config['loss']).title}"
    if config["loss"] == "contrastive":
        name += f" (ε={config['epsilon']:g})"
    return name


def _cell(value, comparable=True):
    return "–" if value is None else f"{100 * value:.2f}" + ("" if comparable else "†")


def _table(rows, columns):
    """rows: {method: {column: (value, comparable)}}; an Avg column over the present values."""
    lines = ["| method | " + " | ".join(columns) + " | Avg |", "|---" * (len(columns) + 2) + "|"]
    for method, values in rows.items():
        present = [values[c][0] for c in columns if c in values]
        cells = [_cell(*values[c]) if c in values else "–" for c in columns]
        average = np.mean(present) if present else None
        mark = "" if len(present) == len(columns) else "*"
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {_cell(average)}{mark} |")
    return "\n".join(lines)


def tables(runs):
    """The markdown of all tables for ``runs``."""
    per_task, nli, interaction, accuracy = {}, {}, {}, {}
    for run in runs:
        config, metrics, method = run["config"], run["metrics"], run["method"]
        comparable = metrics.get("comparable", True)
        for task, result in metrics["tasks"].items():
            test = result["test"]
            if _trained_on_nli(config):
                nli.setdefault(method, {})[task] = (test["spearman"], comparable)
            elif config["kind"] == "interaction":
                interaction.setdefault(method, {})[task] = (test["spearman"], comparable)
            else:
                per_task.setdefault(method, {})[task] = (test["spearman"], comparable)
            if "accuracy" in test and not _trained_on_nli(config):
                label = method + (" (interaction)" if config["kind"] == "interaction" else " (feature)")
                accuracy.setdefault(label, {})[task] = (test["accuracy"], comparable)
    sections = []
    if per_task:
        sections.append(
            "### Feature models trained on each task: test Spearman × 100\n\n" + _table(per_task, MATCHING_TASKS)
        )
    if nli:
        sections.append("### Feature models trained on NLI: test Spearman × 100\n\n" + _table(nli, MATCHING_TASKS))
    if interaction:
        sections.append("### Interaction models: test Spearman × 100\n\n" + _table(interaction, BINARY_TASKS))
    if accuracy:
        sections.append("### Test accuracy × 100 at the threshold tuned on valid\n\n" + _table(accuracy, BINARY_TASKS))
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
    """Valid Spearman against steps, a panel per task, a line per method (NLI runs left out)."""
    plt = _pyplot()
    tasks = [t for t in MATCHING_TASKS if any(r["config"]["task"] == t for r in runs)]
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
    """Histogram densities of test cosines for positive and negative pairs (feature models)."""
    plt = _pyplot()
    feature = [r for r in runs if r["config"]["kind"] == "feature" and not _trained_on_nli(r["config"])]
    methods = sorted({r["method"] for r in feature})
    tasks = [t for t in MATCHING_TASKS if any(r["config"]["task"] == t for r in feature)]
    if not feature:
        return False
    figure, axes = plt.subplots(len(methods), len(tasks), figsize=(3.4 * len(tasks), 2.6 * len(methods)), squeeze=False)
    for run in feature:
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


def write_report(run_dirs, output_dir: str, preface: str = "") -> list:
    """Write results.md, convergence.png and cosine_density.png; returns the written paths."""
    runs = load_runs(run_dirs)
    if not runs:
        raise ValueError("no finished runs (folders with metrics.json and config.json) among: " + ", ".join(run_dirs))
    os.makedirs(output_dir, exist_ok=True)
    written = [os.path.join(output_dir, "results.md")]
    write_text(written[0], (preface + "\n\n" if preface else "") + tables(runs))
    for name, plot in (("convergence.png", plot_convergence), ("cosine_density.png", plot_cosine_density)):
        if plot(runs, os.path.join(output_dir, name)):
            written.append(os.path.join(output_dir, name))
    return written
