"""Fixtures that both suites' conftests offer: the Keras 2 suite's (tests/conftest.py,
tests/training/conftest.py) and the Keras 3 suite's (tests/keras3/conftest.py, which runs with
``--confcutdir tests/keras3`` and so loads neither of the others), so that a test body written
over the process's Keras finds them in either suite. Nothing here imports Keras at import time."""

import contextlib
import io
import json
import os
from types import SimpleNamespace
from unittest import mock

import pytest

from tests.helpers import make_tiny_setup
from tests.zoo import built_once


@pytest.fixture
def tiny_setup(tmp_path):
    return make_tiny_setup(tmp_path)


@pytest.fixture(scope="session")
def bq_run(tmp_path_factory):
    """A finished tiny BQ run as the training script makes it (``train_main``, cosent, 2 epochs of
    6 steps on tiny_setup's data), made once per test run on the process's Keras; read-only, a test
    that writes into the run takes tests.zoo.copy_of it. Its attributes: ``setup`` (the tiny set-up's
    folder), ``options`` (the script options that use it), ``run`` (the run folder), ``stdout`` and
    ``stderr`` (what the run printed), ``renamed`` (each (source, target) of the run's os.replace
    calls, by base name, in order)."""

    def build(folder):
        from cosent_tf.experiments.scripts import train_main

        (folder / "setup").mkdir()
        _, options = make_tiny_setup(folder / "setup")
        renamed, real_replace = [], os.replace

        def replace(source, target):
            renamed.append((os.path.basename(source), os.path.basename(target)))
            return real_replace(source, target)

        stdout, stderr = io.StringIO(), io.StringIO()
        # Recorded as the run goes (the rename test reads them): what the script printed and renamed.
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            with mock.patch.object(os, "replace", replace):
                train_main(["BQ", "--epochs", "2", "--output-dir", str(folder / "run"), *options])
        record = {"options": options, "stdout": stdout.getvalue(), "stderr": stderr.getvalue(), "renamed": renamed}
        (folder / "record.json").write_text(json.dumps(record, ensure_ascii=False), encoding="utf-8")

    folder = built_once(tmp_path_factory, "training-bq-run", build)
    record = json.loads((folder / "record.json").read_text(encoding="utf-8"))
    return SimpleNamespace(
        setup=folder / "setup",
        run=folder / "run",
        options=record["options"],
        stdout=record["stdout"],
        stderr=record["stderr"],
        renamed=[tuple(pair) for pair in record["renamed"]],
    )
