"""The run options' parser imports no TensorFlow, Keras or bert4keras: ``cosent-tf train --help``,
the training scripts' ``--help`` and the parsing of a training command answer at once, the choices
of each option read from tables of plain data (cosent_tf.choices, models.kinds, models.families,
losses.registry, training.recipes)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from cosent_tf.backend import PRECISIONS
from cosent_tf.layers import POOLING_MODES
from cosent_tf.losses import LOSSES
from cosent_tf.models.architectures import ARCHITECTURES
from cosent_tf.optimizers import SCHEDULES
from cosent_tf.training.distribute import STRATEGIES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEAVY = ("tensorflow", "keras", "tf_keras", "bert4keras")
# Printed last by every case: which of HEAVY the process imported.
IMPORTED = f"\nimport sys\nprint('imported:', sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
TRAINING_SCRIPTS = sorted(
    path.name for path in pathlib.Path(ROOT, "scripts").glob("*.py") if "train_main" in path.read_text("utf-8")
)


def _run(code: str) -> str:
    """Run ``code`` in a fresh interpreter; its output, which must end with nothing of HEAVY imported."""
    result = subprocess.run(
        [sys.executable, "-c", code + IMPORTED], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.rstrip().endswith("imported: []"), result.stdout[-500:]
    return result.stdout


def _help_of(call: str) -> str:
    return _run(f"import sys\ntry:\n    {call}\nexcept SystemExit:\n    pass")


def test_train_help_lists_every_table_choice_without_importing_tensorflow():
    shown = " ".join(_help_of("from cosent_tf.cli import main; main(['train', '--help'])").split())
    assert "--strategy" in shown and "--pooling" in shown
    names = [*POOLING_MODES, *PRECISIONS, *SCHEDULES, *STRATEGIES, *ARCHITECTURES, *(n for _, n in LOSSES)]
    assert all(name in shown for name in names), [name for name in names if name not in shown]


def test_top_level_help_imports_no_tensorflow():
    assert "train" in _help_of("from cosent_tf.cli import main; main(['--help'])")


def test_parsing_a_training_command_imports_no_tensorflow():
    out = _run(
        "from cosent_tf.cli import argument_parser\n"
        "from cosent_tf.training.config import run_config\n"
        "arguments = ['train', '--train', 'pairs.tsv', '--kind', 'interaction', '--loss', 'ce', "
        "'--architecture', 'nezha', '--precision', 'bf16', '--strategy', 'mirrored', '--schedule', 'linear']\n"
        "config = run_config(argument_parser().parse_args(arguments))\n"
        "print(config.loss, config.architecture, config.precision, config.strategy, config.schedule)"
    )
    assert "ce nezha bf16 mirrored linear" in out


@pytest.mark.parametrize("kind, loss", [("feature", "cosent"), ("interaction", "ce")])
def test_a_training_parser_builds_without_tensorflow(kind, loss):
    shown = _run(
        "from cosent_tf.experiments.scripts import training_parser\n"
        f"print(training_parser({kind!r}, {loss!r}).format_help())"
    )
    assert "--recipe" in shown and loss in shown


@pytest.mark.parametrize("script", TRAINING_SCRIPTS)
def test_a_training_script_help_imports_no_tensorflow(script):
    path = os.path.join(ROOT, "scripts", script)
    shown = _help_of(f"import runpy; sys.argv = [{path!r}, '--help']; runpy.run_path({path!r}, run_name='__main__')")
    assert "--epochs" in shown


def test_the_report_script_and_what_writes_its_report_import_no_tensorflow():
    """scripts/report.py reads finished runs' files (JSON, CSV, NumPy archives) and draws PNGs: it starts
    without TensorFlow (seconds a report, and a reproduction script runs it after each study)."""
    path = os.path.join(ROOT, "scripts", "report.py")
    shown = _help_of(
        "import cosent_tf.experiments.report, cosent_tf.experiments.runs, cosent_tf.experiments.plots\n    "
        f"import runpy; sys.argv = [{path!r}, '--help']; runpy.run_path({path!r}, run_name='__main__')"
    )
    assert "--evaluations" in shown and "--calibration" in shown


@pytest.mark.heavy
def test_the_report_script_writes_a_report_without_tensorflow(tmp_path):
    """The whole of a report: checking where it writes (the folder kinds this tool writes, exports
    among them), reading the runs, the tables and the plot."""
    from tests.experiments.test_report import fake_run

    run, out = tmp_path / "cosent-STS-B", tmp_path / "report"
    fake_run(run, "STS-B", "feature", "cosent", {"STS-B": 0.5}, pooling="cls")
    path = os.path.join(ROOT, "scripts", "report.py")
    written = _run(
        f"import runpy, sys; sys.argv = [{path!r}, {str(run)!r}, '--output-dir', {str(out)!r}]\n"
        f"runpy.run_path({path!r}, run_name='__main__')"
    )
    assert str(out / "results.md") in written and "CoSENT" in (out / "results.md").read_text()


def test_the_modules_both_kerases_trainers_share_import_no_keras():
    """The run's model source, its data and its metrics serve the Keras 2 engine and the Keras 3
    route (TensorFlow or JAX backend) alike: importing them must choose no Keras, since a process
    holds one. A fresh interpreter is the only place to see what an import pulls in."""
    frameworks = (*HEAVY, "jax")
    code = (
        "import sys\n"
        "import cosent_tf.models.sources, cosent_tf.training.run_data, cosent_tf.evaluation\n"
        f"print('frameworks:', sorted({{m.split('.')[0] for m in sys.modules}} & set({frameworks!r})))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "frameworks: []", result.stdout[-500:]


def test_each_table_has_one_home_that_its_modules_re_export():
    from cosent_tf import backend, choices, layers, optimizers
    from cosent_tf.models import architectures, families
    from cosent_tf.training import distribute

    assert layers.POOLING_MODES is choices.POOLING_MODES and backend.PRECISIONS is choices.PRECISIONS
    assert optimizers.SCHEDULES is choices.SCHEDULES and distribute.STRATEGIES is choices.STRATEGIES
    assert architectures.ARCHITECTURES is families.ARCHITECTURES


def test_strategy_help_says_how_mirrored_gets_several_devices_on_a_cpu():
    import argparse

    from cosent_tf.choices import CPU_DEVICES_VARIABLE
    from cosent_tf.training.config import add_run_options

    parser = argparse.ArgumentParser()
    add_run_options(parser, "strategy")
    shown = " ".join(parser.format_help().split())
    assert f"{CPU_DEVICES_VARIABLE}=N" in shown and "mirrored" in shown
