"""The ``--keras`` option of ``cosent-tf train`` from the Keras 2 side: its parsing, its checks, and
the refusals said before any training (by name, in a process of their own, as the command runs)."""

import json
import os
import subprocess
import sys

import pytest

from cosent_tf.cli import argument_parser
from cosent_tf.errors import ConfigError
from cosent_tf.training.config import RunConfig
from tests.helpers import ROOT

TSV = "我想还款\t怎么还钱\t1\n今天天气\t明天下雨\t0\n"


def test_keras_option_parses_to_the_run_config():
    parser = argument_parser()
    args = parser.parse_args(["train", "--train", "pairs.tsv", "--keras", "3"])
    assert args.keras == 3
    assert parser.parse_args(["train", "--train", "pairs.tsv"]).keras is None
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--train", "pairs.tsv", "--keras", "4"])


def test_keras_check_and_the_keras2_engine_refuse_what_they_cannot_run():
    with pytest.raises(ConfigError, match=r"--keras \(RunConfig.keras\) is 4: choose 2 or 3"):
        RunConfig(keras=4).check()
    with pytest.raises(ConfigError, match="--keras 3: this process holds the Keras 2 engine"):
        RunConfig(task="BQ", keras=3).resolved()
    assert RunConfig(task="BQ", keras=2).resolved().keras == 2  # the Keras 2 engine's own value passes


def _train_command(tmp_path, *options, backend="jax"):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(TSV * 4, encoding="utf-8")
    env = {**os.environ, "KERAS_BACKEND": backend}
    command = [sys.executable, "-m", "cosent_tf.cli", "train", "--train", str(pairs), "--keras", "3", *options]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


# The command's route to the refusals, one process each (the option chooses Keras 3 for the process):
# an architecture and an option of keras_support's list; every refusal of the list is checked
# in-process by tests/keras3/test_run_config_fields.py on both backends.
@pytest.mark.heavy
@pytest.mark.parametrize(
    "options, named",
    [
        (("--architecture", "nezha"), "architecture 'nezha' is on the Keras 2 engine only"),
        (("--strategy", "multi-worker"), "--strategy multi-worker on the jax backend: its data parallelism"),
    ],
)
def test_train_keras3_refuses_by_name_before_writing(tmp_path, options, named):
    out = tmp_path / "run"
    done = _train_command(tmp_path, "--output-dir", str(out), *options)
    assert done.returncode != 0
    assert named in done.stderr, done.stderr[-2000:]
    assert not out.exists()


@pytest.mark.heavy
def test_print_config_resolves_for_keras3_without_keras2(tmp_path):
    done = _train_command(tmp_path, "--print-config", "--epochs", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    settings = json.loads(done.stdout)
    assert settings["keras"] == 3 and settings["maxlen"] == 64 and settings["pooling"] == "cls"
