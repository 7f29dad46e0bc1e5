"""A training run's output folder: its rules (:mod:`cosent_tf.training.run_rules`, imported by
both Kerases and named here too, as before) and the Keras 2 engine's plot of its valid curve."""

from __future__ import annotations

from ..plotting import new_figure, save_png
from .run_rules import (  # noqa: F401  (their home is run_rules, which the Keras 3 trainer imports too)
    BACKUP,
    BEST_WEIGHTS,
    LOCK,
    MARKER_FORMAT,
    METRICS,
    MODEL,
    MODEL_FOLDER,
    PATH_SETTINGS,
    RELIABILITY,
    RENAMED_SETTINGS,
    RESUMABLE_CHANGES,
    RUN_CONFIG,
    RUN_FOLDER,
    RUN_MARKER,
    RUN_OUTPUTS,
    TEST_SCORES,
    VALID_CURVE,
    VALID_METRICS,
    VALIDATION_STATE,
    check_run_folder,
    fingerprints,
    prepare_run_folder,
)


def plot_valid_curve(history: list, path: str, title: str) -> None:
    """Draw one run's valid Spearman against training steps, epoch ends marked (its :data:`VALID_CURVE`).

    Args:
        history: the validation rows (:func:`cosent_tf.io.read_history`): ``step``,
            ``spearman`` and ``end_of_epoch`` of each.
        path: the PNG to write, whole or not at all (through a temporary file).
        title: the plot's title.

    Example:
        >>> rows = [{"step": 10, "spearman": 0.5, "end_of_epoch": True}]
        >>> plot_valid_curve(rows, "runs/bq/valid_curve.png", "feature cosent on BQ")
    """
    figure, axes = new_figure(figsize=(6, 4))
    axes.plot([row["step"] for row in history], [row["spearman"] for row in history], marker=".")
    ends = [row for row in history if row["end_of_epoch"]]
    axes.scatter([r["step"] for r in ends], [r["spearman"] for r in ends], color="C3", zorder=3, label="epoch end")
    axes.set(xlabel="training step", ylabel="valid Spearman", title=title)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    save_png(figure, path)
