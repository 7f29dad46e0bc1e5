"""Memory and time of one large CoSENT batch, whole and in micro-batches (``--micro-batch-size``).

Each variant runs in a process of its own, so that its peak RSS is its own: the small random
model (L4 H312), FusedAdam, a batch of ``PAIRS`` BQ train pairs at maxlen 64, one warm-up
step and ``STEPS`` timed steps in one ``fit`` (the time between the ends of consecutive
steps), plain (the whole batch's activations at once) and through
:class:`cosent_tf.training.gradient_cache.GradientCacheModel` in micro-batches of ``MICRO`` pairs. It
writes ``benchmarks/MICRO_BATCHES.md`` and ``benchmarks/micro_batches.json`` with the CPU it
ran on; only the ratios of one run compare.

    .venv/bin/python benchmarks/micro_batches.py [--pairs 512] [--micro 32] [--steps 5]
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402
from run import cpu_description  # noqa: E402


def measure(variant, pairs, micro, steps):
    """Run in the child process: seconds per step and peak RSS of one variant."""
    import numpy as np

    import cosent_tf as ct
    from cosent_tf.backend import keras, tf
    from cosent_tf.optimizers import build_optimizer
    from cosent_tf.training.gradient_cache import GradientCacheModel

    texts_a, texts_b, labels = common.train_pairs(pairs)
    tokenizer = ct.SentenceTokenizer(common.vocab_path(), common.MAXLEN)
    ids_a, ids_b = tokenizer.encode_all(texts_a, "pairs"), tokenizer.encode_all(texts_b, "pairs")
    batch = next(iter(ct.pair_dataset(ids_a, ids_b, np.asarray(labels), batch_size=pairs, shuffle=False, repeat=True)))
    model = ct.build_encoder(common.MODEL_CONFIG, pooling="cls")
    if variant == "micro":
        model = GradientCacheModel(model, micro)
    model.compile(optimizer=build_optimizer(common.LEARNING_RATE, steps + 1), loss=ct.CoSENTLoss(common.SCALE))
    dataset = tf.data.Dataset.from_tensors(batch).repeat()
    ends = []
    clock = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: ends.append(time.perf_counter()))
    # one fit: the first step (which traces the step function) is the warm-up
    model.fit(dataset, steps_per_epoch=steps + 1, epochs=1, verbose=0, callbacks=[clock])
    times = [later - earlier for earlier, later in zip(ends, ends[1:])]
    return {"seconds_per_step": statistics.median(times), "all_seconds": times, "peak_rss_mib": common.peak_rss_mib()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=512)
    parser.add_argument("--micro", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--child", choices=["plain", "micro"], help=argparse.SUPPRESS)
    parser.add_argument("--output-dir", default=HERE)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.pairs, args.micro, args.steps)))
        return
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {}
    for variant in ("plain", "micro"):
        command = [sys.executable, __file__, "--child", variant]
        command += ["--pairs", str(args.pairs), "--micro", str(args.micro), "--steps", str(args.steps)]
        print(f"{variant}: {' '.join(command)}", flush=True)
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{variant} failed:\n{done.stderr[-3000:]}")
        results[variant] = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"  {results[variant]['seconds_per_step']:.2f} s/step, peak RSS {results[variant]['peak_rss_mib']:.0f} MiB"
        )
    plain, micro = results["plain"], results["micro"]
    record = {
        "cpu": cpu_description(),
        "started": started.isoformat(timespec="seconds"),
        "pairs": args.pairs,
        "micro_batch_pairs": args.micro,
        "results": results,
        "memory_ratio": micro["peak_rss_mib"] / plain["peak_rss_mib"],
        "time_ratio": micro["seconds_per_step"] / plain["seconds_per_step"],
    }
    os.makedirs(args.output_dir, exist_ok=True)
    from cosent_tf.io import write_json, write_text  # after the children: this process stays small

    write_json(os.path.join(args.output_dir, "micro_batches.json"), record)
    write_text(
        os.path.join(args.output_dir, "MICRO_BATCHES.md"),
        f"""# One CoSENT batch of {args.pairs} pairs, whole and in micro-batches of {args.micro}

`benchmarks/micro_batches.py`, {record["started"]}, on {record["cpu"]}. Small random model
(L4 H312), maxlen 64, BQ train pairs, FusedAdam; median of {args.steps} steps after a warm-up step;
each variant in its own process.

| | seconds per step | peak RSS (MiB) |
|---|---|---|
| whole batch | {plain["seconds_per_step"]:.2f} | {plain["peak_rss_mib"]:.0f} |
| micro-batches of {args.micro} pairs | {micro["seconds_per_step"]:.2f} | {micro["peak_rss_mib"]:.0f} |
| micro / whole | {record["time_ratio"]:.2f}× | {record["memory_ratio"]:.2f}× |

Peak RSS is the whole process's (TensorFlow, the model, the data and the step); the step's
own share is what shrinks.
""",
    )
    print(f"time ×{record['time_ratio']:.2f}, peak RSS ×{record['memory_ratio']:.2f}; wrote {args.output_dir}")


if __name__ == "__main__":
    main()
