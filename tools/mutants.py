"""Planted bugs: each must make at least one fast test fail (``make mutants``; not part of CI).

Every mutant is one textual change to the library. For each, the fast tests of the loss,
pooling, pipeline, metrics, callbacks and engine run against a copy of the tree holding that
change; a mutant is killed when a test fails, and survives when all pass. Writes
``tools/mutants.json`` and prints a line per mutant, survivors last.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST_TESTS = [
    "tests/losses/test_cosent.py",
    "tests/losses/test_interaction_cosent.py",
    "tests/losses/test_mse.py",
    "tests/losses/test_contrastive.py",
    "tests/losses/test_softmax.py",
    "tests/test_layers.py",
    "tests/data/test_pipeline.py",
    "tests/test_evaluation.py",
    "tests/test_callbacks.py",
    "tests/training/test_scripts.py",
    "tests/training/test_options.py",
    "tests/training/test_learning.py",
    "tests/training/test_recipes.py",
    "tests/training/test_resume.py",
    "tests/training/test_own_files.py",
]

# (name, file, text to replace, replacement)
MUTANTS = [
    (
        "CoSENT loss of the wrong sign",
        "cosent_tf/losses/registry.py",
        "lambda scale, global_batch=True, **_: CoSENTLoss(scale, global_batch)",
        "lambda scale, global_batch=True, **_: CoSENTLoss(-scale, global_batch)",
    ),
    (
        "--scale ignored",
        "cosent_tf/losses/registry.py",
        "lambda scale, global_batch=True, **_: CoSENTLoss(scale, global_batch)",
        "lambda scale, global_batch=True, **_: CoSENTLoss(20.0, global_batch)",
    ),
    (
        "--epsilon ignored",
        "cosent_tf/losses/registry.py",
        "ThresholdContrastiveLoss(epsilon, positive_above=positive_above)",
        "ThresholdContrastiveLoss(0.5, positive_above=positive_above)",
    ),
    (
        "MSE label range ignored",
        "cosent_tf/losses/registry.py",
        "CosineMSELoss(max_label=max_label)",
        "CosineMSELoss(max_label=1.0)",
    ),
    (
        "--checkpoint ignored",
        "cosent_tf/training/engine.py",
        "build_encoder(cfg.config, cfg.checkpoint,",
        "build_encoder(cfg.config, None,",
    ),
    (
        "classes not made for a classification loss",
        "cosent_tf/training/engine.py",
        "labels = task.classes(labels) if self.loss.on_classes else labels",
        "labels = labels",
    ),
    (
        "--precision ignored",
        "cosent_tf/training/engine.py",
        "dtype_policy(policy_name(cfg.precision))",
        "dtype_policy(policy_name('float32'))",
    ),
    (
        "--no-group-by-length ignored",
        "cosent_tf/training/engine.py",
        "group_by_length=cfg.group_by_length, seed=cfg.seed",
        "group_by_length=True, seed=cfg.seed",
    ),
    (
        "threshold tuned on test",
        "cosent_tf/training/engine.py",
        "task_metrics(test_scores, test.labels, valid_scores, valid.labels, binary=binary)",
        "task_metrics(test_scores, test.labels, test_scores, test.labels, binary=binary)",
    ),
    (
        "interaction labels of a sorted index",
        "cosent_tf/data/pipeline.py",
        "yield (token_ids, segment_ids(token_ids, sep_id)), labels[index]",
        "yield (token_ids, segment_ids(token_ids, sep_id)), labels[np.sort(index)]",
    ),
    (
        "pair labels not interleaved",
        "cosent_tf/data/pipeline.py",
        "np.repeat(labels[index], 2)",
        "np.tile(labels[index], 2)",
    ),
    (
        "ranking order reversed",
        "cosent_tf/losses/cosent.py",
        "ordered = labels[:, None] > labels[None, :]",
        "ordered = labels[:, None] < labels[None, :]",
    ),
    (
        "padding enters the mean",
        "cosent_tf/layers.py",
        "weights = mask[:, :, None]",
        "weights = tf.ones_like(mask)[:, :, None]",
    ),
    ("[CLS] pooling takes the last token", "cosent_tf/layers.py", "return last[:, 0]", "return last[:, -1]"),
    (
        "accuracy counts ties as positive",
        "cosent_tf/evaluation.py",
        "np.mean((np.asarray(scores) > threshold)",
        "np.mean((np.asarray(scores) >= threshold)",
    ),
    (
        "best weights not restored",
        "cosent_tf/callbacks.py",
        "            self.model.set_weights(self._best_weights)",
        "            pass",
    ),
]


def run(tree, tests, timeout):
    env = {**os.environ, "PYTHONPATH": tree}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow", *tests]
    try:
        result = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "killed (timeout)", ""
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    return ("killed" if result.returncode else "survived"), (failed[0] if failed else result.stdout[-200:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the mutants whose name contains this text")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--output", default=os.path.join(ROOT, "tools", "mutants.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tree:
        for name in ("cosent_tf", "tests", "scripts"):
            shutil.copytree(
                os.path.join(ROOT, name), os.path.join(tree, name), ignore=shutil.ignore_patterns("__pycache__")
            )
        shutil.copy(os.path.join(ROOT, "pyproject.toml"), tree)
        results = []
        for name, path, old, new in MUTANTS:
            if args.only and args.only not in name:
                continue
            target = os.path.join(tree, path)
            with open(target, encoding="utf-8") as f:
                original = f.read()
            if original.count(old) != 1:
                raise SystemExit(f"{path}: the text of mutant {name!r} is not there exactly once; update MUTANTS")
            started = time.time()
            with open(target, "w", encoding="utf-8") as f:
                f.write(original.replace(old, new))
            try:
                outcome, evidence = run(tree, FAST_TESTS, args.timeout)
            finally:
                with open(target, "w", encoding="utf-8") as f:
                    f.write(original)
            results.append(
                {
                    "mutant": name,
                    "file": path,
                    "outcome": outcome,
                    "evidence": evidence,
                    "seconds": round(time.time() - started, 1),
                }
            )
            print(f"{outcome:9} {name} ({path}): {evidence}", flush=True)
    survivors = [r for r in results if r["outcome"] == "survived"]
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump({"mutants": results, "survivors": [r["mutant"] for r in survivors]}, f, indent=2)
        f.write("\n")
    print(
        f"{len(results) - len(survivors)} of {len(results)} mutants killed; survivors: "
        + (", ".join(r["mutant"] for r in survivors) or "none")
    )


if __name__ == "__main__":
    main()
