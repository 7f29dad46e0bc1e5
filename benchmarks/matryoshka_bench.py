"""Spearman and Recall@10 by vector width: a plain model cut, a PCA of its vectors, and a Matryoshka model cut.

One command (``make bench-matryoshka``) trains, for each model shape, two CoSENT models on STS-B with the
same seed, settings and batches: a plain one and one with ``--matryoshka-dims`` (every width of the
table), each by ``cosent-tf train`` in a process of its own. Then, in a process per model folder, it
encodes the STS-B test and train sentences at full width with ``SentenceEncoder.encode`` and checks that
``encode(dim=D)`` at the smallest width equals the full vectors cut and renormalised
(``cosent_tf.inference.vectors.truncate``), so that every width is read from one encoding. For each
width D it reports test Spearman (cosine of each pair against its score, as ``cosent-tf evaluate``) and
Recall@10 (``cosent_tf.evaluation.pair_retrieval``: the test pairs as a retrieval task, as
``cosent-tf evaluate --retrieval`` computes it) of:

* the plain model at full width (the reference row);
* the plain model cut to D (``encode(dim=D)``);
* a PCA of the plain model's vectors to D: the mean and the principal axes of the full-width unit
  vectors of the first ``--pca-sentences`` distinct train sentences (NumPy's SVD of the centred
  matrix, as sklearn's PCA), each test vector centred, projected on the first D axes and renormalised;
* the Matryoshka model cut to D.

The models' shapes (``MODELS``): the bundled small config (L4 H312, random weights), and a
BERT-base-width one (H768 A12 I3072 from ``benchmarks/bert-base-random.json``) with fewer layers
(``--base-layers``), trained on fewer pairs (``--base-train-pairs``), so that the whole command runs in
about 25 minutes on a shared 2-core CPU. The model folders stay in ``--work-dir`` (the ANN benchmark,
``benchmarks/ann_bench.py``, encodes with the small Matryoshka model); ``--reuse-models`` scores
finished folders again without training.

It writes ``benchmarks/matryoshka_results.json`` (every figure, the commands), ``benchmarks/MATRYOSHKA.md``
and ``benchmarks/matryoshka.png`` (Spearman and Recall@10 against width, one line per method).

    .venv/bin/python benchmarks/matryoshka_bench.py [--models small,base] [--work-dir runs/matryoshka-bench]
        [--small-epochs 2] [--base-layers 4] [--base-train-pairs 1600] [--pca-sentences 2000]
        [--reuse-models] [--report-only]

Each model's figures replace only that model's entry of the results file, so the two shapes can be
measured by separate commands (``--models small``, then ``--models base``).

The same file is the encoding step's program (``matryoshka_bench.py encode MODEL_DIR OUTPUT.npz N``).
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import common  # noqa: E402

SEED = 42
LEARNING_RATE = 1e-4  # the small reproduction's (docs/small-random): 2e-5 barely moves random weights
# name: (title, config, widths of the table (the first is the full width), layers kept (None: the config's))
MODELS = {
    "small": ("small (L4 H312 A12 I1248, the bundled bert-small-random config)", None, (312, 256, 128, 64, 32)),
    "base": ("BERT-base width (H768 A12 I3072)", os.path.join(HERE, "bert-base-random.json"), (768, 512, 256, 128, 64)),
}
VARIANTS = ("plain", "matryoshka")
METHODS = {  # name: label in the report
    "reference": "plain model, full width (reference)",
    "plain_cut": "plain model cut to D",
    "pca": "PCA of the plain model's vectors to D",
    "matryoshka_cut": "Matryoshka model cut to D",
}
RECALL_KEY = "recall@10"


def sts_path(split):
    return os.path.join(common.data_dir(), "senteval_cn", "STS-B", f"STS-B.{split}.data")


def distinct(texts):
    return list(dict.fromkeys(texts))


# --- the encoding step (a process per model folder) ---------------------------------------------


def encode_step(model_dir, output, train_sentences):
    """Full-width unit vectors of the distinct STS-B test sentences and of the first ``train_sentences``
    distinct train sentences into ``output`` (npz), and the largest difference of ``encode(dim=smallest)``
    from the full vectors cut, said on stdout."""
    import numpy as np

    from cosent_tf import SentenceEncoder
    from cosent_tf.data.files import read_pair_file
    from cosent_tf.inference.vectors import truncate

    encoder = SentenceEncoder.load(model_dir)
    test, train = read_pair_file(sts_path("test")), read_pair_file(sts_path("train"))
    test_texts = distinct(test.texts_a + test.texts_b)
    train_texts = distinct(text for pair in zip(train.texts_a, train.texts_b) for text in pair)[:train_sentences]
    start = time.perf_counter()
    test_vectors = encoder.encode(test_texts, show_progress=False)
    train_vectors = encoder.encode(train_texts, show_progress=False)
    seconds = time.perf_counter() - start
    smallest = min(MODELS[model_key(encoder.width)][2])
    cut = encoder.encode(test_texts, show_progress=False, dim=smallest)
    difference = float(np.abs(cut - truncate(test_vectors, smallest)).max())
    np.savez(
        output,
        test_texts=np.array(test_texts),
        test_vectors=test_vectors,
        train_texts=np.array(train_texts),
        train_vectors=train_vectors,
    )
    rate = (len(test_texts) + len(train_texts)) / seconds
    print(json.dumps({"sentences_per_second": rate, "dim_check": {"dim": smallest, "max_abs_diff": difference}}))


def model_key(width):
    return next(key for key, (_, _, widths) in MODELS.items() if widths[0] == width)


# --- the orchestrator ----------------------------------------------------------------------------


def base_config(work_dir, layers):
    """The BERT-base config with ``layers`` layers, written into ``work_dir``: its path."""
    with open(MODELS["base"][1], encoding="utf-8") as f:
        config = json.load(f)
    config["num_hidden_layers"] = layers
    path = os.path.join(work_dir, f"bert-base-width-L{layers}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1)
    return path


def train_command(model, variant, args, run_dir):
    """The ``cosent-tf train`` arguments of one run (without the program)."""
    _, _, widths = MODELS[model]
    command = ["train", "--train", sts_path("train"), "--valid", sts_path("valid"), "--test", sts_path("test")]
    command += ["--loss", "cosent", "--lr", f"{LEARNING_RATE:g}", "--seed", str(SEED), "--batch-size", "32"]
    if model == "small":
        command += ["--epochs", str(args.small_epochs)]
    else:
        command += ["--config", base_config(args.work_dir, args.base_layers), "--epochs", str(args.base_epochs)]
        command += ["--max-train-pairs", str(args.base_train_pairs)]
        command += ["--max-eval-pairs", str(args.base_eval_pairs)]
    if variant == "matryoshka":
        command += ["--matryoshka-dims", ",".join(map(str, widths))]
    return [*command, "--output-dir", run_dir, "--overwrite"]


def run_logged(command, log_path):
    """Run ``command`` with its output in ``log_path``: (exit status, seconds, stdout)."""
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=log, text=True)
        log.write(completed.stdout)
    return completed.returncode, time.perf_counter() - start, completed.stdout


def tail(path, chars=1500):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().strip()[-chars:]


def train_and_encode(model, args):
    """Train (unless reused) and encode both variants of ``model``: {variant: record}."""
    cli = os.path.join(os.path.dirname(sys.executable), "cosent-tf")
    records = {}
    for variant in VARIANTS:
        run_dir = os.path.join(args.work_dir, f"{model}-{variant}")
        command = train_command(model, variant, args, run_dir)
        record = {"command": "cosent-tf " + shlex.join(command), "run_dir": run_dir}
        metrics_path = os.path.join(run_dir, "metrics.json")
        if not (args.reuse_models and os.path.isfile(metrics_path)):
            log_path = os.path.join(args.work_dir, f"train-{model}-{variant}.log")
            print(f"{model} {variant}: training ({record['command']})", flush=True)
            status, seconds, _ = run_logged([cli, *command], log_path)
            if status:
                raise SystemExit(f"{model} {variant}: training failed (exit status {status}):\n{tail(log_path)}")
            record["train_seconds"] = round(seconds, 1)
        with open(metrics_path, encoding="utf-8") as f:
            record["train_metrics"] = json.load(f)
        vectors_path = os.path.join(args.work_dir, f"{model}-{variant}-vectors.npz")
        log_path = os.path.join(args.work_dir, f"encode-{model}-{variant}.log")
        step = [sys.executable, os.path.abspath(__file__), "encode", os.path.join(run_dir, "model"), vectors_path]
        step.append(str(args.pca_sentences))
        status, seconds, stdout = run_logged(step, log_path)
        if status:
            raise SystemExit(f"{model} {variant}: encoding failed (exit status {status}):\n{tail(log_path)}")
        record.update(json.loads(stdout.strip().splitlines()[-1]), vectors=vectors_path)
        print(f"{model} {variant}: encoded in {seconds:.0f} s; {record['dim_check']}", flush=True)
        records[variant] = record
    return records


def mean_pair_cosine(vectors, pairs=5000):
    """The mean cosine of seeded random pairs of rows: near 1 when the vectors fill a narrow cone."""
    import numpy as np

    first, second = np.random.default_rng(SEED).integers(0, len(vectors), (2, pairs))
    return float(np.mean(np.sum(vectors[first] * vectors[second], axis=1)))


def pca(train_vectors):
    """(mean, axes): the mean row and the principal axes (rows, by decreasing variance)."""
    import numpy as np

    mean = train_vectors.mean(axis=0)
    _, _, axes = np.linalg.svd(train_vectors - mean, full_matrices=False)
    return mean, axes


def pca_project(vectors, mean, axes, dim):
    import numpy as np

    projected = (vectors - mean) @ axes[:dim].T
    return (projected / np.linalg.norm(projected, axis=1, keepdims=True)).astype(np.float32)


def scores_of(vectors_of, test, task):
    """{"spearman", "recall@10", ...} of the test pairs with vectors from ``vectors_of(texts)``."""
    import numpy as np

    from cosent_tf.evaluation import pair_retrieval, spearman

    cosines = np.sum(vectors_of(test.texts_a) * vectors_of(test.texts_b), axis=1)
    retrieval = pair_retrieval(vectors_of, test, task)
    return {"spearman": spearman(cosines, test.labels), RECALL_KEY: retrieval[RECALL_KEY], "retrieval": retrieval}


def score_model(model, records, pca_sentences):
    """Every method's figures at every width: {method: {width: figures}}."""
    import numpy as np

    from cosent_tf.data.files import read_pair_file
    from cosent_tf.data.tasks import Task
    from cosent_tf.inference.vectors import truncate

    test = read_pair_file(sts_path("test"))
    task = Task.for_labels("pairs", test.label_kind, test.labels.min(), test.labels.max())
    loaded = {variant: np.load(records[variant]["vectors"]) for variant in VARIANTS}
    rows = {variant: {t: i for i, t in enumerate(loaded[variant]["test_texts"])} for variant in VARIANTS}

    def lookup(variant, transform):
        vectors = transform(loaded[variant]["test_vectors"])
        return lambda texts: vectors[[rows[variant][t] for t in texts]]

    widths = MODELS[model][2]
    mean, axes = pca(loaded["plain"]["train_vectors"][:pca_sentences])
    table = {"reference": {widths[0]: scores_of(lookup("plain", lambda v: v), test, task)}}
    # encode(dim=D) leaves full-width vectors as they are (check_dim gives None for the full width)
    cut_to = {d: None if d == widths[0] else d for d in widths}
    table["plain_cut"] = {
        d: scores_of(lookup("plain", lambda v, d=d: truncate(v, cut_to[d])), test, task) for d in widths
    }
    table["pca"] = {
        d: scores_of(lookup("plain", lambda v, d=d: pca_project(v, mean, axes, d)), test, task) for d in widths
    }
    table["matryoshka_cut"] = {
        d: scores_of(lookup("matryoshka", lambda v, d=d: truncate(v, cut_to[d])), test, task) for d in widths
    }
    return {
        "table": {method: {str(d): figures for d, figures in by_width.items()} for method, by_width in table.items()},
        "test_pairs": len(test),
        "pca_sentences": min(pca_sentences, len(loaded["plain"]["train_texts"])),
        "mean_cosine_of_random_pairs": {
            variant: mean_pair_cosine(loaded[variant]["test_vectors"]) for variant in VARIANTS
        },
    }


# --- the report ----------------------------------------------------------------------------------


def shown(command):
    """``command`` with the paths under the repository relative to it, as run from its root."""
    return command.replace(ROOT + os.sep, "")


def write_report(results_path):
    from cosent_tf.io import write_text
    from cosent_tf.plotting import new_figure, save_png

    with open(results_path, encoding="utf-8") as f:
        raw = json.load(f)
    lines = [
        "# Spearman and Recall@10 by vector width: cut, PCA and Matryoshka",
        "",
        "For each model shape two CoSENT models were trained on STS-B (random initial weights: no pretrained "
        "checkpoint is on these machines) with the same seed, settings and batches, one plain and one with "
        "`--matryoshka-dims` set to every width of its table (weights 1). Each figure is over the whole STS-B "
        "test file: **Spearman** of the cosine of each pair against its 0-5 score, and **Recall@10** of "
        "`cosent_tf.evaluation.pair_retrieval` (as `cosent-tf evaluate --retrieval`: each distinct first text "
        "with a pair scored above 2.5 is a query, every distinct second text the corpus, ranked by exact cosine). "
        "Rows: the plain model at full width (the reference); the plain model cut to its first D dimensions and "
        "renormalised (`SentenceEncoder.encode(dim=D)`); a PCA of the plain model's vectors (mean and axes of the "
        "full-width unit vectors of the first distinct STS-B train sentences by NumPy's SVD, each vector "
        "centred, projected on the first D axes, renormalised; at full width that is the centred vectors, "
        "rotated, which is why it differs from the reference); the Matryoshka model cut to D. Every width is "
        "read from one full-width encoding: `encode(dim=D)` at the smallest width was checked against the full "
        "vectors cut (its largest difference is given under each table).",
        "",
        "Every run: batch 32, Adam "
        f"{LEARNING_RATE:g} (the small reproduction's; 2e-5 barely moves random weights in so few steps), "
        f"[CLS] pooling, maxlen 64, λ 20, seed {SEED}. What was shrunk to fit about 25 minutes per command on "
        "this 2-core CPU shared with other jobs (where a small-model training epoch took up to 5 times its quiet "
        "time), and why:",
        "",
    ]
    for model, measured in raw["models"].items():
        args = argparse.Namespace(**measured["args"])
        if model == "small":
            lines.append(
                f"- small: the bundled config as it is, {args.small_epochs} epochs over all 5231 train pairs "
                f"(the best epoch by valid Spearman kept, as `cosent-tf train` does); PCA fitted on "
                f"{measured['scores']['pca_sentences']} train sentences."
            )
        else:
            epochs = f"{args.base_epochs} epoch{'s' if args.base_epochs > 1 else ''}"
            lines.append(
                f"- BERT-base width: {args.base_layers} layers instead of 12 (hidden 768, 12 heads, intermediate "
                f"3072 kept), {epochs} over a seeded {args.base_train_pairs} of the 5231 train "
                f"pairs ({args.base_train_pairs // 32} steps), the runs' own validation and test on seeded "
                f"{args.base_eval_pairs} pairs (`--max-eval-pairs`; the tables are over the whole test file), PCA "
                f"fitted on {measured['scores']['pca_sentences']} train sentences. A step of this shape took about "
                "10 times the small model's here, and BERT-base's 12 layers would take three times that: the full "
                "recipe would take hours."
            )
    lines += [
        "",
        "These are random-weight models trained briefly, not pretrained ones: the figures compare the methods "
        "with each other at one scale, not with published numbers. Their vectors fill a narrow cone (the mean "
        "cosine of random pairs of test sentences is given under each model's tables), which is why the PCA, "
        "whose centring removes the cone's common direction, scores above the reference at full width.",
        "",
    ]
    for model, measured in raw["models"].items():
        title, _, widths = MODELS[model]
        started = datetime.datetime.fromisoformat(measured["started"])
        table = measured["scores"]["table"]
        lines += [
            f"## {title}",
            "",
            f"Measured {started:%Y-%m-%d %H:%M} UTC on {measured['cpu']}, Python {measured['python']}, by "
            f"`.venv/bin/python benchmarks/matryoshka_bench.py {measured['command_args']}` "
            f"({measured['wall_seconds'] / 60:.0f} minutes, `nice -n 10` beside other jobs). The trainings:",
            "",
        ]
        for variant in VARIANTS:
            lines.append(f"- {variant}: `{shown(measured['runs'][variant]['command'])}`")
        lines += [""]
        for key, label in (("spearman", "test Spearman × 100"), (RECALL_KEY, "test Recall@10 × 100")):
            lines += [
                f"**{label}** ({measured['scores']['test_pairs']} test pairs)",
                "",
                "| method | " + " | ".join(str(d) for d in widths) + " |",
                "|---|" + "---|" * len(widths),
            ]
            for method, method_label in METHODS.items():
                by_width = table[method]
                cells = [f"{by_width[str(d)][key] * 100:.2f}" if str(d) in by_width else "" for d in widths]
                lines.append(f"| {method_label} | " + " | ".join(cells) + " |")
            lines.append("")
        cone = measured["scores"].get("mean_cosine_of_random_pairs")
        notes = []
        if cone:
            notes.append(
                "mean cosine of random pairs of test sentences at full width: "
                + ", ".join(f"{variant} {value:.4f}" for variant, value in cone.items())
            )
        for variant in VARIANTS:
            record = measured["runs"][variant]
            metrics = record["train_metrics"]
            seconds = f", trained in {record['train_seconds']:.0f} s" if "train_seconds" in record else ""
            notes.append(
                f"{variant}: the run's own test Spearman {metrics['test']['spearman'] * 100:.2f} (best epoch "
                f"{metrics['best_epoch']}{seconds}), `encode(dim={record['dim_check']['dim']})` against the full "
                f"vectors cut: max |Δ| {record['dim_check']['max_abs_diff']:.1e}"
            )
        lines += ["; ".join(notes) + ".", ""]
    lines += ["![Spearman and Recall@10 against width](matryoshka.png)", ""]
    write_text(os.path.join(os.path.dirname(results_path), "MATRYOSHKA.md"), "\n".join(lines))

    columns = len(raw["models"])
    figure, axes = new_figure(2, columns, figsize=(5.2 * columns, 7.2), squeeze=False)
    for column, (model, measured) in enumerate(raw["models"].items()):
        _, _, widths = MODELS[model]
        table = measured["scores"]["table"]
        for row, (key, label) in enumerate((("spearman", "test Spearman"), (RECALL_KEY, "test Recall@10"))):
            axis = axes[row][column]
            reference = table["reference"][str(widths[0])][key]
            axis.axhline(reference, color="grey", linestyle="--", label=METHODS["reference"])
            for method in ("plain_cut", "pca", "matryoshka_cut"):
                axis.plot(widths, [table[method][str(d)][key] for d in widths], marker="o", label=METHODS[method])
            axis.set_xscale("log", base=2)
            axis.set_xticks(widths)
            axis.set_xticklabels([str(d) for d in widths])
            axis.set_xlabel("width D")
            axis.set_ylabel(label)
            axis.set_title(f"{model}: {label}")
            axis.grid(alpha=0.3)
        axes[0][column].legend(fontsize=7)
    figure.tight_layout()
    save_png(figure, os.path.join(os.path.dirname(results_path), "matryoshka.png"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        default=",".join(MODELS),
        help="comma-separated: small,base; the others' figures in the results file are kept",
    )
    parser.add_argument("--work-dir", default=os.path.join(ROOT, "runs", "matryoshka-bench"))
    parser.add_argument("--small-epochs", type=int, default=2)
    parser.add_argument("--base-layers", type=int, default=4, help="layers of the BERT-base-width model")
    parser.add_argument("--base-epochs", type=int, default=1)
    parser.add_argument("--base-train-pairs", type=int, default=1600, help="seeded train pairs of the base model")
    parser.add_argument(
        "--base-eval-pairs", type=int, default=400, help="the base runs' own valid/test subsample (the table: all)"
    )
    parser.add_argument(
        "--pca-sentences", type=int, default=2000, help="the first distinct STS-B train sentences the PCA is fitted on"
    )
    parser.add_argument("--reuse-models", action="store_true", help="score finished runs in --work-dir again")
    parser.add_argument("--output-dir", default=HERE)
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from matryoshka_results.json")
    parser.add_argument(
        "--rescore-only",
        action="store_true",
        help="score the vectors the results file's runs saved in --work-dir again (no training, no encoding)",
    )
    args = parser.parse_args()
    results_path = os.path.join(args.output_dir, "matryoshka_results.json")
    if args.report_only or args.rescore_only:
        if args.rescore_only:
            from cosent_tf.io import write_text

            with open(results_path, encoding="utf-8") as f:
                raw = json.load(f)
            for model, measured in raw["models"].items():
                measured["scores"] = score_model(model, measured["runs"], measured["args"]["pca_sentences"])
            write_text(results_path, json.dumps(raw, indent=1))
        write_report(results_path)
        return 0
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    missing = [p for p in (sts_path("train"), common.vocab_path()) if not os.path.isfile(p)]
    if missing:
        raise SystemExit(f"{', '.join(missing)}: not found; set COSENT_SHARED_DATA to the shared data folder")
    os.makedirs(args.work_dir, exist_ok=True)
    import run

    raw = {"models": {}}
    if os.path.isfile(results_path):
        with open(results_path, encoding="utf-8") as f:
            raw = json.load(f)
    for model in models:
        started = datetime.datetime.now(datetime.timezone.utc)
        runs = train_and_encode(model, args)
        raw["models"][model] = {
            "started": started.isoformat(),
            "cpu": run.cpu_description(),
            "python": platform.python_version(),
            "args": vars(args),
            "command_args": shlex.join(sys.argv[1:]),
            "runs": runs,
            "scores": score_model(model, runs, args.pca_sentences),
            "wall_seconds": round((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()),
        }
    raw["models"] = {model: raw["models"][model] for model in MODELS if model in raw["models"]}
    from cosent_tf.io import write_text

    write_text(results_path, json.dumps(raw, indent=1))
    write_report(results_path)
    with open(os.path.join(args.output_dir, "MATRYOSHKA.md"), encoding="utf-8") as f:
        print(f.read())
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["encode"]:
        encode_step(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit(main())
