"""Where a training step's time goes, by op type and by thread, in float32 and in bf16.

What the question "where does a bf16 step lose the matmul advantage" needs, measured on the
CPU at hand (so that a run on an AMX machine says what to fix there):

* wall milliseconds a step, without and with the profiler;
* each op type's self time a step, summed over threads (TensorFlow's op profile), matmuls
  (``*MatMul*``, ``*Einsum*``) against everything else;
* how many ops run at once on TensorFlow's inter-op threads (``tf_Compute``): the time every
  one of them runs an op, some do and some have none, none does; and which op types run while
  an inter-op thread has none. These are ops side by side, not cores: an op's shards run on
  the intra-op threads, which the profile gives no op events, so a lone op may still keep
  every core busy. ``core_scaling.py`` measures how much of the cores' time a step leaves unused.

The step is ``micro.training_step``'s (the engine's encoder, ``FusedAdam``, CoSENT) on the
benchmark's length-grouped BQ batches. Uses TensorFlow's profiler and its private XSpace
reader, as TensorBoard's profile plugin does.

    make profile-step      # both models, 32 pairs: benchmarks/STEP_PROFILE_{small,base}.md (and .json)
    .venv/bin/python benchmarks/step_profile.py [--model small|base] [--pairs 32] [--steps 20]
"""

import argparse
import bisect
import glob
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cosent_tf.backend import dtype_policy, policy_name, random_seed, tf  # noqa: E402
from cosent_tf.io import atomic_path  # noqa: E402

import common  # noqa: E402
import micro  # noqa: E402
import run  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PRECISIONS = ("float32", "bf16")
INTER_OP_THREAD = "tf_Compute"  # the intra-op threads (tf_numa_*_Eigen) carry no op events
TABLE_ROWS = 25


def is_matmul(op_type):
    return "MatMul" in op_type or "Einsum" in op_type


def op_stats(xplane_path, steps):
    """({op type: self milliseconds a step, summed over threads}, {op type: executions a step})
    from TensorFlow's op profile."""
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin  # after cosent_tf: Keras 2

    data, ok = _pywrap_profiler_plugin.xspace_to_tools_data([xplane_path], "framework_op_stats")
    if not ok:
        raise RuntimeError(f"{xplane_path}: TensorFlow's op profile could not be read")
    table = json.loads(data)[0]
    columns = [c["id"] for c in table["cols"]]
    self_ms, executions = {}, {}
    for row in table["rows"]:
        cells = dict(zip(columns, (c["v"] for c in row["c"])))
        kind = cells["type"]
        if kind not in ("IDLE", ""):
            self_ms[kind] = self_ms.get(kind, 0.0) + cells["total_self_time"] / 1000 / steps
            executions[kind] = executions.get(kind, 0.0) + cells["occurrences"] / steps
    return self_ms, executions


def read_xspace(path):
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # after cosent_tf: Keras 2

    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    return space


def merged(intervals):
    """Sorted, non-overlapping [start, end) covering ``intervals``."""
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def op_type(event_name):
    """``scope/name:Type`` names an op's execution; executor events (``ExecutorState::Process``) do not."""
    name, sep, kind = event_name.rpartition(":")
    return kind if sep and name and not name.endswith(":") and kind else None


def thread_occupancy(space, steps):
    """How busy the inter-op threads of ``space`` (an XSpace) were, in milliseconds a step:
    ``all_busy``, ``some_idle`` (some busy, some not), ``none_busy`` over the span from the first
    to the last event, and ``while_idle``: {op type: time its executions overlap ``some_idle``}."""
    plane = next(p for p in space.planes if p.name == "/host:CPU")
    lines = [line for line in plane.lines if line.name.startswith(INTER_OP_THREAD)]
    if not lines:
        raise RuntimeError("the profile holds no TensorFlow inter-op threads")
    busy = [merged((e.offset_ps, e.offset_ps + e.duration_ps) for e in line.events) for line in lines]
    span_start = min(b[0][0] for b in busy if b)
    span_end = max(b[-1][1] for b in busy if b)
    changes = sorted([(s, 1) for b in busy for s, _ in b] + [(e, -1) for b in busy for _, e in b])
    totals = {"all_busy": 0, "some_idle": 0, "none_busy": 0}
    some_idle = []  # [start, end) while 0 < busy threads < all
    count, previous = 0, span_start
    for moment, change in changes:
        if moment > previous:
            key = "none_busy" if count == 0 else "all_busy" if count == len(lines) else "some_idle"
            totals[key] += moment - previous
            if key == "some_idle":
                some_idle.append((previous, moment))
        count, previous = count + change, moment
    starts = [s for s, _ in some_idle]
    while_idle = {}
    for line in lines:
        for event in line.events:
            kind = op_type(plane.event_metadata[event.metadata_id].name)
            if kind is None:
                continue
            start, end = event.offset_ps, event.offset_ps + event.duration_ps
            overlap, i = 0, max(bisect.bisect_right(starts, start) - 1, 0)
            while i < len(some_idle) and some_idle[i][0] < end:
                overlap += max(0, min(end, some_idle[i][1]) - max(start, some_idle[i][0]))
                i += 1
            if overlap:
                while_idle[kind] = while_idle.get(kind, 0) + overlap
    to_ms = 1e9 * steps  # picoseconds in a millisecond, times steps
    return {
        "compute_threads": len(lines),
        "span": (span_end - span_start) / to_ms,
        **{k: v / to_ms for k, v in totals.items()},
        "while_idle": {k: v / to_ms for k, v in sorted(while_idle.items(), key=lambda kv: -kv[1])},
    }


def profile_precision(precision, config_path, batches, steps, folder):
    """Time ``steps`` training steps without, then with, the profiler; what the profile shows."""
    with dtype_policy(policy_name(precision)), random_seed(0):
        _, _, train_step = micro.training_step(config_path)
        for inputs, labels in batches:  # traces every length once
            train_step(inputs, labels).numpy()

        def timed():
            started = time.perf_counter()
            for step in range(steps):
                inputs, labels = batches[step % len(batches)]
                train_step(inputs, labels).numpy()
            return (time.perf_counter() - started) * 1000 / steps

        unprofiled = timed()
        logdir = os.path.join(folder, precision)
        tf.profiler.experimental.start(logdir)
        try:
            profiled = timed()
        finally:
            tf.profiler.experimental.stop()
    (path,) = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    space = read_xspace(path)
    ops, executions = op_stats(path, steps)
    return {
        "step_ms": unprofiled,
        "profiled_step_ms": profiled,
        "op_ms": dict(sorted(ops.items(), key=lambda kv: -kv[1])),
        "op_executions": dict(sorted(executions.items(), key=lambda kv: -kv[1])),
        "matmul_ms": sum(v for k, v in ops.items() if is_matmul(k)),
        "other_ms": sum(v for k, v in ops.items() if not is_matmul(k)),
        "threads": thread_occupancy(space, steps),
    }


def times(numerator, denominator):
    return f"{numerator / denominator:.2f}×" if denominator else "—"


def by_total(first, second):
    """The keys of two {name: ms} tables, largest sum first."""
    return sorted(set(first) | set(second), key=lambda k: -(first.get(k, 0) + second.get(k, 0)))


def write_report(results, path):
    f32, bf16 = results["float32"], results["bf16"]
    lines = [
        "# Where a training step's time goes",
        "",
        f"`benchmarks/step_profile.py`, {results['started']}. CPU: {results['cpu']}. "
        f"Model {results['model']} ({results['config']}), {results['pairs']} pairs a step "
        f"(mean padded length {results['mean_padded_length']:.1f}), {results['steps']} steps a precision "
        "after one untimed pass over the batches. Milliseconds a step; op time is self time summed "
        "over threads.",
        "",
        "| | float32 | bf16 | float32 / bf16 |",
        "|---|---|---|---|",
    ]

    def row(label, a, b):
        lines.append(f"| {label} | {a:.1f} | {b:.1f} | {times(a, b)} |")

    row("wall, a step", f32["step_ms"], bf16["step_ms"])
    row("wall, a step under the profiler", f32["profiled_step_ms"], bf16["profiled_step_ms"])
    row("op time: matmuls", f32["matmul_ms"], bf16["matmul_ms"])
    row("op time: everything else", f32["other_ms"], bf16["other_ms"])
    threads = f32["threads"]["compute_threads"]
    row(f"an op on every inter-op thread ({threads} threads)", f32["threads"]["all_busy"], bf16["threads"]["all_busy"])
    row("an op on some inter-op threads, none on others", f32["threads"]["some_idle"], bf16["threads"]["some_idle"])
    row("no op on any inter-op thread", f32["threads"]["none_busy"], bf16["threads"]["none_busy"])
    lines += ["", "## Op time by type", "", "| op type | float32 | bf16 | float32 / bf16 |", "|---|---|---|---|"]
    for kind in by_total(f32["op_ms"], bf16["op_ms"])[:TABLE_ROWS]:
        row(kind, f32["op_ms"].get(kind, 0.0), bf16["op_ms"].get(kind, 0.0))
    lines += [
        "",
        "## What runs while an inter-op thread has no op",
        "",
        "Each op type's time a step during which some inter-op threads ran an op and others had none. "
        "Inter-op threads are not cores: the intra-op threads running an op's shards leave no op events "
        "(`core_scaling.py` measures the cores' unused time).",
        "",
        "| op type | float32 | bf16 |",
        "|---|---|---|",
    ]
    idle32, idle16 = f32["threads"]["while_idle"], bf16["threads"]["while_idle"]
    for kind in by_total(idle32, idle16)[:15]:
        lines.append(f"| {kind} | {idle32.get(kind, 0.0):.1f} | {idle16.get(kind, 0.0):.1f} |")
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def add_step_arguments(parser, steps, steps_help):
    """The options this script and ``core_scaling.py`` share: which model, pairs a step, how many
    steps, where the report goes."""
    parser.add_argument("--model", choices=sorted(common.MODELS), default="small")
    parser.add_argument("--config", help="a model config to measure instead of --model's")
    parser.add_argument("--pairs", type=int, default=common.BATCH_PAIRS, help="pairs a step")
    parser.add_argument("--steps", type=int, default=steps, help=steps_help)
    parser.add_argument("--output-dir", default=HERE)


def report_header(args):
    """(the model config's path, what a report says of its run: when, CPU, model, pairs, steps)."""
    config_path = args.config or common.MODELS[args.model][0]
    return config_path, {
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": run.cpu_description(),
        "model": "custom" if args.config else args.model,
        "config": os.path.basename(config_path),
        "pairs": args.pairs,
        "steps": args.steps,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_step_arguments(parser, 20, "steps profiled in each precision")
    args = parser.parse_args(argv)
    config_path, results = report_header(args)
    batches = micro.training_batches(args.pairs, args.steps)
    results["mean_padded_length"] = micro.mean_padded_length(batches)
    with tempfile.TemporaryDirectory() as folder:
        for precision in PRECISIONS:
            results[precision] = profile_precision(precision, config_path, batches, args.steps, folder)
            print(f"{precision}: {results[precision]['step_ms']:.1f} ms a step", flush=True)
    os.makedirs(args.output_dir, exist_ok=True)
    name = results["model"]
    with atomic_path(os.path.join(args.output_dir, f"step_profile_{name}.json")) as tmp, open(tmp, "w") as f:
        json.dump(results, f, indent=1)
    write_report(results, os.path.join(args.output_dir, f"STEP_PROFILE_{name}.md"))
    return results


if __name__ == "__main__":
    main()
