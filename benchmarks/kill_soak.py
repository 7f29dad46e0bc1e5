"""Kill soak: training runs SIGKILLed at random moments, rerun until they finish, against one
that was never interrupted.

Usage: ``python benchmarks/kill_soak.py [--trials 8] [--seed 0]`` (``make kill-soak``).
Each trial trains a tiny random BERT on tiny generated BQ-style data with
``scripts/cosent.py`` (3 epochs of 6 steps, validation and a training-state backup every 2
steps) and kills it with SIGKILL at a moment drawn uniformly over the uninterrupted run's
time from its first epoch to its end (training, testing, writing the model); then runs the
same command again, and so on, until a run finishes before its kill (after ``--max-kills``
kills a run is let finish) or a kill lands after the run wrote its results.
A trial passes when:

* the finished run has the uninterrupted run's validation rows (same steps, Spearman within
  1e-6), best epoch, test Spearman (1e-6) and test scores (1e-5), and no backup left;
* every run of it exited 0 or was the one killed (no other status, no ``Traceback``);
* nothing outside its output folder changed: the data, config and vocabulary files, the
  empty working folder each run starts in, and the output folder's parent, which holds no
  ``.tmp-*`` or ``.old-*`` leftovers.

Writes ``benchmarks/kill_soak.json`` (every trial: its kill times, the step each rerun resumed
at, failures) and ``benchmarks/KILL_SOAK.md``; exits 1 if a trial failed.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import common  # noqa: E402

CHARACTERS = "我你他她们是的不了在有人这中大为上个国和地到以说时要就出会可也"
OPTIONS = ["--batch-size", "8", "--lr", "1e-3", "--epochs", "3", "--eval-every", "2", "--backup-every", "2"]


def write_inputs(root, seed=0):
    """A vocabulary, a 1-layer config and BQ train/valid/test files of 48/24/24 learnable pairs."""
    rng = np.random.default_rng(seed)
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(CHARACTERS)
    with open(os.path.join(root, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(vocab) + "\n")
    config = dict(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        hidden_act="gelu",
        max_position_embeddings=64,
        type_vocab_size=2,
    )
    with open(os.path.join(root, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    folder = os.path.join(root, "data", "senteval_cn", "BQ")
    os.makedirs(folder)
    for split, count in (("train", 48), ("valid", 24), ("test", 24)):
        lines = []
        for _ in range(count):
            first = "".join(rng.choice(list(CHARACTERS), 6))
            shared = int(rng.integers(0, 6))
            second = first[:shared] + "".join(rng.choice(list(CHARACTERS), 6 - shared))
            lines.append(f"{first}\t{second}\t{int(shared >= 3)}\n")
        with open(os.path.join(folder, f"BQ.{split}.data"), "w", encoding="utf-8") as f:
            f.writelines(lines)
    data = ["--data-dir", os.path.join(root, "data"), "--config", os.path.join(root, "config.json")]
    return data + ["--vocab", os.path.join(root, "vocab.txt")]


def snapshot(root, leave_out):
    """Every path under ``root`` but ``leave_out``: a file with its size and modification time, a
    folder by its name (its time changes when the output folder inside it is made)."""
    seen = {}
    for folder, names, files in os.walk(root):
        names[:] = [n for n in names if os.path.join(folder, n) != leave_out]
        for name in names:
            seen[os.path.relpath(os.path.join(folder, name), root)] = "folder"
        for name in files:
            stat = os.lstat(os.path.join(folder, name))
            seen[os.path.relpath(os.path.join(folder, name), root)] = (stat.st_size, stat.st_mtime_ns)
    return seen


def run(command, cwd, kill_after=None):
    """(exit status, stderr, seconds from its first training epoch to its end) of ``command``,
    SIGKILLed ``kill_after`` seconds after Keras starts its first epoch (start-up, which is most
    of a tiny run, is not where the state on disk changes)."""
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines, timer, training_from = [], None, None
    for line in process.stderr:
        lines.append(line)
        if training_from is None and line.startswith("Epoch "):
            training_from = time.time()
            if kill_after is not None:
                timer = threading.Timer(kill_after, process.kill)
                timer.start()
    process.wait()
    if timer is not None:
        timer.cancel()
    return process.returncode, "".join(lines), time.time() - (training_from or time.time())


def outputs(folder):
    rows = []
    with open(os.path.join(folder, "valid_metrics.csv"), encoding="utf-8") as f:
        header = f.readline().strip().split(",")
        for line in f:
            row = dict(zip(header, line.strip().split(",")))
            rows.append((row["epoch"], row["step"], float(row["spearman"])))
    with open(os.path.join(folder, "metrics.json"), encoding="utf-8") as f:
        metrics = json.load(f)
    scores = np.load(os.path.join(folder, "test_scores.npz"))["BQ.scores"]
    return rows, metrics, scores


def differences(got, expected):
    (rows, metrics, scores), (rows0, metrics0, scores0) = got, expected
    found = []
    if [r[:2] for r in rows] != [r[:2] for r in rows0]:
        found.append(f"validation steps {[r[:2] for r in rows]} != {[r[:2] for r in rows0]}")
    elif max((abs(a[2] - b[2]) for a, b in zip(rows, rows0)), default=0) > 1e-6:
        found.append("validation Spearman differs by more than 1e-6")
    if metrics["best_epoch"] != metrics0["best_epoch"]:
        found.append(f"best epoch {metrics['best_epoch']} != {metrics0['best_epoch']}")
    if abs(metrics["test"]["spearman"] - metrics0["test"]["spearman"]) > 1e-6:
        found.append(f"test Spearman {metrics['test']['spearman']} != {metrics0['test']['spearman']}")
    if scores.shape != scores0.shape or np.max(np.abs(scores - scores0)) > 1e-5:
        found.append("test scores differ by more than 1e-5")
    return found


def trial(number, command, root, reference_seconds, rng, max_kills):
    out = os.path.join(root, "runs", f"trial-{number}")
    cwd = os.path.join(root, f"cwd-{number}")
    os.makedirs(cwd)
    before = snapshot(root, out)
    record = {"trial": number, "kills": [], "resumed_at": [], "starts": [], "failures": []}
    while True:
        kill_after = rng.uniform(0, reference_seconds) if len(record["kills"]) < max_kills else None
        code, stderr, seconds = run(command + ["--output-dir", out], cwd, kill_after)
        record["resumed_at"] += [int(s) for s in re.findall(r"resumed at step (\d+)", stderr)]
        record["starts"] += re.findall(r"(resuming the unfinished run|training from scratch)", stderr)
        if "Traceback" in stderr:
            record["failures"].append(f"a traceback: {stderr[-1500:]}")
        if code == -signal.SIGKILL:
            record["kills"].append(round(kill_after, 2))
            if not os.path.exists(os.path.join(out, "metrics.json")):
                continue  # killed after it finished (while exiting): nothing left to resume
        if code != 0:
            record["failures"].append(f"exit status {code}: {stderr[-1500:]}")
        break
    after = snapshot(root, out)
    changed = sorted(set(before) ^ set(after) | {p for p in before if p in after and before[p] != after[p]})
    if changed:
        record["failures"].append(f"changed outside the output folder: {changed[:10]}")
    return record, out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--max-kills", type=int, default=6, help="kills per trial before a run is let finish")
    parser.add_argument("--seed", type=int, default=0, help="seeds the kill moments")
    parser.add_argument("--output", default=os.path.join(HERE, "kill_soak.json"))
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    root = tempfile.mkdtemp(prefix="kill-soak-")
    try:
        command = [sys.executable, os.path.join(ROOT, "scripts", "cosent.py"), "BQ", *write_inputs(root), *OPTIONS]
        os.makedirs(os.path.join(root, "runs"))
        code, stderr, reference_seconds = run(command + ["--output-dir", os.path.join(root, "runs", "whole")], root)
        if code != 0:
            raise SystemExit(f"the uninterrupted run failed ({code}):\n{stderr[-3000:]}")
        expected = outputs(os.path.join(root, "runs", "whole"))
        print(
            f"uninterrupted run: {reference_seconds:.1f} s from its first epoch; CPU {common.cpu_name()}",
            file=sys.stderr,
        )
        trials = []
        for number in range(args.trials):
            record, out = trial(number, command, root, reference_seconds, rng, args.max_kills)
            if not record["failures"]:
                record["failures"] += differences(outputs(out), expected)
                if os.path.exists(os.path.join(out, "backup")):
                    record["failures"].append("the backup outlived the finished run")
            leftovers = [n for n in os.listdir(os.path.dirname(out)) if n.startswith((".tmp-", ".old-"))]
            if leftovers:
                record["failures"].append(f"leftovers beside the output folder: {leftovers}")
            trials.append(record)
            print(
                f"trial {number}: {len(record['kills'])} kills at {record['kills']} s, resumed at "
                f"{record['resumed_at']}: {'; '.join(record['failures']) or 'same result'}",
                file=sys.stderr,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    failed = [t for t in trials if t["failures"]]
    summary = {
        "cpu": common.cpu_name(),
        "uninterrupted_seconds": round(reference_seconds, 1),
        "trials": len(trials),
        "kills": sum(len(t["kills"]) for t in trials),
        "failed": len(failed),
        "every_trial": trials,
    }
    with open(args.output + ".tmp", "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    os.replace(args.output + ".tmp", args.output)
    lines = [
        "# Kill soak",
        "",
        f"`make kill-soak` on {summary['cpu']}: {summary['trials']} trials, {summary['kills']} SIGKILLs at random "
        f"moments (the uninterrupted run took {summary['uninterrupted_seconds']} s from its first epoch to its end); "
        f"{summary['failed']} trials failed.",
        "",
        "| trial | kills (s after the first epoch began) | resumed at step | result |",
        "|---|---|---|---|",
    ]
    for t in trials:
        result = "; ".join(t["failures"]) or "the uninterrupted run's result, nothing written outside its folder"
        lines.append(f"| {t['trial']} | {t['kills']} | {t['resumed_at']} | {result[:300]} |")
    with open(os.path.join(HERE, "KILL_SOAK.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
