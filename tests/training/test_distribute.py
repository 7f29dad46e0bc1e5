"""Strategies (cosent_tf.training.distribute) and the engine under them.

The engine runs under MirroredStrategy on two logical CPU devices (COSENT_TF_CPU_DEVICES=2),
which cosent_tf makes when imported: one process (two_device_steps.py, the ``two_devices``
fixture) runs every case of this module that needs them and nothing more of its own.
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
from cosent_tf.environment import split_cpu
from cosent_tf.errors import ConfigError
from cosent_tf.training.distribute import get_strategy, is_chief
from tests.helpers import ROOT, localhost_workers, make_tiny_setup, run_until
from tests.training.two_device_steps import MIRRORED_STRATEGY, UNSHARED_BATCH


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
def test_a_bad_cpu_device_count_is_refused(value, monkeypatch):
    monkeypatch.setenv("COSENT_TF_CPU_DEVICES", value)
    with pytest.raises(ConfigError, match=f"^COSENT_TF_CPU_DEVICES='{value}': give a number of devices, 1 or more$"):
        split_cpu(tf)


@pytest.mark.heavy
def test_a_bad_cpu_device_count_is_refused_at_import():
    env = {**os.environ, "COSENT_TF_CPU_DEVICES": "two"}
    # A process: the count is read, and refused, when cosent_tf is imported. Which values are
    # refused is test_a_bad_cpu_device_count_is_refused's, in this process.
    done = subprocess.run([sys.executable, "-c", "import cosent_tf.backend"], env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert "COSENT_TF_CPU_DEVICES='two': give a number of devices, 1 or more" in done.stderr


TWO_DEVICE_STEPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "two_device_steps.py")

ENGINE_CASES = [
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
]


def engine_case_id(kind, loss, micro_batch_size, options):
    return f"{kind}-{loss}-{micro_batch_size}-{json.dumps(options, sort_keys=True)}"


class TwoDeviceProcess:
    """What two_device_steps.py wrote for each check it ran, and how the process ended."""

    def __init__(self, results_path, returncode, stderr):
        self.returncode, self.stderr = returncode, stderr
        self.lines = {}
        if results_path.exists():
            for line in results_path.read_text().splitlines():
                written = json.loads(line)
                self.lines[written["case"]] = written

    def result(self, case):
        """The check's result; the test fails with the check's traceback where it raised, or the
        process's stderr where the process ended before writing it."""
        written = self.lines.get(case)
        if written is None:
            pytest.fail(
                f"the two-device process ended (exit status {self.returncode}) before case {case!r} was written:\n"
                + self.stderr[-3000:],
                pytrace=False,
            )
        if "error" in written:
            pytest.fail(f"case {case!r} raised in the two-device process:\n{written['error']}", pytrace=False)
        return written["result"]


@pytest.fixture(scope="module")
def two_devices(request, tmp_path_factory):
    """The module's one two-logical-device process, run once: the mirrored strategy's check, the
    training script's refusal of a batch the replicas cannot share, and the engine step of each
    engine case this session runs (none in a run without the slow tests)."""
    setup, _ = make_tiny_setup(tmp_path_factory.mktemp("two-devices"))
    engine_test = test_an_engine_step_on_two_replicas_equals_one_on_one_device
    selected = [
        item.callspec.params for item in request.session.items if getattr(item, "function", None) is engine_test
    ]
    cases = {
        engine_case_id(**params): [params[name] for name in ("kind", "loss", "micro_batch_size", "options")]
        for params in selected
    }
    return run_two_device_process(setup, cases)


def run_two_device_process(setup, cases):
    """two_device_steps.py run once on ``cases`` (case id -> [kind, loss, micro_batch_size,
    options]) over the tiny set-up folder ``setup``; what it wrote, as a TwoDeviceProcess."""
    results_path = setup / "results.jsonl"
    command = [sys.executable, TWO_DEVICE_STEPS, str(setup), json.dumps(cases), str(results_path)]
    try:
        done = subprocess.run(command, env=two_cpus(), capture_output=True, text=True, timeout=120 + 120 * len(cases))
        returncode, stderr = done.returncode, done.stderr
    except subprocess.TimeoutExpired as late:
        # what the process wrote before it was killed, as bytes where Python did not decode it yet
        stderr = late.stderr.decode(errors="replace") if isinstance(late.stderr, bytes) else late.stderr or ""
        returncode = "none: killed after its timeout"
    return TwoDeviceProcess(results_path, returncode, stderr)


@pytest.mark.slow
@pytest.mark.parametrize("kind, loss, micro_batch_size, options", ENGINE_CASES)
def test_an_engine_step_on_two_replicas_equals_one_on_one_device(kind, loss, micro_batch_size, options, two_devices):
    steps = two_devices.result(engine_case_id(kind, loss, micro_batch_size, options))
    one_device, mirrored = steps["one_device"], steps["mirrored"]
    assert (one_device["replicas"], mirrored["replicas"]) == (1, 2)
    # groups of anchor and positive, and one hard negative (a labelled or a drawn one) when asked for
    assert steps["group_size"] == (None if loss != "mnrl" else 3 if options else 2)
    assert mirrored["loss"] == pytest.approx(one_device["loss"], rel=1e-5)
    scale = max(np.abs(g).max() for g in one_device["gradients"])
    for expected, actual in zip(one_device["gradients"], mirrored["gradients"]):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.slow
def test_a_script_trains_under_a_mirrored_strategy(tiny_setup, two_devices):  # noqa: F811
    tmp_path, options = tiny_setup
    script = [sys.executable, os.path.join(ROOT, "scripts", "cosent.py"), "BQ", *options, "--strategy", "mirrored"]
    out = tmp_path / "mirrored"
    # 45 pairs in batches of 8 on 2 replicas: 5 full batches and one of 4 pairs (one pair left out).
    argv = ["--max-train-pairs", "45", "--epochs", "2", "--output-dir", str(out)]
    # The script as a user runs it: its exit status and log are what is checked.
    done = subprocess.run(script + argv, env=two_cpus(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 replicas (--strategy mirrored), 4 pairs each a step; CoSENT ranks the global batch" in done.stderr
    assert "each pass over the 45 train pairs leaves a partial batch of 5, cut to 4 for the 2 replicas" in done.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["replicas"] == 2 and metrics["steps"] == 12
    assert json.loads((out / "config.json").read_text())["strategy"] == "mirrored"
    assert (out / "model").is_dir() and not (out / "backup").exists()

    # The script's body on --batch-size 7, in the two-device process: the one error line the script
    # ends with (its exit status 1), and nothing written.
    refused = two_devices.result(UNSHARED_BATCH)
    assert refused["exit"].startswith("error: ") and not refused["output_dir_made"]
    assert "--batch-size 7 pairs cannot be shared equally by the 2 replicas of --strategy mirrored" in refused["exit"]


def start_workers(command, own_options=((), ())):
    """``command`` as the two workers of a localhost cluster (TF_CONFIG); worker 0 is the chief.
    ``own_options``: what each worker adds to the command."""
    # A cluster's workers are processes, each with its own TF_CONFIG read at start-up.
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
    # The reference starts from a fresh TensorFlow, as each worker does: the runs must agree to 1e-6.
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
@pytest.mark.full
def test_two_workers_train_mnrl_with_hard_negatives_as_one_process(worker_command):
    """In-batch negatives over the global batch (issue 36): each worker's anchors pick their positive
    among both workers' candidates, so two workers end as one process does."""
    tmp_path, command = worker_command
    # BQ's 24 positive pairs, each anchor with a drawn negative (the tiny data label none): 3 steps an epoch
    command = command + ["--loss", "mnrl", "--hard-negatives-from-labels", "--epochs", "4"]
    # The reference starts from a fresh TensorFlow, as each worker does: the runs must agree to 1e-6.
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
@pytest.mark.full
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

    # The chief's backup holds no trace of the cluster: the run goes on in one process (a fresh
    # one, as the runs it must match to 1e-5 had).
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
    # Each run a process: the reference from a fresh TensorFlow, one killed, one on two devices made at import.
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


def test_mirrored_on_two_devices_says_nothing_of_them(two_devices):
    assert two_devices.result(MIRRORED_STRATEGY) == {"replicas": 2}
    assert "found one device" not in two_devices.stderr


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
