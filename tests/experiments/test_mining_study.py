"""The retrieval study's mined-negative runs and reranked evaluations in the report, and the
seeded subsets written as files for `cosent-tf mine` and `cosent-tf evaluate`."""

import json
import os

import numpy as np
import pytest

from cosent_tf.data.benchmarks import load_task
from cosent_tf.data.files import read_pair_file
from cosent_tf.errors import ConfigError
from cosent_tf.experiments.report import RETRIEVAL_METRICS, load_evaluations, retrieval_tables, write_report
from cosent_tf.experiments.runs import load_runs
from cosent_tf.experiments.scripts import report_main, subset_main, write_task_subset
from cosent_tf.mining import SUMMARY_FORMAT, summary_paths
from tests.experiments.test_report import fake_run, section_rows

TASKS = ("ATEC", "BQ", "LCQMC")
# Each run's test retrieval on each task (every metric of RETRIEVAL_METRICS takes the value) and its
# test Spearman on every task.
RUNS = {
    "cosent": ({"ATEC": 0.30, "BQ": 0.20, "LCQMC": 0.90}, 0.50),
    "in-batch": ({"ATEC": 0.40, "BQ": 0.25, "LCQMC": 0.95}, 0.45),
    "hard": ({"ATEC": 0.42, "BQ": 0.27, "LCQMC": 0.94}, 0.48),
}
MINED = ({"ATEC": 0.44, "BQ": 0.24}, 0.40)  # no LCQMC: no train split to mine
CONFIGS = {
    "cosent": ("cosent", {}),
    "in-batch": ("mnrl", {"hard_negatives_from_labels": False}),
    "hard": ("mnrl", {"hard_negatives_from_labels": True}),
}
IN_BATCH, HARD = "BERT + MNRL", "BERT + MNRL (hard negatives from labels)"
MINED_ROW, COSENT = "BERT + MNRL (mined negatives)", "BERT + CoSENT"
RERANKED_BY = " → reranked by interaction CoSENT (top 20)"


def every_metric(value):
    return dict.fromkeys(RETRIEVAL_METRICS, value)


def mined_file(folder, task, summary_format=SUMMARY_FORMAT):
    """A file of mined examples with, beside it, the summary `cosent-tf mine` writes (its format only)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{task}.jsonl")
    with open(path, "w") as f:
        f.write(json.dumps({"query": "我们", "pos": "你们", "neg": ["他们"]}) + "\n")
    if summary_format is not None:
        with open(summary_paths(path)[0], "w") as f:
            json.dump({"format": summary_format, "anchors": 1}, f)
    return path


def mined_run(folder, task, value, spearman, train_file):
    """A run as `cosent-tf train --train FILE --name TASK --loss mnrl` records it: its own files,
    so not comparable with published numbers."""
    return fake_run(
        folder,
        task,
        "feature",
        "mnrl",
        {task: spearman},
        retrieval={task: every_metric(value)},
        comparable=False,
        pooling="last-avg",
        train_file=train_file,
        hard_negatives_from_labels=False,
    )


def study(tmp_path, runs=RUNS, mined=MINED):
    """{(name, task): run folder} of the study's runs per task and the mined runs (named to tell nothing)."""
    folders = {}
    for name, (values, spearman) in runs.items():
        loss, extra = CONFIGS[name]
        for task in TASKS:
            folders[name, task] = fake_run(
                tmp_path / f"{name}-{task}",
                task,
                "feature",
                loss,
                {task: spearman},
                retrieval={task: every_metric(values[task])},
                comparable=task != "LCQMC",
                pooling="last-avg",
                **extra,
            )
    values, spearman = mined
    for number, (task, value) in enumerate(values.items()):
        train_file = mined_file(str(tmp_path / "mined"), task)
        folders["mined", task] = mined_run(tmp_path / f"run{number}", task, value, spearman, train_file)
    return folders


def reranker(tmp_path, task):
    """The model folder of an interaction CoSENT run (only its run's config.json is read)."""
    folder = tmp_path / f"rerank-interact-cosent-{task}"
    if not folder.exists():
        fake_run(folder, task, "interaction", "cosent", {task: 0.3})
    return str(folder / "model")


def write_evaluation(path, run_dir, plain, reranked, model, top=20, counts=(10, 20)):
    """An `evaluate --retrieval --rerank --output X.json` file; ``plain`` and ``reranked``: {metric: value}."""
    record = {
        "model_dir": os.path.join(run_dir, "model"),
        "file": "subsets/test.tsv",
        "pairs": 100,
        "labels": "binary",
        "spearman": 0.3,
        "retrieval": {**plain, "recall@5": 0.5, "queries": counts[0], "corpus": counts[1]},
        "retrieval_reranked": {
            **reranked,
            "recall@5": 0.5,
            "queries": counts[0],
            "corpus": counts[1],
            "rerank_top": top,
            "reranker": model,
        },
    }
    with open(path, "w") as f:
        json.dump(record, f)
    return str(path)


def rerank(tmp_path, folders, name, task, changes, counts=(10, 20), plain=None):
    """An evaluation of run (name, task) whose first stage is the run's own test retrieval (or
    ``plain``) and whose reranked metrics are those plus ``changes`` ({metric: change})."""
    values = every_metric(RUNS[name][0][task]) if plain is None else plain
    reranked = {key: value + changes.get(key, 0.0) for key, value in values.items()}
    path = tmp_path / f"eval-{name}-{task}.json"
    return write_evaluation(path, folders[name, task], values, reranked, reranker(tmp_path, task), counts=counts)


def rows_of(text, title):
    return section_rows(text, f"#### {title}\n", "| BERT")


def test_a_run_on_mined_negatives_is_known_by_its_mining_summary_not_its_name(tmp_path):
    folders = study(tmp_path)
    # the same kind of run on a file without a mining summary, and on one with another tool's summary
    plain_file = mined_file(str(tmp_path / "own"), "BQ", summary_format=None)
    other_file = mined_file(str(tmp_path / "other"), "BQ", summary_format="something-else")
    own = mined_run(tmp_path / "retrieval-mnrl-mined-BQ", "BQ", 0.9, 0.9, plain_file)
    other = mined_run(tmp_path / "mined-too", "BQ", 0.9, 0.9, other_file)
    runs = load_runs([*folders.values(), own, other])
    assert own not in [run["dir"] for run in runs] and other not in [run["dir"] for run in runs]
    assert [run["mining"] for run in runs if run["mining"]] == [
        summary_paths(str(tmp_path / "mined" / f"{task}.jsonl"))[0] for task in ("ATEC", "BQ")
    ]
    text = retrieval_tables(runs)
    # a row of its own after MNRL's other negatives; † as the run records itself, no LCQMC
    assert rows_of(text, "MRR@10")[:4] == [
        "| BERT + CoSENT | 30.00 | 20.00 | 90.00† | 46.67 |",
        "| BERT + MNRL | 40.00 | 25.00 | 95.00† | 53.33 |",
        "| BERT + MNRL (hard negatives from labels) | 42.00 | 27.00 | 94.00† | 54.33 |",
        "| BERT + MNRL (mined negatives) | 44.00† | 24.00† | – | 34.00* |",
    ]
    assert "| BERT + MNRL (mined negatives) | 40.00† | 40.00† | – | 40.00* |" in rows_of(text, "test Spearman")
    assert "MNRL on mined negatives: trained on a file of its own" in text


def test_a_mined_run_must_be_named_by_its_task(tmp_path):
    train_file = mined_file(str(tmp_path / "mined"), "BQ")
    folder = mined_run(tmp_path / "run", "BQ", 0.4, 0.4, train_file)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    (tmp_path / "run" / "config.json").write_text(json.dumps({**config, "task": "mined-BQ"}))
    with pytest.raises(ConfigError, match=r"config\.json: 'task' 'mined-BQ' .* train it with --name TASK"):
        load_runs([folder])


def mined_lines(text):
    return text.split("MNRL with mined negatives (BERT + MNRL (mined negatives)) against MNRL with other negatives:")[1]


def test_mined_negatives_are_compared_with_mnrls_other_negatives_as_the_numbers_say(tmp_path):
    text = retrieval_tables(load_runs(study(tmp_path).values()))
    compared = mined_lines(text)
    # over ATEC and BQ: mined 34.00, in-batch only 32.50, from labels 34.50, CoSENT 25.00
    assert (
        "- MRR@10: 34.00 on average over ATEC, BQ: beat in-batch negatives only (32.50, +1.50); fell behind "
        "hard negatives from labels (34.50, -0.50); the best of every loss on these tasks: "
        f"{HARD}, 34.50"
    ) in compared
    # Spearman: mined 40.00 below in-batch only 45.00 and from labels 48.00; CoSENT's 50.00 best
    assert (
        "- test Spearman: 40.00 on average over ATEC, BQ: fell behind in-batch negatives only (45.00, -5.00); "
        f"fell behind hard negatives from labels (48.00, -8.00); the best of every loss on these tasks: {COSENT}, 50.00"
    ) in compared
    assert (
        "Mined negatives beat in-batch negatives only on 4 of 5 metrics and hard negatives from labels on 0 of 5 "
        "metrics." in compared
    )
    # which loss led is said of the losses trained on the labelled pairs, over every task they have
    leaders = text.split("Which loss led on average:")[1].split("MNRL with mined negatives")[0]
    assert f"- MRR@10: {HARD}, 54.33 on average over ATEC, BQ, LCQMC" in leaders
    assert MINED_ROW not in leaders


def test_the_mined_verdict_flips_when_the_numbers_do(tmp_path):
    swapped = {**RUNS, "hard": ({"ATEC": 0.44, "BQ": 0.24, "LCQMC": 0.94}, 0.48)}
    mined = ({"ATEC": 0.42, "BQ": 0.27}, 0.49)
    compared = mined_lines(retrieval_tables(load_runs(study(tmp_path, swapped, mined).values())))
    assert (
        "- MRR@10: 34.50 on average over ATEC, BQ: beat in-batch negatives only (32.50, +2.00); beat "
        f"hard negatives from labels (34.00, +0.50); the best of every loss on these tasks: {MINED_ROW}, 34.50"
    ) in compared
    assert (
        "- test Spearman: 49.00 on average over ATEC, BQ: beat in-batch negatives only (45.00, +4.00); beat" in compared
    )
    assert "beat in-batch negatives only on 5 of 5 metrics and hard negatives from labels on 5 of 5 metrics" in compared


def test_reranked_rows_come_from_the_evaluations_and_not_into_the_spearman_table(tmp_path):
    folders = study(tmp_path)
    evaluations = [
        rerank(tmp_path, folders, "cosent", "ATEC", {"mrr@10": 0.05, "recall@1": -0.02, "recall@10": 0.01}),
        rerank(tmp_path, folders, "cosent", "BQ", {"mrr@10": 0.03, "ndcg@10": 0.01}),
        rerank(tmp_path, folders, "hard", "BQ", {"mrr@10": -0.01, "recall@1": -0.01, "ndcg@10": -0.02}),
    ]
    runs = load_runs(folders.values())
    text = retrieval_tables(runs, load_evaluations(evaluations, runs))
    assert rows_of(text, "MRR@10")[-2:] == [
        f"| {COSENT}{RERANKED_BY} | 35.00 | 23.00 | – | 29.00* |",
        f"| {HARD}{RERANKED_BY} | – | 26.00 | – | 26.00* |",
    ]
    assert rows_of(text, "Recall@1")[-2:] == [
        f"| {COSENT}{RERANKED_BY} | 28.00 | 20.00 | – | 24.00* |",
        f"| {HARD}{RERANKED_BY} | – | 26.00 | – | 26.00* |",
    ]
    assert not any("reranked" in row for row in section_rows(text, "#### test Spearman\n"))
    effects = text.split("Did reranking help?")[1]
    # CoSENT: MRR@10 (+5 +3) / 2, Recall@1 (-2 + 0) / 2, nDCG@10 (0 + 1) / 2
    assert (
        f"- {COSENT}, its top 20 reranked by interaction CoSENT: MRR@10 +4.00, Recall@1 -1.00, nDCG@10 +0.50 on "
        "average over ATEC, BQ: reranking helped on MRR@10 and nDCG@10, hurt Recall@1"
    ) in effects
    assert (
        f"- {HARD}, its top 20 reranked by interaction CoSENT: MRR@10 -1.00, Recall@1 -1.00, nDCG@10 -2.00 on "
        "average over BQ: reranking helped on none of them, hurt MRR@10, Recall@1 and nDCG@10"
    ) in effects
    assert "‡" not in text  # every evaluation tested on its run's subset


def test_whether_reranking_helped_flips_when_the_numbers_do(tmp_path):
    folders = study(tmp_path)
    up = rerank(tmp_path, folders, "in-batch", "BQ", {"mrr@10": 0.02, "recall@1": 0.0, "ndcg@10": 0.01})
    runs = load_runs(folders.values())
    effects = retrieval_tables(runs, load_evaluations([up], runs)).split("Did reranking help?")[1]
    assert "MRR@10 +2.00, Recall@1 +0.00, nDCG@10 +1.00 on average over BQ: reranking helped on MRR@10 and " in effects
    assert "left Recall@1 unchanged" in effects
    down = rerank(tmp_path, folders, "in-batch", "BQ", {"mrr@10": -0.02, "recall@1": 0.0, "ndcg@10": -0.01})
    effects = retrieval_tables(runs, load_evaluations([down], runs)).split("Did reranking help?")[1]
    assert (
        "MRR@10 -2.00, Recall@1 +0.00, nDCG@10 -1.00 on average over BQ: reranking helped on none of them, " in effects
    )


@pytest.mark.parametrize(
    "counts, plain, flagged",
    [
        ((10, 20), None, None),
        ((10, 21), None, "corpus 21 against 20"),
        ((12, 20), None, "queries 12 against 10"),
        # 10 queries: one query's rank may move (1/10 of a metric) without another subset
        ((10, 20), {**every_metric(0.25), "mrr@10": 0.34}, None),
        ((10, 20), {**every_metric(0.25), "mrr@10": 0.37}, "MRR@10 37.00 against 25.00"),
    ],
)
def test_an_evaluation_not_on_its_runs_test_subset_is_flagged(tmp_path, counts, plain, flagged):
    folders = study(tmp_path)
    path = rerank(tmp_path, folders, "in-batch", "BQ", {"mrr@10": 0.01}, counts=counts, plain=plain)
    runs = load_runs(folders.values())
    text = retrieval_tables(runs, load_evaluations([path], runs))
    row = rows_of(text, "MRR@10")[-1]
    if flagged is None:
        assert "‡" not in text
        return
    assert row.startswith(f"| {IN_BATCH}{RERANKED_BY} | – | ") and "‡ |" in row
    warning = text.split("**‡ Not the test subset of the other rows:**")[1]
    assert f"{path}: its first stage's retrieval on BQ is not {folders['in-batch', 'BQ']}'s own" in warning
    assert flagged in warning


def test_a_mined_run_tested_on_another_subset_is_flagged(tmp_path):
    folders = study(tmp_path)
    metrics_path = os.path.join(folders["mined", "BQ"], "metrics.json")
    with open(metrics_path) as f:
        metrics = json.load(f)
    metrics["tasks"]["BQ"]["test"]["retrieval"]["corpus"] = 25
    with open(metrics_path, "w") as f:
        json.dump(metrics, f)
    text = retrieval_tables(load_runs(folders.values()))
    assert f"| {MINED_ROW} | 44.00† | 24.00†‡ | – | 34.00* |" in rows_of(text, "MRR@10")
    warning = text.split("**‡ Not the test subset of the other rows:**")[1]
    assert f"{folders['mined', 'BQ']} (mined negatives) on BQ: was tested on another subset than" in warning
    assert "(corpus 25 against 20)" in warning and "on ATEC" not in warning


def test_evaluations_that_cannot_be_placed_are_refused(tmp_path):
    folders = study(tmp_path)
    runs = load_runs(folders.values())
    good = rerank(tmp_path, folders, "cosent", "BQ", {})
    with open(good) as f:
        record = json.load(f)

    def refused(change, match, given_runs=runs):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(change(json.loads(json.dumps(record)))))
        with pytest.raises(ConfigError, match=match):
            retrieval_tables(given_runs, load_evaluations([str(path)], given_runs))

    def without_reranked(r):
        del r["retrieval_reranked"]
        return r

    refused(without_reranked, r"bad\.json: 'retrieval_reranked' is missing: not an evaluation .* --rerank")
    refused(lambda r: {**r, "model_dir": str(tmp_path / "elsewhere" / "model")}, "not among the report's runs")
    refused(
        lambda r: {**r, "retrieval_reranked": {**r["retrieval_reranked"], "recall@1": 1.5}},
        r"bad\.json: 'retrieval_reranked'\['recall@1'\] is 1\.5, outside 0 to 1",
    )
    refused(
        lambda r: {**r, "retrieval": {k: v for k, v in r["retrieval"].items() if k != "ndcg@10"}},
        r"bad\.json: 'retrieval'\['ndcg@10'\] is missing",
    )
    refused(lambda r: {**r, "retrieval_reranked": {**r["retrieval_reranked"], "rerank_top": 0}}, "rerank_top")
    # a CoSENT run the study does not compare (another pooling than the study's)
    other = fake_run(tmp_path / "cosent-cls-BQ", "BQ", "feature", "cosent", {"BQ": 0.2}, pooling="cls")
    with_other = load_runs([*folders.values(), other])
    refused(
        lambda r: {**r, "model_dir": os.path.join(other, "model")}, "not one of the retrieval study's runs", with_other
    )
    with pytest.raises(ConfigError, match="two evaluations of .* reranked alike"):
        load_evaluations([good, good], runs)


def test_the_report_writes_the_reranked_rows_from_the_command_line(tmp_path):
    folders = study(tmp_path)
    evaluation = rerank(tmp_path, folders, "hard", "ATEC", {"mrr@10": 0.02})
    report_main([*folders.values(), "--evaluations", evaluation, "--output-dir", str(tmp_path / "docs")])
    text = (tmp_path / "docs" / "retrieval.md").read_text()
    assert f"| {HARD}{RERANKED_BY} | 44.00 | – | – | 44.00* |" in rows_of(text, "MRR@10")
    assert (tmp_path / "docs" / "retrieval.png").read_bytes()[:4] == b"\x89PNG"
    # an evaluation's bad file stops the report before anything is written
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ConfigError, match="'model_dir' is missing"):
        write_report(list(folders.values()), str(tmp_path / "docs2"), evaluations=[str(tmp_path / "bad.json")])
    assert not (tmp_path / "docs2").exists()


STS_B = [("我们是人", "你们是人", "3.8"), ("他在", "她在", "0.25"), ("大国", "中国", "5"), ("上", "下", "1.2")]


def write_senteval(root, task, split, rows):
    folder = root / "senteval_cn" / task
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{task}.{split}.data").write_text("".join(f"{a}\t{b}\t{label}\n" for a, b, label in rows))


@pytest.mark.parametrize("task, split, count", [("STS-B", "train", 30), ("BQ", "test", 7), ("BQ", "test", 100)])
def test_the_subset_writer_writes_the_pairs_a_seeded_run_samples(tmp_path, task, split, count):
    rows = []
    for number in range(40):
        a, b, label = STS_B[number % len(STS_B)]
        rows.append((f"{a}{number}", f"{b}{number}", label if task == "STS-B" else str(number % 2)))
    write_senteval(tmp_path / "data", task, split, rows)
    output = tmp_path / "subsets" / f"{task}.{split}.tsv"
    written, total = write_task_subset(tmp_path / "data", task, split, count, 42, output)
    expected = load_task(tmp_path / "data" / "senteval_cn", task, split).sample(count, 42)
    assert (written, total) == (min(count, 40), 40) == (len(expected), 40)
    read_back = read_pair_file(output)
    assert read_back.texts_a == expected.texts_a and read_back.texts_b == expected.texts_b
    assert read_back.labels.dtype == expected.labels.dtype and np.array_equal(read_back.labels, expected.labels)
    if count < 40:  # a subset in file order, not the first lines
        assert expected.texts_a != [a for a, _, _ in rows[:count]]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_the_subset_script_writes_once_and_names_what_it_wrote(tmp_path, capsys):
    write_senteval(tmp_path / "data", "STS-B", "test", STS_B)
    output = str(tmp_path / "STS-B.test.tsv")
    arguments = ["STS-B", "test", "--count", "3", "--seed", "7", "--data-dir", str(tmp_path / "data")]
    subset_main([*arguments, "--output", output])
    assert capsys.readouterr().out == f"{output}: 3 of the 4 STS-B test pairs (seed 7)\n"
    first = read(output)
    kept = load_task(tmp_path / "data" / "senteval_cn", "STS-B", "test").sample(3, 7)
    labels = {a: label for a, _, label in STS_B}  # as the file writes them: the shortest decimal
    assert first == "".join(f"{a}\t{b}\t{labels[a]}\n" for a, b in zip(kept.texts_a, kept.texts_b))
    with pytest.raises(SystemExit, match="exists; nothing was written"):
        subset_main([*arguments, "--count", "2", "--output", output])
    assert read(output) == first
    subset_main([*arguments, "--count", "2", "--output", output, "--overwrite"])
    assert len(read(output).splitlines()) == 2
