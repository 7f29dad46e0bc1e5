"""The suite's time, added up over its runs (the Keras 2 suite and the Keras 3 suite on each
backend): what `make test` prints at its end, and the tables of docs/testing.md.

    tools/suite_times.py TIMES.json ...                   the total and the ten slowest modules
    tools/suite_times.py TIMES.json ... --markdown        every module and the slowest fixtures, as tables
    tools/suite_times.py TIMES.json ... --update-order    rewrite tests/module_seconds.json, the order
                                                          in which xdist hands out modules (slowest first)

Each TIMES.json is one pytest run's ``--timing-json`` (tests/timing.py); its name without .json
names the run (keras2, keras3-tensorflow, keras3-jax).
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.timing import MODULE_SECONDS  # noqa: E402  (the path of the order file, defined once)


def load(paths):
    runs = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            runs[os.path.splitext(os.path.basename(path))[0]] = json.load(f)
    return runs


def module_rows(runs):
    """(run, module, seconds, tests), slowest first."""
    rows = [
        (run, module, entry["seconds"], entry["tests"])
        for run, record in runs.items()
        for module, entry in record["modules"].items()
    ]
    return sorted(rows, key=lambda row: -row[2])


def summary(runs):
    lines = []
    walls = ", ".join(f"{run} {record['wall_s']:.0f} s" for run, record in runs.items())
    total_wall = sum(record["wall_s"] for record in runs.values())
    own = sum(row[2] for row in module_rows(runs))
    lines.append(f"suite: {total_wall:.0f} s of wall time ({walls}); the tests' own time adds up to {own:.0f} s")
    lines.append("the ten slowest modules:")
    for run, module, seconds, tests in module_rows(runs)[:10]:
        lines.append(f"{seconds:8.1f} s  {tests:4d} tests  {module}  ({run})")
    return "\n".join(lines)


def markdown(runs, fixtures=25):
    lines = ["| run | module | tests | seconds |", "|---|---|---:|---:|"]
    for run, module, seconds, tests in module_rows(runs):
        lines.append(f"| {run} | `{module}` | {tests} | {seconds:.1f} |")
    lines += ["", "| run | fixture (where it is defined) | set-ups | seconds |", "|---|---|---:|---:|"]
    rows = sorted(
        ((run, name, entry) for run, record in runs.items() for name, entry in record["fixtures"].items()),
        key=lambda row: -row[2]["seconds"],
    )
    for run, name, entry in rows[:fixtures]:
        lines.append(f"| {run} | `{name}` | {entry['setups']} | {entry['seconds']:.1f} |")
    return "\n".join(lines)


def update_order(runs):
    seconds = {}
    for _, module, value, _ in module_rows(runs):
        # A Keras 3 module runs once per backend: the slower run decides its place.
        seconds[module] = round(max(value, seconds.get(module, 0.0)), 1)
    with open(MODULE_SECONDS, "w", encoding="utf-8") as f:
        json.dump(dict(sorted(seconds.items())), f, indent=1)
        f.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("times", nargs="+", help="timing files written by pytest --timing-json")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--update-order", action="store_true")
    args = parser.parse_args()
    runs = load(args.times)
    print(markdown(runs) if args.markdown else summary(runs))
    if args.update_order:
        update_order(runs)


if __name__ == "__main__":
    main()
