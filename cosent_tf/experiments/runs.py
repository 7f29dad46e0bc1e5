"""The finished training runs a report compares: each run folder read and checked whole, and the
runs grouped into the paper's studies (the per-task tables, NLI, interaction models, Table I's
ε sweep, the pooling comparison and the batch-size study).
"""

from __future__ import annotations

import collections
import logging
import math
import os
import zipfile
from collections.abc import Iterable
from typing import Any, Callable, Optional

import numpy as np

from ..calibration import CALIBRATION_METHODS
from ..choices import POOLING_MODES
from ..data.tasks import CNSD, MATCHING_TASKS, TASKS, get_task
from ..errors import ConfigError, DataError
from ..io import json_field, read_history, read_json
from ..losses import get_loss
from ..models.kinds import FEATURE, INTERACTION, KINDS
from ..training.run_folder import METRICS, RUN_CONFIG, TEST_SCORES, VALID_METRICS

logger = logging.getLogger(__name__)

# A run as the report holds it: {"dir", "metrics", "config", "method", "mining"} and, once read,
# "history". "mining" is the mining summary beside the run's train file (a run on mined
# negatives, see mining_summary), or None for a run on a benchmark task's own files.
Run = dict[str, Any]

# The test metrics the tables and plots read, and the range each must lie in (or be NaN, which
# the engine writes as null: an undefined correlation of constant scores).
METRIC_RANGES = {"spearman": (-1.0, 1.0), "pearson": (-1.0, 1.0), "accuracy": (0.0, 1.0)}
# The figures of the match decision a run ships (cosent_tf.calibration.decision_metrics on a
# binary task's test pairs; ``accuracy``, at the decision's accuracy threshold, is above) and
# their ranges. Runs trained before models shipped a decision lack them, and a run without a
# calibration map lacks ece, log_loss and brier; each is read when present.
DECISION_RANGES = {
    "accuracy_oracle": (0.0, 1.0),
    "f1": (0.0, 1.0),
    "f1_oracle": (0.0, 1.0),
    "ece_uncalibrated": (0.0, 1.0),
    "ece": (0.0, 1.0),
    "log_loss": (0.0, math.inf),
    "brier": (0.0, 1.0),
}

# The study every run of a model kind belongs to (see STUDIES); None where a run's task, loss,
# pooling and batch size decide it (group_runs).
KIND_STUDIES: dict[str, Optional[str]] = {FEATURE.name: None, INTERACTION.name: "interaction"}


def load_runs(run_dirs: Iterable[str | os.PathLike[str]]) -> list[Run]:
    """The finished runs among ``run_dirs``, each read and checked whole.

    A folder of an unfinished run (config.json without metrics.json), of no run at all, or of a
    run on the user's own files is left out with a warning naming it; a run on a file of mined
    negatives (a mining summary beside it, :func:`mining_summary`) is kept, placed by its name.
    A damaged finished run stops the report: a ConfigError or DataError names the folder's file
    and what is wrong with it, rather than a table that quietly lacks or misreads the run.

    Args:
        run_dirs: run folders, as training writes them.

    Returns:
        One dict per finished run: ``dir``, ``config`` and ``metrics`` (checked), ``method``
        (:func:`method_name`) and ``mining`` (the mining summary's path, or None).

    Raises:
        ConfigError: a folder that is not there, or a finished run's config or metrics damaged.
        DataError: a finished run's file that cannot be read.

    Example:
        >>> runs = load_runs(["runs/bq-cosent", "runs/bq-sbert"])
        >>> [run["method"] for run in runs]
        ['BERT + CoSENT', 'BERT + Sentence-BERT']
    """
    runs = []
    for folder in run_dirs:
        folder = os.fspath(folder)
        if not os.path.isdir(folder):
            raise ConfigError(
                f"{folder}: {'is not a folder' if os.path.exists(folder) else 'no such run folder'}; "
                "give the folders of finished training runs"
            )
        metrics_path, config_path = os.path.join(folder, METRICS), os.path.join(folder, RUN_CONFIG)
        if not os.path.exists(metrics_path):
            why = "a run not finished (no metrics.json)" if os.path.exists(config_path) else "not a training run"
            logger.warning("%s: %s; left out of the report", folder, why)
            continue
        if not os.path.exists(config_path):
            raise ConfigError(
                f"{config_path}: missing beside {metrics_path}: the run's settings are lost, so the report cannot "
                "place it; restore config.json or leave this folder out"
            )
        config = read_json(config_path, "a training run's config")
        train_file = json_field(config, "train_file", (str, type(None)), config_path)
        mining = None if train_file is None else mining_summary(train_file)
        if train_file is not None and mining is None:
            logger.warning(
                "%s: trained on its own file %s, which is neither a benchmark task nor mined negatives (no mining "
                "summary beside it); left out",
                folder,
                train_file,
            )
            continue
        config = _checked_config(config, config_path, mined=mining is not None)
        metrics = _checked_metrics(read_json(metrics_path, "a training run's metrics"), metrics_path)
        if config["task"] in MATCHING_TASKS and config["task"] not in metrics["tasks"]:
            raise ConfigError(f"{metrics_path}: no test metrics of the run's own task {config['task']} (in 'tasks')")
        runs.append(
            {"dir": folder, "metrics": metrics, "config": config, "method": method_name(config), "mining": mining}
        )
    return runs


def mining_summary(train_file: str) -> str | None:
    """The mining summary beside a run's train file, which tells a run on mined negatives from one
    on any other file of the user's (the report knows the run by this provenance, not its name).

    Args:
        train_file: the run's ``train_file``, as its config records it (a relative path is read
            from the current folder, where the study's script runs everything).

    Returns:
        The summary's path, or None when there is none or it is no mining summary (its
        ``format`` is not :data:`cosent_tf.mining.SUMMARY_FORMAT`).

    Raises:
        ConfigError: the summary is there but cannot be read as JSON (the message names it).

    Example:
        >>> mining_summary("runs/small/mined/BQ.jsonl")  # doctest: +SKIP
        'runs/small/mined/BQ.summary.json'
    """
    from ..mining import SUMMARY_FORMAT, summary_paths

    path = summary_paths(train_file)[0]
    if not os.path.isfile(path):
        return None
    summary = read_json(path, "a mining summary")
    return path if summary.get("format") == SUMMARY_FORMAT else None


def _checked_config(config: dict[str, Any], path: str, mined: bool = False) -> dict[str, Any]:
    """The fields of config.json the report reads, checked. ``mined``: a run on mined negatives,
    whose ``task`` is the name it was given (``cosent-tf train --name``)."""
    for key in ("task", "kind", "loss"):
        if json_field(config, key, str, path) is None:
            raise ConfigError(f"{path}: {key!r} is missing; the report needs the run's task, kind and loss")
    if config["task"] not in TASKS:
        named = " (a run on mined negatives is placed by its name: train it with --name TASK)" if mined else ""
        raise ConfigError(
            f"{path}: 'task' {config['task']!r} is not one of the benchmark tasks ({', '.join(TASKS)}){named}"
        )
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


def _checked_metrics(metrics: dict[str, Any], path: str) -> dict[str, Any]:
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
        values: dict[str, Any] = {}
        for metric, (low, high) in {**METRIC_RANGES, **DECISION_RANGES}.items():
            value = json_field(test, metric, (int, float, type(None)), path, what=f"{where}['test'][{metric!r}]")
            if metric not in test:
                continue
            value = math.nan if value is None else float(value)
            if not (math.isnan(value) or low <= value <= high):
                raise ConfigError(f"{path}: {where}['test'][{metric!r}] is {value}, outside {low:g} to {high:g}")
            values[metric] = value
        method = json_field(test, "calibration", (str, type(None)), path, what=f"{where}['test']['calibration']")
        if method is not None:
            if method not in CALIBRATION_METHODS:
                raise ConfigError(
                    f"{path}: {where}['test']['calibration'] is {method!r}, not one of {', '.join(CALIBRATION_METHODS)}"
                )
            values["calibration"] = method
        if "spearman" not in values:
            raise ConfigError(f"{path}: {where}['test']['spearman'] is missing")
        checked[task] = {**result, "test": values}
    return {**metrics, "tasks": checked}


def run_history(run: Run) -> list[dict[str, Any]]:
    """The run's valid_metrics.csv rows; a DataError naming the file (and line) if it is missing
    or damaged: cut off, a row of other fields than the header's, a value that is no number, a
    Spearman outside -1 to 1 (NaN, of constant scores, is one the engine writes)."""
    if "history" in run:
        return run["history"]
    path = os.path.join(run["dir"], VALID_METRICS)
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


def run_test_scores(run: Run, task: str) -> tuple[np.ndarray, np.ndarray]:
    """(scores, labels) of ``task`` from the run's test_scores.npz; a DataError naming the file
    if it is missing or damaged."""
    path = os.path.join(run["dir"], TEST_SCORES)
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


def _trained_on_nli(config: dict[str, Any]) -> bool:
    return get_task(config["task"]).data == CNSD


def pooling_of(config: dict[str, Any]) -> str:
    return config.get("pooling") or "cls"  # runs that did not record it pooled [CLS]


def method_name(config: dict[str, Any]) -> str:
    """A run's row name in the tables: architecture and loss, ε for a contrastive run, and the widths of
    a Matryoshka run (which would otherwise share, and take, the plain run's row)."""
    architecture = config.get("architecture") or config["model"]  # runs before 0.2 called it "model"
    name = f"{architecture.upper()} + {get_loss(config['kind'], config['loss']).title}"
    if config["loss"] == "contrastive":
        name += f" (ε={config['epsilon']:g})"
    if config.get("matryoshka_dims"):
        name += f" ({matryoshka_note(config['matryoshka_dims'], config.get('matryoshka_weights'))})"
    return name


def matryoshka_note(dims: list[int], weights: Optional[list[float]]) -> str:
    """``matryoshka 312,128,64``: the widths a run trained (``--matryoshka-dims``), widest first, and
    their weights when they are not 1 each.

    Example:
        >>> matryoshka_note([64, 312, 128], [0.5, 1, 1])
        'matryoshka 312,128,64 weighted 1/1/0.5'
    """
    widths = sorted(zip(dims, weights or [1.0] * len(dims)), reverse=True)
    note = "matryoshka " + ",".join(str(dim) for dim, _ in widths)
    if any(weight != 1 for _, weight in widths):
        note += " weighted " + "/".join(f"{weight:g}" for _, weight in widths)
    return note


# Which table a run belongs to. A per-task feature run at the usual pooling and batch size is
# "per_task"; one at another batch size only feeds the batch-size table, one at another
# pooling the pooling table, a contrastive one only Table I.
STUDIES = ("per_task", "nli", "interaction", "epsilon", "pooling", "batch_size")


def batch_size_of(config: dict[str, Any]) -> int | None:
    return config.get("batch_size")


def _usual(runs: list[Run], setting: Callable[[dict[str, Any]], Any]) -> Any:
    counts = collections.Counter(setting(run["config"]) for run in runs).most_common(1)
    return counts[0][0] if counts else None


def group_runs(runs: list[Run]) -> dict[str, Any]:
    """{study: runs} for :data:`STUDIES`, and the usual pooling and batch size: the ones most
    per-task feature runs used (the others are the pooling and batch-size studies).

    Args:
        runs: runs from :func:`load_runs`.

    Returns:
        ``{study: [runs]}`` for every study, plus ``usual_pooling`` and ``usual_batch_size``.

    Example:
        >>> groups = group_runs(load_runs(folders))
        >>> [run["method"] for run in groups["per_task"]]
    """
    feature = [
        r
        for r in runs
        if KIND_STUDIES[r["config"]["kind"]] is None
        and not _trained_on_nli(r["config"])
        and r["config"]["loss"] != "contrastive"
    ]
    usual_pooling, usual_batch = _usual(feature, pooling_of), _usual(feature, batch_size_of)
    groups: dict[str, Any] = {study: [] for study in STUDIES}
    for run in runs:
        config = run["config"]
        kind_study = KIND_STUDIES[config["kind"]]
        if _trained_on_nli(config):
            study = "nli"
        elif kind_study is not None:
            study = kind_study
        elif config["loss"] == "contrastive":
            study = "epsilon"
        elif batch_size_of(config) != usual_batch:
            study = "batch_size"
        elif pooling_of(config) != usual_pooling:
            study = "pooling"
        else:
            study = "per_task"
        groups[study].append(run)
    groups["usual_pooling"], groups["usual_batch_size"] = usual_pooling, usual_batch
    return groups


def tested_tasks(runs: list[Run]) -> list[str]:
    """The tasks the runs were tested on, in table order."""
    return [t for t in MATCHING_TASKS if any(t in r["metrics"]["tasks"] for r in runs)]


def trained_tasks(runs: list[Run]) -> list[str]:
    """The tasks the runs were trained on, in table order."""
    return [t for t in MATCHING_TASKS if any(r["config"]["task"] == t for r in runs)]


def table_one_runs(groups: dict[str, Any]) -> list[Run]:
    """The paper's Table I: the contrastive runs by ε, then CoSENT on the same tasks at the
    same pooling.

    Args:
        groups: from :func:`group_runs`.

    Returns:
        The runs in the table's row order.

    Example:
        >>> rows = table_one_runs(group_runs(load_runs(folders)))
    """
    contrastive = sorted(groups["epsilon"], key=lambda run: run["config"]["epsilon"])
    tasks, poolings = tested_tasks(contrastive), {pooling_of(r["config"]) for r in contrastive}
    cosent = [
        r
        for r in groups["per_task"] + groups["pooling"]
        if r["config"]["loss"] == "cosent" and r["config"]["task"] in tasks and pooling_of(r["config"]) in poolings
    ]
    return contrastive + cosent


def batch_size_runs(groups: dict[str, Any]) -> list[Run]:
    """CoSENT runs at other batch sizes and, at the same pooling and tasks, at the usual one;
    smallest batch first."""
    studied = [r for r in groups["batch_size"] if r["config"]["loss"] == "cosent"]
    settings = {(pooling_of(r["config"]), r["config"]["task"]) for r in studied}
    usual = [
        r
        for r in groups["per_task"] + groups["pooling"]
        if r["config"]["loss"] == "cosent" and (pooling_of(r["config"]), r["config"]["task"]) in settings
    ]
    return sorted(usual + studied, key=lambda r: (batch_size_of(r["config"]) is None, batch_size_of(r["config"]) or 0))


def convergence_groups(groups: dict[str, Any]) -> dict[str, list[Run]]:
    """{pooling: runs} of the per-task feature runs (contrastive left out) on the tasks where
    more than one loss was trained at that pooling, poolings in their table's order.

    Args:
        groups: from :func:`group_runs`.

    Returns:
        ``{pooling: runs}``; a pooling without such runs is left out.

    Example:
        >>> for pooling, runs in convergence_groups(group_runs(load_runs(folders))).items(): ...
    """
    compared = collections.defaultdict(list)
    for run in groups["per_task"] + groups["pooling"]:
        compared[pooling_of(run["config"])].append(run)
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
