"""The paper's plots over finished runs: convergence (its Figure 3), densities of test cosines
(its Figure 5) and test Spearman against the global batch size; and the calibration study's
reliability curves.

matplotlib loads on the first plot, with its file-only backend, so that nothing here needs a
display and importing the report does not import matplotlib.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..calibration import ECE_BINS, expected_calibration_error, reliability_bins
from ..data.tasks import get_task
from ..plotting import new_figure, save_png
from .runs import KIND_STUDIES, Run, batch_size_of, run_history, run_test_scores, tested_tasks, trained_tasks


def plot_convergence(runs: list[Run], path: str) -> bool:
    """Valid Spearman against steps, a panel per task, a line per method, written to ``path``.

    Returns False (and draws nothing) when no run has a benchmark task.

    Example:
        >>> plot_convergence(load_runs(["runs/bq-cosent", "runs/bq-sbert"]), "convergence.png")
    """
    tasks = trained_tasks(runs)
    if not tasks:
        return False
    figure, axes = new_figure(1, len(tasks), figsize=(4.2 * len(tasks), 3.6), squeeze=False)
    for axis, task in zip(axes[0], tasks):
        for run in (r for r in runs if r["config"]["task"] == task):
            history = run_history(run)
            # A kind with a study of its own shares the task's panel, so its lines say which kind.
            kind = run["config"]["kind"]
            label = run["method"] + (f" ({kind})" if KIND_STUDIES[kind] else "")
            axis.plot([h["step"] for h in history], [h["spearman"] for h in history], marker=".", label=label)
        axis.set(title=task, xlabel="training step", ylabel="valid Spearman")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    save_png(figure, path)
    return True


def plot_cosine_density(runs: list[Run], path: str) -> bool:
    """Histogram densities of test cosines for positive and negative pairs: a row per method,
    a column per task (feature models trained on that task), written to ``path``.

    Returns False (and draws nothing) for no runs; a DataError names a run's missing or damaged
    test scores.

    Example:
        >>> plot_cosine_density(load_runs(["runs/bq-cosent"]), "cosine_density.png")
    """
    if not runs:
        return False
    methods = list(dict.fromkeys(r["method"] for r in runs))
    tasks = trained_tasks(runs)
    figure, axes = new_figure(len(methods), len(tasks), figsize=(3.4 * len(tasks), 2.6 * len(methods)), squeeze=False)
    for run in runs:
        axis = axes[methods.index(run["method"])][tasks.index(run["config"]["task"])]
        task = run["config"]["task"]
        scores, labels = run_test_scores(run, task)
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
    save_png(figure, path)
    return True


def plot_batch_sizes(runs: list[Run], path: str) -> bool:
    """Test Spearman against the global batch size (log scale), a line per task, written to
    ``path``; False (nothing drawn) for no runs.

    Example:
        >>> plot_batch_sizes(batch_size_runs(group_runs(load_runs(folders))), "batch_size.png")
    """
    if not runs:
        return False
    figure, axis = new_figure(figsize=(5, 3.6))
    for task in tested_tasks(runs):
        points = sorted(
            (batch_size_of(r["config"]), r["metrics"]["tasks"][task]["test"]["spearman"])
            for r in runs
            if r["config"]["task"] == task and batch_size_of(r["config"]) is not None
        )
        axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=task)
    axis.set_xscale("log", base=2)
    axis.set(xlabel="global batch size (pairs)", ylabel="test Spearman", title="CoSENT, one epoch")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    save_png(figure, path)
    return True


def plot_reliability_panels(
    panels: Mapping[tuple[str, str], Mapping[str, tuple[np.ndarray, np.ndarray]]], path: str, bins: int = ECE_BINS
) -> bool:
    """Reliability curves, a panel per (row, column) of ``panels`` ({(row, column): {curve:
    (probabilities, 0/1 labels)}}): per equal-width bin of the probability, the share of pairs
    that match against their mean probability (a calibrated one lies on the diagonal), each
    point's area the bin's share of the pairs, each curve's ECE in its legend; written to ``path``.

    Returns False (and draws nothing) for no panels.

    Example:
        >>> plot_reliability_panels({("CoSENT", "BQ"): {"calibrated": (p, labels)}}, "calibration.png")
    """
    if not panels:
        return False
    rows = list(dict.fromkeys(row for row, _ in panels))
    columns = list(dict.fromkeys(column for _, column in panels))
    figure, axes = new_figure(len(rows), len(columns), figsize=(3.3 * len(columns), 3.3 * len(rows)), squeeze=False)
    for axis_row, row in zip(axes, rows):
        for axis, column in zip(axis_row, columns):
            curves = panels.get((row, column))
            if curves is None:
                axis.set_axis_off()
                continue
            axis.plot([0, 1], [0, 1], color="0.6", linestyle=":", linewidth=1)
            for name, (probabilities, labels) in curves.items():
                figures = reliability_bins(probabilities, labels, bins)
                used = figures["pairs"] > 0
                share = figures["pairs"][used] / figures["pairs"].sum()
                ece = expected_calibration_error(probabilities, labels, bins)
                (line,) = axis.plot(
                    figures["mean_probability"][used], figures["share_matching"][used], label=f"{name}, ECE {ece:.3f}"
                )
                axis.scatter(
                    figures["mean_probability"][used],
                    figures["share_matching"][used],
                    s=8 + 150 * share,
                    color=line.get_color(),
                )
            axis.set(xlim=(0, 1), ylim=(0, 1))
            axis.set_title(f"{row} · {column}", fontsize=8)
            axis.legend(fontsize=6, loc="upper left")
            axis.grid(alpha=0.3)
    for axis in axes[-1]:
        axis.set_xlabel("mean probability in the bin")
    for axis_row in axes:
        axis_row[0].set_ylabel("share of pairs that match")
    figure.tight_layout()
    save_png(figure, path)
    return True
