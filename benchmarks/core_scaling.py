"""How much the cores beyond the first speed up a training step, in float32 and in bf16.

TensorFlow's op profile (``step_profile.py``) records ops on its inter-op threads only; the
intra-op threads that run a matmul's or an element-wise op's shards leave no op events. So
"one inter-op thread with no op" there does not mean an idle core. This measures idle cores
directly: the engine's training step (``micro.training_step``, the benchmark's length-grouped
BQ batches) timed in child processes pinned to one core and to every core this process may
use (TensorFlow sizes its thread pools from the affinity it starts with), float32 and bf16
steps taking turns in each child (``micro.turn_taking_seconds``). With N cores, a speed-up of
S leaves 1 - S/N of the cores' time unused.

    make profile-step     # also writes benchmarks/CORE_SCALING_{small,base}.md (and .json)
    .venv/bin/python benchmarks/core_scaling.py [--model small|base] [--steps 24] [--rounds 2]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cosent_tf.io import write_text  # noqa: E402

import micro  # noqa: E402
import run  # noqa: E402
import step_profile  # noqa: E402
from step_profile import PRECISIONS  # noqa: E402


def child(config_path, pairs, steps, rounds, output):
    """In a pinned child: {precision: ms a step} of the two precisions' steps taking turns."""
    batches = micro.training_batches(pairs, steps)
    seconds = micro.turn_taking_seconds(config_path, batches, rounds)
    step_ms = {precision: 1000 * seconds[precision] / (len(batches) * rounds) for precision in PRECISIONS}
    write_text(output, json.dumps({"step_ms": step_ms, "cores": len(os.sched_getaffinity(0))}))


def pinned_step_ms(cores, args, config_path):
    """Run :func:`child` in a process pinned to ``cores``; its {precision: ms a step}."""
    with tempfile.TemporaryDirectory() as folder:
        output = os.path.join(folder, "child.json")
        command = [sys.executable, os.path.abspath(__file__), "--child", output, "--config", config_path]
        command += ["--pairs", str(args.pairs), "--steps", str(args.steps), "--rounds", str(args.rounds)]
        completed = subprocess.run(command, capture_output=True, text=True, preexec_fn=run.pinned_to(cores))
        if completed.returncode:
            raise SystemExit(f"{' '.join(command)} (cores {sorted(cores)}) failed:\n{completed.stderr[-3000:]}")
        with open(output, encoding="utf-8") as f:
            measured = json.load(f)
    if measured["cores"] != len(cores):
        raise SystemExit(f"the child ran on {measured['cores']} cores, not the {len(cores)} it was pinned to")
    return measured["step_ms"]


def measure(args, config_path):
    """{cores: {precision: ms a step}} for one core and all of them, each measured ``args.repeats``
    times in alternation (this machine's speed drifts between processes), the best kept."""
    available = sorted(os.sched_getaffinity(0))
    settings = {1: {available[0]}, len(available): set(available)}
    best = {n: dict.fromkeys(PRECISIONS, float("inf")) for n in settings}
    for _ in range(args.repeats):
        for n, cores in settings.items():
            for precision, ms in pinned_step_ms(cores, args, config_path).items():
                best[n][precision] = min(best[n][precision], ms)
            print(f"{n} core(s): {best[n]}", flush=True)
    return best


def write_report(results, path):
    cores = results["cores"]
    one, every = results["step_ms"]["1"], results["step_ms"][str(cores)]
    lines = [
        "# How the cores beyond the first speed up a training step",
        "",
        f"`benchmarks/core_scaling.py`, {results['started']}. CPU: {results['cpu']}. Model {results['model']} "
        f"({results['config']}), {results['pairs']} pairs a step, {results['steps']} length-grouped BQ batches "
        f"taken {results['rounds']} times, float32 and bf16 steps taking turns in a child process pinned to the "
        f"cores given; the best of {results['repeats']} such processes each. Milliseconds a step.",
        "",
        f"| | 1 core | {cores} cores | speed-up | cores' time unused |",
        "|---|---|---|---|---|",
    ]
    for precision in PRECISIONS:
        speedup = one[precision] / every[precision]
        lines.append(
            f"| {precision} | {one[precision]:.1f} | {every[precision]:.1f} | {speedup:.2f}× | "
            f"{100 * (1 - speedup / cores):.0f}% |"
        )
    lines += [
        "",
        f"bf16 over float32: {one['float32'] / one['bf16']:.2f}× on 1 core, "
        f"{every['float32'] / every['bf16']:.2f}× on {cores}.",
    ]
    write_text(path, "\n".join(lines) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    step_profile.add_step_arguments(parser, 24, "batches a pass")
    parser.add_argument("--rounds", type=int, default=2, help="passes over the batches in each child")
    parser.add_argument("--repeats", type=int, default=2, help="child processes for each number of cores")
    parser.add_argument("--child", metavar="OUTPUT_JSON", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    config_path, results = step_profile.report_header(args)
    if args.child:
        return child(config_path, args.pairs, args.steps, args.rounds, args.child)
    results.update(rounds=args.rounds, repeats=args.repeats, cores=len(os.sched_getaffinity(0)))
    results["step_ms"] = {str(n): ms for n, ms in measure(args, config_path).items()}
    os.makedirs(args.output_dir, exist_ok=True)
    name = results["model"]
    write_text(os.path.join(args.output_dir, f"core_scaling_{name}.json"), json.dumps(results, indent=1))
    write_report(results, os.path.join(args.output_dir, f"CORE_SCALING_{name}.md"))
    return results


if __name__ == "__main__":
    main()
