"""What a finished run reports, the same on both Kerases: whether it started from random weights, the
valid and test metrics of each evaluated task with the match decision fitted on valid (and the files
they come with: ``test_scores.npz``, ``reliability.png``), the JSON line on stdout and the last line
of the log.

Keras-free: the Keras 2 engine (:mod:`cosent_tf.training.engine`) and the Keras 3 trainer
(:mod:`cosent_tf.keras3.training`) both import it, and score pairs with their own models.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from typing import Any, Callable, Optional

import numpy as np

from ..calibration import (
    MatchDecision,
    decision_metrics,
    decision_warnings,
    fit_decision,
    format_threshold,
    majority_said,
    plot_reliability,
    reliability_curves,
)
from ..data.pairs import PairData
from ..data.tasks import Task
from ..errors import ConfigError
from ..evaluation import task_metrics
from ..io import atomic_path
from ..models.spec import SPEC_FILE, read_spec
from .config import RunConfig
from .run_rules import RELIABILITY, TEST_SCORES

logger = logging.getLogger(__name__)

# Said at the start of a run without --checkpoint, and recorded with its results.
RANDOM_WEIGHTS_NOTE = (
    "no --checkpoint: the model starts from random weights, which is fine for trying the engine but "
    "not for use: such a model gives unrelated sentences cosines near 1, and its figures are not "
    "comparable with a pretrained model's"
)
RANDOM_CHECKPOINT_NOTE = (
    "the --checkpoint model folder was itself trained from random weights, so this model is random at its root too"
)

# What `cosent-tf train` prints on stdout, its one line, of the metrics it writes to metrics.json.
PRINTED_RESULTS = ("valid", "test", "best_epoch", "wall_seconds")


def starts_from_random_weights(checkpoint: Optional[str]) -> bool:
    """Whether a run from ``checkpoint`` starts from random weights: none given, or a model folder
    that was itself trained from random weights."""
    if not checkpoint:
        return True
    folder = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
    if os.path.exists(os.path.join(folder, SPEC_FILE)):
        return bool(read_spec(folder).source.get("random_weights"))
    return False


def say_random_weights(checkpoint: Optional[str]) -> None:
    """Warn, at the start of a run from random weights (:func:`starts_from_random_weights`), that its
    model is not for use."""
    logger.warning("NOTE: %s", RANDOM_WEIGHTS_NOTE if not checkpoint else RANDOM_CHECKPOINT_NOTE)


def model_origin(cfg: RunConfig, random_weights: bool, best_epoch: int, test: Mapping[str, Any]) -> dict:
    """What a run's model folder records of where its weights come from (its spec's ``source``): the
    task, loss and starting checkpoint, whether it started from random weights, the run's folder,
    the best epoch and its test metrics."""
    assert cfg.output_dir is not None, "a resolved RunConfig"
    return {
        "task": cfg.task,
        "loss": cfg.loss,
        "checkpoint": cfg.checkpoint and os.path.abspath(cfg.checkpoint),
        "random_weights": random_weights,
        "run": os.path.abspath(cfg.output_dir),
        "best_epoch": best_epoch,
        "test": test,
    }


def printed_results(metrics: Mapping[str, Any]) -> dict:
    """The part of a finished run's metrics that ``cosent-tf train`` prints as its JSON line."""
    return {name: metrics[name] for name in PRINTED_RESULTS}


def fit_run_decision(
    scores: np.ndarray, pairs: PairData, task: Task, scored_by: str, precision: str
) -> Optional[MatchDecision]:
    """The match decision fitted on a task's valid scores, or None (logged) when its labels allow
    none; a calibration map only when there are enough pairs (the decision's note says otherwise)."""
    try:
        decision = fit_decision(
            scores,
            pairs.labels,
            os.path.abspath(pairs.source) if os.path.isfile(pairs.source) else pairs.source,
            graded=not task.binary,
            score=scored_by,
            require_calibration=False,
        )
    except ConfigError as e:
        logger.warning("%s: no match decision: %s", task.name, e)
        return None
    if precision != "float32":  # the folder loads in float32 by default: say which scores it was fitted on
        decision = dataclasses.replace(decision, fitted_on={**decision.fitted_on, "precision": precision})
    return decision


def test_and_decide(
    cfg: RunConfig,
    evaluation: Mapping[str, tuple[PairData, PairData]],
    tasks: Mapping[str, Task],
    scores: Callable[[str], tuple[np.ndarray, np.ndarray]],
    retrieval: Optional[Callable[[PairData, Task], dict]],
    scored_by: str,
) -> tuple[dict, Optional[MatchDecision]]:
    """Valid and test metrics per task, and the match decision the model ships.

    For every task the decision is fitted on its valid scores (:func:`fit_run_decision`: thresholds
    and a calibration map for binary labels, the expected-label map for graded ones) and measured on
    test (:func:`cosent_tf.calibration.decision_metrics`: accuracy at the valid-tuned threshold next
    to the majority baseline, F1, calibration; what :func:`cosent_tf.calibration.decision_warnings`
    finds wrong with it is logged); the training task's decision is returned to ship with the
    model, and its reliability diagram drawn. A model with sentence vectors (``retrieval`` given) also gets
    retrieval metrics on a task's test pairs (binary or graded). The test scores and labels go to
    ``test_scores.npz`` in ``cfg.output_dir``.

    Args:
        cfg: the run's resolved settings.
        evaluation: task name -> (valid pairs, test pairs).
        tasks: task name -> its :class:`~cosent_tf.data.tasks.Task`.
        scores: task name -> (valid scores, test scores) of the trained model.
        retrieval: (pairs, task) -> retrieval metrics of the model's vectors; None for a model
            without sentence vectors.
        scored_by: what the scores are (the model kind's ``scored_by``).

    Returns:
        ``(per_task, decision)``; the decision is None when the training task is not among the
        evaluated ones (NLI) or its valid pairs could not be fitted (one class), which is logged.
    """
    assert cfg.output_dir is not None, "a resolved RunConfig"
    per_task: dict = {}
    saved_scores: dict[str, Any] = {}  # task.scores and task.labels of each task
    decision = None
    for name, (valid, test) in evaluation.items():
        valid_scores, test_scores = scores(name)
        task_decision = fit_run_decision(valid_scores, valid, tasks[name], scored_by, cfg.precision)
        per_task[name] = {
            "valid": task_metrics(valid_scores, valid.labels),
            "test": {
                **task_metrics(test_scores, test.labels),
                **decision_metrics(test_scores, test.labels, task_decision),
            },
        }
        for message in decision_warnings(per_task[name]["test"], f"{name} test ({test.source})", len(test.labels)):
            logger.warning("%s", message)
        if retrieval is not None:  # any task with positive pairs: its graded ones too
            per_task[name]["test"]["retrieval"] = retrieval(test, tasks[name])
        saved_scores[f"{name}.scores"], saved_scores[f"{name}.labels"] = test_scores, test.labels
        if name == cfg.task:
            decision = task_decision
            if decision is not None and decision.calibration is not None:
                plot_reliability(
                    os.path.join(cfg.output_dir, RELIABILITY),
                    reliability_curves(test_scores, np.asarray(test.labels) > 0.5, decision),
                    f"{cfg.kind} {cfg.loss} on {name}: test pairs, the map fitted on valid",
                )
    with atomic_path(os.path.join(cfg.output_dir, TEST_SCORES)) as tmp, open(tmp, "wb") as f:
        np.savez(f, **saved_scores)
    return per_task, decision


def run_summary(metrics: Mapping[str, Any], model_dir: str) -> str:
    """One readable line of a finished run's results, the last of its log: the task and model,
    the test Spearman (and accuracy at the valid-tuned threshold on a binary task, with the accuracy
    of answering every test pair with the majority label beside it), the best epoch's valid figure
    that chose it (``--best-metric``), where the model is, and whether it started from random
    weights.

    ``metrics`` is the run's (metrics.json); with several evaluated tasks (NLI) the Spearmans are their mean.
    """
    test, valid = metrics["test"], metrics["valid"]
    evaluated = metrics.get("tasks", {})
    mean = f", the mean over {', '.join(evaluated)}" if len(evaluated) > 1 else ""
    said = f"{metrics['task']} {metrics['kind']} {metrics['loss']}: test spearman {test['spearman']:.4f}{mean}"
    if "accuracy" in test:
        said += f", accuracy {test['accuracy']:.4f} at threshold {format_threshold(test['threshold'])}"
        if "majority_accuracy" in test:
            said += f" ({majority_said(test)})"
    chosen_by = metrics.get("best_metric", "spearman")  # a run of an earlier version chose by Spearman
    best = valid[chosen_by] if chosen_by in valid else metrics["best_valid"]
    said += f" (best valid {chosen_by} {best:.4f} at epoch {metrics['best_epoch']}); model in {model_dir}"
    if metrics.get("random_weights"):
        said += " (from random weights: not for use)"
    return said
