"""Time of keeping examples that share a text in different batches, on 100k examples.

:func:`cosent_tf.data.batching.keep_duplicates_apart` rearranges one epoch's batches (of
``--batch-size`` examples, cut from length-grouped examples as a training run cuts them) so
that no batch holds two examples sharing a text where it can. Its work is bounded per
example; this measures it on data where no text is shared, where 10% of the examples share
one text (far more than batches can keep apart), where queries repeat (each in about 8
examples), and on BQ's train pairs from the shared data if present. It writes
``benchmarks/DUPLICATE_SAMPLER.md`` with the CPU it ran on.

    .venv/bin/python benchmarks/duplicate_sampler.py [--examples 100000] [--batch-size 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from cosent_tf.data.batching import batch_indices, keep_duplicates_apart, text_keys  # noqa: E402
from cosent_tf.io import write_text  # noqa: E402

import common  # noqa: E402
from run import cpu_description  # noqa: E402


def made_up(examples, shared_share, queries=None, seed=0):
    """(first texts, second texts, lengths): every second text its own; the first texts own
    too, but ``shared_share`` of them one text, or drawn from ``queries`` texts."""
    rng = np.random.default_rng(seed)
    if queries:
        firsts = [f"q{int(q)}" for q in rng.integers(0, queries, examples)]
    else:
        firsts = [f"a{k}" for k in range(examples)]
        for k in np.flatnonzero(rng.random(examples) < shared_share):
            firsts[k] = "the shared text"
    seconds = [f"b{k}" for k in range(examples)]
    return firsts, seconds, rng.integers(3, 60, examples).tolist()


def bq_train(examples):
    """BQ's train pairs (the first ``examples`` well-formed lines), or None where absent."""
    path = common.bq_path("train")
    if not os.path.exists(path):
        return None
    firsts, seconds = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\r\n").split("\t")
            if len(fields) == 3:
                firsts.append(fields[0])
                seconds.append(fields[1])
            if len(firsts) == examples:
                break
    return firsts, seconds, [max(len(a), len(b)) + 2 for a, b in zip(firsts, seconds)]


def clashing(batches, keys):
    """Examples sharing a text with one before them in their batch that does not itself."""
    count = 0
    for batch in batches:
        seen = set()
        for example in batch.tolist():
            if keys[example] & seen:
                count += 1
            else:
                seen |= keys[example]
    return count


def measure(name, data, batch_size, repeats):
    firsts, seconds, lengths = data
    started = time.perf_counter()
    keys = text_keys(firsts, seconds)
    keys_seconds = time.perf_counter() - started
    cut = batch_indices(lengths, batch_size, epoch=0, group_by_length=True, seed=0)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        placed, moved, left = keep_duplicates_apart(cut, keys)
        times.append(time.perf_counter() - started)
    row = {
        "name": name,
        "examples": len(keys),
        "before": clashing(cut, keys),
        "moved": moved,
        "left": left,
        "keys": keys_seconds,
        "median": statistics.median(times),
        "max": max(times),
    }
    print(row, flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=os.path.join(HERE, "DUPLICATE_SAMPLER.md"))
    args = parser.parse_args()
    cases = [
        ("no text shared", made_up(args.examples, 0.0)),
        ("10% share one text", made_up(args.examples, 0.1)),
        ("queries repeat (about 8 examples each)", made_up(args.examples, 0.0, queries=args.examples // 8)),
    ]
    bq = bq_train(args.examples)
    if bq is not None:
        cases.append(("BQ train pairs", bq))
    rows = [measure(name, data, args.batch_size, args.repeats) for name, data in cases]
    stamp = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    lines = [
        f"# Keeping duplicates apart: {args.examples} examples, batches of {args.batch_size}",
        "",
        f"`benchmarks/duplicate_sampler.py`, {stamp}, on {cpu_description()}. One epoch's batches, cut",
        "from length-grouped examples (seed 0) as a training run cuts them; keys are each example's",
        f"two texts. Seconds: median (and slowest) of {args.repeats} calls of `keep_duplicates_apart`;",
        "`text_keys` once. *Clashing*: examples sharing a text with an earlier one of their batch.",
        "",
        "| data | examples | clashing as cut | moved | left clashing | seconds | text_keys seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['name']} | {row['examples']} | {row['before']} | {row['moved']} | {row['left']} "
            f"| {row['median']:.2f} ({row['max']:.2f}) | {row['keys']:.2f} |"
        )
    lines += [
        "",
        "Where one text is in more examples than there are batches, those beyond one per batch",
        "cannot be kept apart and are left; once every batch holds that text no exchange is looked",
        "for, so they cost a few looks each. The machine may have been running other work: the",
        "seconds are an upper bound for it.",
        "",
    ]
    write_text(args.output, "\n".join(lines))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
