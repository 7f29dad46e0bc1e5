"""Speed of this engine against the original bert4keras pipeline and sentence-transformers.

One command (``make bench``) measures, in one run on this machine, every contestant's
job in a process of its own (so its peak RSS is its own), each with 3 repetitions after
one warm-up (see common.py). For the small model and for BERT-base (random weights,
``common.MODELS``), in float32 and in bf16:

* training pairs/s: the pass over the pairs after the warm-up steps, in 3 stretches;
  each step's seconds; and the process's peak RSS;
* encoding sentences/s: a warm-up call, then 3 timed calls on all the sentences (or as
  many as the time budget allows), and the process's peak RSS; for this engine also
  through its exported SavedModel (raw strings, in input order);

and once, for the small model:

* ``micro.py``: CoSENT's share of a step at 64 pairs, achieved GFLOP/s against the
  measured matmul peak, and bf16 training over float32 from steps taking turns in one process;
* accuracy: one epoch of ``scripts/cosent.py STS-B`` (same seed, small model) plain
  (float32, batches in random order), length-grouped (the default) and grouped in bf16,
  so the speed-ups are seen not to cost test Spearman.

It writes ``benchmarks/results.json`` (every repetition) and ``benchmarks/RESULTS.md``
(medians with min-max, and the ratios the speed targets are stated in). A job that fails is
recorded with its error in both, the others are still measured, and the command then exits
with status 1; nothing is retried.

    .venv/bin/python benchmarks/run.py [--time-budget 60] [--bench-python .venv-reference/bin/python] [--cpus 0,1]

``--cpus`` pins every process the run starts to those CPUs (as ``taskset -c`` would), so that a
larger machine can be measured on as many cores as the developers' 2-core machines have.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cosent_tf.io import write_text  # noqa: E402

import common  # noqa: E402

CONTESTANTS = {  # name: (script, the virtual environment it runs in)
    "this engine": ("this_engine.py", "engine"),
    "original pipeline": ("original_pipeline.py", "engine"),
    "sentence-transformers": ("sentence_transformers_bench.py", "bench"),
}
PRECISIONS = ("float32", "bf16")
ENGINE, ORIGINAL, ST = "this engine", "original pipeline", "sentence-transformers"
# Encode jobs beyond each contestant's plain one, and the row label they get in RESULTS.md.
EXTRA_ENCODE_JOBS = {
    "encode_saved_model": "exported SavedModel, raw strings in input order",
    "encode_frozen_weights": "encode, TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1",
    "encode_sorted": "sentences sorted by length",
}
# Variables a job's process starts with: README advises TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 for
# processes that only encode or serve (oneDNN's AMX kernel for the Dense layers, where the CPU has it).
JOB_ENVIRONMENT = {"encode_frozen_weights": {"TF_ONEDNN_ASSUME_FROZEN_WEIGHTS": "1"}}


def _jobs():
    for model in common.MODELS:
        for name in CONTESTANTS:
            yield from ((model, name, job, p) for job in ("train", "encode") for p in PRECISIONS)
            if name == ENGINE:
                yield from (
                    (model, name, job, p) for job in ("encode_saved_model", "encode_frozen_weights") for p in PRECISIONS
                )
            if name == ORIGINAL and model == "small":
                yield (model, name, "encode_sorted", "float32")


JOBS = list(_jobs())  # (model, contestant, job, precision); the models are common.MODELS
MODEL_NAMES = {"small": "small (L4 H312 A12 I1248)", "base": "BERT-base (L12 H768 A12 I3072)"}
RATE = {
    "train": "train_pairs_per_second",
    **dict.fromkeys(("encode", *EXTRA_ENCODE_JOBS), "encode_sentences_per_second"),
}


def failure(command, completed):
    """What results.json records of a job that failed: the command, its exit status, its error's end."""
    return {
        "error": f"exit status {completed.returncode}: {completed.stderr.strip()[-2000:]}",
        "command": " ".join(command),
    }


def pinned_to(cpus):
    """A ``preexec_fn`` that pins the child process to ``cpus`` (None: no pinning). TensorFlow and
    PyTorch size their thread pools from the affinity they start with."""
    return None if cpus is None else lambda: os.sched_setaffinity(0, cpus)


def parse_cpus(text):
    """``--cpus``: CPU numbers as ``taskset -c`` takes them (``0,1``, ``0-3``, ``0-1,8``)."""
    cpus = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        last = last if dash else first
        if not (first.isdigit() and last.isdigit()) or int(last) < int(first):
            raise argparse.ArgumentTypeError(f"{text!r}: give CPU numbers and ranges, as in 0,1 or 0-3")
        cpus.update(range(int(first), int(last) + 1))
    return sorted(cpus)


def run_job(python, script, job, precision, env, model="small", cpus=None):
    """The job's figures, or (it failed) :func:`failure`'s record; said on the console either way."""
    with tempfile.TemporaryDirectory() as folder:
        output = os.path.join(folder, "result.json")
        command = [python, os.path.join(HERE, script), job, precision, output]
        completed = subprocess.run(
            command, env={**env, "BENCH_MODEL": model}, capture_output=True, text=True, preexec_fn=pinned_to(cpus)
        )
        if completed.returncode != 0:
            print(f"FAILED: {' '.join(command)}\n{completed.stderr[-3000:]}", flush=True)
            return failure(command, completed)
        with open(output, encoding="utf-8") as f:
            return json.load(f)


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def cpu_description():
    return f"{common.cpu_name()}, {os.cpu_count()} cores, {', '.join(common.cpu_flags()) or 'no AVX2'}"


FAILED = "failed"


def fmt(s, digits=0):
    return f"{s['median']:.{digits}f} ({s['min']:.{digits}f}–{s['max']:.{digits}f})"


def rate(result, digits=0):
    return FAILED if "error" in result else fmt(result["rate"], digits)


def field(result, name, pattern="{}"):
    return FAILED if "error" in result else pattern.format(result[name])


def with_rate(record):
    """A job's record from results.json with ``rate`` (median, min, max of its repetitions)
    and ``repeats`` added; a failed job's record as it is."""
    if "error" in record:
        return record
    rates = record[RATE[record["job"]]]
    return {**record, "rate": summary(rates), "repeats": len(rates)}


def ratio(mine, theirs):
    """The median rate of job ``mine`` over that of ``theirs``, or None when either failed."""
    if "error" in mine or "error" in theirs:
        return None
    return mine["rate"]["median"] / theirs["rate"]["median"]


# The speed targets: (label, model, this engine's (job, precision), the other's
# (contestant, job, precision), target or None).
TARGETS = [
    row
    for model in common.MODELS
    for row in (
        ("training float32 vs sentence-transformers", model, ("train", "float32"), (ST, "train", "float32"), 2.0),
        ("training bf16 vs sentence-transformers bf16", model, ("train", "bf16"), (ST, "train", "bf16"), 1.2),
        ("encoding float32 vs sentence-transformers", model, ("encode", "float32"), (ST, "encode", "float32"), 1.2),
        ("encoding bf16 vs sentence-transformers bf16", model, ("encode", "bf16"), (ST, "encode", "bf16"), 1.2),
        ("training bf16 vs float32, this engine", model, ("train", "bf16"), (ENGINE, "train", "float32"), 1.5),
        ("training float32 vs original pipeline", model, ("train", "float32"), (ORIGINAL, "train", "float32"), 2.0),
        ("encoding bf16 vs float32, this engine", model, ("encode", "bf16"), (ENGINE, "encode", "float32"), None),
        ("encoding float32 vs original pipeline", model, ("encode", "float32"), (ORIGINAL, "encode", "float32"), None),
        (
            "encoding float32, frozen weights, vs sentence-transformers",
            model,
            ("encode_frozen_weights", "float32"),
            (ST, "encode", "float32"),
            None,
        ),
        (
            "encoding bf16, frozen weights, vs sentence-transformers bf16",
            model,
            ("encode_frozen_weights", "bf16"),
            (ST, "encode", "bf16"),
            None,
        ),
        (
            "SavedModel encoding float32 vs sentence-transformers",
            model,
            ("encode_saved_model", "float32"),
            (ST, "encode", "float32"),
            None,
        ),
        (
            "SavedModel encoding bf16 vs sentence-transformers bf16",
            model,
            ("encode_saved_model", "bf16"),
            (ST, "encode", "bf16"),
            None,
        ),
    )
]
# Judged only where the CPU computes in bf16 (common.has_bf16_arithmetic).
NEEDS_BF16_HARDWARE = "training bf16 vs float32, this engine"
# Two runs of the same batches, compared on the steps both timed (same_steps_ratio).
SAME_STEPS = "training bf16 vs float32, this engine"


def same_steps_ratio(mine, theirs):
    """(``theirs``' seconds over ``mine``'s on the training steps both timed, their number),
    or None when either job failed or has no step times. For two runs of the same batches:
    within a time budget the faster run times more of the length-grouped batches, whose
    lengths vary along the pass, so the medians of their rates would compare different work."""
    if any("error" in r or "step_seconds" not in r for r in (mine, theirs)):
        return None
    steps = min(len(mine["step_seconds"]), len(theirs["step_seconds"]))
    return sum(theirs["step_seconds"][:steps]) / sum(mine["step_seconds"][:steps]), steps


def ratio_row(model, label, value, target, basis="", measurable=True):
    """A row of the ratio table: ``value`` (None: a job failed) against ``target`` (None:
    no target); ``measurable`` false where this CPU cannot show what the target asks."""
    wanted = "" if target is None else f"≥ {target}×"
    if value is None:
        return f"| {model} | {label} | — (a job {FAILED}) | {wanted} | |"
    met = "" if target is None else ("yes" if value >= target else "**no**")
    if not measurable:
        wanted, met = f"{wanted} with AVX512-BF16 or AMX", "not measurable (this CPU has neither)"
    return f"| {model} | {label} | {value:.2f}×{basis} | {wanted} | {met} |"


def write_report(path, results, micro, accuracy, args, started, cpu, has_bf16, previous=None):
    cpus = getattr(args, "cpus", None)  # results.json from before --cpus has none
    cpus_text = ",".join(map(str, cpus or ()))
    pinning = f", every process pinned to CPUs {cpus_text} ({len(cpus)} of them)" if cpus else ""
    cpus_option = f" --cpus {cpus_text}" if cpus else ""
    lines = [
        "# Speed: this engine vs the original bert4keras pipeline and sentence-transformers",
        "",
        f"Measured {started:%Y-%m-%d %H:%M} UTC on {cpu}{pinning}, Python {platform.python_version()}, "
        f"by `make bench` (`.venv/bin/python benchmarks/run.py --time-budget {args.time_budget:g}{cpus_option}`): "
        f"each job in its own process, {common.REPEATS} repetitions after a warm-up. Rates are medians of the "
        "repetitions with their min–max.",
        "",
        f"Set-up (every contestant): random BERTs of two shapes, {' and '.join(MODEL_NAMES.values())}, vocab "
        f"21128, [CLS] pooling, maxlen {common.MAXLEN}; training on the first {common.TRAIN_PAIRS} BQ train pairs "
        f"in batches of {common.BATCH_PAIRS} pairs (CoSENT λ=20, Adam 2e-5): one pass, the steps after the "
        f"warm-up ({common.MODELS['small'][1]} steps small, {common.MODELS['base'][1]} base) cut into "
        f"{common.REPEATS} consecutive stretches; encoding the first {common.ENCODE_SENTENCES} BQ test sentences "
        f"in batches of {common.ENCODE_BATCH}: a warm-up call, then {common.REPEATS} timed calls. A job that "
        f"would need more than {args.time_budget:g} s of timed work stops there and reports the rates of what it "
        "did: the `steps timed` and `sentences per call` columns say how much each job did (of "
        f"{common.TRAIN_PAIRS // common.BATCH_PAIRS} steps less the warm-up, and {common.ENCODE_SENTENCES} "
        "sentences).",
        "",
        "| model | contestant | precision | train pairs/s | steps timed | peak RSS, training (MiB) | "
        "encode sentences/s | sentences per call | peak RSS, encoding (MiB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for model in common.MODELS:
        for name in CONTESTANTS:
            for precision in PRECISIONS:
                train, encode = results[(model, name, "train", precision)], results[(model, name, "encode", precision)]
                lines.append(
                    f"| {model} | {name} | {precision} | {rate(train, 1)} | {field(train, 'timed_steps')} | "
                    f"{field(train, 'peak_rss_mib', '{:.0f}')} | {rate(encode)} | {field(encode, 'sentences')} | "
                    f"{field(encode, 'peak_rss_mib', '{:.0f}')} |"
                )
                for job, label in EXTRA_ENCODE_JOBS.items():
                    extra = results.get((model, name, job, precision))
                    if extra is not None:
                        lines.append(
                            f"| {model} | {name}, {label} | {precision} | | | | {rate(extra)} | "
                            f"{field(extra, 'sentences')} | {field(extra, 'peak_rss_mib', '{:.0f}')} |"
                        )
    lines += [
        "",
        "## Ratios (medians of this engine over the other, same run)",
        "",
        "This engine's bf16 training over its float32 training is instead the float32 run's time over the bf16 "
        "run's on the steps both timed: the same batches, whose lengths vary along the pass.",
        "",
        "| model | ratio | measured | target | met |",
        "|---|---|---|---|---|",
    ]
    for label, model, mine, theirs, target in TARGETS:
        my_result, their_result = results[(model, ENGINE, *mine)], results[(model, *theirs)]
        value, basis = ratio(my_result, their_result), ""
        same_steps = same_steps_ratio(my_result, their_result) if label == SAME_STEPS else None
        if same_steps is not None:
            value, steps = same_steps
            basis = f" (the {steps} steps both timed)"
        measurable = has_bf16 or label != NEEDS_BF16_HARDWARE
        lines.append(ratio_row(model, label, value, target, basis, measurable))
    mine, original = results[("small", ENGINE, "train", "float32")], results[("small", ORIGINAL, "train", "float32")]
    if "error" in mine or "error" in original:
        lines.append(f"| small | peak training RSS float32, this engine / original | — (a job {FAILED}) | ≤ 1 | |")
    else:
        rss_mine, rss_orig = mine["peak_rss_mib"], original["peak_rss_mib"]
        lines.append(
            f"| small | peak training RSS float32, this engine / original | {rss_mine / rss_orig:.2f} | ≤ 1 | "
            f"{'yes' if rss_mine <= rss_orig else '**no**'} |"
        )
    if "error" in micro:
        lines.append(f"| small | CoSENT loss share of a float32 step at 64 pairs | — (micro.py {FAILED}) | ≤ 2% | |")
        lines += ["", f"## A training step at 64 pairs: `benchmarks/micro.py` {FAILED} (see below)"]
    else:
        lines += _micro_section(micro, has_bf16)
    lines += _accuracy_section(accuracy, previous)
    lines += failures_section(results, micro, accuracy)
    write_text(path, "\n".join(lines) + "\n")


def _micro_section(micro, has_bf16):
    share = micro["float32"]["loss_share"]
    lines = [
        f"| small | CoSENT loss share of a float32 step at 64 pairs | {100 * share:.2f}% | ≤ 2% | "
        f"{'yes' if share <= 0.02 else '**no**'} |"
    ]
    turns = micro.get("turns")  # absent from runs before it was measured
    if turns:
        label = f"{NEEDS_BF16_HARDWARE}, steps taking turns in one process (`micro.py`)"
        basis = f" ({turns['steps']} steps of {turns['pairs_per_batch']} pairs each)"
        value = turns["seconds"]["float32"] / turns["seconds"]["bf16"]
        target = next(row[-1] for row in TARGETS if row[0] == NEEDS_BF16_HARDWARE)
        lines.append(ratio_row("small", label, value, target, basis, has_bf16))
    lines += [
        "",
        "## A training step at 64 pairs (this engine, `benchmarks/micro.py`)",
        "",
        f"Length-grouped batches of 64 pairs, mean padded length {micro['mean_padded_length']:.1f}; "
        f"{micro['train_step_gflop']:.1f} GFLOP of matmuls per step (backward counted as 2× forward). "
        "Medians of 3 timed passes over the same batches.",
        "",
        "| precision | step (ms) | CoSENT loss fwd+bwd (ms) | loss share | achieved GFLOP/s | matmul peak GFLOP/s "
        "| of peak |",
        "|---|---|---|---|---|---|---|",
    ]
    for precision in ("float32", "bf16"):
        m = micro[precision]
        lines.append(
            f"| {precision} | {1000 * m['step_seconds']:.0f} | {1000 * m['loss_seconds']:.2f} | "
            f"{100 * m['loss_share']:.2f}% | {m['achieved_gflops']:.0f} | {m['matmul_peak_gflops']:.0f} | "
            f"{100 * m['fraction_of_peak']:.0f}% |"
        )
    return lines


def _accuracy_section(accuracy, previous):
    """The short STS-B runs against the plain one and against the same runs of the previous
    ``make bench`` (``previous``: its start and accuracy figures), so that a speed change is
    seen not to move test Spearman by more than 0.01."""
    if not accuracy:
        return []
    plain = accuracy["plain float32"].get("test_spearman")
    before = previous.get("accuracy", {}) if previous else {}
    lines = [
        "",
        "## Accuracy: length-grouped batches and bf16 against the plain run and the previous run",
        "",
        "One epoch of `scripts/cosent.py STS-B --epochs 1 --lr 1e-4` (seed 42, the small random BERT): test "
        "Spearman against the plain float32 run (batches in random order) and against the same run in the previous "
        f"`make bench` ({previous['started'][:16].replace('T', ' ') + ' UTC' if previous else 'none recorded'}):",
        "",
        "| run | valid Spearman | test Spearman | test − plain | previous test | change | within 0.01 | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, m in accuracy.items():
        if "error" in m:
            lines.append(f"| {name} | {FAILED} | {FAILED} | | | | | |")
            continue
        versus_plain = "—" if plain is None else f"{m['test_spearman'] - plain:+.4f}"
        earlier = before.get(name, {}).get("test_spearman")
        if earlier is None:
            earlier_cells = "— | | "
        else:
            change = m["test_spearman"] - earlier
            earlier_cells = f"{earlier:.4f} | {change:+.4f} | {'yes' if abs(change) <= 0.01 else '**no**'}"
        lines.append(
            f"| {name} | {m['valid_spearman']:.4f} | {m['test_spearman']:.4f} | {versus_plain} | {earlier_cells} | "
            f"{m['wall_seconds']:.0f} |"
        )
    return lines


def failures_section(results, micro=None, accuracy=None):
    """Each failed job (``results`` keyed by tuples of names; ``micro.py``'s and the accuracy
    runs' records where given) with its command and the end of its error output."""
    failed = [(" ".join(key), result) for key, result in results.items() if "error" in result]
    failed += [("micro", micro)] if micro and "error" in micro else []
    failed += [(f"accuracy, {name}", m) for name, m in (accuracy or {}).items() if "error" in m]
    if not failed:
        return []
    lines = ["", "## Failed jobs", "", "Not retried; every other job was measured.", ""]
    for name, result in failed:
        lines += [f"### {name}", "", f"`{result['command']}`", "", "```", result["error"], "```", ""]
    return lines


ACCURACY_RUNS = {
    "plain float32": ["--no-group-by-length"],
    "length-grouped float32": [],
    "length-grouped bf16": ["--precision", "bf16"],
}


def accuracy_runs(folder, cpus=None):
    """Test Spearman of a short STS-B run per set-up: {name: metrics}."""
    metrics = {}
    for name, options in ACCURACY_RUNS.items():
        output = os.path.join(folder, name.replace(" ", "-"))
        command = [
            sys.executable,
            os.path.join(os.path.dirname(HERE), "scripts", "cosent.py"),
            "STS-B",
            "--data-dir",
            common.data_dir(),
            "--epochs",
            "1",
            "--lr",
            "1e-4",
            "--output-dir",
            output,
            *options,
        ]
        completed = subprocess.run(command, capture_output=True, text=True, preexec_fn=pinned_to(cpus))
        if completed.returncode != 0:
            print(f"FAILED: accuracy, {name}\n{completed.stderr[-3000:]}", flush=True)
            metrics[name] = failure(command, completed)
            continue
        with open(os.path.join(output, "metrics.json"), encoding="utf-8") as f:
            result = json.load(f)
        metrics[name] = {
            "test_spearman": result["test"]["spearman"],
            "valid_spearman": result["valid"]["spearman"],
            "wall_seconds": result["wall_seconds"],
        }
        print(f"accuracy, {name}: test Spearman {metrics[name]['test_spearman']:.4f}", flush=True)
    return metrics


def check_environment(bench_python):
    """Exit with what is missing, before any job: a missing Python or data file would otherwise
    fail its jobs one by one, each reported only when the whole run ends."""
    problems = []
    if not (os.path.isfile(bench_python) and os.access(bench_python, os.X_OK)):
        problems.append(f"--bench-python {bench_python}: not found (`make bench` installs it)")
    else:
        probe = subprocess.run(
            [bench_python, "-c", "import sentence_transformers, torch"], capture_output=True, text=True
        )
        if probe.returncode:
            reason = (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]
            problems.append(f"--bench-python {bench_python}: cannot import sentence-transformers and torch ({reason})")
    for path in (common.vocab_path(), common.bq_path("train"), common.bq_path("test")):
        if not os.path.isfile(path):
            problems.append(f"{path}: not found; set COSENT_SHARED_DATA to the shared data folder")
    if problems:
        raise SystemExit("the benchmark cannot start:\n  " + "\n  ".join(problems))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--time-budget",
        type=float,
        default=60.0,
        help="seconds of timed work (all repetitions) after which a slow job stops and reports",
    )
    parser.add_argument(
        "--bench-python", default=".venv-reference/bin/python", help="the Python with torch and sentence-transformers"
    )
    parser.add_argument("--output-dir", default=HERE)
    parser.add_argument("--skip-accuracy", action="store_true", help="leave out the three short STS-B runs")
    parser.add_argument("--report-only", action="store_true", help="rewrite RESULTS.md from OUTPUT_DIR/results.json")
    parser.add_argument(
        "--cpus", type=parse_cpus, help="pin every job to these CPUs, as taskset -c takes them (0,1 or 0-3)"
    )
    args = parser.parse_args()
    if args.report_only:
        return report(os.path.join(args.output_dir, "results.json"))
    unavailable = sorted(set(args.cpus or ()) - os.sched_getaffinity(0))
    if unavailable:
        parser.error(f"--cpus: this process may not run on CPU {', '.join(map(str, unavailable))}")
    check_environment(args.bench_python)
    started = datetime.datetime.now(datetime.timezone.utc)
    pythons = {"engine": sys.executable, "bench": args.bench_python}
    env = {**os.environ, "BENCH_TIME_BUDGET": str(args.time_budget), "PYTHONUNBUFFERED": "1"}
    micro = run_job(sys.executable, "micro.py", "micro", "float32", env, cpus=args.cpus)
    if "error" not in micro:
        print(f"micro: loss share {100 * micro['float32']['loss_share']:.2f}%", flush=True)
    runs = {}
    for model, name, job, precision in JOBS:
        script, venv = CONTESTANTS[name]
        job_env = {**env, **JOB_ENVIRONMENT.get(job, {})}
        runs[(model, name, job, precision)] = figures = run_job(
            pythons[venv], script, job, precision, job_env, model, args.cpus
        )
        if "error" not in figures:
            print(
                f"{model} {name} {job} {precision}: {', '.join(f'{r:.1f}' for r in figures[RATE[job]])}/s, "
                f"peak RSS {figures['peak_rss_mib']:.0f} MiB",
                flush=True,
            )
    with tempfile.TemporaryDirectory() as folder:
        accuracy = {} if args.skip_accuracy else accuracy_runs(folder, args.cpus)
    raw = {
        "started": started.isoformat(),
        "cpu": cpu_description(),
        "bf16_arithmetic": common.has_bf16_arithmetic(),
        "args": vars(args),
        "micro": micro,
        "accuracy": accuracy,
        "runs": [{"model": m, "contestant": n, "job": j, "precision": p, **runs[(m, n, j, p)]} for m, n, j, p in JOBS],
    }
    results_path = os.path.join(args.output_dir, "results.json")
    raw["previous"] = previous_run(results_path)
    write_text(results_path, json.dumps(raw, indent=1))
    return report(results_path)


def previous_run(results_path):
    """The start and accuracy figures of the run whose results.json is about to be replaced, or None."""
    try:
        with open(results_path, encoding="utf-8") as f:
            earlier = json.load(f)
    except FileNotFoundError:
        return None
    return {"started": earlier["started"], "accuracy": earlier.get("accuracy") or {}}


def report(results_path):
    """Write RESULTS.md beside ``results.json`` from the repetitions it holds; returns 1 when
    a job had failed (the exit status of ``make bench``), else 0."""
    with open(results_path, encoding="utf-8") as f:
        raw = json.load(f)
    results = {(run["model"], run["contestant"], run["job"], run["precision"]): with_rate(run) for run in raw["runs"]}
    path = os.path.join(os.path.dirname(results_path), "RESULTS.md")
    write_report(
        path,
        results,
        raw["micro"],
        raw.get("accuracy") or {},
        argparse.Namespace(**raw["args"]),
        datetime.datetime.fromisoformat(raw["started"]),
        raw["cpu"],
        raw["bf16_arithmetic"],
        raw.get("previous"),
    )
    with open(path, encoding="utf-8") as f:
        print(f.read())
    failed = [run for run in raw["runs"] if "error" in run] + [
        m for m in [raw["micro"], *(raw.get("accuracy") or {}).values()] if "error" in m
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
