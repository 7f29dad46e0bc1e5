"""Issue 33 (never lose a file, never lie, never hang) for multi-worker start-up and the report.

The multi-worker checks run in this process with TensorFlow's strategy replaced by a stand-in:
every check and the wait for the other workers come before the strategy is built.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from cosent_tf import distribute
from cosent_tf.distribute import get_strategy
from cosent_tf.errors import ConfigError, TrainingInterrupted

from conftest import ROOT, tiny_setup  # noqa: F401  (a fixture)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def tf_config(workers, index=0, **task):
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index, **task}})


@pytest.fixture
def built(monkeypatch):
    """The multi-worker strategies built, as (own port free to take) flags: the stand-in records
    whether this task's port was given back for TensorFlow's server to take."""
    monkeypatch.setattr(distribute, "_made", {})
    made = []

    def stand_in():
        _, me = distribute.read_tf_config()
        port = distribute.read_tf_config()[0][me][1]
        with socket.socket() as server:
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(("", port))
        made.append(port)
        return "strategy"

    monkeypatch.setattr(distribute.tf.distribute, "MultiWorkerMirroredStrategy", stand_in)
    return made


BAD_TF_CONFIGS = [
    ("[]", 'TF_CONFIG must be a JSON object with "cluster" and "task", not array'),
    ("{}", 'TF_CONFIG: "cluster" must be an object of job name -> list of "host:port" addresses, not missing'),
    ('"worker"', 'TF_CONFIG must be a JSON object with "cluster" and "task", not string'),
    ("7", 'TF_CONFIG must be a JSON object with "cluster" and "task", not integer'),
    ('{"cluster": [], "task": {}}', 'TF_CONFIG: "cluster" must be an object of job name -> list'),
    ('{"cluster": {}, "task": {}}', 'TF_CONFIG: "cluster" must be an object of job name -> list'),
    ('{"cluster": {"worker": "a:1"}}', 'TF_CONFIG: cluster["worker"] must be a list of "host:port" strings, not "a:1"'),
    ('{"cluster": {"worker": ["a:1", 2]}}', 'TF_CONFIG: cluster["worker"] must be a list of "host:port" strings'),
    ('{"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}', 'TF_CONFIG: "cluster" has no "worker" job'),
    ('{"cluster": {"chief": ["a:1"]}, "task": {"type": "chief", "index": 0}}', 'TF_CONFIG: "cluster" has no "worker"'),
    ('{"cluster": {"ps": ["a:1"], "worker": ["a:2"]}}', 'TF_CONFIG: cluster job "ps" is not one that --strategy'),
    ('{"cluster": {"chief": ["a:1", "a:2"], "worker": ["a:3"]}}', 'cluster["chief"] lists 2 addresses; a cluster has'),
    ('{"cluster": {"worker": ["a:1"]}}', 'TF_CONFIG: "task" must be an object like {"type": "worker", "index": 0}'),
    ('{"cluster": {"worker": ["a:1"]}, "task": 0}', 'TF_CONFIG: "task" must be an object like'),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"index": 0}}', 'TF_CONFIG: task "type" null is not a job of the'),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}', 'task "type" "chief" is not a job'),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}}', 'TF_CONFIG: task "index" must be an integer, not'),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "0"}}', 'task "index" must be an integer'),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": true}}', 'task "index" must be an integ'),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0.0}}', 'task "index" must be an integ'),
]


@pytest.mark.parametrize("value, message", BAD_TF_CONFIGS)
def test_a_tf_config_without_a_usable_cluster_is_refused_before_training_alone(value, message, monkeypatch, built):
    monkeypatch.setenv("TF_CONFIG", value)
    with pytest.raises(ConfigError) as refused:
        get_strategy("multi-worker")
    assert message in str(refused.value)
    assert built == []


@pytest.mark.parametrize(
    "workers, index, message",
    [
        (["127.0.0.1:5001", "127.0.0.1:5002"], -1, 'task "index" -1 is out of range: cluster["worker"] lists 2'),
        (["127.0.0.1:5001", "127.0.0.1:5002"], 2, 'task "index" 2 is out of range: cluster["worker"] lists 2'),
        (["127.0.0.1:5001", "127.0.0.1"], 0, 'cluster["worker"][1] \'127.0.0.1\' is not a "host:port" address'),
        (["127.0.0.1:", "127.0.0.1:5002"], 1, 'cluster["worker"][0] \'127.0.0.1:\' is not a "host:port" address'),
        ([":5001", "127.0.0.1:5002"], 1, 'cluster["worker"][0] \':5001\' is not a "host:port" address'),
        (["127.0.0.1:http", "h:1"], 1, 'cluster["worker"][0] \'127.0.0.1:http\' is not a "host:port" address'),
        (["127.0.0.1:-5", "h:1"], 1, 'cluster["worker"][0] \'127.0.0.1:-5\' is not a "host:port" address'),
        (["127.0.0.1:5001", "127.0.0.1:70000"], 0, "cluster[\"worker\"][1] '127.0.0.1:70000': port 70000 is out of"),
        (["127.0.0.1:0", "127.0.0.1:5002"], 1, "cluster[\"worker\"][0] '127.0.0.1:0': port 0 is out of range (1 to"),
        (["h:5001", "h:5001"], 0, "the address h:5001 is listed twice (worker 0 and worker 1)"),
    ],
)
def test_a_bad_cluster_address_is_named_before_tensorflow_starts_a_server(workers, index, message, monkeypatch, built):
    monkeypatch.setenv("TF_CONFIG", tf_config(workers, index))
    with pytest.raises(ConfigError) as refused:
        get_strategy("multi-worker")
    assert "TF_CONFIG" in str(refused.value) and message in str(refused.value)
    assert built == []


@pytest.mark.parametrize("host", ["", "127.0.0.1"])
def test_this_tasks_port_in_use_is_named(host, monkeypatch, built):
    with socket.socket() as other_process:
        other_process.bind((host, 0))
        other_process.listen()
        port = other_process.getsockname()[1]
        monkeypatch.setenv("TF_CONFIG", tf_config([f"127.0.0.1:{port}", f"127.0.0.1:{free_port()}"]))
        started = time.monotonic()
        with pytest.raises(ConfigError) as refused:
            get_strategy("multi-worker", worker_timeout=30)
    assert time.monotonic() - started < 5
    assert str(refused.value) == (
        f"TF_CONFIG: this task's address 127.0.0.1:{port} (worker 0): port {port} on this machine is in use by "
        "another process; end that process or give this task another port in TF_CONFIG (on every machine)"
    )
    assert built == []


def test_a_worker_that_never_starts_is_named_after_the_timeout(monkeypatch, built, caplog):
    monkeypatch.setattr(distribute, "WAIT_LOG_EVERY", 0.4)
    mine, missing, late = free_port(), free_port(), free_port()
    monkeypatch.setenv("TF_CONFIG", tf_config([f"127.0.0.1:{p}" for p in (mine, missing, late)], 0))
    caplog.set_level("INFO", "cosent_tf")
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with socket.socket() as worker_2:  # it starts, worker 1 never does
        worker_2.bind(("127.0.0.1", late))
        worker_2.listen()
        started = time.monotonic()
        with pytest.raises(ConfigError) as refused:
            get_strategy("multi-worker", worker_timeout=1.5)
    assert 1.5 <= time.monotonic() - started < 5
    assert str(refused.value) == (
        f"worker 0: worker 1 (127.0.0.1:{missing}) did not start within 1.5 seconds (worker 1: Connection refused); "
        "nothing was trained: start the same command on every machine of TF_CONFIG's cluster, or wait longer "
        "with --worker-timeout SECONDS"
    )
    lines = [r.getMessage() for r in caplog.records]
    assert (
        lines[0]
        == f"worker 0: waiting for worker 1 (127.0.0.1:{missing}) to start (up to 1.5 seconds, --worker-timeout) ..."
    )
    again = [line for line in lines[1:] if line.startswith("worker 0: still waiting, after ")]
    assert again and all(f"for worker 1 (127.0.0.1:{missing}) to start (up to 1.5" in line for line in again)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers
    assert built == []
    with socket.socket() as mine_again:  # the port was given back
        mine_again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        mine_again.bind(("", mine))


def test_the_strategy_is_built_once_every_worker_listens_and_this_tasks_port_is_free(monkeypatch, built, caplog):
    chief, mine = free_port(), free_port()
    config = {"cluster": {"chief": [f"127.0.0.1:{chief}"], "worker": [f"127.0.0.1:{mine}"]}}
    monkeypatch.setenv("TF_CONFIG", json.dumps({**config, "task": {"type": "worker", "index": 0}}))
    caplog.set_level("INFO", "cosent_tf")
    with socket.socket() as late_chief:
        late_chief.bind(("127.0.0.1", chief))
        threading.Timer(1.0, late_chief.listen).start()
        started = time.monotonic()
        assert get_strategy("multi-worker", worker_timeout=30) == "strategy"
    assert 1.0 <= time.monotonic() - started < 5
    assert built == [mine]  # the stand-in could take this task's port, as TensorFlow's server must
    assert f"worker 0: waiting for chief 0 (127.0.0.1:{chief}) to start" in caplog.text
    assert get_strategy("multi-worker") == "strategy" and built == [mine]  # once per process


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_wait_at_once(number, monkeypatch, built):
    missing = free_port()
    monkeypatch.setenv("TF_CONFIG", tf_config([f"127.0.0.1:{free_port()}", f"127.0.0.1:{missing}"]))
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    signalled = threading.Timer(0.5, os.kill, (os.getpid(), number))
    signalled.start()
    started = time.monotonic()
    try:
        with pytest.raises(TrainingInterrupted) as stopped:
            get_strategy("multi-worker", worker_timeout=60)
    finally:
        signalled.cancel()  # not to end pytest itself if the wait ended before the signal
    assert time.monotonic() - started < 3
    assert stopped.value.signal_number == number
    assert str(stopped.value) == (
        f"{signal.Signals(number).name} received while worker 0 waited for worker 1 to start; "
        "nothing was trained or written"
    )
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers
    assert built == []


def lines_until(process, start, seconds):
    """Read ``process``'s stderr up to a line starting with ``start``; the lines read."""
    lines, stop = [], time.monotonic() + seconds
    for line in process.stderr:
        lines.append(line)
        if line.startswith(start) or time.monotonic() > stop:
            break
    return lines


@pytest.mark.slow
def test_a_script_whose_other_worker_never_starts_times_out_or_stops_on_sigterm(tiny_setup):  # noqa: F811
    tmp_path, options = tiny_setup
    missing = free_port()
    env = {**os.environ, "TF_CONFIG": tf_config([f"127.0.0.1:{free_port()}", f"127.0.0.1:{missing}"])}
    script = [sys.executable, os.path.join(ROOT, "scripts", "cosent.py"), "BQ", *options, "--strategy", "multi-worker"]
    waiting = f"worker 0: waiting for worker 1 (127.0.0.1:{missing}) to start"

    timed_out = subprocess.run(
        script + ["--worker-timeout", "2", "--output-dir", str(tmp_path / "a")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert timed_out.returncode == 1, timed_out.stderr[-3000:]
    assert waiting in timed_out.stderr and "Traceback" not in timed_out.stderr
    assert timed_out.stderr.endswith(
        f"error: worker 0: worker 1 (127.0.0.1:{missing}) did not start within 2 seconds (worker 1: Connection "
        "refused); nothing was trained: start the same command on every machine of TF_CONFIG's cluster, or wait "
        "longer with --worker-timeout SECONDS\n"
    )
    assert not (tmp_path / "a").exists()

    process = subprocess.Popen(
        script + ["--output-dir", str(tmp_path / "b")],
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        shown = lines_until(process, waiting, 120)
        assert shown and shown[-1].startswith(waiting), "".join(shown)[-3000:]
        process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _, rest = process.communicate(timeout=30)
    finally:
        process.kill()
    assert time.monotonic() - sent < 5
    assert process.returncode == 128 + signal.SIGTERM, rest[-3000:]
    assert rest.endswith(
        "stopped: SIGTERM received while worker 0 waited for worker 1 to start; nothing was trained or written\n"
    )
    assert "Traceback" not in rest and not (tmp_path / "b").exists()
