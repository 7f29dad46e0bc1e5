"""Where the suite's time goes: a pytest plugin (``-p tests.timing``, in pyproject.toml's addopts)
that adds up each test's setup, call and teardown by module, times each fixture's setup, and at
the end prints the total and the ten slowest modules. ``--timing-json PATH`` also writes the
tables (``tools/suite_times.py`` adds the suites up and makes docs/testing.md's tables of them).

It works under pytest-xdist: the workers send each test's fixture times to the controller in
the report's ``user_properties``, so one table covers every worker.

It also puts the slowest modules first (their seconds in tests/module_seconds.json): xdist hands
out whole modules (``--dist loadfile``), and a long module handed out last would leave the other
worker idle while it runs. xdist hands them out in this order only with ``--no-loadscope-reorder``
(the Makefile passes it); by default it reorders them by their number of tests.
"""

import json
import os
import time
from collections import defaultdict

import pytest

_FIXTURE_KEY = "timing.fixtures"
MODULE_SECONDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "module_seconds.json")


def recorded_module_seconds():
    """module path -> seconds of its last recorded run (tools/suite_times.py --update-order)."""
    try:
        with open(MODULE_SECONDS, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    seconds = recorded_module_seconds()
    # A module with no record yet goes first, as if slow: better an idle minute early than late.
    unknown = max(seconds.values(), default=0.0)
    # Fastest first: a run on one worker has no idle tail to avoid, and another run beside it
    # (slowest first) then meets each module at another time, so that neither waits on the cached
    # references the other is computing. The sort is stable: a module's tests keep their order.
    sign = 1 if config.getoption("fastest_modules_first") else -1
    items.sort(key=lambda item: sign * seconds.get(item.nodeid.split("::")[0], unknown))


def pytest_addoption(parser):
    parser.addoption("--timing-json", default=None, help="write per-module and per-fixture times to this JSON file")
    parser.addoption(
        "--fastest-modules-first",
        action="store_true",
        help="run the modules fastest first (by tests/module_seconds.json) instead of slowest first",
    )


class _Timing:
    def __init__(self, config):
        self.config = config
        self.started = time.monotonic()
        self.modules = defaultdict(float)
        self.module_tests = defaultdict(int)
        # "where it is defined::fixture" (a conftest's folder, for its fixtures) -> seconds
        self.fixtures = defaultdict(float)
        self.fixture_counts = defaultdict(int)
        self.pending = []  # fixture times of the test running now (this process)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        started = time.monotonic()
        yield
        if getattr(fixturedef.func, "__name__", "") == "get_direct_param_fixture_func":
            return  # a parametrize argument, not a fixture
        where = fixturedef.baseid or "(plugin)"
        self.pending.append((f"{where}::{fixturedef.argname}", time.monotonic() - started))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if self.pending:
            report.user_properties.append((_FIXTURE_KEY, list(self.pending)))
            self.pending.clear()

    def pytest_runtest_logreport(self, report):
        module = report.nodeid.split("::")[0]
        self.modules[module] += report.duration
        if report.when == "call":
            self.module_tests[module] += 1
        for key, value in report.user_properties:
            if key == _FIXTURE_KEY:
                for name, seconds in value:
                    self.fixtures[name] += seconds
                    self.fixture_counts[name] += 1

    def pytest_terminal_summary(self, terminalreporter):
        if hasattr(self.config, "workerinput"):
            return
        wall = time.monotonic() - self.started
        total = sum(self.modules.values())
        slowest = sorted(self.modules.items(), key=lambda item: -item[1])[:10]
        write = terminalreporter.write_line
        terminalreporter.section("suite time")
        write(f"wall {wall:.0f} s; tests' own time {total:.0f} s in {len(self.modules)} modules")
        for module, seconds in slowest:
            write(f"{seconds:8.1f} s  {self.module_tests[module]:4d} tests  {module}")
        path = self.config.getoption("--timing-json")
        if path:
            record = {
                "wall_s": wall,
                "modules": {m: {"seconds": s, "tests": self.module_tests[m]} for m, s in self.modules.items()},
                "fixtures": {f: {"seconds": s, "setups": self.fixture_counts[f]} for f, s in self.fixtures.items()},
            }
            with open(path, "w", encoding="utf-8") as f:
                json.dump(record, f, indent=1, sort_keys=True)


def pytest_configure(config):
    config.pluginmanager.register(_Timing(config), "cosent-timing")
