"""Strategies (cosent_tf.distribute) and the engine under them.

The engine runs under MirroredStrategy on two logical CPU devices (COSENT_TF_CPU_DEVICES=2),
each case in its own process: the CPU is split when cosent_tf is imported.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cosent_tf.backend import tf
from cosent_tf.distribute import get_strategy, is_chief
from cosent_tf.errors import ConfigError

from conftest import ROOT, tiny_setup  # noqa: F401  (a fixture)


def two_cpus():
    return {**os.environ, "COSENT_TF_CPU_DEVICES": "2"}


def test_default_strategy_and_unknown_names():
    assert get_strategy("default") is tf.distribute.get_strategy()
    assert is_chief(get_strategy("default"))
    with pytest.raises(ConfigError, match="unknown strategy 'horovod'; choose one of default, mirrored, multi-worker"):
        get_strategy("horovod")


def test_multi_worker_needs_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ConfigError, match="reads the cluster from the TF_CONFIG environment variable"):
        get_strategy("multi-worker")
    monkeypatch.setenv("TF_CONFIG", "{'cluster': }")
    with pytest.raises(ConfigError, match="TF_CONFIG is not JSON"):
        get_strategy("multi-worker")


@pytest.mark.parametrize("value", ["two", "0"])
def test_a_bad_cpu_device_count_is_refused_at_import(value):
    env = {**os.environ, "COSENT_TF_CPU_DEVICES": value}
    done = subprocess.run([sys.executable, "-c", "import cosent_tf.backend"], env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert f"COSENT_TF_CPU_DEVICES='{value}': give a number of devices, 1 or more" in done.stderr


ENGINE_STEP = """
import json, sys
from cosent_tf.backend import keras, random_seed
from cosent_tf.distribute import get_strategy
from cosent_tf.training import Matcher, RunConfig, load_run_data

root, kind, loss_name = sys.argv[1:4]
cfg = RunConfig(
    task="BQ", kind=kind, loss=loss_name, data_dir=f"{root}/data", config=f"{root}/config.json",
    vocab=f"{root}/vocab.txt", batch_size=8, pooling="last-avg" if kind == "feature" else None,
).resolved()
data = load_run_data(cfg)


def one_step(strategy):
    # the engine's model, loss and batches under the strategy; plain SGD at rate 1, so that the
    # weights move by minus the gradient
    with random_seed(cfg.seed), strategy.scope():
        matcher = Matcher(cfg, data.task)
        # A random BERT's [CLS] vectors are nearly equal for every text (cosines 1 - 1e-7), where
        # float32 rounding decides the gradient: spread the weights as a trained model's are.
        matcher.model.set_weights([w * 20 if w.ndim == 2 else w for w in matcher.model.get_weights()])
        model, loss, labels = matcher.training_model(data.train.labels)
        model.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss)
    before = [w.copy() for w in model.get_weights()]
    batches = matcher.dataset(matcher.prepare(data.train), labels, 0, strategy.num_replicas_in_sync)
    history = model.fit(batches, steps_per_epoch=1, epochs=1, verbose=0)
    moved = [(b - a).tolist() for b, a in zip(before, model.get_weights())]
    return {"replicas": strategy.num_replicas_in_sync, "loss": history.history["loss"][0], "gradients": moved}


print(json.dumps({"one_device": one_step(get_strategy("default")), "mirrored": one_step(get_strategy("mirrored"))}))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind, loss", [("feature", "cosent"), ("feature", "sbert"), ("interaction", "cosent"), ("interaction", "ce")]
)
def test_an_engine_step_on_two_replicas_equals_one_on_one_device(kind, loss, tiny_setup):  # noqa: F811
    tmp_path, _ = tiny_setup
    done = subprocess.run(
        [sys.executable, "-c", ENGINE_STEP, str(tmp_path), kind, loss],
        env=two_cpus(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    steps = json.loads(done.stdout.strip().splitlines()[-1])
    one_device, mirrored = steps["one_device"], steps["mirrored"]
    assert (one_device["replicas"], mirrored["replicas"]) == (1, 2)
    assert mirrored["loss"] == pytest.approx(one_device["loss"], rel=1e-5)
    scale = max(np.abs(g).max() for g in one_device["gradients"])
    for expected, actual in zip(one_device["gradients"], mirrored["gradients"]):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.slow
def test_a_script_trains_under_a_mirrored_strategy(tiny_setup):  # noqa: F811
    tmp_path, options = tiny_setup
    script = [sys.executable, os.path.join(ROOT, "scripts", "cosent.py"), "BQ", *options, "--strategy", "mirrored"]
    out = tmp_path / "mirrored"
    # 45 pairs in batches of 8 on 2 replicas: 5 full batches and one of 4 pairs (one pair left out).
    argv = ["--max-train-pairs", "45", "--epochs", "2", "--output-dir", str(out)]
    done = subprocess.run(script + argv, env=two_cpus(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 replicas (--strategy mirrored), 4 pairs each a step; CoSENT ranks the global batch" in done.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["replicas"] == 2 and metrics["steps"] == 12
    assert json.loads((out / "config.json").read_text())["strategy"] == "mirrored"
    assert (out / "model").is_dir() and not (out / "backup").exists()

    odd = subprocess.run(
        script + ["--batch-size", "7", "--output-dir", str(tmp_path / "odd")],
        env=two_cpus(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert odd.returncode != 0 and not (tmp_path / "odd").exists()
    assert "--batch-size 7 pairs cannot be shared equally by the 2 replicas of --strategy mirrored" in odd.stderr
