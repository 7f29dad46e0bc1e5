import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from cosent_tf.calibration import decision_metrics, fit_decision, write_decision
from cosent_tf.data.tasks import BINARY_TASKS
from cosent_tf.errors import ConfigError
from cosent_tf.experiments.report import (
    RETRIEVAL_METRICS,
    calibration_results,
    calibration_tables,
    retrieval_study_runs,
    retrieval_tables,
    tables,
    write_calibration_report,
    write_report,
)
from cosent_tf.experiments.runs import KIND_STUDIES, STUDIES, load_runs
from cosent_tf.models.kinds import KINDS
from tests.helpers import ROOT


def fake_run(
    folder,
    task,
    kind,
    loss,
    spearmans,
    accuracy=None,
    comparable=True,
    steps=(10, 20),
    history=None,
    retrieval=None,
    decision=None,
    **config,
):
    """A finished run folder as the engine writes it; ``history``: (step, valid Spearman) rows;
    ``retrieval``: {task: test retrieval metrics}; ``decision``: {task: the test figures of its
    match decision}."""
    os.makedirs(folder)
    # train_file null, as every run on a benchmark task writes it
    config = {"task": task, "kind": kind, "loss": loss, "model": "bert", "epsilon": 0.5, "train_file": None, **config}
    tasks = {}
    for name, value in spearmans.items():
        test = {"spearman": value, "pearson": value}
        if accuracy is not None:
            test.update(accuracy=accuracy, threshold=0.5)
        if retrieval and name in retrieval:
            test["retrieval"] = {**retrieval[name], "queries": 10, "corpus": 20}
        if decision and name in decision:
            test.update(decision[name])
        tasks[name] = {"valid": {"spearman": value}, "test": test}
    metrics = {
        "task": task,
        "kind": kind,
        "loss": loss,
        "comparable": comparable,
        "tasks": tasks,
        "test": {"spearman": float(np.mean(list(spearmans.values())))},
    }
    with open(os.path.join(folder, "metrics.json"), "w") as f:
        json.dump(metrics, f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    history = history or [(step, 0.1 * (i + 1)) for i, step in enumerate(steps)]
    rows = ["epoch,step,end_of_epoch,spearman"] + [f"1,{step},False,{value}" for step, value in history]
    with open(os.path.join(folder, "valid_metrics.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")
    rng = np.random.default_rng(0)
    scores = {f"{name}.scores": rng.uniform(-1, 1, 50) for name in spearmans}
    scores.update({f"{name}.labels": rng.integers(0, 2, 50).astype(float) for name in spearmans})
    np.savez(os.path.join(folder, "test_scores.npz"), **scores)
    return str(folder)


def section_rows(text, after, start="|"):
    """The lines starting with ``start`` of the section that follows ``after`` (up to the next ###)."""
    return [line for line in text.split(after)[1].split("###")[0].splitlines() if line.startswith(start)]


def test_tables_follow_the_published_layout(tmp_path):
    runs = [
        fake_run(tmp_path / "a", "BQ", "feature", "cosent", {"BQ": 0.7}, accuracy=0.8),
        fake_run(tmp_path / "b", "STS-B", "feature", "cosent", {"STS-B": 0.6}),
        fake_run(tmp_path / "c", "BQ", "feature", "sbert", {"BQ": 0.5}),
        fake_run(tmp_path / "d", "LCQMC", "interaction", "ce", {"LCQMC": 0.4}, accuracy=0.7, comparable=False),
        fake_run(
            tmp_path / "e",
            "NLI",
            "feature",
            "cosent",
            {t: 0.1 * (i + 1) for i, t in enumerate(["ATEC", "BQ", "LCQMC", "PAWSX", "STS-B"])},
        ),
    ]
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "config.json").write_text(json.dumps({"task": "BQ", "kind": "feature", "loss": "mse"}))
    text = tables(load_runs(runs + [str(tmp_path / "unfinished")]))  # left out, with a warning
    assert "| method | ATEC | BQ | LCQMC | PAWSX | STS-B | Avg |" in text
    assert "| BERT + CoSENT | – | 70.00 | – | – | 60.00 | 65.00* |" in text
    assert "| BERT + Sentence-BERT | – | 50.00 | – | – | – | 50.00* |" in text
    assert "| BERT + CoSENT | 10.00 | 20.00 | 30.00 | 40.00 | 50.00 | 30.00 |" in text  # the NLI table
    assert "| BERT + CE | – | – | 40.00† | – | 40.00* |" in text
    assert "| BERT + CE (interaction) | – | – | 70.00† | – | 70.00* |" in text
    assert "| BERT + CoSENT (feature) | – | 80.00 | – | – | 80.00* |" in text


def test_report_writes_tables_and_plots(tmp_path):
    runs = [
        fake_run(tmp_path / "a", "BQ", "feature", "cosent", {"BQ": 0.7}),
        fake_run(tmp_path / "b", "BQ", "feature", "mse", {"BQ": 0.6}),
    ]
    written = write_report(runs, str(tmp_path / "out"), preface="Random init.")
    assert [os.path.basename(p) for p in written] == ["results.md", "convergence.png", "cosine_density.png"]
    assert (tmp_path / "out" / "results.md").read_text().startswith("Random init.")
    for name in ("convergence.png", "cosine_density.png"):
        assert (tmp_path / "out" / name).read_bytes()[:4] == b"\x89PNG"
    (tmp_path / "nothing").mkdir()
    with pytest.raises(ValueError, match="no finished runs"):
        write_report([str(tmp_path / "nothing")], str(tmp_path / "out2"))
    assert not (tmp_path / "out2").exists()


def test_table_one_sorts_the_contrastive_runs_by_epsilon_next_to_cosent(tmp_path):
    runs = [fake_run(tmp_path / "cosent", "ATEC", "feature", "cosent", {"ATEC": 0.3}, accuracy=0.8)]
    for epsilon, value in ((0.9, 0.25), (-1.0, 0.05), (0.0, 0.2)):
        runs.append(
            fake_run(tmp_path / f"eps{epsilon}", "ATEC", "feature", "contrastive", {"ATEC": value}, epsilon=epsilon)
        )
    text = tables(load_runs(runs))
    assert section_rows(text, "Table I", "| BERT") == [
        "| BERT + Contrastive (ε=-1) | 5.00 |",
        "| BERT + Contrastive (ε=0) | 20.00 |",
        "| BERT + Contrastive (ε=0.9) | 25.00 |",
        "| BERT + CoSENT | 30.00 |",
    ]
    # The ε runs are in Table I only: not among the per-task rows, nor in the accuracy table.
    per_task = text.split("### Feature models trained on each task")[1].split("###")[0]
    assert "Contrastive" not in per_task
    assert "Contrastive" not in text.split("at the threshold tuned on valid")[1].split("###")[0]


def test_pooling_table_has_a_row_per_pooling_and_the_main_table_keeps_the_usual_one(tmp_path):
    runs = [
        fake_run(tmp_path / "cls-bq", "BQ", "feature", "cosent", {"BQ": 0.7}, pooling="cls"),
        fake_run(tmp_path / "cls-sts", "STS-B", "feature", "cosent", {"STS-B": 0.6}, pooling="cls"),
        fake_run(tmp_path / "mse-bq", "BQ", "feature", "mse", {"BQ": 0.65}, pooling="cls"),
        fake_run(tmp_path / "mean-bq", "BQ", "feature", "cosent", {"BQ": 0.5}, pooling="last-avg"),
        fake_run(tmp_path / "mean-sts", "STS-B", "feature", "cosent", {"STS-B": 0.4}, pooling="last-avg"),
        fake_run(tmp_path / "max-sts", "STS-B", "feature", "cosent", {"STS-B": 0.3}, pooling="max"),
    ]
    text = tables(load_runs(runs))
    assert "### Feature models trained on each task (CLS pooling)" in text
    assert "| BERT + CoSENT | – | 70.00 | – | – | 60.00 | 65.00* |" in text
    assert section_rows(text, "pooling comparison") == [
        "| method | BQ | STS-B | Avg |",
        "|---|---|---|---|",
        "| CLS (cls) | 70.00 | 60.00 | 65.00 |",
        "| mean (last-avg) | 50.00 | 40.00 | 45.00 |",
        "| max (max) | – | 30.00 | 30.00* |",
    ]


def test_convergence_counts_steps_to_the_runs_own_best_and_cosents_steps_to_each_best(tmp_path):
    def run(loss, history):
        return fake_run(tmp_path / loss, "BQ", "feature", loss, {"BQ": history[-1][1]}, history=history)

    runs = [
        run("cosent", [(10, 0.30), (20, 0.62), (30, 0.65), (40, 0.60)]),
        run("mse", [(10, 0.20), (20, 0.30), (30, 0.37), (40, 0.40)]),
        run("sbert", [(10, -0.2), (20, -0.1)]),
        run("contrastive", [(10, 0.7), (20, 0.9)]),  # Table I's, not compared here
    ]
    text = tables(load_runs(runs)).split("### Convergence")[1]
    own, versus = text.split("steps CoSENT took to reach the same value")
    # 90% of the own best: CoSENT 0.585 (step 20), MSE 0.36 (0.37 at step 30); a best below 0 has no target.
    assert "| BERT + CoSENT | 20 |" in own and "| BERT + MSE | 30 |" in own
    assert "| BERT + Sentence-BERT | – |" in own
    # MSE's best, 0.40, took it 40 steps and CoSENT 20; Sentence-BERT's, -0.1, CoSENT had at step 10.
    assert "| BERT + MSE | 40 / 20 |" in versus and "| BERT + Sentence-BERT | 20 / 10 |" in versus
    assert "CoSENT |" not in versus and "Contrastive" not in text


def test_convergence_says_when_cosent_never_reaches_a_methods_best(tmp_path):
    runs = [
        fake_run(tmp_path / "cosent", "BQ", "feature", "cosent", {"BQ": 0.3}, history=[(10, 0.2), (20, 0.3)]),
        fake_run(tmp_path / "mse", "BQ", "feature", "mse", {"BQ": 0.6}, history=[(10, 0.2), (20, 0.3), (30, 0.4)]),
    ]
    versus = tables(load_runs(runs)).split("steps CoSENT took to reach the same value")[1]
    assert "| BERT + MSE | 30 / – |" in versus


def test_report_draws_the_epsilon_sweep(tmp_path):
    runs = [
        fake_run(tmp_path / "cosent", "ATEC", "feature", "cosent", {"ATEC": 0.3}),
        fake_run(tmp_path / "eps", "ATEC", "feature", "contrastive", {"ATEC": 0.1}, epsilon=-1.0),
    ]
    written = write_report(runs, str(tmp_path / "out"))
    assert [os.path.basename(p) for p in written] == [
        "results.md",
        "convergence.png",
        "cosine_density.png",
        "epsilon_density.png",
    ]
    assert (tmp_path / "out" / "epsilon_density.png").read_bytes()[:4] == b"\x89PNG"


def test_batch_size_study_has_its_own_table_and_plot(tmp_path):
    runs = []
    for size, micro, value in ((32, None, 0.5), (128, 32, 0.45), (512, 32, 0.3)):
        for task, shift in (("BQ", 0.0), ("STS-B", 0.1)):
            runs.append(
                fake_run(
                    tmp_path / f"{size}-{task}",
                    task,
                    "feature",
                    "cosent",
                    {task: value + shift},
                    batch_size=size,
                    micro_batch_size=micro,
                )
            )
    runs.append(fake_run(tmp_path / "mse", "BQ", "feature", "mse", {"BQ": 0.2}, batch_size=32))
    text = tables(load_runs(runs))
    # 32 pairs is the usual batch size (most runs), so the main table holds those runs only
    assert "### Feature models trained on each task (CLS pooling, 32 pairs a batch)" in text
    assert "| BERT + CoSENT | – | 50.00 | – | – | 60.00 | 55.00* |" in text
    assert section_rows(text, "several global batch sizes", "| ")[1:] == [
        "| 32 pairs | 50.00 | 60.00 | 55.00 |",
        "| 128 pairs (micro-batches of 32) | 45.00 | 55.00 | 50.00 |",
        "| 512 pairs (micro-batches of 32) | 30.00 | 40.00 | 35.00 |",
    ]
    written = write_report(runs, str(tmp_path / "out"))
    assert "batch_size.png" in [os.path.basename(p) for p in written]


def test_convergence_is_compared_at_each_pooling_that_has_several_losses(tmp_path):
    def run(name, loss, pooling, values):
        history = [(10 * (i + 1), v) for i, v in enumerate(values)]
        return fake_run(tmp_path / name, "BQ", "feature", loss, {"BQ": values[-1]}, history=history, pooling=pooling)

    runs = [
        run("cosent-cls", "cosent", "cls", [0.3, 0.2]),
        run("mse-cls", "mse", "cls", [0.3, 0.25]),
        run("sbert-cls", "sbert", "cls", [0.3, 0.1]),
        run("cosent-mean", "cosent", "last-avg", [0.2, 0.4, 0.5]),
        run("mse-mean", "mse", "last-avg", [0.1, 0.2, 0.4]),
        run("cosent-max", "cosent", "max", [0.1, 0.2]),  # one loss at max pooling: nothing to compare
    ]
    text = tables(load_runs(runs))
    assert "Convergence of the feature models trained on each task, CLS pooling" in text
    mean = text.split("Convergence of the feature models trained on each task, mean pooling")[1]
    # own best: CoSENT 0.45 first at step 30, MSE 0.36 at step 30; MSE's best 0.4: 30 steps, CoSENT 20
    own, versus = mean.split("steps CoSENT took to reach the same value")
    assert own.count("| 30 |") == 2 and "| BERT + MSE | 30 / 20 |" in versus
    assert "max pooling" not in text
    mean_results = text.split("Feature models trained on each task, mean pooling: test Spearman × 100")[1]
    assert "| BERT + CoSENT | 50.00 | 50.00 |\n| BERT + MSE | 40.00 | 40.00 |" in mean_results.split("###")[0]
    written = [os.path.basename(p) for p in write_report(runs, str(tmp_path / "out"))]
    assert "convergence-last-avg.png" in written and "convergence-max.png" not in written


def test_table_one_sets_cosent_at_the_pooling_of_the_contrastive_runs(tmp_path):
    runs = [
        fake_run(tmp_path / "cls", "ATEC", "feature", "cosent", {"ATEC": 0.2}, pooling="cls"),
        fake_run(tmp_path / "mse", "ATEC", "feature", "mse", {"ATEC": 0.1}, pooling="cls"),
        fake_run(tmp_path / "mean", "ATEC", "feature", "cosent", {"ATEC": 0.4}, pooling="last-avg"),
        fake_run(tmp_path / "eps", "ATEC", "feature", "contrastive", {"ATEC": 0.3}, pooling="last-avg", epsilon=0.9),
    ]
    assert section_rows(tables(load_runs(runs)), "Table I; mean pooling): test Spearman × 100", "| BERT") == [
        "| BERT + Contrastive (ε=0.9) | 30.00 |",
        "| BERT + CoSENT | 40.00 |",
    ]


def test_every_model_kind_has_a_study_or_is_grouped_by_its_settings():
    assert set(KIND_STUDIES) == set(KINDS)
    assert {study for study in KIND_STUDIES.values() if study is not None} <= set(STUDIES)


# The retrieval study: (loss, extra settings, row name) of each run, as reproduce_small.sh trains them.
STUDY = (
    ("cosent", {}, "BERT + CoSENT"),
    ("mnrl", {"hard_negatives_from_labels": False}, "BERT + MNRL"),
    ("mnrl", {"hard_negatives_from_labels": True}, "BERT + MNRL (hard negatives from labels)"),
    ("angle", {}, "BERT + AnglE"),
    ("cosent-ibn", {"cosine_weight": 0.0, "ibn_weight": 20.0, "angle_weight": 1.0}, "BERT + CoSENT + IBN + AnglE"),
)


def study_values(number, task_number):
    """Distinct test Spearman and retrieval metrics for the study's run ``number`` on a task."""
    spearman = 0.6 - 0.1 * number + 0.01 * task_number  # CoSENT has the best Spearman
    metrics = {key: 0.1 + 0.05 * number + 0.01 * task_number + 0.001 * i for i, key in enumerate(RETRIEVAL_METRICS)}
    return spearman, metrics


def study_runs(folder, tasks=("BQ", "STS-B"), pooling="last-avg", **settings):
    runs = []
    for number, (loss, extra, _) in enumerate(STUDY):
        for task_number, task in enumerate(tasks):
            spearman, metrics = study_values(number, task_number)
            name = f"retrieval-{number}-{task}"
            runs.append(
                fake_run(
                    folder / name,
                    task,
                    "feature",
                    loss,
                    {task: spearman},
                    retrieval={task: metrics},
                    pooling=pooling,
                    **extra,
                    **settings,
                )
            )
    return runs


def test_retrieval_tables_take_each_cell_from_the_runs_and_say_which_loss_led(tmp_path):
    tasks = ("BQ", "STS-B")
    text = retrieval_tables(load_runs(study_runs(tmp_path)))
    titles = {"spearman": "test Spearman", **RETRIEVAL_METRICS}
    for key, title in titles.items():
        rows = section_rows(text.split("trained on each task (mean pooling)")[1], f"#### {title}\n", "| BERT")
        assert len(rows) == len(STUDY)
        for number, (row, (_, _, name)) in enumerate(zip(rows, STUDY)):
            values = [
                study_values(number, t)[0] if key == "spearman" else study_values(number, t)[1][key] for t in range(2)
            ]
            cells = [f"{100 * v:.2f}" for v in values] + [f"{100 * np.mean(values):.2f}"]
            assert row == f"| {name} | " + " | ".join(cells) + " |"
    assert "| method | " + " | ".join(tasks) + " | Avg |" in text
    # CoSENT has the best Spearman and the mix (the last row) the best retrieval metrics
    leaders = text.split("Which loss led on average:")[1]
    assert "- test Spearman: BERT + CoSENT," in leaders
    for title in RETRIEVAL_METRICS.values():
        assert f"- {title}: BERT + CoSENT + IBN + AnglE," in leaders
    assert "BERT + CoSENT led on test Spearman but BERT + CoSENT + IBN + AnglE on MRR@10" in leaders


def test_retrieval_tables_name_the_loss_that_leads_from_the_runs_not_the_order(tmp_path):
    runs = study_runs(tmp_path, tasks=("BQ",))
    # MNRL (the second run) now has the best MRR@10 and Spearman
    with open(os.path.join(runs[1], "metrics.json")) as f:
        metrics = json.load(f)
    metrics["tasks"]["BQ"]["test"]["retrieval"]["mrr@10"] = 0.9
    metrics["tasks"]["BQ"]["test"]["spearman"] = 0.95
    with open(os.path.join(runs[1], "metrics.json"), "w") as f:
        json.dump(metrics, f)
    leaders = retrieval_tables(load_runs(runs)).split("Which loss led on average:")[1]
    assert "- MRR@10: BERT + MNRL, 90.00" in leaders and "- test Spearman: BERT + MNRL, 95.00" in leaders
    assert "BERT + MNRL led on both test Spearman and MRR@10." in leaders


def test_a_metric_a_run_lacks_is_a_dash_and_ties_are_said(tmp_path):
    runs = [
        fake_run(tmp_path / "cosent", "BQ", "feature", "cosent", {"BQ": 0.5}),  # recorded before retrieval metrics
        fake_run(tmp_path / "mnrl", "BQ", "feature", "mnrl", {"BQ": 0.5}, retrieval={"BQ": {"mrr@10": 0.3}}),
        fake_run(tmp_path / "angle", "BQ", "feature", "angle", {"BQ": 0.2}, retrieval={"BQ": {"mrr@10": 0.3}}),
    ]
    text = retrieval_tables(load_runs(runs))
    assert section_rows(text, "#### MRR@10\n", "| BERT") == [
        "| BERT + CoSENT | – | –* |",
        "| BERT + MNRL | 30.00 | 30.00 |",
        "| BERT + AnglE | 30.00 | 30.00 |",
    ]
    leaders = text.split("Which loss led on average:")[1]
    assert "- test Spearman: BERT + CoSENT and BERT + MNRL (tied), 50.00 on average over BQ" in leaders
    assert "- MRR@10: no task has it recorded for every loss" in leaders
    assert "led on both" not in leaders and "led on test Spearman but" not in leaders


def test_a_tie_of_every_loss_is_said_so(tmp_path):
    runs = [
        fake_run(tmp_path / loss, "BQ", "feature", loss, {"BQ": 0.4}, retrieval={"BQ": {"recall@10": 1.0}})
        for loss in ("cosent", "mnrl", "angle")
    ]
    leaders = retrieval_tables(load_runs(runs)).split("Which loss led on average:")[1]
    assert "- test Spearman: every loss, tied, 40.00 on average over BQ" in leaders
    assert "- Recall@10: every loss, tied, 100.00 on average over BQ" in leaders


def test_runs_trained_on_nli_get_tables_of_their_own(tmp_path):
    runs = []
    for number, (loss, extra, _) in enumerate(STUDY[:2]):
        values = {task: study_values(number, t) for t, task in enumerate(("BQ", "LCQMC"))}
        spearmans = {task: v[0] for task, v in values.items()}
        retrieval = {task: v[1] for task, v in values.items()}
        runs.append(fake_run(tmp_path / loss, "NLI", "feature", loss, spearmans, retrieval=retrieval, **extra))
    text = retrieval_tables(load_runs(runs))
    assert "trained on each task" not in text
    rows = section_rows(text.split("trained on NLI (CLS pooling)")[1], "#### MRR@10\n", "| BERT")
    mrr = [[study_values(n, t)[1]["mrr@10"] for t in range(2)] for n in range(2)]
    assert rows == [
        f"| {name} | {100 * a:.2f} | {100 * b:.2f} | {100 * (a + b) / 2:.2f} |"
        for (_, _, name), (a, b) in zip(STUDY, mrr)
    ]


def test_a_report_of_the_study_alone_writes_its_files_and_leaves_results_md(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.md").write_text("the paper's tables")
    written = write_report(study_runs(tmp_path / "runs"), str(out), preface="The study.")
    assert [os.path.basename(p) for p in written] == ["retrieval.md", "retrieval.png"]
    assert (
        (out / "retrieval.md")
        .read_text()
        .startswith("The study.\n\n### Retrieval study: feature models trained on each task")
    )
    assert (out / "retrieval.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "results.md").read_text() == "the paper's tables"


def test_without_retrieval_objectives_there_is_no_retrieval_section(tmp_path):
    runs = [fake_run(tmp_path / "cosent", "BQ", "feature", "cosent", {"BQ": 0.5}, retrieval={"BQ": {"mrr@10": 0.2}})]
    assert retrieval_tables(load_runs(runs)) is None
    written = [os.path.basename(p) for p in write_report(runs, str(tmp_path / "out"))]
    assert "retrieval.md" not in written and "retrieval.png" not in written


def test_the_study_next_to_the_papers_runs_compares_the_cosent_run_trained_as_it_was(tmp_path):
    study = study_runs(tmp_path / "study", tasks=("BQ",), eval_every=0)
    paper = [
        fake_run(
            tmp_path / "cosent-last-avg-BQ", "BQ", "feature", "cosent", {"BQ": 0.1}, pooling="last-avg", eval_every=10
        ),
        fake_run(tmp_path / "mse-last-avg-BQ", "BQ", "feature", "mse", {"BQ": 0.2}, pooling="last-avg", eval_every=10),
    ]
    runs = load_runs(paper + study)
    chosen = [run["dir"] for run in retrieval_study_runs(runs)]
    assert chosen == study  # the study's own CoSENT run (no --eval-every), not the paper's
    text = tables(runs)
    assert "MNRL" not in text and "AnglE" not in text  # the objectives are the study's only
    written = [os.path.basename(p) for p in write_report(paper + study, str(tmp_path / "out"))]
    assert written[0] == "results.md" and written[-2:] == ["retrieval.md", "retrieval.png"]


def test_two_cosent_runs_that_fit_the_study_equally_are_refused(tmp_path):
    runs = study_runs(tmp_path / "study", tasks=("BQ",))
    runs.append(fake_run(tmp_path / "twin", "BQ", "feature", "cosent", {"BQ": 0.3}, pooling="last-avg"))
    with pytest.raises(ConfigError, match="two CoSENT runs on BQ at last-avg pooling fit the retrieval study"):
        retrieval_study_runs(load_runs(runs))


def test_a_retrieval_metric_out_of_range_names_the_file_and_field(tmp_path):
    runs = study_runs(tmp_path, tasks=("BQ",))
    path = os.path.join(runs[1], "metrics.json")
    with open(path) as f:
        metrics = json.load(f)
    metrics["tasks"]["BQ"]["test"]["retrieval"]["recall@1"] = 1.5
    with open(path, "w") as f:
        json.dump(metrics, f)
    with pytest.raises(
        ConfigError, match=r"metrics\.json: tasks\['BQ'\]\['test'\]\['retrieval'\]\['recall@1'\] is 1\.5"
    ):
        retrieval_tables(load_runs(runs))


# The match decision each model ships (issue 38): its figures in results.md, and the calibration study.
DECIDED = {
    "accuracy": 0.71,
    "threshold": 0.93,
    "accuracy_oracle": 0.74,
    "f1": 0.62,
    "f1_oracle": 0.655,
    "ece_uncalibrated": 0.4321,
    "ece": 0.0456,
    "log_loss": 0.5987,
    "brier": 0.2012,
    "calibration": "isotonic",
}


def test_the_decision_table_shows_each_runs_figures_and_a_dash_for_a_run_from_before(tmp_path):
    no_map = {key: value for key, value in DECIDED.items() if key not in ("ece", "log_loss", "brier", "calibration")}
    runs = [
        fake_run(tmp_path / "cosent", "BQ", "feature", "cosent", {"BQ": 0.7}, accuracy=0.71, decision={"BQ": DECIDED}),
        fake_run(tmp_path / "old", "BQ", "feature", "mse", {"BQ": 0.6}, accuracy=0.65),  # before decisions
        fake_run(
            tmp_path / "interact",
            "LCQMC",
            "interaction",
            "cosent",
            {"LCQMC": 0.4},
            comparable=False,
            decision={"LCQMC": no_map},
        ),
        fake_run(tmp_path / "sts", "STS-B", "feature", "cosent", {"STS-B": 0.6}),  # graded: no row
    ]
    text = tables(load_runs(runs))
    assert section_rows(text, "Match decision shipped with each model") == [
        "| task | model | accuracy | accuracy, oracle | F1 | F1, oracle | ECE of the score | ECE calibrated | log-loss "
        "| Brier | map |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        "| BQ | BERT + CoSENT (feature) | 71.00 | 74.00 | 62.00 | 65.50 | 0.432 | 0.046 | 0.599 | 0.201 | isotonic |",
        "| BQ | BERT + MSE (feature) | 65.00 | – | – | – | – | – | – | – | – |",
        "| LCQMC† | BERT + CoSENT (interaction) | 71.00 | 74.00 | 62.00 | 65.50 | 0.432 | – | – | – | – |",
    ]
    assert "– not recorded: a run trained before models shipped a decision" in text
    # runs that all predate decisions: the accuracy table only, no table of dashes
    assert "Match decision" not in tables(load_runs(runs[1:2]))


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("ece", 1.5, r"tasks\['BQ'\]\['test'\]\['ece'\] is 1\.5, outside 0 to 1"),
        ("log_loss", -0.1, r"tasks\['BQ'\]\['test'\]\['log_loss'\] is -0\.1, outside 0 to inf"),
        (
            "f1_oracle",
            "high",
            r"tasks\['BQ'\]\['test'\]\['f1_oracle'\] must be a JSON integer or number or null, not string",
        ),
        (
            "calibration",
            "sigmoid",
            r"tasks\['BQ'\]\['test'\]\['calibration'\] is 'sigmoid', not one of isotonic, platt",
        ),
    ],
)
def test_a_damaged_decision_figure_names_the_file_and_field(tmp_path, key, value, message):
    run = fake_run(
        tmp_path / "cosent", "BQ", "feature", "cosent", {"BQ": 0.7}, decision={"BQ": {**DECIDED, key: value}}
    )
    with pytest.raises(ConfigError, match=r"metrics\.json: " + message):
        load_runs([run])


def brute_best(scores, labels, measure):
    """The best ``measure`` (accuracy or F1 of ``score > t``) over every threshold that splits the
    scores differently: below them all, or at each score."""
    candidates = [scores.min() - 1.0, *np.unique(scores)]
    return max(measure(scores > t, labels) for t in candidates)


def brute_accuracy(predicted, labels):
    return sum(int(p == bool(y)) for p, y in zip(predicted, labels)) / len(labels)


def brute_f1(predicted, labels):
    true_positives = sum(int(p and y) for p, y in zip(predicted, labels))
    called, actual = int(np.sum(predicted)), int(np.sum(labels))
    return 2 * true_positives / (called + actual) if called + actual else 0.0


def brute_ece(probabilities, labels, bins=10):
    total = 0.0
    for i in range(bins):
        low, high = i / bins, (i + 1) / bins
        inside = (probabilities >= low) & ((probabilities < high) if i < bins - 1 else (probabilities <= high))
        if inside.any():
            total += inside.sum() * abs(labels[inside].mean() - probabilities[inside].mean())
    return total / len(labels)


def brute_log_loss(probabilities, labels):
    p = np.clip(probabilities, 1e-15, 1 - 1e-15)
    return float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))


def decision_run(folder, task, kind, scores, labels, decision, record=True):
    """A finished CoSENT run of ``task`` whose test pairs are (``scores``, ``labels``) and whose
    model ships ``decision`` (None: no decision.json, a run from before decisions); ``record``: its
    metrics.json holds the decision's test figures, as training writes them."""
    recorded = decision_metrics(scores, labels, decision) if record and decision is not None else None
    fake_run(folder, task, kind, "cosent", {task: 0.5}, decision={task: recorded} if recorded else None)
    np.savez(os.path.join(folder, "test_scores.npz"), **{f"{task}.scores": scores, f"{task}.labels": labels})
    if decision is not None:
        os.makedirs(os.path.join(folder, "model"))
        write_decision(os.path.join(folder, "model"), decision)
    return str(folder)


def calibration_study(tmp_path):
    """Runs whose findings are known by construction, with their test pairs and decisions:

    - feature, ATEC: cosines near 1 (0.85 to 1) whatever the pair, half of them matches, the
      decision fitted on valid pairs drawn alike: calibration cuts the ECE;
    - interaction, ATEC: scores that are already probabilities, a decision whose thresholds are
      the test pairs' own best and whose map says 0.99 for every pair: calibration raises the ECE
      and does worse than a constant;
    - feature, BQ: a decision fitted on 30 valid pairs, too few for a map;
    - interaction, BQ: a run from before decisions (no decision.json).
    """
    from scipy import special

    from cosent_tf.calibration import MatchDecision, ScoreMap, best_f1_threshold, best_threshold

    rng = np.random.default_rng(7)

    def near_one(count):
        scores = rng.uniform(0.85, 1.0, count)
        return scores.astype(np.float32), (rng.random(count) < (scores - 0.85) / 0.15).astype(np.float32)

    valid, test = near_one(400), near_one(300)
    fitted = fit_decision(*valid, file="ATEC.valid.data")
    probability_scores = rng.uniform(0, 1, 300).astype(np.float32)
    probability_labels = (rng.random(300) < probability_scores).astype(np.float32)
    constant = MatchDecision(
        fitted_on={"file": "ATEC.valid.data", "pairs": 400, "labels": "binary"},
        thresholds={
            "accuracy": best_threshold(probability_scores, probability_labels)[0],
            "f1": best_f1_threshold(probability_scores, probability_labels)[0],
        },
        calibration=ScoreMap("platt", slope=0.0, intercept=float(special.logit(0.99))),
        held_out_log_loss={"isotonic": 0.71, "platt": 0.64},
        score="head",
    )
    small_valid, bq_test = near_one(30), near_one(200)
    no_map = fit_decision(*small_valid, file="BQ.valid.data", require_calibration=False)
    tests = {"feature-ATEC": test, "interaction-ATEC": (probability_scores, probability_labels)}
    tests.update({"feature-BQ": bq_test, "interaction-BQ": near_one(200)})
    decisions = {"feature-ATEC": fitted, "interaction-ATEC": constant, "feature-BQ": no_map, "interaction-BQ": None}
    # given out of table order: the report sorts them by task, then kind
    runs = [
        decision_run(tmp_path / name, name.split("-")[1], name.split("-")[0], *tests[name], decisions[name])
        for name in ("interaction-BQ", "interaction-ATEC", "feature-BQ", "feature-ATEC")
    ]
    return runs, tests, decisions


def expected_figures(scores, labels, decision):
    """The study's figures of a run, computed by brute force."""
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    figures = {
        "accuracy_oracle": brute_best(scores, labels, brute_accuracy),
        "f1_oracle": brute_best(scores, labels, brute_f1),
        "ece_uncalibrated": brute_ece(np.clip(scores, 0, 1), labels),
        "constant_log_loss": brute_log_loss(np.full(len(labels), labels.mean()), labels),
        "accuracy_one_class": max(labels.mean(), 1 - labels.mean()),
    }
    if decision is not None:
        figures["accuracy"] = brute_accuracy(scores > decision.thresholds["accuracy"], labels)
        figures["f1"] = brute_f1(scores > decision.thresholds["f1"], labels)
    if decision is not None and decision.calibration is not None:
        probabilities = decision.calibration(scores)
        figures.update(
            ece=brute_ece(probabilities, labels),
            log_loss=brute_log_loss(probabilities, labels),
            brier=float(np.mean((probabilities - labels) ** 2)),
            held_out_log_loss=decision.held_out_log_loss[decision.calibration.method],
            calibration=decision.calibration.method,
        )
    return figures


def test_calibration_results_match_a_brute_force_reckoning_of_each_runs_test_pairs(tmp_path):
    runs, tests, decisions = calibration_study(tmp_path)
    results = calibration_results(load_runs(runs))
    assert [(r["task"], r["kind"]) for r in results] == [
        ("ATEC", "feature"),
        ("ATEC", "interaction"),
        ("BQ", "feature"),
        ("BQ", "interaction"),
    ]
    for result in results:
        name = f"{result['kind']}-{result['task']}"
        expected = expected_figures(*tests[name], decisions[name])
        shown = {key: value for key, value in result["figures"].items() if key in expected}
        assert shown.keys() == expected.keys(), name
        for key, value in expected.items():
            assert shown[key] == (value if isinstance(value, str) else pytest.approx(value, abs=1e-9)), (name, key)
        probabilities = result["curves"]["score read as a probability"][0]
        np.testing.assert_allclose(probabilities, np.clip(tests[name][0], 0, 1))
    assert "calibrated (platt)" in results[1]["curves"] and len(results[2]["curves"]) == 1
    assert "30 pairs" in results[2]["note"] and "no decision.json" in results[3]["note"]


def test_calibration_tables_say_what_the_figures_show(tmp_path):
    runs, tests, decisions = calibration_study(tmp_path)
    text = calibration_tables(calibration_results(load_runs(runs)))
    figures = {name: expected_figures(*tests[name], decisions[name]) for name in tests}
    rows = section_rows(text, "calibration before and after")
    assert rows[0].startswith("| task | model | accuracy | accuracy, one class | accuracy, oracle |") and rows[
        0
    ].endswith("| map | held-out log-loss |")
    f = figures["feature-ATEC"]
    assert rows[2] == (
        f"| ATEC | BERT + CoSENT (feature) | {100 * f['accuracy']:.2f} | {100 * f['accuracy_one_class']:.2f} | "
        f"{100 * f['accuracy_oracle']:.2f} | "
        f"{100 * f['f1']:.2f} | {100 * f['f1_oracle']:.2f} | {f['ece_uncalibrated']:.3f} | {f['ece']:.3f} | "
        f"{f['log_loss']:.3f} | {f['brier']:.3f} | {f['calibration']} | {f['held_out_log_loss']:.3f} |"
    )
    f = figures["interaction-BQ"]
    assert rows[5] == (
        f"| BQ | BERT + CoSENT (interaction) | – | {100 * f['accuracy_one_class']:.2f} | "
        f"{100 * f['accuracy_oracle']:.2f} | – | {100 * f['f1_oracle']:.2f} | "
        f"{f['ece_uncalibrated']:.3f} | – | – | – | – | – |"
    )
    # the shipped thresholds against the oracle's, over the three runs with a decision
    decided = ("feature-ATEC", "interaction-ATEC", "feature-BQ")
    gaps = {name: 100 * (figures[name]["accuracy_oracle"] - figures[name]["accuracy"]) for name in decided}
    assert gaps["interaction-ATEC"] == 0 and gaps["feature-ATEC"] > 0 and gaps["feature-BQ"] > 0
    widest = max(gaps, key=gaps.get)
    kind, task = widest.split("-")
    feature_mean = (gaps["feature-ATEC"] + gaps["feature-BQ"]) / 2
    assert (
        f"The threshold fitted on valid gave a test accuracy {np.mean(list(gaps.values())):.2f} points below the "
        f"test-oracle threshold's on average over 3 runs (feature models {feature_mean:.2f}, interaction models "
        f"0.00), at most {gaps[widest]:.2f} points (BERT + CoSENT ({kind}) on {task}); it reached the oracle's "
        "accuracy on 1 of them." in text
    )
    assert "**F1 at the shipped threshold.**" in text
    # answering every pair alike: the bar an accuracy is worth something above
    beaten = [name for name in decided if figures[name]["accuracy"] <= figures[name]["accuracy_one_class"]]
    if beaten:
        assert f"**Against one class.** On {len(beaten)} of the 3 runs the shipped threshold's accuracy" in text
    else:
        assert "**Against one class.** On every run the shipped threshold's accuracy was above" in text
    # calibration cut the ECE where the cosines sat near 1, and raised it where the map says 0.99 to every pair
    cut, raised = figures["feature-ATEC"], figures["interaction-ATEC"]
    assert cut["ece"] < cut["ece_uncalibrated"] and raised["ece"] > raised["ece_uncalibrated"]
    assert (
        "The shipped map cut the test ECE on 1 of the 2 runs with a map, not on BERT + CoSENT (interaction) on ATEC: "
        f"{raised['ece_uncalibrated']:.3f} → {raised['ece']:.3f}; the mean ECE went from "
        f"{(cut['ece_uncalibrated'] + raised['ece_uncalibrated']) / 2:.3f} (the score read as a probability) to "
        f"{(cut['ece'] + raised['ece']) / 2:.3f} (feature models {cut['ece_uncalibrated']:.3f} → {cut['ece']:.3f}, "
        f"interaction models {raised['ece_uncalibrated']:.3f} → {raised['ece']:.3f})." in text
    )
    # the fitted map is Platt's for these pairs (seeded), and the hand-made one is Platt's
    assert (cut["calibration"], raised["calibration"]) == ("platt", "platt")
    assert "The held-out log-loss on valid chose Platt scaling for 2 runs." in text
    assert cut["log_loss"] < cut["constant_log_loss"] and raised["log_loss"] > raised["constant_log_loss"]
    assert (
        "on 1 of the 2 runs; where it was not, the probabilities told less than that constant (BERT + CoSENT "
        f"(interaction) on ATEC: {raised['log_loss']:.3f} against {raised['constant_log_loss']:.3f})." in text
    )
    unmapped = text.split("**Without a calibration map:** 2 runs: ")[1]
    assert unmapped.startswith("BERT + CoSENT (feature) on BQ (BQ.valid.data has 30 pairs")
    assert "BERT + CoSENT (interaction) on BQ (no decision.json in" in unmapped


def test_calibration_says_so_when_every_run_gains(tmp_path):
    runs, _, _ = calibration_study(tmp_path)
    text = calibration_tables(calibration_results(load_runs([runs[3]])))  # the feature ATEC run alone
    assert "The shipped map cut the test ECE on the one run with a map;" in text
    assert "below that of the best constant probability on the test pairs" in text and "on every run with a map" in text
    assert "(feature models" not in text  # one kind: no means by kind


def test_a_decision_refitted_after_the_run_was_tested_is_refused(tmp_path):
    runs, _, _ = calibration_study(tmp_path)
    path = os.path.join(runs[3], "metrics.json")
    with open(path) as f:
        metrics = json.load(f)
    metrics["tasks"]["ATEC"]["test"]["ece"] += 0.01
    with open(path, "w") as f:
        json.dump(metrics, f)
    with pytest.raises(
        ConfigError, match=r"model/decision\.json: is not the decision .* was tested with: its ECE calibrated"
    ):
        calibration_results(load_runs(runs))


def test_the_calibration_study_takes_one_run_per_binary_task_and_model(tmp_path):
    sts = fake_run(tmp_path / "sts", "STS-B", "feature", "cosent", {"STS-B": 0.5})
    with pytest.raises(
        ConfigError, match=r"sts: trained on STS-B; the calibration study takes runs trained on a binary"
    ):
        calibration_results(load_runs([sts]))
    twins = [fake_run(tmp_path / name, "BQ", "feature", "cosent", {"BQ": 0.5}) for name in ("one", "two")]
    with pytest.raises(ConfigError, match=r"one and .*two: two runs of BERT \+ CoSENT \(feature\) on BQ"):
        calibration_results(load_runs(twins))


def test_the_calibration_report_writes_its_files_alone(tmp_path):
    from cosent_tf.experiments.scripts import report_main

    runs, _, _ = calibration_study(tmp_path / "runs")
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.md").write_text("the paper's tables")
    written = write_calibration_report(runs, str(out), preface="The study.")
    assert [os.path.basename(p) for p in written] == ["calibration.md", "calibration.png"]
    assert (out / "calibration.md").read_text().startswith("The study.\n\n### Match decision on each binary task")
    assert (out / "calibration.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "results.md").read_text() == "the paper's tables" and sorted(os.listdir(out)) == [
        "calibration.md",
        "calibration.png",
        "results.md",
    ]
    # scripts/report.py --calibration writes the same; with --evaluations it is refused
    report_main([*runs, "--calibration", "--output-dir", str(tmp_path / "by-script")])
    assert (tmp_path / "by-script" / "calibration.md").read_text() == (out / "calibration.md").read_text().split(
        "The study.\n\n"
    )[1]
    with pytest.raises(SystemExit) as refused:
        report_main([*runs, "--calibration", "--evaluations", "x.json", "--output-dir", str(tmp_path / "no")])
    assert refused.value.code == 2 and not (tmp_path / "no").exists()


# Stands in for the Python that scripts/reproduce_small.sh runs: a training script's call, or
# cosent-tf train's, writes the run folder the engine would (settings from its options, made-up
# metrics) and records its options; cosent-tf mine writes its output and summary, cosent-tf
# evaluate its JSON (the first stage's metrics the run's own), scripts/subset.py its file, each
# with the options; scripts/report.py runs for real.
# The tasks a fake NLI run is tested on; a fake run of one task is tested on it alone.
NLI_TESTED = ["ATEC", "BQ", "LCQMC", "PAWSX", "STS-B"]
FAKE_PYTHON = """#!{python}
import json, os, shutil, sys

script, args = sys.argv[1], sys.argv[2:]
if script.endswith("report.py"):
    os.execv(sys.executable, [sys.executable, script, *args])

def option(name, default=None):
    return args[args.index(name) + 1] if name in args else default

def write_json(path, record):
    with open(path, "w") as f:
        json.dump(record, f)

command = args[1] if script == "-m" and args[0] == "cosent_tf.cli" else None
if script.endswith("subset.py"):
    with open(option("--output"), "w") as f:
        f.write("\\t".join(args) + "\\n")
    sys.exit(0)
if command == "mine":
    with open(option("--output"), "w") as f:
        f.write(json.dumps({{"query": "q", "pos": "p", "neg": ["n"]}}) + "\\n")
    summary = os.path.splitext(option("--output"))[0] + ".summary.json"
    write_json(summary, {{"format": "cosent-tf-mining", "arguments": args}})
    sys.exit(0)
if command == "evaluate":
    model_dir = args[2]
    with open(os.path.join(os.path.dirname(model_dir), "metrics.json")) as f:
        (plain,) = [result["test"]["retrieval"] for result in json.load(f)["tasks"].values()]
    reranked = {{key: value if key in ("queries", "corpus") else 1.1 * value for key, value in plain.items()}}
    reranked.update(rerank_top=int(option("--rerank-top")), reranker=option("--rerank"))
    record = {{"model_dir": model_dir, "file": args[3], "retrieval": plain, "retrieval_reranked": reranked}}
    write_json(option("--output"), {{**record, "arguments": args}})
    sys.exit(0)

if command == "train":
    name, task, interaction = "train", option("--name"), False
else:
    name = os.path.basename(script)[: -len(".py")]
    task = "NLI" if name.endswith("_nli") else args[0]
    interaction = name.startswith("interact")
losses = {{"sbert": "sbert", "sbert_nli": "sbert", "interact": "ce"}}
config = {{
    "task": task,
    "kind": "interaction" if interaction else "feature",
    "loss": option("--loss", losses.get(name, "cosent")),
    "architecture": "bert",
    "pooling": option("--pooling", "cls"),
    "batch_size": int(option("--batch-size", 64 if task == "NLI" else 32)),
    "micro_batch_size": None if option("--micro-batch-size") is None else int(option("--micro-batch-size")),
    "epsilon": float(option("--epsilon", 0.5)),
    "eval_every": int(option("--eval-every", 0)),
    "train_file": option("--train"),
    "arguments": args,
}}
if "--hard-negatives-from-labels" in args or "--no-hard-negatives-from-labels" in args:
    config["hard_negatives_from_labels"] = "--hard-negatives-from-labels" in args
out = option("--output-dir")
value = (sum(map(ord, out)) % 90 + 5) / 100  # made up, and differing between runs
tested = {nli_tested!r} if task == "NLI" else [task]
retrieval = {{"recall@1": value / 4, "recall@10": value / 2, "mrr@10": value / 3, "ndcg@10": value / 3}}
retrieval.update(queries=30, corpus=60)
tasks = {{t: {{"test": {{"spearman": value, "retrieval": retrieval}}}} for t in tested}}
os.makedirs(out)
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(config, f)
with open(os.path.join(out, "valid_metrics.csv"), "w") as f:
    f.write("epoch,step,end_of_epoch,spearman\\n1,10,False,0.1\\n1,20,True," + str(value) + "\\n")
if name in ("cosent", "interact_cosent") and task in {binary!r}:
    # the CoSENT scripts' runs on a binary task also fit the decision their model ships and record
    # its test figures, as training does: the decision made up for the task and score (reproduce_small
    # fits it once, on made-up pairs), so that no fake run imports NumPy
    made_up = os.path.join({decisions!r}, task + ("-head" if name == "interact_cosent" else "-cosine"))
    os.makedirs(os.path.join(out, "model"))
    shutil.copyfile(os.path.join(made_up, "decision.json"), os.path.join(out, "model", "decision.json"))
    with open(os.path.join(made_up, "figures.json")) as f:
        tasks[task]["test"].update(json.load(f))
    shutil.copyfile(os.path.join(made_up, "test_scores.npz"), os.path.join(out, "test_scores.npz"))
else:
    # the others copy the made-up scores of what they test (reproduce_small writes them)
    shutil.copyfile(os.path.join({scores!r}, "+".join(tested) + ".npz"), os.path.join(out, "test_scores.npz"))
with open(os.path.join(out, "metrics.json"), "w") as f:
    json.dump({{"comparable": "--train-from-valid" not in args and command is None, "tasks": tasks}}, f)
print(json.dumps({{"test": {{"spearman": value}}}}))
"""


def made_up_pairs(rng, count):
    """``count`` scores in [-1, 1] and 0/1 labels, a pair the likelier to match the higher its score."""
    drawn = rng.uniform(-1, 1, count)
    return drawn, (rng.random(count) < (drawn + 1) / 2).astype(float)


def reproduce_small(tmp_path, *arguments, fails=False):
    """Run scripts/reproduce_small.sh with the fake Python; (its output, {run: its options});
    ``fails``: the script is to stop with an error (its output is then stdout and stderr)."""
    fake, scores = tmp_path / "python", tmp_path / "made-up-scores"
    os.makedirs(scores, exist_ok=True)
    for tested in [*([task] for task in NLI_TESTED), NLI_TESTED]:  # what a fake run tests: its task, or NLI's
        made_up = {f"{task}.scores": np.linspace(-1, 1, 20) for task in tested}
        made_up.update({f"{task}.labels": np.arange(20) % 2 for task in tested})
        np.savez(scores / ("+".join(tested) + ".npz"), **made_up)
    decisions = tmp_path / "made-up-decisions"
    rng = np.random.default_rng(0)
    for task in BINARY_TASKS:  # each binary task's made-up decision, as each score fits it (FAKE_PYTHON)
        for scored_by in ("cosine", "head"):
            folder = decisions / f"{task}-{scored_by}"
            if folder.exists():
                continue
            folder.mkdir(parents=True)
            (valid_scores, valid_labels), (test_scores, test_labels) = (made_up_pairs(rng, n) for n in (300, 200))
            decision = fit_decision(valid_scores, valid_labels, f"{task}.valid.data", score=scored_by)
            write_decision(folder, decision)
            figures = decision_metrics(test_scores, test_labels, decision)
            (folder / "figures.json").write_text(json.dumps(figures, default=float))
            np.savez(folder / "test_scores.npz", **{f"{task}.scores": test_scores, f"{task}.labels": test_labels})
    fake.write_text(
        FAKE_PYTHON.format(
            python=sys.executable,
            scores=str(scores),
            nli_tested=NLI_TESTED,
            binary=BINARY_TASKS,
            decisions=str(decisions),
        )
    )
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake)}
    done = subprocess.run(
        ["bash", os.path.join(ROOT, "scripts", "reproduce_small.sh"), *arguments],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if fails:
        assert done.returncode != 0, done.stdout[-3000:]
        return done.stdout + done.stderr, {}
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = {}
    for name in os.listdir(tmp_path / "runs"):
        if os.path.isfile(tmp_path / "runs" / name / "config.json"):  # not subsets/, mined/, reranked/
            with open(tmp_path / "runs" / name / "config.json") as f:
                runs[name] = json.load(f)["arguments"]
    return done.stdout, runs


STUDY_NAMES = [name for _, _, name in STUDY]


def recorded(path):
    """The options a fake step recorded in its output (a JSON file's "arguments", else the file's line)."""
    with open(path) as f:
        text = f.read()
    return json.loads(text)["arguments"] if path.endswith(".json") else text.rstrip("\n").split("\t")


def option_of(arguments, name):
    return arguments[arguments.index(name) + 1]


@pytest.mark.slow
def test_reproduce_small_runs_the_study_with_one_budget_and_reports_it_apart(tmp_path):
    out, docs = tmp_path / "runs", tmp_path / "docs"
    printed, runs = reproduce_small(tmp_path, "data", str(out), str(docs))
    tasks = ("ATEC", "BQ", "LCQMC", "STS-B", "NLI")
    losses = ("cosent", "mnrl", "mnrl-hard", "angle", "cosent-ibn")
    mined_tasks, reranked_tasks = ("ATEC", "BQ", "STS-B"), ("ATEC", "BQ", "LCQMC", "STS-B")
    study = {name: arguments for name, arguments in runs.items() if name.startswith("retrieval-")}
    mined = {f"retrieval-mnrl-mined-{task}" for task in mined_tasks}
    assert set(study) == {f"retrieval-{loss}-{task}" for loss in losses for task in tasks} | mined
    for name, arguments in study.items():
        steps = arguments[arguments.index("--steps-per-epoch") + 1]
        pooling = arguments[arguments.index("--pooling") + 1]
        pairs = option_of(arguments, "--max-train-pairs") if name not in mined else "4000"
        assert (steps, pooling, pairs) == ("125", "last-avg", "8000" if name.endswith("NLI") else "4000"), name
        assert "--eval-every" not in arguments and ("--train-from-valid" in arguments) == name.endswith("LCQMC")
    # the rerankers: interaction CoSENT, one epoch of the train pairs, rows of no table
    rerankers = {name: arguments for name, arguments in runs.items() if name.startswith("rerank-")}
    assert set(rerankers) == {f"rerank-interact-cosent-{task}" for task in reranked_tasks}
    for name, arguments in rerankers.items():
        assert option_of(arguments, "--max-train-pairs") == "4000" and "--eval-every" not in arguments
        assert ("--train-from-valid" in arguments) == name.endswith("LCQMC")
    # the seeded subsets the runs read, as files: LCQMC has no train split, so no train subset
    for task in reranked_tasks:
        for split, count in (("train", "4000"), ("test", "2000")):
            path = out / "subsets" / f"{task}.{split}.tsv"
            assert path.exists() == (split == "test" or task in mined_tasks), path
            if path.exists():
                arguments = recorded(str(path))
                assert arguments[:2] == [task, split] and option_of(arguments, "--count") == count
    # mined by the in-batch MNRL run, guarded by the task's reranker; trained on by cosent-tf train
    for task in mined_tasks:
        mine = recorded(str(out / "mined" / f"{task}.summary.json"))
        assert mine[1] == "mine" and option_of(mine, "--data") == str(out / "subsets" / f"{task}.train.tsv")
        assert option_of(mine, "--model") == str(out / f"retrieval-mnrl-{task}" / "model")
        assert option_of(mine, "--rescore") == str(out / f"rerank-interact-cosent-{task}" / "model")
        assert (option_of(mine, "--num-negatives"), option_of(mine, "--range")) == ("1", "10-50")
        train = study[f"retrieval-mnrl-mined-{task}"]
        assert option_of(train, "--train") == str(out / "mined" / f"{task}.jsonl")
        assert option_of(train, "--test") == os.path.join("data", task, f"{task}.test.data")
        assert [option_of(train, name) for name in ("--name", "--loss", "--max-eval-pairs")] == [task, "mnrl", "2000"]
    # each task's CoSENT and MNRL (hard negatives) runs reranked on the test subset
    evaluations = sorted(os.listdir(out / "reranked"))
    firsts = ("retrieval-cosent", "retrieval-mnrl-hard")
    assert evaluations == sorted(f"{first}-{task}.json" for first in firsts for task in reranked_tasks)
    for first in firsts:
        for task in reranked_tasks:
            arguments = recorded(str(out / "reranked" / f"{first}-{task}.json"))
            model, pairs = str(out / f"{first}-{task}" / "model"), str(out / "subsets" / f"{task}.test.tsv")
            assert arguments[1:4] == ["evaluate", model, pairs] and "--retrieval" in arguments
            assert option_of(arguments, "--rerank") == str(out / f"rerank-interact-cosent-{task}" / "model")
            assert option_of(arguments, "--rerank-top") == "20"
    # the paper's runs make results.md, the study's retrieval.md, each with its own preface
    results, retrieval = (docs / "results.md").read_text(), (docs / "retrieval.md").read_text()
    assert results.startswith("## Small-scale reproduction") and retrieval.startswith("## Retrieval study")
    for name in ("MNRL", "AnglE", "IBN"):
        assert name not in results
    per_task, nli = (f"feature models trained on {what} (mean pooling)" for what in ("each task", "NLI"))
    rows = section_rows(retrieval.split(per_task)[1], "#### MRR@10\n", "| BERT")
    reranked = [f"{name} → reranked by interaction CoSENT (top 20)" for name in (STUDY_NAMES[0], STUDY_NAMES[2])]
    assert [row.split(" | ")[0][2:] for row in rows] == [
        *STUDY_NAMES[:3],
        "BERT + MNRL (mined negatives)",
        *STUDY_NAMES[3:],
        *reranked,
    ]
    assert "| BERT + MNRL (mined negatives) | " in rows[3] and rows[3].split(" | ")[3] == "–"  # no LCQMC
    rows = section_rows(retrieval.split(nli)[1], "#### MRR@10\n", "| BERT")
    assert [row.split(" | ")[0][2:] for row in rows] == STUDY_NAMES
    assert "MNRL with mined negatives (BERT + MNRL (mined negatives))" in retrieval
    assert "Did reranking help?" in retrieval and "‡" not in retrieval  # the fake evaluations are the runs' own
    assert (docs / "retrieval.png").read_bytes()[:4] == b"\x89PNG"
    assert "paper's runs:" in printed and "retrieval study's runs:" in printed
    # the study alone: its finished runs and steps are skipped, its report made again, results.md left
    (docs / "results.md").write_text("kept")
    (docs / "retrieval.md").unlink()
    again, _ = reproduce_small(tmp_path, "retrieval", "data", str(out), str(docs))
    steps = len(study) + len(rerankers) + 7 + len(mined_tasks) + len(evaluations)  # 7 subsets
    assert again.count("skip ") == steps and "paper's runs:" not in again
    assert (docs / "retrieval.md").read_text() == retrieval and (docs / "results.md").read_text() == "kept"
    # the calibration study's runs are the paper's: the default run measured them, and the study alone
    # trains nothing more and makes the same report
    calibration = (docs / "calibration.md").read_text()
    assert calibration.startswith("## Calibration study") and "calibration study's runs:" in printed
    again, after = reproduce_small(tmp_path, "calibration", "data", str(out), str(docs))
    assert again.count("skip ") == 8 and after == runs
    assert (docs / "calibration.md").read_text() == calibration


@pytest.mark.slow
def test_reproduce_small_calibration_measures_the_papers_cosent_runs_of_each_binary_task(tmp_path):
    out, docs = tmp_path / "runs", tmp_path / "docs"
    binary, held_out = ("ATEC", "BQ", "LCQMC", "PAWSX"), ("LCQMC", "PAWSX")
    # a run finished before models shipped a decision is skipped as finished, then refused by name
    fake_run(out / "cosent-BQ", "BQ", "feature", "cosent", {"BQ": 0.5})
    printed, _ = reproduce_small(tmp_path, "calibration", "data", str(out), str(docs), fails=True)
    assert f"trained before models shipped a decision (no model/decision.json): {out / 'cosent-BQ'};" in printed
    assert not docs.exists()
    shutil.rmtree(out / "cosent-BQ")
    printed, runs = reproduce_small(tmp_path, "calibration", "data", str(out), str(docs))
    assert printed.count("skip ") == 7 and "paper's runs:" not in printed and "calibration study's runs:" in printed
    assert set(runs) == {f"{prefix}-{task}" for prefix in ("cosent", "interact-cosent") for task in binary}
    for task in binary:
        feature, interaction = runs[f"cosent-{task}"], runs[f"interact-cosent-{task}"]
        # the paper's options, as its study gives them ([CLS] pooling, CoSENT: the scripts' defaults)
        assert (option_of(feature, "--eval-every"), option_of(interaction, "--eval-every")) == ("10", "40")
        for arguments in (feature, interaction):
            assert [option_of(arguments, name) for name in ("--max-train-pairs", "--lr", "--epochs")] == [
                "4000",
                "1e-4",
                "1",
            ]
            assert option_of(arguments, "--max-eval-pairs") == "2000" and option_of(arguments, "--data-dir") == "data"
            assert "--pooling" not in arguments and "--loss" not in arguments
            assert ("--train-from-valid" in arguments) == (task in held_out)
    text = (docs / "calibration.md").read_text()
    assert text.startswith("## Calibration study (random initialisation, partial data)")
    rows = section_rows(text, "calibration before and after")[2:]
    assert [row.split(" | ")[:2] for row in rows] == [
        [f"| {task}{'†' if task in held_out else ''}", f"BERT + CoSENT ({kind})"]
        for task in binary
        for kind in ("feature", "interaction")
    ]
    assert all(" – " not in row for row in rows)  # every run ships a decision with a map
    assert "**Accuracy at the shipped threshold.**" in text and "**Calibration.**" in text
    assert (docs / "calibration.png").read_bytes()[:4] == b"\x89PNG"
    assert sorted(os.listdir(docs)) == ["calibration.md", "calibration.png"]
