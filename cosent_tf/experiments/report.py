"""Compare finished runs: markdown tables in the layout of the published ones, and plots.

* ``results.md``: test Spearman x 100 (methods as rows; ATEC, BQ, LCQMC, PAWSX, STS-B, Avg
  as columns) for feature models trained per task, for models trained on NLI, and for
  interaction models; test accuracy x 100 at the threshold tuned on valid; and, for runs that
  record them, the figures of the match decision each model ships (:func:`decision_table`).
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
* ``calibration.md`` and ``calibration.png``, asked for apart (:func:`write_calibration_report`):
  the calibration study, each binary task's runs measured on their test pairs, the shipped
  thresholds against the test oracle and the ECE before and after calibration, with sentences
  computed from the table, and the reliability curves.

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
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Callable, Optional

import numpy as np

from ..calibration import DECISION_FILE, ECE_BINS, decision_metrics, log_loss, majority_accuracy, reliability_curves
from ..choices import POOLING_MODES
from ..data.tasks import BINARY_TASKS, MATCHING_TASKS
from ..errors import ConfigError
from ..evaluation import RANK_CUTOFF
from ..io import atomic_path, json_field, read_json, write_text
from ..losses import get_loss
from ..models.kinds import FEATURE, KINDS
from ..models.spec import read_model_decision
from ..plotting import new_figure, save_png
from ..training.run_folder import METRICS, MODEL, RUN_CONFIG, TEST_SCORES
from .plots import plot_batch_sizes, plot_convergence, plot_cosine_density, plot_reliability_panels
from .runs import (
    Run,
    batch_size_runs,
    convergence_groups,
    group_runs,
    load_runs,
    pooling_of,
    run_history,
    run_test_scores,
    table_one_runs,
    tested_tasks,
    trained_tasks,
)

# A table's cells: {row: {column: (value, marks)}}, the marks written after the value.
Cells = dict[str, dict[str, tuple[float, str]]]
NOT_COMPARABLE = "†"  # the run records itself as not comparable with published numbers
OTHER_SUBSET = "‡"  # measured on another test subset than the rows it stands among


def _cell(value: float | np.floating | None, marks: str = "") -> str:
    return "–" if value is None else f"{100 * value:.2f}" + marks


def _marks(run: Run) -> str:
    return "" if run["metrics"].get("comparable", True) else NOT_COMPARABLE


def _table(rows: Cells, columns: Sequence[str], average: bool = True) -> str:
    """rows: {method: {column: (value, marks)}}; an Avg column over the present values."""
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
) -> Cells:
    """{row: {task: (test metric, marks)}} over ``runs``."""
    rows: Cells = {}
    for run in runs:
        for task, result in run["metrics"]["tasks"].items():
            if metric in result["test"]:
                rows.setdefault(row_name(run), {})[task] = (result["test"][metric], _marks(run))
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
# How large a retrieval test was (keys beside the metrics): two results of one test subset agree on them.
RETRIEVAL_COUNTS = ("queries", "corpus")
# The metrics whose change by reranking is said under the tables.
RERANK_METRICS = (f"mrr@{RANK_CUTOFF}", "recall@1", f"ndcg@{RANK_CUTOFF}")
_HEADLINE_METRIC = f"mrr@{RANK_CUTOFF}"  # shown next to test Spearman, in the first table and the plot
_MIX_WEIGHT_KEYS = ("cosine_weight", "ibn_weight", "angle_weight")
# The key of an evaluation's reranked retrieval metrics (cosent-tf evaluate --retrieval --rerank --output).
RERANKED = "retrieval_reranked"

# An evaluation with reranking as the report holds it (see load_evaluations).
Evaluation = dict[str, Any]


def _is_retrieval_objective(run: Run) -> bool:
    return run["config"]["kind"] == FEATURE.name and run["config"]["loss"] in RETRIEVAL_LOSSES


def _is_mined(run: Run) -> bool:
    """The run trained on a file of mined negatives (its mining summary is beside its train file)."""
    return run.get("mining") is not None


def _settings_apart(run: Run, others: list[Run]) -> int:
    """How many settings of ``run``'s config differ from each of ``others``', summed."""
    config = run["config"]
    return sum(
        sum(config.get(key) != other["config"].get(key) for key in config.keys() | other["config"].keys())
        for other in others
    )


def retrieval_study_runs(runs: list[Run]) -> list[Run]:
    """The runs of the retrieval study among ``runs``: every feature run of a retrieval objective
    (:data:`RETRIEVAL_LOSSES`), runs on mined negatives included, and, for each task and pooling
    they were trained at, the CoSENT run at that task and pooling whose other settings differ
    least from theirs (so that a study reported next to the paper's runs compares CoSENT trained
    as the study trained it; a run on mined negatives, which trains on a file of its own, has no
    say in that unless it is the setting's only one).

    Args:
        runs: runs from :func:`~cosent_tf.experiments.runs.load_runs`.

    Returns:
        The study's runs, CoSENT first, then the objectives in :data:`RETRIEVAL_LOSSES` order
        (MNRL: in-batch negatives only, negatives from labels, mined negatives); empty when no
        run trained a retrieval objective.

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
        in_setting = [r for r in objectives if (r["config"]["task"], pooling_of(r["config"])) == (task, pooling)]
        setting = [r for r in in_setting if not _is_mined(r)] or in_setting
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
            _is_mined(r),
            bool(r["config"].get("hard_negatives_from_labels")),
            bool(r["config"].get("symmetric")),
        ),
    )


def _retrieval_label(run: Run, with_pooling: bool) -> str:
    """A study run's row name: its method, and what tells it from a run of the same loss."""
    config = run["config"]
    notes = []
    if _is_mined(run):
        notes.append("mined negatives")
    elif config.get("hard_negatives_from_labels"):
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


def _retrieval_block(
    block: dict[str, Any], path: str, where: str, required: bool = False
) -> tuple[dict[str, float], dict[str, int]]:
    """The metrics of :data:`RETRIEVAL_METRICS` (numbers from 0 to 1) and the counts of
    :data:`RETRIEVAL_COUNTS` in a retrieval result ``block`` of the JSON file ``path``;
    ``required``: a missing metric is an error, not left out."""
    values: dict[str, float] = {}
    for key in RETRIEVAL_METRICS:
        value = json_field(block, key, (int, float), path, what=f"{where}[{key!r}]")
        if value is None:
            if required:
                raise ConfigError(f"{path}: {where}[{key!r}] is missing")
            continue
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{path}: {where}[{key!r}] is {value}, outside 0 to 1")
        values[key] = float(value)
    counts: dict[str, int] = {}
    for key in RETRIEVAL_COUNTS:
        count = json_field(block, key, int, path, what=f"{where}[{key!r}]")
        if count is not None:
            if count < 1:
                raise ConfigError(f"{path}: {where}[{key!r}] is {count}; a retrieval test has at least one")
            counts[key] = count
    return values, counts


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
    counts: dict[str, dict[str, int]] = {}
    for task in run["metrics"]["tasks"]:
        where = f"tasks[{task!r}]['test']['retrieval']"
        retrieval = json_field(recorded[task]["test"], "retrieval", dict, path, what=where) or {}
        results[task], counts[task] = _retrieval_block(retrieval, path, where)
    run["retrieval"], run["retrieval_counts"] = results, counts
    return results


def _run_retrieval_counts(run: Run) -> dict[str, dict[str, int]]:
    """{task: {"queries": n, "corpus": n}} of the run's test retrieval, as far as recorded."""
    run_retrieval(run)
    return run["retrieval_counts"]


def _reranker_name(model_dir: str) -> str:
    """The reranker's name in a row: its run's kind and loss ("interaction CoSENT") when its folder
    is a training run's model, else its path."""
    config_path = os.path.join(os.path.dirname(os.path.normpath(model_dir)), RUN_CONFIG)
    if not os.path.isfile(config_path):
        return model_dir
    config = read_json(config_path, "a training run's config")
    kind, loss = config.get("kind"), config.get("loss")
    if not (isinstance(kind, str) and isinstance(loss, str)):
        return model_dir
    try:
        return f"{kind} {get_loss(kind, loss).title}"
    except ConfigError:
        return model_dir


def load_evaluations(paths: Iterable[str | os.PathLike[str]], runs: list[Run]) -> list[Evaluation]:
    """The retrieval evaluations with reranking among ``paths`` (the JSON that ``cosent-tf evaluate
    MODEL FILE --retrieval --rerank DIR --output X.json`` writes), each read, checked and placed:
    its run is the folder around its ``model_dir``, and its task that run's.

    Args:
        paths: the evaluations' JSON files.
        runs: the report's runs (:func:`~cosent_tf.experiments.runs.load_runs`); each
            evaluation's run must be among them.

    Returns:
        One dict per file: ``path``, ``run``, ``task``, ``retrieval`` and ``reranked``
        (``{metric: value}`` of the first stage's ranking and of the reranked one, on the same
        pairs), ``retrieval_counts`` and ``reranked_counts`` (queries and corpus),
        ``rerank_top``, ``reranker`` (the interaction model's folder) and ``reranker_name``.

    Raises:
        ConfigError: a file that is no such evaluation (no reranked metrics, a metric missing or
            outside 0 to 1), one whose run is not among ``runs`` or was not trained on a task it
            was tested on, or two of one run reranked alike; the message names the file.

    Example:
        >>> runs = load_runs(["runs/retrieval-cosent-BQ"])
        >>> load_evaluations(["runs/reranked/retrieval-cosent-BQ.json"], runs)[0]["reranked"]["mrr@10"]
        0.35
    """
    by_folder = {os.path.realpath(run["dir"]): run for run in runs}
    evaluations: list[Evaluation] = []
    alike: dict[tuple[str, str, int], str] = {}
    for path in (os.fspath(given) for given in paths):
        record = read_json(path, "an evaluation (cosent-tf evaluate --output)")
        model_dir = json_field(record, "model_dir", str, path)
        plain = json_field(record, "retrieval", dict, path)
        reranked = json_field(record, RERANKED, dict, path)
        if model_dir is None or plain is None or reranked is None:
            fields = (("model_dir", model_dir), ("retrieval", plain), (RERANKED, reranked))
            missing = next(key for key, value in fields if value is None)
            raise ConfigError(
                f"{path}: {missing!r} is missing: not an evaluation of a model's retrieval with reranking "
                "(cosent-tf evaluate MODEL FILE --retrieval --rerank DIR --output FILE.json)"
            )
        top = json_field(reranked, "rerank_top", int, path, what=f"{RERANKED}['rerank_top']")
        reranker = json_field(reranked, "reranker", str, path, what=f"{RERANKED}['reranker']")
        if top is None or top < 1 or reranker is None:
            raise ConfigError(
                f"{path}: {RERANKED} must say how many candidates were reranked ('rerank_top', at least 1) "
                "and by which model ('reranker')"
            )
        run_dir = os.path.dirname(os.path.normpath(model_dir))
        run = by_folder.get(os.path.realpath(run_dir))
        if run is None:
            raise ConfigError(
                f"{path}: evaluates {model_dir}, the model of {run_dir}, which is not among the report's runs; "
                "give that run's folder too"
            )
        task = run["config"]["task"]
        if task not in MATCHING_TASKS:
            raise ConfigError(
                f"{path}: evaluates a model trained on {task}, which tests on several tasks; a reranked row is "
                f"placed by the one task its run trained and was tested on ({', '.join(MATCHING_TASKS)})"
            )
        key = (os.path.realpath(run_dir), os.path.realpath(reranker), top)
        if key in alike:
            raise ConfigError(
                f"{alike[key]} and {path}: two evaluations of {run_dir} reranked alike (the top {top} by "
                f"{reranker}); give the report one of them"
            )
        alike[key] = path
        values, counts = _retrieval_block(plain, path, "'retrieval'", required=True)
        reranked_values, reranked_counts = _retrieval_block(reranked, path, repr(RERANKED), required=True)
        evaluations.append(
            {
                "path": path,
                "run": run,
                "task": task,
                "retrieval": values,
                "retrieval_counts": counts,
                "reranked": reranked_values,
                "reranked_counts": reranked_counts,
                "rerank_top": top,
                "reranker": reranker,
                "reranker_name": _reranker_name(reranker),
            }
        )
    return evaluations


def _count_differences(counts: dict[str, int], others: dict[str, int]) -> list[str]:
    """The counts (:data:`RETRIEVAL_COUNTS`) recorded by both on which two retrieval results differ."""
    return [
        f"{key} {counts[key]} against {others[key]}"
        for key in RETRIEVAL_COUNTS
        if key in counts and key in others and counts[key] != others[key]
    ]


def _subset_differences(evaluation: Evaluation) -> list[str]:
    """How an evaluation's first-stage retrieval differs from its run's own test retrieval; empty
    when they agree, so that the evaluation tested on the run's test subset.

    The evaluation encodes the texts in other batches than the run's test did, so float rounding
    may swap two near-tied candidates of a query: each metric, a mean over queries, may move by
    one query's share (1 / queries) and still be the same subset's. The counts must be equal.
    """
    task, run = evaluation["task"], evaluation["run"]
    values, counts = evaluation["retrieval"], evaluation["retrieval_counts"]
    recorded, recorded_counts = run_retrieval(run).get(task, {}), _run_retrieval_counts(run).get(task, {})
    shared = [key for key in RETRIEVAL_METRICS if key in recorded] + [
        k for k in RETRIEVAL_COUNTS if k in recorded_counts
    ]
    if not shared:
        return ["the run records no test retrieval to compare with"]
    differences = _count_differences(counts, recorded_counts)
    queries = counts.get("queries") or recorded_counts.get("queries")
    allowed = 1.0 / queries if queries else 0.0
    differences += [
        f"{title} {100 * values[key]:.2f} against {100 * recorded[key]:.2f}"
        for key, title in RETRIEVAL_METRICS.items()
        if key in recorded and abs(values[key] - recorded[key]) > allowed + 1e-9
    ]
    return differences


def _mined_subset_warnings(grouped: list[Run]) -> tuple[list[str], set[tuple[str, str]]]:
    """Runs on mined negatives whose test retrieval counts are not those of the other study runs on
    the task (so they were tested on another subset): the warnings, and the (run folder, task)
    of each cell to mark."""
    warnings, marked = [], set()
    for run in filter(_is_mined, grouped):
        task = run["config"]["task"]
        counts = _run_retrieval_counts(run).get(task, {})
        for other in grouped:
            other_counts = _run_retrieval_counts(other).get(task, {})
            if _is_mined(other) or other["config"]["task"] != task or not other_counts:
                continue
            differences = _count_differences(counts, other_counts)
            if not counts:
                why = "records no queries and corpus of its test retrieval, so its test subset cannot be checked"
            elif differences:
                why = f"was tested on another subset than {other['dir']} ({'; '.join(differences)})"
            else:
                continue
            warnings.append(f"{run['dir']} (mined negatives) on {task}: {why}")
            marked.add((run["dir"], task))
            break
    return warnings, marked


def _study_rows(runs: list[Run], metric: str, with_pooling: bool, marked: Collection[tuple[str, str]] = ()) -> Cells:
    """{row: {task: (value, marks)}} of test Spearman (``metric`` "spearman") or a retrieval metric;
    ``marked``: the (run folder, task) cells measured on another test subset."""
    rows: Cells = {}
    for run in runs:
        row = rows.setdefault(_retrieval_label(run, with_pooling), {})
        for task, result in run["metrics"]["tasks"].items():
            value = result["test"]["spearman"] if metric == "spearman" else run_retrieval(run)[task].get(metric)
            if value is not None:
                row[task] = (value, _marks(run) + (OTHER_SUBSET if (run["dir"], task) in marked else ""))
    return rows


def _reranked_label(evaluation: Evaluation, with_pooling: bool) -> str:
    first_stage = _retrieval_label(evaluation["run"], with_pooling)
    return f"{first_stage} → reranked by {evaluation['reranker_name']} (top {evaluation['rerank_top']})"


def _reranked_rows(evaluations: list[Evaluation], metric: str, with_pooling: bool, marked: set[str]) -> Cells:
    """{row: {task: (value, marks)}} of a reranked retrieval metric; ``marked``: the paths of the
    evaluations not made on their run's test subset."""
    rows: Cells = {}
    for evaluation in evaluations:
        marks = _marks(evaluation["run"]) + (OTHER_SUBSET if evaluation["path"] in marked else "")
        row = rows.setdefault(_reranked_label(evaluation, with_pooling), {})
        row[evaluation["task"]] = (evaluation["reranked"][metric], marks)
    return rows


def _named_together(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _means(rows: Cells, tasks: Sequence[str]) -> dict[str, float]:
    """100 × each row's mean over ``tasks``, rounded as the tables show it, for the rows that have them all."""
    return {
        row: round(100 * float(np.mean([values[t][0] for t in tasks])), 2)
        for row, values in rows.items()
        if tasks and all(t in values for t in tasks)
    }


def _leaders(tables_rows: dict[str, Cells], tasks: Sequence[str]) -> str:
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


def _mnrl_label(runs: list[Run], pooling: str, from_labels: bool, with_pooling: bool) -> Optional[str]:
    """The row of the MNRL run at ``pooling`` with in-batch negatives only or with hard negatives
    from the labels (not symmetric, not on mined negatives), if there is one."""
    for run in runs:
        config = run["config"]
        if (
            config["loss"] == "mnrl"
            and not _is_mined(run)
            and bool(config.get("hard_negatives_from_labels")) == from_labels
            and not config.get("symmetric")
            and pooling_of(config) == pooling
        ):
            return _retrieval_label(run, with_pooling)
    return None


def _mined_comparison(
    grouped: list[Run], tables_rows: dict[str, Cells], tasks: Sequence[str], with_pooling: bool
) -> list[str]:
    """For each row of MNRL on mined negatives: per metric, its average against MNRL with
    in-batch negatives only and with hard negatives from the labels, over the tasks the three
    share, whether it beat each, and the loss that led on those tasks; then a count of the
    metrics on which it beat each."""
    sections = []
    for mined in dict.fromkeys(_retrieval_label(r, with_pooling) for r in grouped if _is_mined(r)):
        pooling = pooling_of(next(r for r in grouped if _retrieval_label(r, with_pooling) == mined)["config"])
        rivals = [
            (what, label)
            for what, label in (
                ("in-batch negatives only", _mnrl_label(grouped, pooling, False, with_pooling)),
                ("hard negatives from labels", _mnrl_label(grouped, pooling, True, with_pooling)),
            )
            if label is not None
        ]
        if not rivals:
            sections.append(f"{mined}: no MNRL run on other negatives at the same pooling to compare it with.")
            continue
        lines, beaten, measured = [], {what: 0 for what, _ in rivals}, 0
        compared = [mined, *(label for _, label in rivals)]
        for title, rows in tables_rows.items():
            shared = [t for t in tasks if all(t in rows[row] for row in compared)]
            means = _means({row: rows[row] for row in compared}, shared)
            if not means:
                lines.append(f"- {title}: no task has it recorded for all of them")
                continue
            measured += 1
            against = []
            for what, label in rivals:
                change = round(means[mined] - means[label], 2)
                beaten[what] += change > 0
                verdict = "beat" if change > 0 else "fell behind" if change < 0 else "tied with"
                against.append(f"{verdict} {what} ({means[label]:.2f}, {change:+.2f})")
            everyone = _means(rows, shared)
            best = max(everyone.values())
            leaders = [row for row, mean in everyone.items() if mean == best]
            lines.append(
                f"- {title}: {means[mined]:.2f} on average over {', '.join(shared)}: {'; '.join(against)}; "
                f"the best of every loss on these tasks: {_named_together(leaders)}, {best:.2f}"
            )
        tally = " and ".join(f"{what} on {count} of {measured} metrics" for what, count in beaten.items())
        sections.append(
            f"MNRL with mined negatives ({mined}) against MNRL with other negatives:\n\n"
            + "\n".join(lines)
            + f"\n\nMined negatives beat {tally}."
        )
    return sections


def _rerank_effects(evaluations: list[Evaluation], with_pooling: bool) -> Optional[str]:
    """For each first stage and reranker: the average change by reranking of :data:`RERANK_METRICS`
    over the tasks it was reranked on (each evaluation's reranked ranking against its own first
    stage's, on the same pairs), and where it helped."""
    if not evaluations:
        return None
    stages: dict[str, list[Evaluation]] = {}
    for evaluation in evaluations:
        stages.setdefault(_reranked_label(evaluation, with_pooling), []).append(evaluation)
    lines = []
    for evaluated in stages.values():
        first = evaluated[0]
        tasks = [t for t in MATCHING_TASKS if any(e["task"] == t for e in evaluated)]
        changes = {
            RETRIEVAL_METRICS[key]: round(
                100 * float(np.mean([e["reranked"][key] - e["retrieval"][key] for e in evaluated])), 2
            )
            for key in RERANK_METRICS
        }
        helped = [title for title, change in changes.items() if change > 0]
        hurt = [title for title, change in changes.items() if change < 0]
        same = [title for title, change in changes.items() if change == 0]
        verdicts = [f"helped on {_named_together(helped)}"] if helped else ["helped on none of them"]
        verdicts += [f"hurt {_named_together(hurt)}"] if hurt else []
        verdicts += [f"left {_named_together(same)} unchanged"] if same else []
        shown = ", ".join(f"{title} {change:+.2f}" for title, change in changes.items())
        lines.append(
            f"- {_retrieval_label(first['run'], with_pooling)}, its top {first['rerank_top']} reranked by "
            f"{first['reranker_name']}: {shown} on average over {', '.join(tasks)}: reranking {', '.join(verdicts)}"
        )
    return (
        "Did reranking help? The average change × 100 of each first stage's ranking once reranked (each "
        "evaluation against its own first stage, on the same pairs):\n\n" + "\n".join(lines)
    )


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


def retrieval_tables(runs: list[Run], evaluations: Sequence[Evaluation] = ()) -> Optional[str]:
    """The markdown of the retrieval study among ``runs`` (:func:`retrieval_study_runs`): for the
    runs trained on each task and for those trained on NLI, test Spearman × 100 and MRR@10 × 100,
    then Recall@1, Recall@10 and nDCG@10 × 100, a row per loss and a column per task with
    their average; and which loss led on each metric on average, said in a sentence.

    A run on mined negatives is a row of its own ("MNRL (mined negatives)"), compared under the
    tables with MNRL on in-batch negatives only and on hard negatives from the labels; each
    first stage reranked in ``evaluations`` is a row of the retrieval tables (not of Spearman's,
    which reranking leaves as it is), and how much reranking changed its MRR@10, Recall@1 and
    nDCG@10 is said under them. A result that cannot be the other rows' test subset is marked ‡
    and said in bold: an evaluation whose first-stage metrics are not its run's own test
    retrieval, and a run on mined negatives whose test retrieval had other queries or corpus
    than the other runs on its task.

    Args:
        runs: runs from :func:`~cosent_tf.experiments.runs.load_runs`.
        evaluations: from :func:`load_evaluations` (over the same runs).

    Returns:
        The tables, or None when no run trained a retrieval objective.

    Raises:
        ConfigError: as :func:`retrieval_study_runs` and :func:`run_retrieval` say, and an
            evaluation whose run is not one of the study's runs.

    Example:
        >>> print(retrieval_tables(load_runs(["runs/retrieval-cosent-BQ", "runs/retrieval-mnrl-BQ"])))
    """
    study = retrieval_study_runs(runs)
    for evaluation in evaluations:
        if all(evaluation["run"] is not run for run in study):
            raise ConfigError(
                f"{evaluation['path']}: evaluates a model of {evaluation['run']['dir']}, which is not one of the "
                "retrieval study's runs (a retrieval objective, or the CoSENT run trained most like them)"
            )
    if not study:
        return None
    poolings = list(dict.fromkeys(pooling_of(r["config"]) for r in study))
    with_pooling = len(poolings) > 1
    setting = ", ".join(f"{POOLING_MODES[p]} pooling" for p in poolings)
    order = {id(run): number for number, run in enumerate(study)}
    sections = []
    for heading, grouped, tasks in _study_groups(study):
        reranked = sorted(
            (e for e in evaluations if any(e["run"] is run for run in grouped)), key=lambda e: order[id(e["run"])]
        )
        warnings, marked = _mined_subset_warnings(grouped)
        other_subset = set()
        for evaluation in reranked:
            differences = _subset_differences(evaluation)
            if differences:
                other_subset.add(evaluation["path"])
                warnings.append(
                    f"{evaluation['path']}: its first stage's retrieval on {evaluation['task']} is not "
                    f"{evaluation['run']['dir']}'s own test retrieval ({'; '.join(differences)}), so it did not test "
                    "on the run's test subset and its reranked row does not compare with the rows above"
                )
        metrics = {"test Spearman": "spearman", **{title: key for key, title in RETRIEVAL_METRICS.items()}}
        rows = {title: _study_rows(grouped, key, with_pooling, marked) for title, key in metrics.items()}
        mined = {_retrieval_label(r, with_pooling) for r in grouped if _is_mined(r)}
        by_labels = {title: {row: v for row, v in cells.items() if row not in mined} for title, cells in rows.items()}
        shown = {
            title: rows[title]
            if key == "spearman"
            else {**rows[title], **_reranked_rows(reranked, key, with_pooling, other_subset)}
            for title, key in metrics.items()
        }
        sections.append(f"### Retrieval study: {heading} ({setting}), test metrics × 100")
        sections += [f"#### {title}\n\n" + _table(shown[title], tasks) for title in metrics]
        if warnings:
            sections.append(
                f"**{OTHER_SUBSET} Not the test subset of the other rows:**\n\n" + "\n".join(f"- {w}" for w in warnings)
            )
        sections.append(_leaders(by_labels, tasks))
        sections += _mined_comparison(grouped, rows, tasks, with_pooling)
        effects = _rerank_effects(reranked, with_pooling)
        if effects:
            sections.append(effects)
    sections.append(_retrieval_notes(study, evaluations))
    return "\n\n".join(sections) + "\n"


def _retrieval_notes(study: list[Run], evaluations: Sequence[Evaluation]) -> str:
    """The notes under the study's tables, on the marks and rows present."""
    lcqmc = "LCQMC: trained on a seeded part of valid, no train split being available"
    mined = "; MNRL on mined negatives: trained on a file of its own, which the engine never calls comparable"
    notes = [
        f"{NOT_COMPARABLE} the run records itself as not comparable with published numbers (its metrics.json "
        f"notes say why; {lcqmc}{mined if any(map(_is_mined, study)) else ''})."
    ]
    if evaluations:
        notes.append(
            "→ reranked: the first stage ranks the whole corpus for each query, and the interaction model "
            "reorders its top K by the score it gives each (query, candidate) pair (`cosent-tf evaluate "
            "--retrieval --rerank`); the pair scores, and so test Spearman, are the first stage's own."
        )
    notes.append("* Avg over the tasks present only.")
    return "  \n".join(notes)


def _mean_over(values: dict[str, tuple[float, str]], columns: list[str]) -> float:
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
    panels: list[tuple[str, list[Cells], list[str]]] = []
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


# The match decision's figures in the report's tables: (key of a task's test metrics, title, format);
# "percent" figures are shown × 100, "plain" ones as they are (lower is better), "text" as written.
DECISION_COLUMNS = (
    ("accuracy", "accuracy", "percent"),
    ("accuracy_oracle", "accuracy, oracle", "percent"),
    ("f1", "F1", "percent"),
    ("f1_oracle", "F1, oracle", "percent"),
    ("ece_uncalibrated", "ECE of the score", "plain"),
    ("ece", "ECE calibrated", "plain"),
    ("log_loss", "log-loss", "plain"),
    ("brier", "Brier", "plain"),
    ("calibration", "map", "text"),
)


def _decision_notes(held_out: bool = False) -> str:
    """What the decision table's columns are (``held_out``: with the chosen map's held-out log-loss)."""
    return (
        "accuracy and F1 × 100 at the thresholds shipped with the model (each the best for its measure on the "
        "valid pairs) and, as *oracle*, at the best thresholds of the test pairs themselves"
        + ("; *one class*: the accuracy of answering every test pair with its more common class" if held_out else "")
        + "; *ECE of the score*: "
        "expected calibration error of the score read as a probability (clipped to [0, 1]; an interaction "
        "model's score is its head's output), *ECE calibrated*: that of the probability the shipped map gives, "
        f"with its log-loss and Brier score (all lower is better; the ECE over {ECE_BINS} equal-width bins); "
        "*map*: the calibration map that the held-out log-loss on valid chose"
        + (", *held-out log-loss* that map's, on held-out folds of the valid pairs" if held_out else "")
        + ". – not recorded: a run trained before models shipped a decision, or one whose valid pairs were too "
        "few for a map."
    )


def _figure(value: Any, style: str) -> str:
    """A decision figure as a table shows it; – for one not recorded (or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if style == "percent":
        return f"{100 * value:.2f}"
    return f"{value:.3f}" if style == "plain" else str(value)


def _decision_rows(rows: list[tuple[str, str, dict[str, Any]]], columns: Sequence[tuple[str, str, str]]) -> str:
    """A markdown table of (task, model, figures) rows over ``columns`` (:data:`DECISION_COLUMNS`' form)."""
    header = ["task", "model", *(title for _, title, _ in columns)]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for task, model, figures in rows:
        cells = [_figure(figures.get(key), style) for key, _, style in columns]
        lines.append(f"| {task} | {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def decision_table(runs: list[Run]) -> str | None:
    """The figures of the match decision each run ships, on each binary task it was tested on
    (:data:`DECISION_COLUMNS`, from its metrics.json), a row per run and task, task by task.

    Args:
        runs: runs from :func:`~cosent_tf.experiments.runs.load_runs`.

    Returns:
        The table and its notes; None when no run records a decision's figures (runs trained
        before models shipped a decision record only the accuracy, which the accuracy table has).
        A figure a run lacks is a dash.

    Example:
        >>> print(decision_table(load_runs(["runs/cosent-BQ", "runs/interact-cosent-BQ"])))
    """
    rows = [
        (task + _marks(run), f"{run['method']} ({run['config']['kind']})", run["metrics"]["tasks"][task]["test"])
        for task in BINARY_TASKS
        for run in runs
        if task in run["metrics"]["tasks"]
    ]
    decided = [key for key, _, _ in DECISION_COLUMNS if key != "accuracy"]
    if not any(key in figures for _, _, figures in rows for key in decided):
        return None
    return _decision_rows(rows, DECISION_COLUMNS) + "\n\n" + _decision_notes()


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
    decisions = decision_table(accuracy_runs)
    if decisions:
        sections.append(
            "### Match decision shipped with each model (fitted on valid), on the binary tasks' test pairs\n\n"
            + decisions
        )
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


def write_report(
    run_dirs: Iterable[str | os.PathLike[str]],
    output_dir: str,
    preface: str = "",
    evaluations: Iterable[str | os.PathLike[str]] = (),
) -> list[str]:
    """Write results.md and the plots: convergence.png (valid Spearman against steps, the
    paper's Figure 3), cosine_density.png (test cosines of positive and negative pairs, its
    Figure 5) and, with a Table I sweep, epsilon_density.png (the same for each ε and CoSENT),
    with CoSENT runs at several batch sizes, batch_size.png; with runs of the retrieval
    objectives, retrieval.md and retrieval.png (:func:`retrieval_tables`, :func:`plot_retrieval`),
    its retrieval tables with a reranked row for each first stage ``evaluations`` reranked.
    results.md and its plots are written only when runs outside the retrieval study are among
    the inputs, so that a report of the study's runs alone leaves a results.md beside it as it is.

    Everything is made in a scratch folder first and moved into ``output_dir`` only once all of
    it was made: a damaged run (see :func:`load_runs`) stops the report with nothing written.

    Args:
        run_dirs: run folders; unfinished runs are left out with a warning.
        output_dir: the folder to write the report into (made if missing).
        preface: markdown put before the tables of each markdown file written.
        evaluations: JSON files of ``cosent-tf evaluate --retrieval --rerank --output``, each of
            a model of a retrieval study's run among ``run_dirs`` (:func:`load_evaluations`).

    Returns:
        The written paths.

    Raises:
        ConfigError: ``output_dir`` is a file, no finished run is among ``run_dirs``, a run
            is damaged (as :func:`load_runs` says), or an evaluation is (as
            :func:`load_evaluations` and :func:`retrieval_tables` say).

    Example:
        >>> write_report(["runs/bq-cosent", "runs/bq-sbert"], "report")
        ['report/results.md', 'report/convergence.png', 'report/cosine_density.png']
    """
    runs = _report_runs(run_dirs, output_dir)
    reranked = load_evaluations(evaluations, runs)
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
        retrieval = retrieval_tables(runs, reranked)
        if retrieval is not None:
            write_text(os.path.join(scratch, "retrieval.md"), before + retrieval)
            made.append("retrieval.md")
            if plot_retrieval(runs, os.path.join(scratch, "retrieval.png")):
                made.append("retrieval.png")
        return _publish(scratch, made, output_dir)


def _report_runs(run_dirs: Iterable[str | os.PathLike[str]], output_dir: str) -> list[Run]:
    """The finished runs among ``run_dirs``; a ConfigError when there are none or ``output_dir`` is a file."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise ConfigError(f"{output_dir}: exists and is not a folder; give a folder for the report")
    run_dirs = list(run_dirs)
    runs = load_runs(run_dirs)
    if not runs:
        raise ConfigError(
            "no finished runs (folders with metrics.json and config.json) among: " + ", ".join(map(str, run_dirs))
        )
    return runs


def _publish(scratch: str, made: list[str], output_dir: str) -> list[str]:
    """Move the files ``made`` in ``scratch`` into ``output_dir``, each atomically; their new paths."""
    written = [os.path.join(output_dir, name) for name in made]
    for name, path in zip(made, written):
        with atomic_path(path) as tmp:
            shutil.copyfile(os.path.join(scratch, name), tmp)
    return written


# --- the calibration study ----------------------------------------------------------------------

# The calibration study's figures: the decision's (DECISION_COLUMNS), then the held-out log-loss on
# valid of the map chosen.
CALIBRATION_COLUMNS = (
    DECISION_COLUMNS[0],
    ("accuracy_one_class", "accuracy, one class", "percent"),
    *DECISION_COLUMNS[1:],
    ("held_out_log_loss", "held-out log-loss", "plain"),
)
CALIBRATION_METHOD_NAMES = {"isotonic": "isotonic regression", "platt": "Platt scaling"}
# Figures of the decision recomputed from a run's test scores must agree this closely with the ones
# its metrics.json recorded when it was tested.
RECORDED_TOLERANCE = 1e-6

# A run of the calibration study as the report holds it (see calibration_results).
CalibrationResult = dict[str, Any]


def _check_recorded(run: Run, task: str, figures: dict[str, Any]) -> None:
    """A ConfigError when ``figures``, recomputed from the run's test scores and its model's
    decision.json, disagree with those its metrics.json recorded: the decision was refitted after
    the run was tested (cosent-tf calibrate), or the files are of different runs."""
    recorded = run["metrics"]["tasks"][task]["test"]
    for key, title, style in DECISION_COLUMNS:
        if key not in recorded or key not in figures:
            continue
        if style == "text":
            differs = recorded[key] != figures[key]
        else:
            differs = not abs(float(recorded[key]) - float(figures[key])) <= RECORDED_TOLERANCE
        if differs:
            raise ConfigError(
                f"{os.path.join(run['dir'], MODEL, DECISION_FILE)}: is not the decision {run['dir']} was tested with: "
                f"its {title} on the {task} test pairs ({TEST_SCORES}) is {figures[key]}, but {METRICS} recorded "
                f"{recorded[key]}; was it refitted (cosent-tf calibrate) after training? Report the run's own "
                "decision, or train the run again"
            )


def calibration_results(runs: list[Run]) -> list[CalibrationResult]:
    """Each run's match decision measured on its own task's test pairs: the figures of
    :data:`CALIBRATION_COLUMNS`, from the run's ``test_scores.npz`` and its model's
    ``decision.json``, and the reliability curves before and after calibration.

    The figures are computed here rather than read from metrics.json, so that the table and the
    curves come from the same pairs; where metrics.json records them too, they must agree.

    Args:
        runs: runs from :func:`~cosent_tf.experiments.runs.load_runs`, each trained on a binary
            task (:data:`~cosent_tf.data.tasks.BINARY_TASKS`), one per task and model.

    Returns:
        One dict per run, by task (in table order) then model kind: ``run``, ``task``, ``model``
        (its row name: method and kind), ``kind``, ``figures`` (:func:`cosent_tf.calibration.decision_metrics`'
        keys, ``held_out_log_loss`` of the chosen map and ``constant_log_loss``, that of the best
        constant probability on the test pairs: their share of matches), ``note`` (why the
        decision has no map, or None) and ``curves`` ({name: (probabilities, 0/1 labels)}: the
        score read as a probability and, with a map, the calibrated probability). A run whose
        model has no decision.json (trained before models shipped one) has only the figures that
        need none (the oracle's and the score's ECE), and ``note`` says so.

    Raises:
        ConfigError: a run not trained on a binary task, two runs of one task and model, a
            decision.json that is damaged or another model's (as
            :func:`~cosent_tf.calibration.read_decision` says), or figures that disagree with
            the run's metrics.json (:func:`_check_recorded`).
        DataError: a run's test scores missing or damaged.

    Example:
        >>> results = calibration_results(load_runs(["runs/cosent-BQ", "runs/interact-cosent-BQ"]))
        >>> results[0]["figures"]["ece"] < results[0]["figures"]["ece_uncalibrated"]
        True
    """
    kinds = list(KINDS)
    seen: dict[tuple[str, str], str] = {}
    results = []
    for run in runs:
        task, kind = run["config"]["task"], run["config"]["kind"]
        if task not in BINARY_TASKS:
            raise ConfigError(
                f"{run['dir']}: trained on {task}; the calibration study takes runs trained on a binary task "
                f"({', '.join(BINARY_TASKS)}), whose decision was fitted on that task's valid pairs"
            )
        model = f"{run['method']} ({kind})"
        if (task, model) in seen:
            raise ConfigError(
                f"{seen[task, model]} and {run['dir']}: two runs of {model} on {task}; the study has one row per "
                "task and model, so give the report one of them"
            )
        seen[task, model] = run["dir"]
        scores, labels = run_test_scores(run, task)
        matches = np.asarray(labels) > 0.5
        model_dir = os.path.join(run["dir"], MODEL)
        decision = read_model_decision(model_dir, kind)
        figures: dict[str, Any] = decision_metrics(scores, labels, decision)
        note: Optional[str] = None
        if decision is None:
            note = f"no {DECISION_FILE} in {model_dir}: trained before models shipped a decision"
        else:
            if decision.calibration is None:
                note = decision.note or f"the decision in {model_dir} has no calibration map"
            losses = decision.held_out_log_loss or {}
            if decision.calibration is not None and decision.calibration.method in losses:
                figures["held_out_log_loss"] = float(losses[decision.calibration.method])
            _check_recorded(run, task, figures)
        figures["constant_log_loss"] = log_loss(np.full(len(matches), matches.mean()), matches)
        # what answering every pair alike scores: the bar an accuracy is worth something above
        figures["accuracy_one_class"] = majority_accuracy(matches)
        curves = reliability_curves(scores, matches, decision)
        results.append(
            {"run": run, "task": task, "model": model, "kind": kind, "figures": figures, "note": note, "curves": curves}
        )
    return sorted(results, key=lambda r: (BINARY_TASKS.index(r["task"]), kinds.index(r["kind"]), r["model"]))


def _runs_count(count: int) -> str:
    return f"{count} run" + ("" if count == 1 else "s")


def _where(result: CalibrationResult) -> str:
    return f"{result['model']} on {result['task']}"


def _by_kind(results: list[CalibrationResult], figure: Callable[[CalibrationResult], float], form: str) -> str:
    """`` (feature a, interaction b)``: the mean of ``figure`` per model kind, when there is more than one."""
    kinds = list(dict.fromkeys(r["kind"] for r in results))
    if len(kinds) < 2:
        return ""
    means = [
        f"{kind} models {format(float(np.mean([figure(r) for r in results if r['kind'] == kind])), form)}"
        for kind in kinds
    ]
    return f" ({', '.join(means)})"


def _threshold_finding(results: list[CalibrationResult], key: str, title: str) -> str | None:
    """How far ``title`` at the shipped threshold fell below the test oracle's, said of ``results``."""
    measured = [r for r in results if key in r["figures"] and f"{key}_oracle" in r["figures"]]
    if not measured:
        return None

    def gap(result: CalibrationResult) -> float:  # in points; never below 0, the oracle being the test's best
        return 100 * (result["figures"][f"{key}_oracle"] - result["figures"][key])

    widest = max(measured, key=gap)
    # matched: the two figures the table shows are equal
    matched = sum(
        _figure(r["figures"][key], "percent") == _figure(r["figures"][f"{key}_oracle"], "percent") for r in measured
    )
    reached = (
        "every one of them" if matched == len(measured) else ("none of them" if not matched else f"{matched} of them")
    )
    return (
        f"**{title[0].upper() + title[1:]} at the shipped threshold.** The threshold fitted on valid gave a test "
        f"{title} "
        f"{np.mean([gap(r) for r in measured]):.2f} points below the test-oracle threshold's on average over "
        f"{_runs_count(len(measured))}{_by_kind(measured, gap, '.2f')}, at most {gap(widest):.2f} points "
        f"({_where(widest)}); it reached the oracle's {title} on {reached}."
    )


def _one_class_finding(results: list[CalibrationResult]) -> str | None:
    """On which runs the shipped threshold's accuracy did not beat answering every pair alike."""
    measured = [r for r in results if "accuracy" in r["figures"]]
    if not measured:
        return None
    beaten = [r for r in measured if r["figures"]["accuracy"] <= r["figures"]["accuracy_one_class"]]
    if not beaten:
        return (
            "**Against one class.** On every run the shipped threshold's accuracy was above that of answering "
            "every test pair with its more common class."
        )
    oracle_gain = max(
        100 * (r["figures"]["accuracy_oracle"] - r["figures"]["accuracy_one_class"])
        for r in beaten
        if "accuracy_oracle" in r["figures"]
    )
    listed = "; ".join(
        f"{_where(r)}: {_figure(r['figures']['accuracy'], 'percent')} against "
        f"{_figure(r['figures']['accuracy_one_class'], 'percent')}"
        for r in beaten
    )
    return (
        f"**Against one class.** On {len(beaten)} of the {_runs_count(len(measured))} the shipped threshold's "
        f"accuracy was not above that of answering every test pair with its more common class ({listed}): "
        "there the scores separate the classes so little that even the test oracle's threshold gains at most "
        f"{oracle_gain:.2f} points over one class."
    )


def _calibration_finding(results: list[CalibrationResult]) -> str | None:
    """Whether calibration cut the ECE, which maps were chosen and how the log-loss compares with a constant."""
    mapped = [r for r in results if "ece" in r["figures"]]
    if not mapped:
        return None
    figures = [r["figures"] for r in mapped]
    cut = {id(r) for r in mapped if r["figures"]["ece"] < r["figures"]["ece_uncalibrated"]}
    before = float(np.mean([f["ece_uncalibrated"] for f in figures]))
    after = float(np.mean([f["ece"] for f in figures]))
    if len(cut) == len(mapped):
        every = "the one run" if len(mapped) == 1 else f"every one of the {len(mapped)} runs"
        said = f"cut the test ECE on {every} with a map"
    else:
        missed = [
            f"{_where(r)}: {r['figures']['ece_uncalibrated']:.3f} → {r['figures']['ece']:.3f}"
            for r in mapped
            if id(r) not in cut
        ]
        said = (
            f"cut the test ECE on {len(cut)} of the {_runs_count(len(mapped))} with a map, not on {'; '.join(missed)}"
        )
    kinds = list(dict.fromkeys(r["kind"] for r in mapped))
    per_kind = ""
    if len(kinds) > 1:
        means = {
            kind: [
                float(np.mean([r["figures"][key] for r in mapped if r["kind"] == kind]))
                for key in ("ece_uncalibrated", "ece")
            ]
            for kind in kinds
        }
        per_kind = " (" + ", ".join(f"{kind} models {a:.3f} → {b:.3f}" for kind, (a, b) in means.items()) + ")"
    text = (
        f"**Calibration.** The shipped map {said}; the mean ECE went from {before:.3f} (the score read as a "
        f"probability) to {after:.3f}{per_kind}."
    )
    methods = collections.Counter(r["figures"]["calibration"] for r in mapped)
    chosen = [f"{CALIBRATION_METHOD_NAMES[m]} for {_runs_count(n)}" for m, n in sorted(methods.items())]
    text += f" The held-out log-loss on valid chose {' and '.join(chosen)}."
    below = {id(r) for r in mapped if r["figures"]["log_loss"] < r["figures"]["constant_log_loss"]}
    constant = (
        "the best constant probability on the test pairs (their own share of matches, which no map fitted on "
        "valid knows)"
    )
    if len(below) == len(mapped):
        text += f" The calibrated log-loss was below that of {constant} on every run with a map."
    else:
        others = [
            f"{_where(r)}: {r['figures']['log_loss']:.3f} against {r['figures']['constant_log_loss']:.3f}"
            for r in mapped
            if id(r) not in below
        ]
        text += (
            f" The calibrated log-loss was below that of {constant} on {len(below)} of the "
            f"{_runs_count(len(mapped))}; where it was not, the probabilities told less than that constant "
            f"({'; '.join(others)})."
        )
    return text


def calibration_tables(results: list[CalibrationResult]) -> str:
    """The calibration study's table (:data:`CALIBRATION_COLUMNS`, a row per task and model) and
    the sentences computed from it: how far the shipped thresholds' accuracy and F1 fall below
    the test oracle's, whether calibration cut the ECE on every run, which maps were chosen, and
    how the calibrated log-loss compares with the best constant probability.

    Args:
        results: from :func:`calibration_results`.

    Returns:
        The markdown.

    Example:
        >>> print(calibration_tables(calibration_results(load_runs(folders))))
    """
    rows = [(r["task"] + _marks(r["run"]), r["model"], r["figures"]) for r in results]
    sections = [
        "### Match decision on each binary task's test pairs: shipped thresholds against the test oracle, "
        "calibration before and after\n\n" + _decision_rows(rows, CALIBRATION_COLUMNS),
        _decision_notes(held_out=True)
        + f"  \n{NOT_COMPARABLE} the run records itself as not comparable with published numbers (trained on a "
        "seeded part of valid, no train split being available).",
    ]
    findings = [
        _threshold_finding(results, "accuracy", "accuracy"),
        _one_class_finding(results),
        _threshold_finding(results, "f1", "F1"),
        _calibration_finding(results),
    ]
    unmapped = [r for r in results if "ece" not in r["figures"]]
    if unmapped:
        findings.append(
            f"**Without a calibration map:** {_runs_count(len(unmapped))}: "
            + "; ".join(f"{_where(r)} ({r['note']})" for r in unmapped)
            + "."
        )
    sections += [finding for finding in findings if finding]
    return "\n\n".join(sections) + "\n"


def plot_calibration(results: list[CalibrationResult], path: str) -> bool:
    """The reliability curves of each run's test pairs before and after calibration, a panel per
    task (columns) and model (rows), written to ``path`` (:func:`~.plots.plot_reliability_panels`).

    Args:
        results: from :func:`calibration_results`.
        path: the PNG to write.

    Returns:
        False (nothing drawn) for no results.

    Example:
        >>> plot_calibration(calibration_results(load_runs(folders)), "calibration.png")
    """
    panels = {(r["model"], r["task"]): r["curves"] for r in results}
    return plot_reliability_panels(panels, path)


def write_calibration_report(
    run_dirs: Iterable[str | os.PathLike[str]], output_dir: str, preface: str = ""
) -> list[str]:
    """Write the calibration study's report: calibration.md (:func:`calibration_tables`) and
    calibration.png (:func:`plot_calibration`), and nothing else.

    The study's runs are runs the paper's report reads too (the feature CoSENT run of each binary
    task is one of its rows), so a report cannot tell them apart by their settings as it tells the
    retrieval study's: the study is asked for (``scripts/report.py --calibration``), and a report
    of it leaves results.md beside it as it is. Made in a scratch folder and moved into
    ``output_dir`` only once whole.

    Args:
        run_dirs: the study's run folders, each trained on a binary task, with its model's
            decision.json; unfinished runs are left out with a warning.
        output_dir: the folder to write into (made if missing).
        preface: markdown put before the table.

    Returns:
        The written paths.

    Raises:
        ConfigError: ``output_dir`` is a file, no finished run is among ``run_dirs``, or a run is
            damaged or does not fit the study (:func:`load_runs`, :func:`calibration_results`).
        DataError: a run's test scores missing or damaged.

    Example:
        >>> write_calibration_report(["runs/cosent-BQ", "runs/interact-cosent-BQ"], "report")
        ['report/calibration.md', 'report/calibration.png']
    """
    runs = _report_runs(run_dirs, output_dir)
    results = calibration_results(runs)
    before = preface + "\n\n" if preface else ""
    with tempfile.TemporaryDirectory(prefix="cosent-report-") as scratch:
        write_text(os.path.join(scratch, "calibration.md"), before + calibration_tables(results))
        made = ["calibration.md"]
        if plot_calibration(results, os.path.join(scratch, "calibration.png")):
            made.append("calibration.png")
        return _publish(scratch, made, output_dir)
