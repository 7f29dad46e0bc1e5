"""The training scripts end to end: what each hands the engine, their outputs, their messages."""

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from cosent_tf import (
    PairScorer,
    SentenceEncoder,
    read_senteval,
)
from cosent_tf.calibration import format_threshold
from cosent_tf.experiments.scripts import train_main
from cosent_tf.training import engine as training
from tests.helpers import ROOT, read_until_closed
from tests.training.run_helpers import RUN_FILES, read_csv

SCRIPTS = [
    ("cosent.py", "BQ"),
    ("cosent.py", "STS-B", "--loss", "mse"),
    ("cosent.py", "BQ", "--loss", "contrastive", "--epsilon", "0.2"),
    ("sbert.py", "STS-B"),
    ("cosent_nli.py",),
    ("sbert_nli.py",),
    ("interact.py", "BQ"),
    ("interact_cosent.py", "PAWSX"),
]


# What each script hands the engine: (kind, loss, task fixed by the script).
SCRIPT_ENTRIES = {
    "cosent.py": ("feature", "cosent", None),
    "sbert.py": ("feature", "sbert", None),
    "cosent_nli.py": ("feature", "cosent", "NLI"),
    "sbert_nli.py": ("feature", "sbert", "NLI"),
    "interact.py": ("interaction", "ce", None),
    "interact_cosent.py": ("interaction", "cosent", None),
}


@pytest.mark.parametrize("script", sorted(SCRIPT_ENTRIES))
def test_each_script_hands_the_engine_its_kind_loss_and_task(script, monkeypatch):
    import runpy

    from cosent_tf.experiments import scripts

    called = {}
    monkeypatch.setattr(
        scripts,
        "train_main",
        lambda argv=None, kind=None, loss=None, task=None: called.update(kind=kind, loss=loss, task=task),
    )
    runpy.run_path(os.path.join(ROOT, "scripts", script), run_name="__main__")
    assert (called["kind"], called["loss"], called["task"]) == SCRIPT_ENTRIES[script]


@pytest.mark.heavy
@pytest.mark.parametrize(
    "command",
    [pytest.param(c, marks=[pytest.mark.slow] if c == SCRIPTS[0] else []) for c in SCRIPTS],
    ids=[" ".join(c) for c in SCRIPTS],
)
def test_every_script_runs_end_to_end(command, tiny_setup, capsys):
    """The first one runs as a process (the scripts' entry point), the others in this one."""
    tmp_path, options = tiny_setup
    out = tmp_path / "run"
    extra = ["--steps-per-epoch", "3", "--max-eval-pairs", "12"] if command[0].endswith("_nli.py") else []
    argv = [*command[1:], "--epochs", "2", "--output-dir", str(out), *options, *extra]
    if command == SCRIPTS[0]:
        result = subprocess.run(
            [sys.executable, os.path.join(ROOT, "scripts", command[0]), *argv],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-3000:]
    else:
        kind, loss, task = SCRIPT_ENTRIES[command[0]]
        capsys.readouterr()
        train_main(argv, kind=kind, loss=loss, task=task)
        printed = capsys.readouterr()
    assert sorted(os.listdir(out)) == RUN_FILES  # the backup is gone once the run has finished
    metrics = json.loads((out / "metrics.json").read_text())
    assert -1 <= metrics["test"]["spearman"] <= 1 and metrics["best_epoch"] in (1, 2)
    assert metrics["comparable"] is True
    task = metrics["task"]
    if task == "NLI":
        assert sorted(metrics["tasks"]) == ["ATEC", "BQ", "LCQMC", "PAWSX", "STS-B"]
        expected = np.mean([m["test"]["spearman"] for m in metrics["tasks"].values()])
        assert metrics["test"]["spearman"] == pytest.approx(expected)
        assert metrics["train_pairs"] == 40
    if task in ("BQ", "PAWSX"):
        assert 0 <= metrics["test"]["accuracy"] <= 1 and "threshold" in metrics["test"]
    if task == "STS-B":
        assert "accuracy" not in metrics["test"]
    rows = read_csv(out / "valid_metrics.csv")
    assert [(r["epoch"], r["end_of_epoch"]) for r in rows] == [("1", "True"), ("2", "True")]
    best_row = rows[metrics["best_epoch"] - 1]
    assert float(best_row["spearman"]) == pytest.approx(max(float(r["spearman"]) for r in rows))
    with open(out / "valid_curve.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    scores = np.load(out / "test_scores.npz")
    for name, result_of_task in metrics["tasks"].items():  # test Spearman and Pearson of the saved scores
        saved, labels = scores[f"{name}.scores"], scores[f"{name}.labels"]
        assert len(saved) > 0 and result_of_task["test"]["pearson"] == pytest.approx(stats.pearsonr(saved, labels)[0])
        assert result_of_task["test"]["spearman"] == pytest.approx(stats.spearmanr(saved, labels).correlation)
    # the final metrics, and nothing else, on stdout; the summary last on stderr
    if command == SCRIPTS[0]:
        assert_summary(result.stdout, result.stderr, metrics, out)
    else:
        assert_summary(printed.out, printed.err, metrics, out)
    if task != "NLI":  # the model folder reproduces the run's test scores and carries its threshold
        matcher = (PairScorer if metrics["kind"] == "interaction" else SentenceEncoder).load(out / "model")
        test = read_senteval(tmp_path / "data" / "senteval_cn" / task / f"{task}.test.data")
        np.testing.assert_allclose(matcher.similarity(test.texts_a, test.texts_b), scores[f"{task}.scores"], atol=1e-5)
        assert matcher.threshold == metrics["test"].get("threshold")


@pytest.mark.slow
def test_script_reports_a_diverged_run_without_a_traceback(tiny_setup):
    tmp_path, options = tiny_setup
    result = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "scripts", "cosent.py"),
            "BQ",
            "--loss",
            "mse",
            "--epochs",
            "2",
            "--output-dir",
            str(tmp_path / "nan"),
            *options,
            "--lr",
            "1e30",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert "error: the training loss became nan at step" in result.stderr
    assert "Nothing was saved yet" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--batch-size", "0", "must be at least 1, got 0"),
        ("--epochs", "0", "must be at least 1, got 0"),
        ("--max-train-pairs", "-5", "must be at least 1, got -5"),
        ("--lr", "0", "must be above 0, got 0"),
        ("--lr", "nan", "must be above 0, got nan"),
        ("--train-from-valid", "1.5", "must be above 0 and at most 1"),
        ("--maxlen", "two", "'two' is not an integer"),
        ("--eval-every", "-1", "must be at least 0, got -1"),
    ],
)
def test_numbers_from_the_command_line_are_checked(option, value, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        train_main(["BQ", option, value])
    assert stopped.value.code == 2
    assert f"argument {option}: {message}" in capsys.readouterr().err


def test_sigint_while_reading_data_stops_without_a_traceback(tiny_setup, monkeypatch, capsys):
    tmp_path, options = tiny_setup

    def interrupted(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(training, "load_run_data", interrupted)
    with pytest.raises(SystemExit) as stopped:
        train_main(["BQ", "--output-dir", str(tmp_path / "run")] + options)
    assert stopped.value.code == 128 + signal.SIGINT
    assert "stopped: SIGINT received; run the same command again" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("every", ["0", "2"], ids=["at epoch ends", "within epochs"])
def test_on_a_terminal_every_validation_line_starts_a_line_of_its_own(every, tiny_setup, monkeypatch, capsys):
    """`scripts/cosent.py BQ` with stderr, where the progress bar and the log go, on a terminal."""
    import pty
    import threading

    tmp_path, options = tiny_setup
    terminal, process_side = pty.openpty()
    shown = []
    # A terminal holds a few kilobytes: it is read while the run writes, or the run would wait on it.
    reader = threading.Thread(target=read_until_closed, args=(terminal, shown), daemon=True)
    reader.start()
    try:
        with open(process_side, "w", encoding="utf-8", buffering=1) as stderr:
            monkeypatch.setattr(sys, "stderr", stderr)
            train_main(["BQ", "--epochs", "2", "--eval-every", every, "--output-dir", str(tmp_path / "run"), *options])
            monkeypatch.undo()
        reader.join(timeout=60)
    finally:
        os.close(terminal)
    text = b"".join(shown).decode("utf-8")
    assert json.loads(capsys.readouterr().out)["best_epoch"] in (1, 2)  # stdout: the metrics alone
    # a live progress bar was drawn: redrawn in place (a terminal's "\r" alone is its line end)
    assert "\b" in text and re.search(r"\d+/\d+ \[=+\]", text) and "Epoch 2/2" in text
    lines = re.findall(r"(.?)((?:step|epoch) \d+ valid:)", text, flags=re.DOTALL)
    assert len(lines) >= 2 and all(before == "\n" for before, _ in lines), lines


def test_stderr_in_a_log_file_gets_one_line_an_epoch_though_stdout_is_a_terminal(tiny_setup, monkeypatch, capsys):
    """`scripts/cosent.py BQ 2> train.log` from a terminal: no progress bar redrawn into the log."""
    import pty

    tmp_path, options = tiny_setup
    terminal, process_side = pty.openpty()
    saved_stdout = os.dup(1)
    try:
        with open(tmp_path / "train.log", "w") as log:
            monkeypatch.setattr(sys, "stderr", log)
            os.dup2(process_side, 1)  # file descriptor 1 is a terminal, as the user's
            train_main(["BQ", "--epochs", "2", "--output-dir", str(tmp_path / "run"), *options])
    finally:
        os.dup2(saved_stdout, 1)
        for fd in (saved_stdout, terminal, process_side):
            os.close(fd)
    text = (tmp_path / "train.log").read_text(encoding="utf-8")
    assert "\r" not in text and "\b" not in text
    assert re.findall(r"^Epoch \d/2$", text, flags=re.MULTILINE) == ["Epoch 1/2", "Epoch 2/2"]
    assert len(re.findall(r"^\d+/\d+ - .*loss:", text, flags=re.MULTILINE)) == 2  # Keras's line per epoch
    assert json.loads(capsys.readouterr().out)["best_epoch"] in (1, 2)


def assert_summary(stdout, stderr, metrics, out):
    """A finished run's stdout is its JSON line alone; stderr ends with a readable summary."""
    assert stdout.count("\n") == 1
    printed = json.loads(stdout)
    assert printed == {k: metrics[k] for k in ("valid", "test", "best_epoch", "wall_seconds")}
    summary = stderr.rstrip("\n").splitlines()[-1]  # the last line on stderr
    task, test, valid = metrics["task"], metrics["test"], metrics["valid"]
    assert summary.startswith(f"{task} {metrics['kind']} {metrics['loss']}: test spearman {test['spearman']:.4f}")
    assert f"valid spearman {valid['spearman']:.4f} at epoch {metrics['best_epoch']}" in summary
    assert f"model in {out / 'model'}" in summary
    if "accuracy" in test:  # a binary task: accuracy at the threshold tuned on valid, beside the majority's
        with np.load(out / "test_scores.npz") as saved:
            labels = saved[f"{task}.labels"]
        matches = sum(1 for label in labels if label > 0.5)
        answer = (
            '"match"'
            if 2 * matches > len(labels)
            else '"no match"'
            if 2 * matches < len(labels)
            else '"match" (or "no match")'
        )
        majority = max(matches, len(labels) - matches) / len(labels)
        assert (
            f"accuracy {test['accuracy']:.4f} at threshold {format_threshold(test['threshold'])} "
            f"(answering {answer} every time: {majority:.4f})"
        ) in summary
        assert test["majority_accuracy"] == pytest.approx(majority, abs=1e-12)
    else:
        assert "accuracy" not in summary
    assert "random weights" in summary  # tiny_setup's runs have no --checkpoint


def test_a_run_ends_with_a_readable_summary_on_stderr_and_the_json_line_alone_on_stdout(bq_run):
    # The zoo's BQ run printed this (a binary task); test_every_script_runs_end_to_end checks the
    # summary of every script's run, graded STS-B's among them.
    metrics = json.loads((bq_run.run / "metrics.json").read_text())
    assert metrics["task"] == "BQ" and "accuracy" in metrics["test"]
    assert_summary(bq_run.stdout, bq_run.stderr, metrics, bq_run.run)
