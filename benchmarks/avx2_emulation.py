"""Float32 speed with every contestant's kernels capped at AVX2: on this CPU, an approximation
of the AVX2-only CPUs that some of the team's machines have and no ``make bench`` can choose.

oneDNN (TensorFlow's and PyTorch's), MKL (PyTorch's float32 matmuls) and PyTorch's own ATen
kernels each obey a cap on the instructions they use; TensorFlow's other kernels are built
for AVX in its wheels, so need none. TensorFlow's oneDNN ops are turned off, as TensorFlow
itself does on a CPU without AVX512-VNNI, AVX512-BF16, AVX-VNNI or AMX. The report shows each
library's float32 matmul rate with and without the cap, so it is seen where the cap bites. The cores, caches and clocks
stay this CPU's: read the ratios, not the rates, as what an AVX2 machine shows. bf16 is left
out: an AVX2 CPU has no bf16 arithmetic, and under the cap TensorFlow's bf16 matmul finds no
kernel at all.

    .venv/bin/python benchmarks/avx2_emulation.py [--bench-python .venv-reference/bin/python]

writes ``benchmarks/avx2_emulation.json`` and ``benchmarks/AVX2_EMULATION.md``.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cosent_tf.io import write_text  # noqa: E402

import common  # noqa: E402
import run  # noqa: E402

AVX2_CAPS = {
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "DNNL_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ATEN_CPU_CAPABILITY": "avx2",
    # TensorFlow turns its oneDNN ops on by default only where the CPU has AVX512-VNNI,
    # AVX512-BF16, AVX-VNNI or AMX (IsMklEnabled), so an AVX2-only CPU runs its other kernels
    # (matmuls still through oneDNN's sgemm, which the caps above reach)
    "TF_ENABLE_ONEDNN_OPTS": "0",
}
JOBS = [  # (model, contestant, job), all float32
    (model, contestant, job)
    for model in common.MODELS
    for contestant, job in (
        (run.ENGINE, "train"),
        (run.ST, "train"),
        (run.ENGINE, "encode"),
        (run.ST, "encode"),
        (run.ENGINE, "encode_saved_model"),
    )
]
RATIOS = [  # (label, this engine's job, sentence-transformers' job, target or None)
    ("training float32 vs sentence-transformers", "train", "train", 2.0),
    ("encoding float32 vs sentence-transformers", "encode", "encode", 1.2),
    ("SavedModel encoding float32 vs sentence-transformers", "encode_saved_model", "encode", None),
]
# A 1024x768 by 768x3072 float32 matmul, 20 times: GFLOP/s on stdout.
MATMUL_PROBES = {
    "TensorFlow": "import time, tensorflow as tf\n"
    "a, b = tf.random.normal([1024, 768]), tf.random.normal([768, 3072])\n"
    "f = tf.function(lambda: tf.matmul(a, b)); f()\n"
    "t = time.perf_counter()\n"
    "for _ in range(20): f().numpy()\n"
    "print(20 * 2 * 1024 * 768 * 3072 / (time.perf_counter() - t) / 1e9)",
    "PyTorch": "import time, torch\n"
    "a, b = torch.randn(1024, 768), torch.randn(768, 3072); a @ b\n"
    "t = time.perf_counter()\n"
    "for _ in range(20): a @ b\n"
    "print(20 * 2 * 1024 * 768 * 3072 / (time.perf_counter() - t) / 1e9)",
}


def matmul_rate(python, library, env):
    """The probe's GFLOP/s, or None when it failed (said on the console; the jobs still run)."""
    completed = subprocess.run([python, "-c", MATMUL_PROBES[library]], env=env, capture_output=True, text=True)
    if completed.returncode != 0:
        print(f"FAILED: {library} matmul probe\n{completed.stderr[-3000:]}", flush=True)
        return None
    return float(completed.stdout.split()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-budget", type=float, default=60.0, help="as for benchmarks/run.py")
    parser.add_argument("--bench-python", default=".venv-reference/bin/python")
    parser.add_argument("--output-dir", default=HERE)
    args = parser.parse_args()
    run.check_environment(args.bench_python)
    started = datetime.datetime.now(datetime.timezone.utc)
    pythons = {"engine": sys.executable, "bench": args.bench_python}
    env = {**os.environ, "BENCH_TIME_BUDGET": str(args.time_budget), "PYTHONUNBUFFERED": "1"}
    capped = {**env, **AVX2_CAPS}
    probes = {
        library: {"uncapped": matmul_rate(python, library, env), "capped": matmul_rate(python, library, capped)}
        for library, python in (("TensorFlow", sys.executable), ("PyTorch", args.bench_python))
    }
    runs = []
    for model, contestant, job in JOBS:
        script, venv = run.CONTESTANTS[contestant]
        figures = run.run_job(pythons[venv], script, job, "float32", capped, model)
        runs.append({"model": model, "contestant": contestant, "job": job, **figures})
        if "error" not in figures:
            print(f"{model} {contestant} {job}: {', '.join(f'{r:.1f}' for r in figures[run.RATE[job]])}/s", flush=True)
    raw = {"started": started.isoformat(), "cpu": run.cpu_description(), "caps": AVX2_CAPS, "probes": probes}
    raw["runs"] = runs
    path = os.path.join(args.output_dir, "avx2_emulation.json")
    write_text(path, json.dumps(raw, indent=1))
    write_report(os.path.join(args.output_dir, "AVX2_EMULATION.md"), raw)
    return 1 if any("error" in r for r in runs) else 0


def _gflops(rate):
    return run.FAILED if rate is None else f"{rate:.0f}"


def write_report(path, raw):
    results = {(r["model"], r["contestant"], r["job"]): run.with_rate(r) for r in raw["runs"]}
    caps = ", ".join(f"`{k}={v}`" for k, v in raw["caps"].items())
    lines = [
        "# Speed with kernels capped at AVX2 (float32)",
        "",
        f"Measured {raw['started'][:16].replace('T', ' ')} UTC on {raw['cpu']} by "
        f"`benchmarks/avx2_emulation.py`, every job run with {caps}: the jobs, data and set-up of "
        "[RESULTS.md](RESULTS.md), float32 only. The cores, caches and clocks are this CPU's; compare ratios.",
        "",
        "Float32 matmul GFLOP/s (1024×768 by 768×3072) without and with the caps; a library whose rate does "
        "not drop used no more than AVX2 for it on this CPU anyway:",
        "",
        "| library | uncapped | capped at AVX2 |",
        "|---|---|---|",
        *(f"| {lib} | {_gflops(p['uncapped'])} | {_gflops(p['capped'])} |" for lib, p in raw["probes"].items()),
        "",
        "| model | contestant | job | rate (per second) |",
        "|---|---|---|---|",
        *(f"| {m} | {c} | {j} | {run.rate(r)} |" for (m, c, j), r in results.items()),
        "",
        "| model | ratio | measured | target | met |",
        "|---|---|---|---|---|",
    ]
    for model in common.MODELS:
        for label, mine, theirs, target in RATIOS:
            value = run.ratio(results[(model, run.ENGINE, mine)], results[(model, run.ST, theirs)])
            lines.append(run.ratio_row(model, label, value, target))
    lines += run.failures_section(results)
    write_text(path, "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
