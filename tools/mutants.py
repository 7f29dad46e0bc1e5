"""Planted bugs: each must make at least one test fail (``make mutants``; not part of CI).

Every mutant is one textual change to the library, run against the test modules that test that
code (the engine's, loss's, pooling's, pipeline's, metrics' and callbacks' fast tests share one
list), in a copy of the tree holding that change; a mutant is killed when a test fails, and
survives when all pass. ``--tree`` takes the library and the tests from another checkout, so that
one set of mutants measures two versions of the suite. Writes ``tools/mutants.json`` and prints a
line per mutant, survivors last.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST_TESTS = (
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
)
# Paths the tests read from the environment: a relative one is the caller's, not the copy's; an
# unset one would default to a path inside the copy, which has no environments or data, and every
# test that needs it would fail whatever the mutant.
ENVIRONMENT_PATHS = {
    "COSENT_SHARED_DATA": os.path.join("..", "shared", "data"),
    "COSENT_REFERENCE_PYTHON": os.path.join(".venv-reference", "bin", "python"),
    "COSENT_ONNX_REFERENCE_PYTHON": os.path.join(".venv-onnx-reference", "bin", "python"),
}


class Mutant(NamedTuple):
    name: str
    file: str
    old: str
    new: str
    tests: tuple = FAST_TESTS
    # the Keras 3 suite runs in processes of its own, on the TensorFlow backend, without the
    # Keras 2 suite's conftest
    keras3: bool = False
    # where the test that kills it is marked slow: CI runs those, so the mutant may count on them
    slow: bool = False


# (name, file, text to replace, replacement), against FAST_TESTS
ENGINE_MUTANTS = [
    (
        "CoSENT loss of the wrong sign",
        "cosent_tf/losses/registry.py",
        "losses.CoSENTLoss(scale, global_batch)",
        "losses.CoSENTLoss(-scale, global_batch)",
    ),
    (
        "--scale ignored",
        "cosent_tf/losses/registry.py",
        "losses.CoSENTLoss(scale, global_batch)",
        "losses.CoSENTLoss(20.0, global_batch)",
    ),
    (
        "--epsilon ignored",
        "cosent_tf/losses/registry.py",
        "                epsilon, positive_above=positive_above\n",
        "                0.5, positive_above=positive_above\n",
    ),
    (
        "MSE label range ignored",
        "cosent_tf/losses/registry.py",
        "losses.CosineMSELoss(max_label=max_label)",
        "losses.CosineMSELoss(max_label=1.0)",
    ),
    (
        "--checkpoint ignored",
        "cosent_tf/models/builders.py",
        "    return config.variables(head_scope)",
        "    return None",
    ),
    (
        "classes not made for a classification loss",
        "cosent_tf/training/engine.py",
        "labels = task.classes(train.labels) if self.loss.on_classes else train.labels",
        "labels = train.labels",
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
        "cosent_tf/training/run_results.py",
        "fit_run_decision(valid_scores, valid, tasks[name]",
        "fit_run_decision(test_scores, test, tasks[name]",
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
        "cosent_tf/maths/pairs.py",
        "ordered = labels[:, None] > labels[None, :]",
        "ordered = labels[:, None] < labels[None, :]",
    ),
    (
        "padding enters the mean",
        "cosent_tf/maths/pooling.py",
        "weights = mask[:, :, None]",
        "weights = ops.ones(ops.shape(mask))[:, :, None]",
    ),
    ("[CLS] pooling takes the last token", "cosent_tf/maths/pooling.py", "return last[:, 0]", "return last[:, -1]"),
    (
        "accuracy counts ties as positive",
        "cosent_tf/calibration.py",
        "np.mean((np.asarray(scores, dtype=np.float64) > threshold)",
        "np.mean((np.asarray(scores, dtype=np.float64) >= threshold)",
    ),
    (
        "best weights not restored",
        "cosent_tf/callbacks.py",
        "            self.model.set_weights(self._best_weights)",
        "            pass",
    ),
]

MNRL = ("tests/losses/test_mnrl.py",)
COSENT_IBN = ("tests/losses/test_cosent_ibn.py",)
MINING = ("tests/test_mining.py",)
CALIBRATION = ("tests/test_calibration.py",)
PRECISION = ("tests/inference/test_index_precision.py",)
ANN = ("tests/inference/test_ann_index.py",)
VECTORS = ("tests/inference/test_vectors.py",)
KERAS3_LOSSES = ("tests/keras3/test_losses.py",)
KERAS3_ENCODER = ("tests/keras3/test_encoder.py",)

MUTANTS = [Mutant(*mutant) for mutant in ENGINE_MUTANTS] + [
    # in-batch losses
    Mutant(
        "MNRL: each anchor its own query_to_query negative",
        "cosent_tf/maths/mnrl.py",
        "to_queries = ops.where(same_example, minus_infinity, similarities(queries, queries))",
        "to_queries = similarities(queries, queries)",
        MNRL,
    ),
    Mutant(
        "MNRL: per-direction partitions summed, not averaged",
        "cosent_tf/maths/mnrl.py",
        "        log_partition = log_partition / ops.constant(len(blocks), queries)\n",
        "",
        MNRL,
    ),
    Mutant(
        "MNRL: --partition-mode ignored by the Keras 2 loss",
        "cosent_tf/losses/mnrl.py",
        "self.directions, self.partition_mode, self.global_batch",
        "self.directions, 'joint', self.global_batch",
        MNRL,
    ),
    Mutant(
        "CoSENT-IBN: negative pairs are candidates of the in-batch part",
        "cosent_tf/maths/mnrl.py",
        "return scores if chosen is None else ops.where(candidate_kept, scores, minus_infinity)",
        "return scores",
        COSENT_IBN,
    ),
    Mutant(
        "CoSENT-IBN: the cosine part at the in-batch scale",
        "cosent_tf/maths/cosent_ibn.py",
        "ops.constant(cosine_scale, vectors) * interleaved_cosines(ops, vectors)",
        "ops.constant(ibn_scale, vectors) * interleaved_cosines(ops, vectors)",
        COSENT_IBN,
    ),
    Mutant(
        "CoSENT-IBN: anchors and positives swapped",
        "cosent_tf/maths/cosent_ibn.py",
        "in_batch_negatives(ops, vectors[::2], vectors[1::2][:, None, :]",
        "in_batch_negatives(ops, vectors[1::2], vectors[::2][:, None, :]",
        COSENT_IBN,
    ),
    Mutant(
        "AnglE: the imaginary part of the wrong sign",
        "cosent_tf/maths/angle.py",
        "first[:, half:] * second[:, :half] - first[:, :half] * second[:, half:]",
        "first[:, :half] * second[:, half:] - first[:, half:] * second[:, :half]",
        ("tests/losses/test_angle.py",),
    ),
    # mining
    Mutant(
        "mining: rank window one rank late",
        "cosent_tf/mining.py",
        "cosines, indices = cosines[:, self.lo - 1 :], indices[:, self.lo - 1 :]",
        "cosines, indices = cosines[:, self.lo :], indices[:, self.lo :]",
        MINING,
    ),
    Mutant(
        "mining: margin above the positive instead of below",
        "cosent_tf/mining.py",
        "float(self.positive_cosines[number]) - self.margin",
        "float(self.positive_cosines[number]) + self.margin",
        MINING,
    ),
    Mutant(
        "mining: labelled positives kept as negatives",
        "cosent_tf/mining.py",
        "elif key in matches and key != positive_key:",
        "elif key in matches and key == positive_key:",
        MINING,
    ),
    Mutant(
        "mining: ranks counted from the window's start",
        "cosent_tf/mining.py",
        "kept.append((index, self.lo + position, cosine, math.nan))",
        "kept.append((index, 1 + position, cosine, math.nan))",
        MINING,
    ),
    Mutant(
        "mining: rescore margin of the wrong sign",
        "cosent_tf/mining.py",
        "if score >= positive_score - self.rescore_margin:",
        "if score >= positive_score + self.rescore_margin:",
        MINING,
    ),
    Mutant(
        "mining: top sampling takes the worst-ranked",
        "cosent_tf/mining.py",
        "return survivors[:wanted]",
        "return survivors[-wanted:]",
        MINING,
    ),
    # calibration
    Mutant(
        "decision: a score equal to the threshold is a match",
        "cosent_tf/calibration.py",
        "return np.asarray(scores, dtype=np.float64) > self.threshold(rule)",
        "return np.asarray(scores, dtype=np.float64) >= self.threshold(rule)",
        CALIBRATION,
    ),
    Mutant(
        "calibrate: a threshold may cut between equal scores",
        "cosent_tf/calibration.py",
        "possible = np.concatenate([[True], sorted_scores[1:] > sorted_scores[:-1], [True]])",
        "possible = np.concatenate([[True], sorted_scores[1:] >= sorted_scores[:-1], [True]])",
        CALIBRATION,
    ),
    Mutant(
        "calibrate: held-out folds fitted on every fold",
        "cosent_tf/calibration.py",
        "probabilities[out] = fit(s[~out], y[~out])(s[out])",
        "probabilities[out] = fit(s, y)(s[out])",
        CALIBRATION,
    ),
    Mutant(
        "calibrate: Platt targets of the other class's count",
        "cosent_tf/calibration.py",
        "targets = np.where(y, (positives + 1) / (positives + 2), 1 / (negatives + 2))",
        "targets = np.where(y, (negatives + 1) / (negatives + 2), 1 / (positives + 2))",
        CALIBRATION,
    ),
    Mutant(
        "calibrate: accuracy and F1 thresholds swapped",
        "cosent_tf/calibration.py",
        '"accuracy": best_threshold(s, matches)[0], "f1": best_f1_threshold(s, matches)[0]',
        '"accuracy": best_f1_threshold(s, matches)[0], "f1": best_threshold(s, matches)[0]',
        CALIBRATION,
    ),
    Mutant(
        "calibrate: a label equal to --cut is a match",
        "cosent_tf/calibration.py",
        "        matches = values > cut\n",
        "        matches = values >= cut\n",
        CALIBRATION,
    ),
    # index, ANN and vector precision
    Mutant(
        "index: --rescore-multiplier ignored",
        "cosent_tf/inference/index.py",
        "depth = min(len(self), multiplier * k)",
        "depth = min(len(self), k)",
        PRECISION,
    ),
    Mutant(
        "index: ties go to the higher row",
        "cosent_tf/inference/index.py",
        "order = np.lexsort((positions, -values, rows))",
        "order = np.lexsort((-positions, -values, rows))",
        ("tests/inference/test_index.py",),
    ),
    Mutant(
        "int8 codes truncated, not rounded",
        "cosent_tf/inference/vectors.py",
        "steps_from_low = np.rint((block - ranges[0]) / steps)",
        "steps_from_low = np.floor((block - ranges[0]) / steps)",
        VECTORS,
    ),
    Mutant(
        "binary scores count the padding bits",
        "cosent_tf/inference/vectors.py",
        "signs = np.unpackbits(bits, axis=1, count=dim).astype(np.float32)",
        "signs = np.unpackbits(bits, axis=1).astype(np.float32)",
        VECTORS,
    ),
    Mutant(
        "ANN: --nprobe ignored",
        "cosent_tf/inference/ann.py",
        'params.nprobe = int(settings["nprobe"])',
        "params.nprobe = IVF_NPROBE",
        ANN,
    ),
    Mutant(
        "ANN: as many IVF lists as vectors refused",
        "cosent_tf/inference/ann.py",
        'if kind == "ivf" and settings["nlist"] > count:',
        'if kind == "ivf" and settings["nlist"] >= count:',
        ANN,
    ),
    # ONNX
    Mutant(
        "ONNX export: parity's mean pools the padding",
        "cosent_tf/export/onnx_export.py",
        "pooled = (hidden * kept).sum(axis=1) / kept.sum(axis=1)",
        "pooled = hidden.mean(axis=1)",
        ("tests/export/test_onnx_export.py",),
    ),
    Mutant(
        "ONNX export: the graph ignores attention_mask",
        "cosent_tf/export/onnx_export.py",
        "tf.cast(t[0] * t[1], tf.int32)",
        "tf.cast(t[0], tf.int32)",
        ("tests/inference/test_onnx_model.py",),
    ),
    Mutant(
        "ONNX export: --dim cut after the norm",
        "cosent_tf/export/onnx_export.py",
        "tf.math.l2_normalize(tf.cast(t, tf.float32)[:, :dim], axis=1, epsilon=1e-24)",
        "tf.math.l2_normalize(tf.cast(t, tf.float32), axis=1, epsilon=1e-24)[:, :dim]",
        ("tests/export/test_export_dim.py",),
        slow=True,
    ),
    Mutant(
        "ONNX export: the threshold kept at a --dim width",
        "cosent_tf/export/onnx_export.py",
        "model_spec=dataclasses.asdict(spec if dim is None else dataclasses.replace(spec, threshold=None))",
        "model_spec=dataclasses.asdict(spec)",
        ("tests/export/test_export_dim.py",),
        slow=True,
    ),
    Mutant(
        "ONNX runtime: softmax over the batch",
        "cosent_tf/inference/onnx_model.py",
        "outputs = shifted / shifted.sum(axis=1, keepdims=True)",
        "outputs = shifted / shifted.sum(axis=0, keepdims=True)",
        ("tests/inference/test_onnx_model.py",),
    ),
    Mutant(
        "ONNX runtime: segment ids dropped",
        "cosent_tf/inference/onnx_model.py",
        '"token_type_ids": np.asarray(segment_ids, dtype=np.int64),',
        '"token_type_ids": np.zeros_like(ids),',
        ("tests/inference/test_onnx_model.py",),
    ),
    Mutant(
        "ONNX runtime: int8 loads the float32 file",
        "cosent_tf/inference/onnx_model.py",
        "relative = ONNX_FILES[precision]",
        'relative = ONNX_FILES["float32"]',
        ("tests/export/test_onnx_export.py",),
        slow=True,
    ),
    # Keras 3
    Mutant(
        "Keras 3 encoder: padding enters attention",
        "cosent_tf/keras3/encoder.py",
        '"padding_mask": keras.ops.cast(mask, "int32"),',
        '"padding_mask": keras.ops.ones_like(token_ids),',
        KERAS3_ENCODER,
        keras3=True,
    ),
    Mutant(
        "Keras 3 encoder: vectors in length order, not the texts'",
        "cosent_tf/keras3/encoder.py",
        "vectors[rows] = np.asarray(",
        "vectors[start : start + len(rows)] = np.asarray(",
        KERAS3_ENCODER,
        keras3=True,
    ),
    Mutant(
        "Keras 3 CoSENT-IBN: cosine and in-batch scales swapped",
        "cosent_tf/keras3/losses.py",
        "            self.cosine_scale,\n            self.ibn_scale,\n",
        "            self.ibn_scale,\n            self.cosine_scale,\n",
        KERAS3_LOSSES,
        keras3=True,
    ),
    Mutant(
        "Keras 3 MNRL: partition_mode ignored",
        "cosent_tf/keras3/losses.py",
        "            self.directions,\n            self.partition_mode,\n",
        "            self.directions,\n            'joint',\n",
        KERAS3_LOSSES,
        keras3=True,
    ),
    Mutant(
        "Keras 3 training: pair labels not interleaved",
        "cosent_tf/keras3/training.py",
        "return padded(rows), np.repeat(labels[pairs], 2)",
        "return padded(rows), np.tile(labels[pairs], 2)",
        ("tests/keras3/test_training.py",),
        keras3=True,
    ),
    Mutant(
        "Keras 3 SavedModel: the folder's pooling ignored",
        "cosent_tf/keras3/export.py",
        "encoder = build_encoder(loaded.backbone, pooling=spec.pooling)",
        "encoder = build_encoder(loaded.backbone)",
        ("tests/keras3/test_export.py",),
        keras3=True,
    ),
    Mutant(
        "Keras 3 backbone: exact and tanh GELU swapped",
        "cosent_tf/keras3/backbones.py",
        "return exact_gelu if EXACT_GELU[name] else tanh_gelu",
        "return tanh_gelu if EXACT_GELU[name] else exact_gelu",
        ("tests/keras3/test_backbones.py",),
        keras3=True,
    ),
]


def environment(tree, keras3):
    env = {**os.environ, "PYTHONPATH": tree}
    for name, default in ENVIRONMENT_PATHS.items():
        value = env.get(name) or os.path.join(ROOT, default)
        env[name] = os.path.abspath(value)
    if keras3:
        env["KERAS_BACKEND"] = "tensorflow"
    else:
        env.pop("KERAS_BACKEND", None)
    return env


def run(tree, mutant, timeout):
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
    command += ["-m", "" if mutant.slow else "not slow"]
    if mutant.keras3:
        command.append("--confcutdir=tests/keras3")
    command += mutant.tests
    env = environment(tree, mutant.keras3)
    try:
        result = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "killed (timeout)", ""
    failed = [line for line in result.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    evidence = failed[0] if failed else result.stdout[-200:]
    # pytest's usage error and "no tests collected" say nothing of the mutant: counted as kills,
    # a test module renamed away would hide a mutant that nothing tests any more
    if result.returncode in (4, 5):
        return "not run", (result.stdout + result.stderr)[-300:]
    return ("killed" if result.returncode else "survived"), evidence


def copy_tree(source, tree):
    for name in ("cosent_tf", "tests", "scripts"):
        shutil.copytree(
            os.path.join(source, name), os.path.join(tree, name), ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(os.path.join(source, "pyproject.toml"), tree)


def child_cpu_seconds():
    # wall time alone says little on a machine that other jobs share; the tests' own CPU time does
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def commit_of(source):
    done = subprocess.run(["git", "-C", source, "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", action="append", help="run the mutants whose name contains this text (repeat for several)"
    )
    parser.add_argument("--tree", default=ROOT, help="the checkout whose library and tests are run (default: this one)")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument(
        "--clean",
        action="store_true",
        help="first run each mutant's tests on the unchanged tree: a test that fails there kills every mutant",
    )
    parser.add_argument("--output", default=os.path.join(ROOT, "tools", "mutants.json"))
    args = parser.parse_args()
    source = os.path.abspath(args.tree)
    chosen = [mutant for mutant in MUTANTS if not args.only or any(text in mutant.name for text in args.only)]
    started_all = time.time()
    with tempfile.TemporaryDirectory() as tree:
        copy_tree(source, tree)
        # every text is checked before any test runs, so that a stale mutant fails in seconds
        originals = {}
        for mutant in chosen:
            path = mutant.file
            if path not in originals:
                with open(os.path.join(tree, path), encoding="utf-8") as f:
                    originals[path] = f.read()
            if originals[path].count(mutant.old) != 1:
                raise SystemExit(
                    f"{path}: the text of mutant {mutant.name!r} is not there exactly once; update MUTANTS"
                )
            missing = [test for test in mutant.tests if not os.path.exists(os.path.join(tree, test))]
            if missing:
                raise SystemExit(f"mutant {mutant.name!r}: {', '.join(missing)} not in {source}; update its tests")
        clean = []
        if args.clean:
            for group in dict.fromkeys((mutant.tests, mutant.keras3, mutant.slow) for mutant in chosen):
                started = time.time()
                outcome, evidence = run(tree, Mutant("(none)", "", "", "", *group), args.timeout)
                passed = outcome == "survived"
                clean.append({"tests": list(group[0]), "passed": passed, "seconds": round(time.time() - started, 1)})
                print(f"{'passes' if passed else 'FAILS':9} unchanged: {' '.join(group[0])}: {evidence}", flush=True)
        results = []
        for mutant in chosen:
            target = os.path.join(tree, mutant.file)
            original = originals[mutant.file]
            started, cpu_started = time.time(), child_cpu_seconds()
            with open(target, "w", encoding="utf-8") as f:
                f.write(original.replace(mutant.old, mutant.new))
            try:
                outcome, evidence = run(tree, mutant, args.timeout)
            finally:
                with open(target, "w", encoding="utf-8") as f:
                    f.write(original)
            results.append(
                {
                    "mutant": mutant.name,
                    "file": mutant.file,
                    "tests": list(mutant.tests),
                    "keras": 3 if mutant.keras3 else 2,
                    "slow_included": mutant.slow,
                    "outcome": outcome,
                    "evidence": evidence,
                    "seconds": round(time.time() - started, 1),
                    "cpu_seconds": round(child_cpu_seconds() - cpu_started, 1),
                }
            )
            print(f"{outcome:9} {mutant.name} ({mutant.file}, {results[-1]['seconds']}s): {evidence}", flush=True)
    survivors = [r for r in results if not r["outcome"].startswith("killed")]
    record = {
        "tree": source,
        "commit": commit_of(source),
        "seconds": round(time.time() - started_all, 1),
        "cpu_seconds": round(child_cpu_seconds(), 1),
        **({"clean": clean} if args.clean else {}),
        "mutants": results,
        "survivors": [r["mutant"] for r in survivors],
    }
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, ensure_ascii=False)
        f.write("\n")
    print(
        f"{len(results) - len(survivors)} of {len(results)} mutants killed in {record['seconds']:.0f}s; survivors: "
        + (", ".join(r["mutant"] for r in survivors) or "none")
    )


if __name__ == "__main__":
    main()
