"""Training on a user's own pair files (cosent-tf train), and what cannot train on them."""

import csv
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from cosent_tf import (
    SentenceEncoder,
)
from tests.helpers import run_until, tiny_pairs
from tests.training.run_helpers import read_csv


def write_own_files(folder, rng, count):
    """The same kind of pairs as a TSV (with a header), a CSV (quoted commas) and a JSONL file."""
    rows = tiny_pairs(rng, count, scores=False)
    rows = [(a + "，" if i % 5 == 0 else a, b, label) for i, (a, b, label) in enumerate(rows)]
    folder.mkdir(exist_ok=True)
    (folder / "pairs.tsv").write_text(
        "text_a\ttext_b\tlabel\n" + "".join(f"{a}\t{b}\t{label}\n" for a, b, label in rows), encoding="utf-8"
    )
    with open(folder / "pairs.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["q1", "q2", "same"])
        writer.writerows(rows)
    (folder / "pairs.jsonl").write_text(
        "".join(
            json.dumps({"sentence1": a, "sentence2": b, "label": label}, ensure_ascii=False) + "\n"
            for a, b, label in rows
        ),
        encoding="utf-8",
    )
    return rows


def brute_force_retrieval(query_vectors, corpus_vectors, relevant):
    """Recall@1/5/10, MRR@10, nDCG@10 from a full similarity matrix and a stable sort."""
    order = np.argsort(-(query_vectors @ corpus_vectors.T), axis=1, kind="stable")
    recall = {k: [] for k in (1, 5, 10)}
    mrr, ndcg = [], []
    for ranking, wanted in zip(order, relevant):
        hits = [int(i) in wanted for i in ranking[:10]]
        for k in recall:
            recall[k].append(sum(hits[:k]) / len(wanted))
        mrr.append(next((1 / (r + 1) for r, hit in enumerate(hits) if hit), 0.0))
        dcg = sum(1 / np.log2(r + 2) for r, hit in enumerate(hits) if hit)
        ndcg.append(dcg / sum(1 / np.log2(r + 2) for r in range(min(len(wanted), 10))))
    return {**{f"recall@{k}": np.mean(v) for k, v in recall.items()}, "mrr@10": np.mean(mrr), "ndcg@10": np.mean(ndcg)}


@pytest.mark.slow
def test_own_files_train_from_the_command_line_resume_and_evaluate(tiny_setup, capsys):
    """Each format trains the same run, the TSV one killed and resumed; every run with Matryoshka
    widths, which the run records and its model keeps."""
    from cosent_tf.cli import main as cosent_tf
    from cosent_tf.evaluation import pair_retrieval_sets

    tmp_path, options = tiny_setup
    options = [o for i, o in enumerate(options) if "--data-dir" not in options[max(i - 1, 0) : i + 1]]
    rng = np.random.default_rng(5)
    write_own_files(tmp_path / "train", rng, 96)
    test_rows = write_own_files(tmp_path / "test", rng, 40)
    cli = os.path.join(os.path.dirname(sys.executable), "cosent-tf")
    fields = {"csv": ["--text-a-field", "q1", "--text-b-field", "q2", "--label-field", "same"], "jsonl": [], "tsv": []}
    results = {}
    for extension, extra in fields.items():
        out = tmp_path / f"run-{extension}"
        command = [
            cli,
            "train",
            "--train",
            str(tmp_path / "train" / f"pairs.{extension}"),
            "--test",
            str(tmp_path / "test" / f"pairs.{extension}"),
            "--epochs",
            "2",
            "--eval-every",
            "3",
            "--backup-every",
            "3",
            # Matryoshka widths given narrowest first: recorded, and kept by the resumed run
            "--matryoshka-dims",
            "4,16,8",
            "--matryoshka-weights",
            "0.5,1,1",
            *extra,
            *options,
            "--output-dir",
            str(out),
        ]
        if extension == "tsv":  # killed mid-run (a process, to be killed), then resumed by the same command
            code, _ = run_until(command, "step 6 valid", signal.SIGKILL)
            assert code == -signal.SIGKILL and not (out / "metrics.json").exists()
            result = subprocess.run(command, capture_output=True, text=True, timeout=600)
            assert result.returncode == 0, result.stderr[-3000:]
            stderr = result.stderr
            resumed_at = int(re.search(r"resumed at step (\d+)", stderr).group(1))
            assert resumed_at >= 3 and resumed_at % 3 == 0  # a step whose state was saved (--backup-every 3)
        else:  # the same command line in this process: no process is needed to read a format
            capsys.readouterr()
            assert cosent_tf(command[1:]) == 0
            stderr = capsys.readouterr().err
        assert "no --valid file: a seeded 10% of" in stderr  # the held-out valid is said
        assert (
            "the cosent loss is the weighted sum of the loss at the widths 4, 16, 8 of the vectors "
            "(--matryoshka-dims), weights 0.5, 1, 1" in stderr
        )
        config = json.loads((out / "config.json").read_text())
        assert (config["matryoshka_dims"], config["matryoshka_weights"]) == ([4, 16, 8], [0.5, 1.0, 1.0])
        results[extension] = json.loads((out / "metrics.json").read_text())

    # The three formats hold the same pairs, so the runs are the same run: the resumed TSV run
    # validated where and as the uninterrupted CSV run did, and tested the same.
    whole, resumed = (read_csv(tmp_path / f"run-{extension}" / "valid_metrics.csv") for extension in ("csv", "tsv"))
    assert [r["step"] for r in resumed] == [r["step"] for r in whole]
    assert [float(r["spearman"]) for r in resumed] == pytest.approx([float(r["spearman"]) for r in whole], abs=1e-6)

    def flat(test):
        return {**{k: v for k, v in test.items() if k != "retrieval"}, **test["retrieval"]}

    assert flat(results["csv"]["test"]) == pytest.approx(flat(results["tsv"]["test"]))
    assert flat(results["jsonl"]["test"]) == pytest.approx(flat(results["tsv"]["test"]))
    metrics = results["tsv"]
    assert metrics["train_pairs"] == 96 - 10 and "accuracy" in metrics["test"] and not metrics["comparable"]
    assert metrics["notes"][0].startswith("no --valid file: a seeded 10% of")

    # the resumed run's model: its widths widest first, the full width its default
    model_dir = tmp_path / "run-tsv" / "model"
    assert json.loads((model_dir / "cosent_model.json").read_text())["matryoshka_dims"] == [16, 8, 4]
    encoder = SentenceEncoder.load(model_dir)
    assert encoder.spec.matryoshka_dims == [16, 8, 4] and encoder.width == 16

    # evaluate the model folder: the same test metrics, and retrieval as brute force on the same vectors
    evaluate = ["evaluate", str(model_dir), str(tmp_path / "test" / "pairs.tsv"), "--retrieval"]
    assert cosent_tf([*evaluate, "--output", str(tmp_path / "eval")]) == 0
    evaluated = json.loads((tmp_path / "eval.json").read_text())
    for key in ("spearman", "pearson", "accuracy", "threshold"):
        assert evaluated[key] == pytest.approx(metrics["test"][key], abs=1e-6)
    assert evaluated["retrieval"] == pytest.approx(metrics["test"]["retrieval"], abs=1e-6)
    texts_a = [a for a, _, _ in test_rows]
    queries, corpus, relevant = pair_retrieval_sets(
        texts_a, [b for _, b, _ in test_rows], [label == 1 for _, _, label in test_rows]
    )
    expected = brute_force_retrieval(encoder.encode(queries), encoder.encode(corpus), relevant)
    for key, value in expected.items():
        assert evaluated["retrieval"][key] == pytest.approx(value, abs=1e-6), key
    assert (evaluated["retrieval"]["queries"], evaluated["retrieval"]["corpus"]) == (len(queries), len(corpus))
    scored = (tmp_path / "eval.tsv").read_text(encoding="utf-8").splitlines()
    assert len(scored) == 40 and scored[0].split("\t")[:3] == [str(v) for v in test_rows[0]]


def test_own_files_that_cannot_train_are_refused_before_anything_is_written(tiny_setup):
    from cosent_tf.cli import main as cosent_tf

    tmp_path, options = tiny_setup
    options = [o for i, o in enumerate(options) if "--data-dir" not in options[max(i - 1, 0) : i + 1]]
    rng = np.random.default_rng(2)
    rows = tiny_pairs(rng, 40, scores=False)
    (tmp_path / "train.tsv").write_text("".join(f"{a}\t{b}\t{y}\n" for a, b, y in rows), encoding="utf-8")
    (tmp_path / "graded.tsv").write_text("".join(f"{a}\t{b}\t{y * 2.5}\n" for a, b, y in rows), encoding="utf-8")
    (tmp_path / "words.tsv").write_text("".join(f"{a}\t{b}\tneutral\n" for a, b, y in rows), encoding="utf-8")
    (tmp_path / "ones.tsv").write_text("".join(f"{a}\t{b}\t1\n" for a, b, y in rows), encoding="utf-8")
    out = tmp_path / "run"

    def refused(arguments, message):
        with pytest.raises(SystemExit, match=message):
            cosent_tf(["train", *arguments, "--epochs", "1", *options, "--output-dir", str(out)])
        assert not out.exists()

    refused(
        ["--train", str(tmp_path / "train.tsv"), "--valid", str(tmp_path / "graded.tsv")],
        r"graded.tsv: its labels are graded but those of the train file .*train.tsv are binary",
    )
    refused(
        ["--train", str(tmp_path / "train.tsv"), "--test", str(tmp_path / "words.tsv")],
        r"words.tsv: its labels are nli but those of the train file .* are binary",
    )
    refused(
        ["--train", str(tmp_path / "ones.tsv"), "--valid", str(tmp_path / "train.tsv")],
        r"ones.tsv: all 40 pairs \(after any sampling\) have the label 1: there is nothing to rank.*"
        r"--allow-single-label",
    )
    refused(
        ["--train", str(tmp_path / "train.tsv"), "--kind", "interaction", "--loss", "mse"],
        r"unknown interaction loss 'mse'; choose one of ce, cosent",
    )
    metrics = cosent_tf(
        [
            "train",
            "--train",
            str(tmp_path / "ones.tsv"),
            "--valid",
            str(tmp_path / "train.tsv"),
            "--allow-single-label",
            "--epochs",
            "1",
            *options,
            "--output-dir",
            str(out),
        ]
    )
    assert metrics == 0 and (out / "metrics.json").exists()
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["task"] == "ones" and saved["notes"] == [
        "no --test file: the test metrics are the valid ones, measured on the data the best epoch (and the "
        "threshold) were chosen on, so they flatter the model"
    ]
    assert saved["test"]["spearman"] == saved["valid"]["spearman"]
