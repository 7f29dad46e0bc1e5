"""The small reproduction's STS-B CoSENT run on the Keras 2 engine and on Keras 3 (TensorFlow and JAX
backends), from the same initial weights and seed: does the Keras 3 route reach the same test Spearman?

One random initial checkpoint (the small reproduction's config, ``cosent_tf/configs/bert-small-random.json``,
written once by the Keras 2 engine as a Google-format folder) is the ``--checkpoint`` of three runs of
``scripts/cosent.py STS-B`` with the reproduction's settings (4000 seeded train pairs, 2000 seeded valid and
test pairs, one epoch, Adam 1e-4, batch 32 pairs, [CLS] pooling), each in a process of its own: without
``--keras``, then with ``--keras 3`` under ``KERAS_BACKEND=tensorflow`` and ``=jax``, for seeds 42 (the
reproduction's) and 43. A seed gives both Kerases the same batches; dropout masks and rounding are
each one's own, so the runs agree in distribution, not step by step: the seeds show how far runs of one
Keras fall apart.

Writes ``benchmarks/keras3_spearman.json`` and ``benchmarks/KERAS3_SPEARMAN.md``; the runs stay in
``runs/keras3-spearman`` (a rerun reuses finished ones).

    .venv/bin/python benchmarks/keras3_spearman.py [--data-dir ../shared/data]
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIG = os.path.join(ROOT, "cosent_tf", "configs", "bert-small-random.json")
SETTINGS = ["--lr", "1e-4", "--epochs", "1", "--max-train-pairs", "4000", "--max-eval-pairs", "2000"]
SEEDS = (42, 43)  # the reproduction's seed, and one more to show how far runs of one Keras fall apart
# name: (the row's title, the extra options, KERAS_BACKEND)
RUNS = {
    "keras2": ("Keras 2 engine", [], None),
    "keras3-tensorflow": ("Keras 3, TensorFlow backend", ["--keras", "3"], "tensorflow"),
    "keras3-jax": ("Keras 3, JAX backend", ["--keras", "3"], "jax"),
}
WRITE_INITIAL = """
import sys
import cosent_tf
from cosent_tf.models.builders import build_encoder
from cosent_tf.models.checkpoints import save_checkpoint
from cosent_tf.backend import keras
keras.utils.set_random_seed(42)
config, folder, vocab = sys.argv[1:]
save_checkpoint(build_encoder(config, pooling="cls"), folder, config, vocab_path=vocab)
"""


def environment(backend):
    env = {key: value for key, value in os.environ.items() if key != "KERAS_BACKEND"}
    if backend:
        env["KERAS_BACKEND"] = backend
    return env


def cpu_name():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    shared = os.environ.get("COSENT_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
    parser.add_argument("--data-dir", default=shared)
    parser.add_argument("--runs-dir", default=os.path.join(ROOT, "runs", "keras3-spearman"))
    parser.add_argument("--output-dir", default=HERE)
    parser.add_argument("--seeds", type=lambda text: [int(x) for x in text.split(",")], default=list(SEEDS))
    args = parser.parse_args()
    vocab = os.path.join(args.data_dir, "vocab", "bert-base-chinese-vocab.txt")
    initial = os.path.join(args.runs_dir, "initial")
    if not os.path.isdir(initial):
        os.makedirs(args.runs_dir, exist_ok=True)
        subprocess.run([sys.executable, "-c", WRITE_INITIAL, CONFIG, initial, vocab], cwd=ROOT, check=True)
    results = {}
    for seed in args.seeds:
        for name, (title, extra, backend) in RUNS.items():
            output = os.path.join(args.runs_dir, f"{name}-seed{seed}")
            metrics_path = os.path.join(output, "metrics.json")
            if not os.path.exists(metrics_path):
                print(f"{title}, seed {seed} ...", flush=True)
                command = [sys.executable, "scripts/cosent.py", "STS-B", "--data-dir", args.data_dir]
                command += ["--checkpoint", initial, "--seed", str(seed)] + SETTINGS + extra
                command += ["--output-dir", output, "--overwrite"]
                done = subprocess.run(command, cwd=ROOT, env=environment(backend), capture_output=True, text=True)
                if done.returncode != 0:
                    print(done.stderr[-3000:], file=sys.stderr)
                    raise SystemExit(f"{title}, seed {seed}: the run failed")
            with open(metrics_path, encoding="utf-8") as f:
                metrics = json.load(f)
            run = results.setdefault(name, {"title": title, "seeds": {}})
            run["seeds"][seed] = {"valid": spearman_of(metrics["valid"]), "test": spearman_of(metrics["test"])}
            print(f"{title}, seed {seed}: test Spearman {run['seeds'][seed]['test']:.4f}", flush=True)
    record = {
        "cpu": cpu_name(),
        "date": datetime.date.today().isoformat(),
        "settings": SETTINGS,
        "seeds": args.seeds,
        "config": os.path.relpath(CONFIG, ROOT),
        "runs": results,
    }
    with open(os.path.join(args.output_dir, "keras3_spearman.json"), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2, ensure_ascii=False)
    write_report(record, os.path.join(args.output_dir, "KERAS3_SPEARMAN.md"))


def spearman_of(split):
    return split["spearman"] if isinstance(split, dict) else split


def write_report(record, path):
    runs = record["runs"]
    seeds = list(runs["keras2"]["seeds"])
    lines = [
        "# The small STS-B run on Keras 2 and Keras 3",
        "",
        f"Written by `benchmarks/keras3_spearman.py` on {record['date']} ({record['cpu']}). The small reproduction's",
        f"CoSENT run on STS-B (`scripts/cosent.py STS-B {' '.join(record['settings'])} --seed S`), each from the same",
        f"random initial checkpoint (`{record['config']}`, written once by the Keras 2 engine). A seed gives both",
        "Kerases the same batches (one engine, `cosent_tf.training.engine`, trains on either Keras); dropout",
        "masks and rounding are each Keras's and backend's own, so runs of one seed agree in",
        "distribution, not step by step. Test Spearman:",
        "",
        "| run | " + " | ".join(f"seed {seed}" for seed in seeds) + " | mean | mean − Keras 2's |",
        "|---|" + "---|" * (len(seeds) + 2),
    ]
    reference = sum(runs["keras2"]["seeds"][seed]["test"] for seed in seeds) / len(seeds)
    for run in runs.values():
        tests = [run["seeds"][seed]["test"] for seed in seeds if seed in run["seeds"]]
        mean = sum(tests) / len(tests)
        cells = " | ".join(f"{run['seeds'][seed]['test']:.4f}" if seed in run["seeds"] else "" for seed in seeds)
        lines.append(f"| {run['title']} | {cells} | {mean:.4f} | {mean - reference:+.4f} |")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
