"""What int8 costs in quality: the ONNX export of every model of the small reproduction, float32 and
int8, checked on its task's test file.

Each model folder of ``runs/small`` that the reproduction wrote (``cosent-TASK``, feature models;
``interact-cosent-TASK``, interaction models; TASK ATEC, BQ, LCQMC or PAWSX) is exported with
``cosent-tf export MODEL OUT --format onnx --quantize int8 --check TEST_FILE`` (the Python call
behind it, in a child process of its own), into a temporary folder, with the task's whole test
file from the shared data. The table gives, per model, the float32 and int8 files' Spearman and
accuracy (x100, accuracy at each file's own best threshold on the test file, as the export's check
computes them), what int8 loses, whether the export's 0.5-point warning fired, the layout, the
seconds of the export (conversion, quantisation, writing) and of its check, and the files' sizes.

    make onnx-quality     # about 30 minutes on 2 cores; writes docs/small-random/onnx-int8.md
    .venv/bin/python benchmarks/onnx_quality.py [--runs runs/small] [--only cosent-BQ ...] [--output FILE]
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = ("ATEC", "BQ", "LCQMC", "PAWSX")
RUN_NAMES = tuple(f"cosent-{task}" for task in TASKS) + tuple(f"interact-cosent-{task}" for task in TASKS)
DEFAULT_OUTPUT = os.path.join(ROOT, "docs", "small-random", "onnx-int8.md")
COMMAND = "make onnx-quality"


def child(model_dir, out_dir, check_file, result_path):
    """Export ``model_dir`` (int8 too, checked on ``check_file``) into ``out_dir``; write what was
    measured to ``result_path`` as JSON."""
    from cosent_tf.export import onnx_export
    from cosent_tf.io import write_text

    spent = {"check": 0.0}
    quality_check = onnx_export.quality_check

    def timed_check(*args, **kwargs):
        start = time.perf_counter()
        try:
            return quality_check(*args, **kwargs)
        finally:
            spent["check"] += time.perf_counter() - start

    onnx_export.quality_check = timed_check  # the check's seconds apart from the export's
    start = time.perf_counter()
    exported = onnx_export.export_onnx(model_dir, out_dir, quantize="int8", check_file=check_file)
    seconds = time.perf_counter() - start
    sizes = {precision: os.path.getsize(os.path.join(out_dir, path)) for path, precision in exported.files.items()}
    result = {
        "layout": exported.layout,
        "reason": exported.reason,
        "check": exported.check,
        "sizes": sizes,
        "export_seconds": seconds - spent["check"],
        "check_seconds": spent["check"],
    }
    write_text(result_path, json.dumps(result, indent=1))


def model_task(model_dir):
    """(kind, task) of a model folder of the reproduction, from its cosent_model.json."""
    path = os.path.join(model_dir, "cosent_model.json")
    with open(path, encoding="utf-8") as f:
        described = json.load(f)
    task = (described.get("source") or {}).get("task")
    if task not in TASKS:
        raise SystemExit(f"{path}: its source names task {task!r}, not one of {', '.join(TASKS)}")
    return described["kind"], task


def test_file(task):
    """The task's test file in the shared data (its whole test split)."""
    data = common.data_dir()
    nested = os.path.join(data, "senteval_cn")
    path = os.path.join(nested if os.path.isdir(nested) else data, task, f"{task}.test.data")
    if not os.path.isfile(path):
        raise SystemExit(f"{path}: the {task} test file is not there (set COSENT_SHARED_DATA to the shared data)")
    return path


def measure(name, model_dir, folder):
    """Run :func:`child` on one model in a process of its own; what it measured."""
    kind, task = model_task(model_dir)
    check_file = test_file(task)
    result_path = os.path.join(folder, f"{name}.json")
    out_dir = os.path.join(folder, name)
    command = [sys.executable, os.path.abspath(__file__), "--child", model_dir, out_dir, check_file, result_path]
    print(f"{name}: exporting ({kind}, checked on {check_file})", file=sys.stderr, flush=True)
    start = time.perf_counter()
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{completed.stderr[-3000:]}")
    with open(result_path, encoding="utf-8") as f:
        result = json.load(f)
    print(f"{name}: done in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return {"name": name, "kind": kind, "task": task, "check_file": check_file, **result}


def versions():
    """The converter's and runtime's versions, as the child sees them."""
    code = "import onnxruntime, tf2onnx, onnx; print(onnxruntime.__version__, tf2onnx.__version__, onnx.__version__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return dict(zip(("onnxruntime", "tf2onnx", "onnx"), out))


def _figure(check, precision, name):
    value = check[precision].get(name)
    return "" if value is None else f"{value:.2f}"


def table(rows):
    lines = [
        "| model | task | pairs | layout | Spearman float32 | int8 | loss | accuracy float32 | int8 | loss "
        "| warning | export s | check s | float32 MB | int8 MB |",
        "|---|---|--:|---|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|",
    ]
    for row in rows:
        check, loss = row["check"], row["check"]["int8_loss"]
        accuracy_loss = "" if loss.get("accuracy") is None else f"{loss['accuracy']:.2f}"
        cells = [
            row["name"],
            row["task"],
            str(check["pairs"]),
            row["layout"],
            _figure(check, "float32", "spearman"),
            _figure(check, "int8", "spearman"),
            f"{loss['spearman']:.2f}",
            _figure(check, "float32", "accuracy"),
            _figure(check, "int8", "accuracy"),
            accuracy_loss,
            "**yes**" if check["warning"] else "no",
            f"{row['export_seconds']:.0f}",
            f"{row['check_seconds']:.0f}",
            f"{row['sizes']['float32'] / 1e6:.1f}",
            f"{row['sizes']['int8'] / 1e6:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(rows, runs_dir, packages, wall_seconds):
    fired = [row["name"] for row in rows if row["check"]["warning"]]
    reasons = sorted({row["reason"] for row in rows if row["reason"]})
    layouts = sorted({row["layout"] for row in rows})
    cores = len(os.sched_getaffinity(0))
    parts = [
        "# int8 against float32: the ONNX exports of the small reproduction",
        "",
        f"Written by `{COMMAND}` (`.venv/bin/python benchmarks/onnx_quality.py`), {time.strftime('%Y-%m-%d')}, "
        f"in {wall_seconds / 60:.0f} minutes, on {common.cpu_name()} ({cores} cores; {platform.machine()}), "
        f"onnxruntime {packages['onnxruntime']}, tf2onnx {packages['tf2onnx']}, onnx {packages['onnx']}.",
        "",
        f"Each model folder of `{os.path.relpath(runs_dir, ROOT)}` (the small reproduction: a randomly initialised "
        "4-layer BERT, hidden 312, trained for one epoch on at most 4000 pairs of each task, LCQMC's and PAWSX's "
        "taken from their valid files; see [results.md](results.md)) was exported with",
        "",
        "```sh",
        "cosent-tf export runs/small/NAME/model OUT --format onnx --quantize int8 --check ../shared/data/senteval_cn/"
        "TASK/TASK.test.data",
        "```",
        "",
        "and the check's figures are in the table: Spearman and accuracy (x100) of `onnx/model.onnx` (float32) and "
        "`onnx/model_qint8.onnx` (onnxruntime's dynamic int8 quantisation) on the task's whole test file, accuracy "
        "at each file's own best threshold on that file, as the check computes it. The loss is float32 minus int8; "
        "the export warns when either loss is above 0.5 point. These test files are larger than the 2000-pair "
        "subsets the reproduction tests on (PAWSX's test file is itself 2000 pairs), so the float32 figures "
        "differ from results.md's. The models start from random weights: the figures say what int8 does to "
        "these models, not how good a model is.",
        "",
        table(rows),
        "",
        "Export seconds: the conversion by tf2onnx, the export's own parity check against the engine, the "
        "quantisation and writing the folder; check seconds: scoring the test file with both files (one ONNX "
        "Runtime session each, on every core). The machine was shared with other work, so the seconds are "
        "indicative. MB: 10^6 bytes.",
        "",
    ]
    if fired:
        parts.append(
            f"The warning fired for {len(fired)} of {len(rows)} models ({', '.join(fired)}): "
            "for those, serve the float32 file, or check int8 on your own labelled pairs."
        )
    else:
        parts.append(f"The warning fired for none of the {len(rows)} models.")
    parts.append("")
    if "onnx" in layouts and reasons:
        parts.append(
            "Layout `onnx`: the ONNX file with the tokenizer only, which sentence-transformers cannot load; "
            f"the export's reason: {'; '.join(reasons)}."
        )
        parts.append("")
    return "\n".join(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default=os.path.join(ROOT, "runs", "small"), help="the reproduction's runs folder")
    parser.add_argument("--only", nargs="+", choices=RUN_NAMES, help="these runs only")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="the Markdown report (default: %(default)s)")
    parser.add_argument("--child", nargs=4, metavar=("MODEL", "OUT", "CHECK", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    names = [
        name
        for name in args.only or RUN_NAMES
        if os.path.isfile(os.path.join(args.runs, name, "model", "cosent_model.json"))
    ]
    if not names:
        raise SystemExit(f"{args.runs}: no model folder of the small reproduction ({', '.join(RUN_NAMES)})")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="onnx-quality-") as folder:
        rows = [measure(name, os.path.join(args.runs, name, "model"), folder) for name in names]
    text = report(rows, args.runs, versions(), time.perf_counter() - start)
    with open(args.output + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(args.output + ".tmp", args.output)
    print(f"{args.output}: {len(rows)} models", file=sys.stderr)


if __name__ == "__main__":
    main()
