"""Training and encoding speed of the small model on Keras 3 (TensorFlow and JAX backends) against
the Keras 2 engine.

One command (``make bench-keras3``) measures the small reproduction's model
(``cosent_tf/configs/bert-small-random.json``, random weights, [CLS] pooling) three ways:

* the Keras 2 engine: ``cosent_tf.build_encoder`` (bert4keras on tf-keras), ``CoSENTLoss(20)``,
  ``FusedAdam`` 2e-5 (what ``cosent-tf train`` compiles), ``model.fit``;
* Keras 3 on TensorFlow and Keras 3 on JAX: ``cosent_tf.keras3.backbones.backbone_from_config``
  (a keras-hub ``BertBackbone``), ``cosent_tf.keras3.build_encoder``, ``cosent_tf.keras3.CoSENTLoss(20)``,
  ``keras.optimizers.Adam`` 2e-5, ``model.fit``, with Keras's own compile settings
  (``jit_compile="auto"``: ``jax.jit`` on JAX; on TensorFlow, XLA only where there is a GPU).

Every contestant gets the same batches of token ids: STS-B train pairs and test sentences from the
shared data, tokenised once by this project's ``SentenceTokenizer`` (maxlen 64) in a set-up process,
each batch padded to its longest row rounded up to a multiple of 16 (a few shapes, which JAX and
XLA compile once each, in the warm-up). Training: ``model.fit`` on a ``tf.data`` of batches of 32
interleaved pairs (64 rows), ``common.WARMUP_STEPS`` steps of warm-up, then the steps/s of
``common.REPEATS`` consecutive stretches of the rest. Encoding: the encoder's forward pass
(``predict_on_batch``, batches of 64 of the length-sorted test sentences; tokenisation is not timed),
one pass over them as warm-up, then ``common.REPEATS`` timed passes.

Each contestant and job runs in a process of its own, one after the other: one Keras per process, and
``KERAS_BACKEND`` picks the Keras 3 backend. It writes ``benchmarks/keras3_results.json`` (every
figure), ``benchmarks/KERAS3.md`` (medians with min-max, and the ratios to the Keras 2 engine of the
same run) and ``benchmarks/keras3.png``. A job that fails is recorded with its error and the others are
still measured; the command then exits with status 1.

    .venv/bin/python benchmarks/keras3_bench.py [--train-pairs 3200] [--time-budget 60] [--cpus 0,1]
        [--report-only]

The same file is the workers' program (``keras3_bench.py prepare FOLDER`` and
``keras3_bench.py worker NAME JOB FOLDER OUTPUT``); only ``common`` is imported at its top.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import common  # noqa: E402

MARK = "@@keras3-bench "  # starts the lines a worker says to the orchestrator (libraries print too)
REFERENCE = "keras2"  # the contestant every ratio is taken to
# name: (the row's title, the Keras the process imports, the Keras 3 backend or None)
CONTESTANTS = {
    "keras2": ("Keras 2 engine (tf-keras, bert4keras)", "keras2", None),
    "keras3-tensorflow": ("Keras 3, TensorFlow backend (keras-hub BertBackbone)", "keras3", "tensorflow"),
    "keras3-jax": ("Keras 3, JAX backend (keras-hub BertBackbone)", "keras3", "jax"),
}
JOBS = ("train", "encode")
TRAIN_PAIRS = 3200  # 100 steps of 32 pairs: 10 of warm-up, 90 timed
WIDTH_STEP = 16  # batches are padded to a multiple of this many tokens (bucket())
IDS_FILE = "token_ids.npz"


def say(**message):
    sys.stdout.write(MARK + json.dumps(message) + "\n")
    sys.stdout.flush()


def sts_b(split):
    """STS-B's ``split`` as the project reads it (``cosent_tf.data.benchmarks.load_task``)."""
    from cosent_tf.data.benchmarks import load_task

    return load_task(os.path.join(common.data_dir(), "senteval_cn"), "STS-B", split)


# --- the set-up step and the workers ---------------------------------------------------------------


def bucket(length):
    """The width a batch whose longest row has ``length`` tokens is padded to: the next multiple of
    ``WIDTH_STEP``, at most ``common.MAXLEN``. A few widths, not one a batch: JAX and XLA compile a step
    once per shape, and padding every batch to the maxlen would do five times the arithmetic on
    STS-B's short sentences."""
    return min(common.MAXLEN, -(-length // WIDTH_STEP) * WIDTH_STEP)


def prepare(folder, train_pairs):
    """Token ids of the first ``train_pairs`` STS-B train pairs (interleaved: rows 2k and 2k+1 are pair
    k, each row carrying its pair's label) and of the STS-B test sentences (sorted by length, as the
    encoders sort what they encode), padded to ``common.MAXLEN``, with each batch's width.

    Runs in a Keras 2 process: the tokenizer is the engine's (bert4keras's WordPiece)."""
    import numpy as np

    from cosent_tf.models.tokenization import SentenceTokenizer

    tokenizer = SentenceTokenizer(common.vocab_path(), common.MAXLEN)

    def padded(rows, batch):
        ids = np.zeros((len(rows), common.MAXLEN), np.int32)
        for number, row in enumerate(rows):
            ids[number, : len(row)] = row
        widths = [bucket(max(map(len, rows[i : i + batch]))) for i in range(0, len(rows), batch)]
        return ids, np.asarray(widths, np.int32)

    train = sts_b("train")
    if len(train) < train_pairs:
        raise SystemExit(f"{train.source}: {len(train)} pairs, fewer than --train-pairs {train_pairs}")
    interleaved = [text for pair in zip(train.texts_a[:train_pairs], train.texts_b[:train_pairs]) for text in pair]
    test = sts_b("test")
    sentences = sorted((text for pair in zip(test.texts_a, test.texts_b) for text in pair), key=len, reverse=True)
    train_ids, train_widths = padded(tokenizer.encode_all(interleaved), 2 * common.BATCH_PAIRS)
    encode_ids, encode_widths = padded(tokenizer.encode_all(sentences), common.ENCODE_BATCH)
    np.savez(
        os.path.join(folder, IDS_FILE),
        train_ids=train_ids,
        train_labels=np.repeat(train.labels[:train_pairs].astype(np.float32), 2),
        train_widths=train_widths,
        encode_ids=encode_ids,
        encode_widths=encode_widths,
    )
    say(
        train_pairs=train_pairs,
        encode_sentences=len(sentences),
        mean_tokens_train=float((train_ids != 0).sum(1).mean()),
        mean_tokens_encode=float((encode_ids != 0).sum(1).mean()),
        mean_width_train=float(train_widths.mean()),
        mean_width_encode=float(encode_widths.mean()),
    )


def batches(ids, widths, rows, labels=None):
    """``ids`` cut into batches of ``rows``, each cut to its width; with ``labels``, (ids, labels) pairs.

    The first batch of each width is moved to the front (the order of the rest kept), so that the
    warm-up builds every step the timed part runs."""
    cut = [ids[i : i + rows, :width] for i, width in zip(range(0, len(ids), rows), widths)]
    if labels is not None:
        cut = list(zip(cut, (labels[i : i + rows] for i in range(0, len(ids), rows))))
    firsts = {}
    for number, width in enumerate(widths):
        firsts.setdefault(int(width), number)
    order = sorted(firsts.values()) + [n for n in range(len(cut)) if n not in set(firsts.values())]
    return [cut[n] for n in order]


def keras2_model():
    """The Keras 2 engine's encoder, compiled as ``cosent-tf train`` compiles it; it takes (ids, segments)."""
    import numpy as np

    import cosent_tf as ct
    from cosent_tf.backend import keras

    keras.utils.set_random_seed(0)
    model = ct.build_encoder(common.MODEL_CONFIG, pooling="cls")
    model.compile(optimizer=ct.FusedAdam(common.LEARNING_RATE), loss=ct.CoSENTLoss(common.SCALE))
    return keras, model, lambda ids: (ids, np.zeros_like(ids)), {"keras": keras.__version__, "optimizer": "FusedAdam"}


def keras3_model():
    """The Keras 3 route's encoder on a keras-hub backbone built from the same config; it takes ids."""
    import keras

    from cosent_tf.keras3 import CoSENTLoss, build_encoder
    from cosent_tf.keras3.backbones import backbone_from_config

    keras.utils.set_random_seed(0)
    config = common.model_config()
    model = build_encoder(backbone_from_config(config), pooling="cls")
    model.compile(optimizer=keras.optimizers.Adam(common.LEARNING_RATE), loss=CoSENTLoss(common.SCALE))
    details = {"keras": keras.__version__, "backend": keras.backend.backend(), "optimizer": "keras.optimizers.Adam"}
    if keras.backend.backend() == "jax":
        import jax

        details["jax"] = jax.__version__
    return keras, model, lambda ids: ids, details


def worker(name, job, folder, output):
    """Build contestant ``name``'s model and run ``job`` on the prepared ids; write its figures."""
    import numpy as np

    keras, model, inputs, details = (keras2_model if CONTESTANTS[name][1] == "keras2" else keras3_model)()
    import tensorflow as tf

    arrays = np.load(os.path.join(folder, IDS_FILE))
    started = time.perf_counter()
    if job == "train":
        train = batches(arrays["train_ids"], arrays["train_widths"], 2 * common.BATCH_PAIRS, arrays["train_labels"])
        ids_spec = tf.TensorSpec((None, None), tf.int32)
        dataset = tf.data.Dataset.from_generator(
            lambda: ((inputs(ids), labels) for ids, labels in train),
            output_signature=(
                (ids_spec, ids_spec) if CONTESTANTS[name][1] == "keras2" else ids_spec,
                tf.TensorSpec((None,), tf.float32),
            ),
        )
        clock, losses = common.StepClock(), []
        model.fit(dataset, epochs=1, callbacks=[common.keras_step_callback(keras, clock, losses)], verbose=0)
        figures = common.train_figures(clock, losses)
        figures["train_steps_per_second"] = [rate / common.BATCH_PAIRS for rate in figures["train_pairs_per_second"]]
        figures["first_step_seconds"] = clock.ends[0] - started  # the build of the step (tracing, compiling)
        figures["widths"] = sorted({int(w) for w in arrays["train_widths"]})
    else:
        encode = batches(arrays["encode_ids"], arrays["encode_widths"], common.ENCODE_BATCH)
        sentences = sum(len(batch) for batch in encode)

        def encode_all():
            start = time.perf_counter()
            vectors = [model.predict_on_batch(inputs(batch)) for batch in encode]
            if sum(map(len, vectors)) != sentences:
                raise SystemExit(f"{sum(map(len, vectors))} vectors for {sentences} sentences")
            return sentences / (time.perf_counter() - start)

        warmup = encode_all()  # builds the forward pass of every width
        rates = [encode_all() for _ in range(common.REPEATS)]
        figures = {"encode_sentences_per_second": rates, "warmup_sentences_per_second": warmup, "sentences": sentences}
    figures.update(
        details,
        jit_compile=bool(getattr(model, "jit_compile", False)),
        peak_rss_mib=round(common.peak_rss_mib(), 1),
        wall_seconds=round(time.perf_counter() - started, 1),
    )
    with open(output, "w", encoding="utf-8") as f:
        json.dump(figures, f)


# --- the orchestrator ------------------------------------------------------------------------------


def environment(name):
    """The child's environment: ``KERAS_BACKEND`` for a Keras 3 contestant, none for the Keras 2 one."""
    env = {key: value for key, value in os.environ.items() if key != "KERAS_BACKEND"}
    backend = CONTESTANTS[name][2] if name in CONTESTANTS else None
    return {**env, "KERAS_BACKEND": backend} if backend else env


def tail(text, chars=3000):
    return text.strip()[-chars:]


def run_child(arguments, name, cpus):
    """``keras3_bench.py ARGUMENTS`` in a process of its own: (its completed process, the command)."""
    import run

    command = [sys.executable, os.path.abspath(__file__), *arguments]
    completed = subprocess.run(
        command, env=environment(name), capture_output=True, text=True, preexec_fn=run.pinned_to(cpus)
    )
    if completed.returncode:
        print(f"FAILED: {' '.join(command)}\n{tail(completed.stderr)}", flush=True)
    return completed, command


def measure(args):
    """Every contestant's figures: {"setup": ..., "contestants": {name: {job: figures or error}}}."""
    results = {"contestants": {name: {} for name in CONTESTANTS}}
    with tempfile.TemporaryDirectory(prefix="keras3-bench-") as folder:
        completed, command = run_child(["prepare", folder, str(args.train_pairs)], REFERENCE, args.cpus)
        messages = [json.loads(line[len(MARK) :]) for line in completed.stdout.splitlines() if line.startswith(MARK)]
        if completed.returncode or not messages:
            results["setup"] = {"error": f"exit status {completed.returncode}: {tail(completed.stderr, 2000)}"}
            return results
        results["setup"] = messages[-1]
        print(f"set-up: {results['setup']}", flush=True)
        for job in JOBS:
            for name in CONTESTANTS:
                output = os.path.join(folder, f"{name}-{job}.json")
                completed, command = run_child(["worker", name, job, folder, output], name, args.cpus)
                if completed.returncode:
                    figures = {"error": f"exit status {completed.returncode}: {tail(completed.stderr, 2000)}"}
                    figures["command"] = " ".join(command)
                else:
                    with open(output, encoding="utf-8") as f:
                        figures = json.load(f)
                results["contestants"][name][job] = figures
                print(f"{name} {job}: {summary(figures, job)}", flush=True)
    return results


def rates(figures, job):
    """The job's rates (steps/s or sentences/s), or None where it failed."""
    key = "train_steps_per_second" if job == "train" else "encode_sentences_per_second"
    return figures.get(key) if figures else None


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def summary(figures, job):
    values = rates(figures, job)
    if values is None:
        return "failed"
    unit = "steps/s" if job == "train" else "sentences/s"
    return f"{median(values):.2f} {unit} ({min(values):.2f}–{max(values):.2f})"


def check_environment():
    problems = [
        f"{path}: not found; set COSENT_SHARED_DATA to the shared data folder"
        for path in (
            common.vocab_path(),
            os.path.join(common.data_dir(), "senteval_cn", "STS-B", "STS-B.train.data"),
            os.path.join(common.data_dir(), "senteval_cn", "STS-B", "STS-B.test.data"),
        )
        if not os.path.isfile(path)
    ]
    probe = subprocess.run([sys.executable, "-c", "import keras_hub, jax"], capture_output=True, text=True)
    if probe.returncode:
        reason = (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]
        problems.append(f"cannot import keras_hub and jax ({reason}); install the extra: pip install -e '.[keras3]'")
    if problems:
        raise SystemExit("the Keras 3 benchmark cannot start:\n  " + "\n  ".join(problems))


# --- the report ------------------------------------------------------------------------------------


def cell(figures, job, digits):
    values = rates(figures, job)
    if values is None:
        return "failed"
    return f"{median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def ratio(raw, name, job):
    mine, reference = (rates(raw["contestants"][n].get(job), job) for n in (name, REFERENCE))
    if mine is None or reference is None:
        return "— (a job failed)"
    return f"{median(mine) / median(reference):.2f}×"


def write_report(results_path):
    """KERAS3.md and keras3.png from ``results_path``; the exit status: 1 where a job failed."""
    from cosent_tf.io import write_text

    with open(results_path, encoding="utf-8") as f:
        raw = json.load(f)
    folder = os.path.dirname(os.path.abspath(results_path))
    setup = raw["setup"]
    when = datetime.datetime.fromisoformat(raw["started"]).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Speed: the Keras 3 route (TensorFlow and JAX backends) against the Keras 2 engine",
        "",
        f"Measured {when} on {raw['cpu']}, {raw['cores']} cores, {', '.join(raw['cpu_flags']) or 'no AVX'}, "
        f"Python {raw['python']}, by `make bench-keras3` (`{raw['command']}`), at nice {raw['nice']} beside other "
        "work on the machine. The small reproduction's model (`cosent_tf/configs/bert-small-random.json`: 4 layers, "
        "hidden 312, 12 heads, intermediate 1248, vocab 21128; random weights, [CLS] pooling), float32."
        + (
            f" The machine's load average (1 minute) was {raw['load_average_before']:.1f} when it started and "
            f"{raw['load_average_after']:.1f} when it ended."
            if "load_average_after" in raw
            else ""
        ),
        "",
    ]
    if "error" in setup:
        lines += [f"The set-up step failed, nothing was measured: {setup['error']}", ""]
    else:
        lines += [
            f"Every contestant gets the same batches of token ids: the first {setup['train_pairs']} STS-B train "
            f"pairs and the {setup['encode_sentences']} STS-B test sentences, tokenised once by this project's "
            f"`SentenceTokenizer` (maxlen {common.MAXLEN}; {setup['mean_tokens_train']:.1f} tokens a training row "
            f"and {setup['mean_tokens_encode']:.1f} a test sentence on average), each batch padded to its longest "
            f"row rounded up to a multiple of {WIDTH_STEP} (mean width {setup['mean_width_train']:.1f} in training, "
            f"{setup['mean_width_encode']:.1f} in encoding): a few shapes, each built in the warm-up, as JAX and XLA "
            "compile a step once per shape. **Training**: `model.fit` on a `tf.data` of those batches, "
            f"{common.BATCH_PAIRS} interleaved pairs ({2 * common.BATCH_PAIRS} rows) each, CoSENT (λ "
            f"{common.SCALE:g}), Adam {common.LEARNING_RATE:g}; {common.WARMUP_STEPS} steps of warm-up (the first "
            f"batch of each width among them), then the steps/s of {common.REPEATS} consecutive stretches of the "
            "rest (median, min–max). **Encoding**: the encoder's forward pass, `predict_on_batch` on batches of "
            f"{common.ENCODE_BATCH} of the length-sorted sentences, one pass as warm-up, then {common.REPEATS} timed "
            "passes (tokenisation is not timed). Each contestant and job ran in a process of its own, one after "
            "the other.",
            "",
            "- Keras 2 engine: `cosent_tf.build_encoder` (bert4keras on tf-keras), `CoSENTLoss`, `FusedAdam` (what "
            "`cosent-tf train` compiles); tf.function graphs, no XLA.",
            "- Keras 3: `backbone_from_config` (a keras-hub `BertBackbone`), `cosent_tf.keras3.build_encoder`, "
            "`cosent_tf.keras3.CoSENTLoss`, `keras.optimizers.Adam`, compiled with Keras's defaults "
            '(`jit_compile="auto"`: `jax.jit` on JAX; on TensorFlow Keras turns XLA on only where there is a GPU, so '
            "a CPU runs `tf.function` graphs, as the Keras 2 engine does).",
            "",
            "| contestant | training steps/s | first step (s) | training peak RSS (MiB) | encoding sentences/s | "
            "encoding peak RSS (MiB) | XLA / jit | versions |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, (title, _, _) in CONTESTANTS.items():
            train = raw["contestants"][name].get("train") or {}
            encode = raw["contestants"][name].get("encode") or {}
            done = train if "error" not in train else encode
            versions = ", ".join(
                f"{key} {done[key]}" for key in ("keras", "jax") if key in done and "error" not in done
            )
            first = f"{train['first_step_seconds']:.1f}" if "first_step_seconds" in train else ""
            lines.append(
                f"| {title} | {cell(train, 'train', 2)} | {first} | {train.get('peak_rss_mib', '')} | "
                f"{cell(encode, 'encode', 0)} | {encode.get('peak_rss_mib', '')} | "
                f"{'yes' if done.get('jit_compile') else 'no'} | {versions} |"
            )
        lines += [
            "",
            "`first step` is the time from the start of `fit` to the end of its first step: building the step "
            "(tracing, and compiling where XLA or `jax.jit` does).",
            "",
            "## Ratios to the Keras 2 engine (medians, same run)",
            "",
            "| contestant | training | encoding |",
            "|---|---|---|",
        ]
        for name, (title, _, _) in CONTESTANTS.items():
            if name != REFERENCE:
                lines.append(f"| {title} | {ratio(raw, name, 'train')} | {ratio(raw, name, 'encode')} |")
        lines += ["", "![training steps/s and encoding sentences/s](keras3.png)", ""]
        write_plot(raw, os.path.join(folder, "keras3.png"))
    failed = [
        (name, job, figures)
        for name, jobs in raw["contestants"].items()
        for job, figures in jobs.items()
        if "error" in figures
    ]
    if failed:
        lines += ["## Failed jobs", ""]
        for name, job, figures in failed:
            command = figures.get("command", "")
            lines += [f"### {name} {job}", "", f"`{command}`", "", "```", figures["error"], "```", ""]
    write_text(os.path.join(folder, "KERAS3.md"), "\n".join(lines))
    return 1 if failed or "error" in setup else 0


def write_plot(raw, path):
    from cosent_tf.plotting import new_figure, save_png

    figure, axes = new_figure(1, 2, figsize=(10, 3.6))
    names = list(CONTESTANTS)
    labels = ["Keras 2 engine", "Keras 3 TF", "Keras 3 JAX"]
    for axis, job, unit in zip(axes, JOBS, ("training steps/s", "encoding sentences/s")):
        values = [rates(raw["contestants"][name].get(job), job) for name in names]
        medians = [median(v) if v else 0.0 for v in values]
        low = [m - min(v) if v else 0.0 for m, v in zip(medians, values)]
        high = [max(v) - m if v else 0.0 for m, v in zip(medians, values)]
        axis.bar(labels, medians, yerr=[low, high], color=["#888888", "#ff6f00", "#3367d6"], capsize=4)
        axis.set_ylabel(unit)
        axis.set_title(f"small model, {unit}")
    figure.tight_layout()
    save_png(figure, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-pairs", type=int, default=TRAIN_PAIRS, help="STS-B train pairs trained on")
    parser.add_argument("--time-budget", type=float, default=common.TIME_BUDGET, help="seconds of timed work a job")
    parser.add_argument("--output-dir", default=HERE, help="where keras3_results.json and KERAS3.md go")
    parser.add_argument("--cpus", type=lambda text: __import__("run").parse_cpus(text), help="pin every job")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from the results file")
    args = parser.parse_args()
    results_path = os.path.join(args.output_dir, "keras3_results.json")
    if not args.report_only:
        check_environment()
        os.environ["BENCH_TIME_BUDGET"] = str(args.time_budget)
        os.environ["BENCH_MODEL"] = "small"
        started = datetime.datetime.now(datetime.timezone.utc)
        raw = {
            "started": started.isoformat(),
            "cpu": common.cpu_name(),
            "cpu_flags": common.cpu_flags(),
            "cores": len(os.sched_getaffinity(0)) if args.cpus is None else len(args.cpus),
            "python": platform.python_version(),
            "nice": os.nice(0),
            "load_average_before": os.getloadavg()[0],
            "command": " ".join([".venv/bin/python", "benchmarks/keras3_bench.py", *sys.argv[1:]]),
            "args": vars(args),
            **measure(args),
        }
        raw["load_average_after"] = os.getloadavg()[0]  # the machine's other work, over the last minute
        from cosent_tf.io import write_text

        write_text(results_path, json.dumps(raw, indent=1) + "\n")
    return write_report(results_path)


if __name__ == "__main__":
    if sys.argv[1:2] == ["prepare"]:
        prepare(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1:2] == ["worker"]:
        worker(*sys.argv[2:6])
    else:
        sys.exit(main())
