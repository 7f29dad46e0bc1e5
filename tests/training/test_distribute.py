"""Strategies (cosent_tf.training.distribute) and the engine under them.

The engine runs under MirroredStrategy on two logical CPU devices (COSENT_TF_CPU_DEVICES=2),
each case in its own process: the CPU is split when cosent_tf is imported.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from cosent_tf.backend import tf
from cosent_tf.errors import ConfigError
from cosent_tf.training.distribute import get_strategy, is_chief
from tests.helpers import ROOT, localhost_workers, run_until


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
import dataclasses, json, sys
from cosent_tf.backend import keras, random_seed
from cosent_tf.training.distribute import get_strategy
from cosent_tf.training.config import RunConfig
from cosent_tf.training.engine import Matcher
from cosent_tf.training.run_data import load_run_data

root, kind, loss_name, micro_batch_size, options = sys.argv[1:6]
cfg = RunConfig(
    task="BQ", kind=kind, loss=loss_name, data_dir=f"{root}/data", config=f"{root}/config.json",
    vocab=f"{root}/vocab.txt", batch_size=8, pooling="last-avg" if kind == "feature" else None,
    **json.loads(options),
).resolved()
data = load_run_data(cfg)


def one_step(strategy, cfg):
    # the engine's model, loss and batches under the strategy; plain SGD at rate 1, so that the
    # weights move by minus the gradient
    with random_seed(cfg.seed), strategy.scope():
        matcher = Matcher(cfg, data.task)
        # A random BERT's [CLS] vectors are nearly equal for every text (cosines 1 - 1e-7), where
        # float32 rounding decides the gradient: spread the weights as a trained model's are.
        matcher.model.set_weights([w * 20 if w.ndim == 2 else w for w in matcher.model.get_weights()])
        model, loss, labels = matcher.training_model(data.train)
        model.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss)
    before = [w.copy() for w in model.get_weights()]
    keys = matcher.duplicate_keys(data.train)
    batches = matcher.dataset(matcher.prepare(data.train), labels, 0, strategy.num_replicas_in_sync, keys)
    history = model.fit(batches, steps_per_epoch=1, epochs=1, verbose=0)
    moved = [(b - a).tolist() for b, a in zip(before, model.get_weights())]
    return {"replicas": strategy.num_replicas_in_sync, "loss": history.history["loss"][0], "gradients": moved}


mirrored_cfg = dataclasses.replace(cfg, micro_batch_size=int(micro_batch_size) or None)
print(json.dumps({
    "group_size": data.group_size,
    "one_device": one_step(get_strategy("default"), cfg),
    "mirrored": one_step(get_strategy("mirrored"), mirrored_cfg),
}))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind, loss, micro_batch_size, options",
    [
        ("feature", "cosent", 0, {}),
        ("feature", "sbert", 0, {}),
        ("interaction", "cosent", 0, {}),
        ("interaction", "ce", 0, {}),
        ("feature", "cosent", 3, {}),  # each replica's 4 pairs in micro-batches of 3 and 1
        ("interaction", "cosent", 1, {}),
        # mnrl: BQ's positive pairs, 8 a batch; with hard negatives from labels, groups of 3 rows
        ("feature", "mnrl", 0, {}),
        ("feature", "mnrl", 3, {}),
        ("feature", "mnrl", 3, {"hard_negatives_from_labels": True, "symmetric": True}),
        ("feature", "cosent-ibn", 0, {}),
        ("feature", "angle", 0, {}),
    ],
)
def test_an_engine_step_on_two_replicas_equals_one_on_one_device(kind, loss, micro_batch_size, options, tiny_setup):  # noqa: F811
    tmp_path, _ = tiny_setup
    done = subprocess.run(
        [sys.executable, "-c", ENGINE_STEP, str(tmp_path), kind, loss, str(micro_batch_size), json.dumps(options)],
        env=two_cpus(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    steps = json.loads(done.stdout.strip().splitlines()[-1])
    one_device, mirrored = steps["one_device"], steps["mirrored"]
    assert (one_device["replicas"], mirrored["replicas"]) == (1, 2)
    # groups of anchor and positive, and one hard negative (a labelled or a drawn one) when asked for
    assert steps["group_size"] == (None if loss != "mnrl" else 3 if options else 2)
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
    assert "2 replicas (--strategy mirrored), 4 pairs each a step; CoSENT ranks the global batch" in done.stderr
    assert "each pass over the 45 train pairs leaves a partial batch of 5, cut to 4 for the 2 replicas" in done.stderr
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


def start_workers(command, own_options=((), ())):
    """``command`` as the two workers of a localhost cluster (TF_CONFIG); worker 0 is the chief.
    ``own_options``: what each worker adds to the command."""
    return [
        subprocess.Popen(
            command + ["--strategy", "multi-worker", *options],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for env, options in zip(localhost_workers(2), own_options)
    ]


def finish(workers):
    outputs = [worker.communicate(timeout=300) for worker in workers]
    for worker, (_, stderr) in zip(workers, outputs):
        assert worker.returncode == 0, stderr[-3000:]
    return outputs


def trained_weights(out):
    from cosent_tf import SentenceEncoder

    return SentenceEncoder.load(str(out / "model")).model.get_weights()


def same_result(expected, actual, tolerance):
    """Assert that the run in folder ``actual`` ended as the one in ``expected`` did: the same number
    of steps, test Spearman and model weights within ``tolerance``. Returns ``actual``'s metrics."""
    want, got = (json.loads((folder / "metrics.json").read_text()) for folder in (expected, actual))
    assert got["steps"] == want["steps"]
    assert got["test"]["spearman"] == pytest.approx(want["test"]["spearman"], abs=tolerance)
    for wanted_weights, weights in zip(trained_weights(expected), trained_weights(actual)):
        np.testing.assert_allclose(weights, wanted_weights, atol=tolerance)
    return got


@pytest.fixture
def worker_command(tiny_setup):  # noqa: F811
    tmp_path, options = tiny_setup
    # last-avg: a random BERT's [CLS] vectors are nearly equal, and float32 rounding would then
    # decide the gradients (see test_an_engine_step_on_two_replicas_equals_one_on_one_device).
    command = [sys.executable, os.path.join(ROOT, "scripts", "cosent.py"), "BQ", *options, "--pooling", "last-avg"]
    command += ["--epochs", "2", "--eval-every", "2", "--backup-every", "2"]
    return tmp_path, command


@pytest.mark.slow
def test_two_workers_train_as_one_process_with_their_global_batch(worker_command):
    """What docs/guide.md says of two workers against one process (issue 35): with dropout off (the
    tiny model has none) and batches the replicas share whole (48 pairs in batches of 8), 54 steps
    at --lr 1e-3 end within 1e-6 in every weight."""
    tmp_path, command = worker_command
    command = command + ["--epochs", "9"]
    single = subprocess.run(command + ["--output-dir", str(tmp_path / "single")], capture_output=True, text=True)
    assert single.returncode == 0, single.stderr[-3000:]
    (chief_out, chief_log), (worker_out, _) = finish(start_workers(command + ["--output-dir", str(tmp_path / "two")]))
    # Only the chief writes: its stdout is the metrics, the other worker's says who it is.
    assert json.loads(worker_out) == {"worker": "worker 1", "steps": 54}
    assert json.loads(chief_out)["test"] == json.loads((tmp_path / "two" / "metrics.json").read_text())["test"]
    assert "2 replicas (--strategy multi-worker), 4 pairs each a step" in chief_log
    assert "sit each pass out" not in chief_log
    two = same_result(tmp_path / "single", tmp_path / "two", 1e-6)
    assert (two["replicas"], two["steps"]) == (2, 54)


@pytest.mark.slow
def test_two_workers_train_mnrl_with_hard_negatives_as_one_process(worker_command):
    """In-batch negatives over the global batch (issue 36): each worker's anchors pick their positive
    among both workers' candidates, so two workers end as one process does."""
    tmp_path, command = worker_command
    # BQ's 24 positive pairs, each anchor with a drawn negative (the tiny data label none): 3 steps an epoch
    command = command + ["--loss", "mnrl", "--hard-negatives-from-labels", "--epochs", "4"]
    single = subprocess.run(command + ["--output-dir", str(tmp_path / "single")], capture_output=True, text=True)
    assert single.returncode == 0, single.stderr[-3000:]
    (_, chief_log), _ = finish(start_workers(command + ["--output-dir", str(tmp_path / "two")]))
    assert (
        "2 replicas (--strategy multi-worker), 4 examples each a step; the mnrl loss takes the global batch"
        in chief_log
    )
    assert "3 texts an example (anchor, positive, 1 hard negative); 8 examples a batch" in chief_log
    assert "sit each pass out" not in chief_log
    two = same_result(tmp_path / "single", tmp_path / "two", 1e-6)
    assert (two["replicas"], two["steps"]) == (2, 12)


@pytest.mark.slow
def test_a_killed_worker_and_its_chief_resume_to_the_uninterrupted_result_on_the_cluster_or_alone(worker_command):
    tmp_path, command = worker_command
    finish(start_workers(command + ["--output-dir", str(tmp_path / "whole")]))
    out = tmp_path / "killed"
    chief, other = start_workers(command + ["--output-dir", str(out)])
    # 6 steps an epoch; by the time step 8 is validated, the state after step 6 is saved
    killed = False
    for line in chief.stderr:
        if line.startswith("step 8 valid"):
            other.kill()
            killed = True
            break
    assert killed
    other.communicate(timeout=60)
    try:  # the chief's next collective fails: it ends on its own, saying how to go on
        _, chief_err = chief.communicate(timeout=120)
    finally:
        chief.kill()
    assert chief.returncode == 1, chief_err[-3000:]
    assert "error: worker 0: lost contact with worker 1 while training;" in chief_err
    assert f"the last saved training state is in {out / 'backup'}: run the same command again" in chief_err
    assert not (out / "metrics.json").exists() and (out / "backup").is_dir()
    shutil.copytree(out, tmp_path / "moved")  # the same stopped run, to go on without the cluster

    (_, chief_log), _ = finish(start_workers(command + ["--output-dir", str(out)]))
    assert int(re.search(r"resumed at step (\d+)", chief_log).group(1)) in (6, 8)
    assert same_result(tmp_path / "whole", out, 1e-6)["steps"] == 12

    # The chief's backup holds no trace of the cluster: the run goes on in one process.
    alone = subprocess.run(command + ["--output-dir", str(tmp_path / "moved")], capture_output=True, text=True)
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert "resuming the unfinished run in this folder with strategy 'multi-worker' -> 'default'" in alone.stderr
    moved = same_result(tmp_path / "whole", tmp_path / "moved", 1e-5)
    assert (moved["replicas"], moved["steps"]) == (1, 12)


def refused_start(workers):
    """Both workers' (exit status, stderr): each must end on its own, without training."""
    try:
        outputs = [worker.communicate(timeout=120)[1] for worker in workers]
    finally:
        for worker in workers:  # one left waiting for its peer: end it, and the test fails
            worker.kill()
    return [(worker.returncode, stderr) for worker, stderr in zip(workers, outputs)]


@pytest.mark.slow
@pytest.mark.parametrize("refusing", [0, 1], ids=["the chief", "the other worker"])
def test_a_worker_that_cannot_start_ends_every_worker_before_training(refusing, worker_command):
    tmp_path, command = worker_command
    out, own_options = tmp_path / "run", [[], []]
    if refusing == 0:
        out.mkdir()
        (out / "notes.txt").write_text("mine")  # not a run folder: the chief refuses it
        reason, left = "is not a cosent-tf training run", ["notes.txt"]
    else:
        own_options[1] = ["--data-dir", str(tmp_path / "no-such-data")]  # only worker 1's data is missing
        # the chief had locked the folder and marked it as a run's (run_folder.RUN_MARKER), nothing more
        reason, left = "no-such-data", [".cosent-run", ".lock"]
    outcomes = refused_start(start_workers(command + ["--output-dir", str(out)], own_options))
    (code, err), (other_code, other_err) = outcomes[refusing], outcomes[1 - refusing]
    assert code != 0 and reason in err, err[-3000:]
    assert other_code != 0, other_err[-3000:]
    assert f"worker {1 - refusing}: worker {refusing} could not start the run (its log says why)" in other_err
    assert sorted(p.name for p in out.iterdir()) == left


@pytest.mark.slow
def test_a_run_stopped_on_one_device_resumes_on_two_replicas_to_the_same_result(worker_command):
    tmp_path, command = worker_command
    whole = subprocess.run(command + ["--output-dir", str(tmp_path / "whole")], capture_output=True, text=True)
    assert whole.returncode == 0, whole.stderr[-3000:]
    out = tmp_path / "moved"  # 6 steps an epoch: by step 8's validation, step 6's state is saved
    code, _ = run_until(command + ["--output-dir", str(out)], "step 8 valid", signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert not (out / "metrics.json").exists() and (out / "backup").is_dir()
    resumed = subprocess.run(
        command + ["--output-dir", str(out), "--strategy", "mirrored"], env=two_cpus(), capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming the unfinished run in this folder with strategy 'default' -> 'mirrored'" in resumed.stderr
    assert int(re.search(r"resumed at step (\d+)", resumed.stderr).group(1)) in (6, 8)
    assert same_result(tmp_path / "whole", out, 1e-5)["replicas"] == 2


def test_mirrored_on_one_device_says_it_trains_on_one_replica_once(monkeypatch, caplog):
    from cosent_tf.training import distribute

    if len(tf.config.list_logical_devices("GPU")) > 1 or len(tf.config.list_logical_devices("CPU")) > 1:
        pytest.skip("this machine has several devices")
    monkeypatch.setattr(distribute, "_made", {})  # a strategy of its own, made by this call
    caplog.set_level("WARNING", "cosent_tf")
    strategy = get_strategy("mirrored")
    assert strategy.num_replicas_in_sync == 1
    get_strategy("mirrored")
    assert len(caplog.messages) == 1, caplog.messages
    assert caplog.messages[0].startswith("--strategy mirrored found one device (")
    assert "1 replica, as --strategy default would give" in caplog.messages[0]
    assert "COSENT_TF_CPU_DEVICES=N" in caplog.messages[0]


def test_mirrored_on_two_devices_says_nothing_of_them():
    quiet = """
import logging
logging.basicConfig(level=logging.WARNING)
from cosent_tf.training.distribute import get_strategy
print(get_strategy("mirrored").num_replicas_in_sync)
"""
    done = subprocess.run([sys.executable, "-c", quiet], env=two_cpus(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["2"] and "found one device" not in done.stderr


@pytest.mark.parametrize("pairs", [48, 46, 45, 41])
def test_the_pairs_the_replicas_leave_out_of_each_pass_are_said(pairs):
    from cosent_tf.data.batching import batch_indices
    from cosent_tf.training.distribute import partial_batch_note

    one_device = batch_indices([1] * pairs, 8, epoch=0)
    replicas = batch_indices([1] * pairs, 8, epoch=0, replicas=2)
    trained_alone, trained_shared = sum(map(len, one_device)), sum(map(len, replicas))
    note = partial_batch_note(pairs, 8, 2)
    assert partial_batch_note(pairs, 8, 1) is None
    if trained_shared == trained_alone:
        assert note is None
        return
    assert note.startswith(f"each pass over the {pairs} train pairs leaves ")
    assert f"{trained_alone - trained_shared} pair(s) sit each pass out" in note or "they sit each pass out" in note
    if len(replicas) != len(one_device):
        assert f"a pass takes {len(replicas)} steps where one device takes {len(one_device)}" in note
    else:
        assert f"a partial batch of {len(min(one_device, key=len))}, cut to {len(min(replicas, key=len))}" in note
    assert "does not follow a one-device run step for step" in note
