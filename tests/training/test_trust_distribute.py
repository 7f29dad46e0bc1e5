"""Issue 33 (never lose a file, never lie, never hang) for multi-worker start-up and the report.

The multi-worker checks run in this process with TensorFlow's strategy replaced by a stand-in:
every check and the wait for the other workers come before the strategy is built.
"""

import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from cosent_tf.errors import ConfigError, DataError, TrainingInterrupted
from cosent_tf.training import distribute
from cosent_tf.training.distribute import get_strategy
from tests.helpers import ROOT


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
    (
        '{"cluster": {"worker": ["a:1"]}, "task": {"type": ["worker"], "index": 0}}',
        'task "type" ["worker"] is not a job',
    ),
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

    # The script as a user runs it: its exit status and last line of stderr are what is checked.
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

    # A process of its own to receive SIGTERM and end with its exit status.
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


def good_runs(tmp_path):
    from tests.experiments.test_report import fake_run

    return [
        fake_run(tmp_path / "a", "BQ", "feature", "cosent", {"BQ": 0.7}, accuracy=0.8, pooling="cls", batch_size=32),
        fake_run(tmp_path / "b", "BQ", "feature", "mse", {"BQ": 0.6}, accuracy=0.7, pooling="cls", batch_size=32),
    ]


def edit_json(name, change):
    def damage(folder):
        path = folder / name
        value = json.loads(path.read_text())
        change(value)
        path.write_text(json.dumps(value))

    return damage


def write(name, text):
    def damage(folder):
        path = folder / name
        path.unlink(missing_ok=True)
        if text is not None:
            path.write_bytes(text if isinstance(text, bytes) else text.encode())

    return damage


def scores(**arrays):
    def damage(folder):
        np.savez(folder / "test_scores.npz", **arrays)

    return damage


HEADER = "epoch,step,end_of_epoch,spearman\r\n"
DAMAGED_RUNS = {
    "config.json missing": (write("config.json", None), ConfigError, "config.json: missing beside", None),
    "metrics.json not JSON": (write("metrics.json", '{"tasks": '), ConfigError, "metrics.json, line 1: a tra", None),
    "metrics.json a list": (
        write("metrics.json", "[]"),
        ConfigError,
        "metrics.json: a training run's metrics must be a JSON object, not array",
        None,
    ),
    "config.json a string": (
        write("config.json", '"BQ"'),
        ConfigError,
        "config.json: a training run's config must be a JSON object, not string",
        None,
    ),
    "config.json not UTF-8": (
        write("config.json", b'{"task": "\xff"}'),
        ConfigError,
        "config.json: a training run's config is not valid UTF-8",
        None,
    ),
    "no task": (edit_json("config.json", lambda c: c.pop("task")), ConfigError, "config.json: 'task' is missing", None),
    "kind a number": (
        edit_json("config.json", lambda c: c.update(kind=1)),
        ConfigError,
        "config.json: 'kind' must be a JSON string, not integer",
        None,
    ),
    "unknown task": (
        edit_json("config.json", lambda c: c.update(task="bq")),
        ConfigError,
        "config.json: 'task' 'bq' is not one of the benchmark tasks",
        None,
    ),
    "unknown loss": (
        edit_json("config.json", lambda c: c.update(loss="foo")),
        ConfigError,
        "config.json: unknown feature loss 'foo'",
        None,
    ),
    "unknown pooling": (
        edit_json("config.json", lambda c: c.update(pooling="avg")),
        ConfigError,
        "config.json: 'pooling' 'avg' is not one of",
        None,
    ),
    "batch size a string": (
        edit_json("config.json", lambda c: c.update(batch_size="32")),
        ConfigError,
        "config.json: 'batch_size' must be a JSON integer or null, not string",
        None,
    ),
    "batch size NaN": (
        edit_json("config.json", lambda c: c.update(batch_size=math.nan)),
        ConfigError,
        "config.json: 'batch_size' must be a JSON integer or null, not number (nan)",
        None,
    ),
    "contrastive epsilon NaN": (
        edit_json("config.json", lambda c: c.update(loss="contrastive", epsilon=math.nan)),
        ConfigError,
        "config.json: 'epsilon' must be a finite number",
        None,
    ),
    "no tasks": (
        edit_json("metrics.json", lambda m: m.pop("tasks")),
        ConfigError,
        "metrics.json: 'tasks' is missing or empty",
        None,
    ),
    "tasks a list": (
        edit_json("metrics.json", lambda m: m.update(tasks=[])),
        ConfigError,
        "metrics.json: 'tasks' must be a JSON object, not array",
        None,
    ),
    "spearman a string": (
        edit_json("metrics.json", lambda m: m["tasks"]["BQ"]["test"].update(spearman="0.6")),
        ConfigError,
        "metrics.json: tasks['BQ']['test']['spearman'] must be a JSON integer or number or null, not string",
        None,
    ),
    "spearman out of range": (
        edit_json("metrics.json", lambda m: m["tasks"]["BQ"]["test"].update(spearman=60.0)),
        ConfigError,
        "metrics.json: tasks['BQ']['test']['spearman'] is 60.0, outside -1 to 1",
        None,
    ),
    "accuracy out of range": (
        edit_json("metrics.json", lambda m: m["tasks"]["BQ"]["test"].update(accuracy=-0.5)),
        ConfigError,
        "metrics.json: tasks['BQ']['test']['accuracy'] is -0.5, outside 0 to 1",
        None,
    ),
    "no spearman": (
        edit_json("metrics.json", lambda m: m["tasks"]["BQ"]["test"].pop("spearman")),
        ConfigError,
        "metrics.json: tasks['BQ']['test']['spearman'] is missing",
        None,
    ),
    "test a list": (
        edit_json("metrics.json", lambda m: m["tasks"]["BQ"].update(test=[])),
        ConfigError,
        "metrics.json: tasks['BQ']['test'] must be a JSON object, not array",
        None,
    ),
    "comparable a string": (
        edit_json("metrics.json", lambda m: m.update(comparable="yes")),
        ConfigError,
        "metrics.json: 'comparable' must be a JSON true/false, not string",
        None,
    ),
    "own task not tested": (
        edit_json("metrics.json", lambda m: m.update(tasks={"ATEC": m["tasks"]["BQ"]})),
        ConfigError,
        "metrics.json: no test metrics of the run's own task BQ",
        None,
    ),
    "history missing": (write("valid_metrics.csv", None), DataError, "valid_metrics.csv: missing", None),
    "history cut off": (
        write("valid_metrics.csv", HEADER + "1,10,False,0.1\r\n1,2"),
        DataError,
        "valid_metrics.csv, line 3: cut off",
        3,
    ),
    "history short row": (
        write("valid_metrics.csv", HEADER + "1,10,False,0.1\r\n1,20\r\n"),
        DataError,
        "valid_metrics.csv, line 3: 2 values where the header names 4",
        3,
    ),
    "history bad number": (
        write("valid_metrics.csv", HEADER + "1,10,False,0.1\r\n1,20,False,abc\r\n"),
        DataError,
        "valid_metrics.csv, line 3: spearman 'abc' is not a number",
        3,
    ),
    "history bad step": (
        write("valid_metrics.csv", HEADER + "1,10,False,0.1\r\n1,2.5,False,0.2\r\n"),
        DataError,
        "valid_metrics.csv, line 3: step '2.5' is not a whole number",
        3,
    ),
    "history out of range": (
        write("valid_metrics.csv", HEADER + "1,10,False,0.1\r\n1,20,False,3.5\r\n"),
        DataError,
        "valid_metrics.csv, line 3: step 20, spearman 3.5: not a validation result",
        3,
    ),
    "history without spearman": (
        write("valid_metrics.csv", "epoch,step\r\n1,10\r\n"),
        DataError,
        "valid_metrics.csv, line 1: no 'step' and 'spearman' columns",
        1,
    ),
    "test scores missing": (write("test_scores.npz", None), DataError, "test_scores.npz: missing", None),
    "test scores of another task": (
        scores(**{"ATEC.scores": np.zeros(4), "ATEC.labels": np.zeros(4)}),
        DataError,
        "test_scores.npz: holds no BQ.scores and BQ.labels",
        None,
    ),
    "test scores not finite": (
        scores(**{"BQ.scores": np.array([0.5, np.nan]), "BQ.labels": np.zeros(2)}),
        DataError,
        "test_scores.npz: BQ.scores holds values that are not finite numbers",
        None,
    ),
    "test scores and labels apart": (
        scores(**{"BQ.scores": np.zeros(3), "BQ.labels": np.zeros(2)}),
        DataError,
        "test_scores.npz: BQ.scores and BQ.labels are not two lists of the same length",
        None,
    ),
    "test scores damaged": (
        write("test_scores.npz", b"PK\x03\x04 not a zip"),
        DataError,
        "test_scores.npz: not readable as the run's test scores",
        None,
    ),
}


@pytest.mark.parametrize("damage, error, message, line", DAMAGED_RUNS.values(), ids=DAMAGED_RUNS.keys())
def test_a_damaged_run_stops_the_report_naming_its_file_and_nothing_is_written(damage, error, message, line, tmp_path):
    from cosent_tf.experiments.report import write_report

    runs = good_runs(tmp_path)
    out = tmp_path / "report"
    out.mkdir()
    (out / "results.md").write_text("the last report")
    damage(tmp_path / "b")
    with pytest.raises(error) as refused:
        write_report(runs, str(out))
    assert str(refused.value).startswith(str(tmp_path / "b") + os.sep), str(refused.value)
    assert message in str(refused.value)
    if error is DataError:
        assert refused.value.line == line
    assert sorted(p.name for p in out.iterdir()) == ["results.md"]
    assert (out / "results.md").read_text() == "the last report"


def test_an_undefined_spearman_is_shown_as_nan_and_is_no_runs_best(tmp_path):
    from cosent_tf.experiments.report import load_runs, tables
    from tests.experiments.test_report import fake_run

    nan = math.nan
    cosent = fake_run(tmp_path / "a", "BQ", "feature", "cosent", {"BQ": 0.5}, history=[(10, nan), (20, 0.5)])
    mse = fake_run(tmp_path / "b", "BQ", "feature", "mse", {"BQ": 0.4}, history=[(10, nan), (20, 0.3), (30, 0.4)])
    metrics = json.loads((tmp_path / "b" / "metrics.json").read_text())
    metrics["tasks"]["BQ"]["test"]["spearman"] = None  # as the engine writes a NaN
    (tmp_path / "b" / "metrics.json").write_text(json.dumps(metrics))
    text = tables(load_runs([cosent, mse]))
    assert "| BERT + MSE | – | nan | – | – | – | nan* |" in text
    own, versus = text.split("### Convergence")[1].split("steps CoSENT took to reach the same value")
    assert "| BERT + CoSENT | 20 |" in own and "| BERT + MSE | 30 |" in own
    assert "| BERT + MSE | 30 / 20 |" in versus  # its best, 0.4, at step 30; CoSENT passed it at 20


def test_runs_left_out_are_named_and_a_missing_folder_or_a_file_for_output_is_refused(tmp_path, caplog):
    from cosent_tf.experiments.report import write_report

    runs = good_runs(tmp_path)
    (tmp_path / "running").mkdir()
    (tmp_path / "running" / "config.json").write_text("{}")
    (tmp_path / "notes").mkdir()
    own = tmp_path / "own"
    own.mkdir()
    for name in ("config.json", "metrics.json"):
        (own / name).write_text(json.dumps({"train_file": "pairs.tsv", "task": "mine"}))
    caplog.set_level("WARNING", "cosent_tf")
    written = write_report(runs + [str(tmp_path / name) for name in ("running", "notes", "own")], str(tmp_path / "out"))
    assert os.path.basename(written[0]) == "results.md"
    assert caplog.messages == [
        f"{tmp_path / 'running'}: a run not finished (no metrics.json); left out of the report",
        f"{tmp_path / 'notes'}: not a training run; left out of the report",
        f"{own}: trained on its own file pairs.tsv, which is neither a benchmark task nor mined negatives (no mining "
        "summary beside it); left out",
    ]
    with pytest.raises(ConfigError, match=f"^{tmp_path / 'gone'}: no such run folder; give the folders of finished"):
        write_report(runs + [str(tmp_path / "gone")], str(tmp_path / "out2"))
    (tmp_path / "file").write_text("mine")
    with pytest.raises(ConfigError, match=f"^{tmp_path / 'file'}: exists and is not a folder; give a folder"):
        write_report(runs, str(tmp_path / "file"))
    assert not (tmp_path / "out2").exists() and (tmp_path / "file").read_text() == "mine"


LISTENS_BUT_NEVER_JOINS = """
import json, os, socket, sys
mine, other, timeout = sys.argv[1:4]
os.environ["TF_CONFIG"] = json.dumps(
    {"cluster": {"worker": [f"127.0.0.1:{mine}", f"127.0.0.1:{other}"]}, "task": {"type": "worker", "index": 0}}
)
worker_1 = socket.create_server(("127.0.0.1", int(other)))  # another program on worker 1's port
from cosent_tf.training.distribute import get_strategy
print("starting", flush=True)
get_strategy("multi-worker", worker_timeout=float(timeout))
print("built", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("ended_by", ["the timeout", "SIGINT", "SIGTERM"])
def test_tensorflows_start_with_a_worker_that_listens_but_never_joins_ends(ended_by):
    mine, other = free_port(), free_port()
    timeout = 3 if ended_by == "the timeout" else 300
    # A process per way of ending: each one ends it with a SIGKILL it sends itself, after a signal
    # to its process group where a signal ends it.
    process = subprocess.Popen(
        [sys.executable, "-c", LISTENS_BUT_NEVER_JOINS, str(mine), str(other), str(timeout)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal gives a command
    )
    try:
        assert process.stdout.readline() == "starting\n"
        started = time.monotonic()
        if ended_by != "the timeout":
            time.sleep(2)  # TensorFlow is starting: the wait for worker 1's port ended at once
            os.killpg(process.pid, signal.Signals[ended_by])
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert (3 if ended_by == "the timeout" else 2) <= time.monotonic() - started < 20
    assert process.returncode == -signal.SIGKILL and out == "", err[-3000:]
    assert err.endswith(
        "error: worker 0: TensorFlow did not connect the cluster's workers within 3 seconds, although each listened "
        "on its port (one may have stopped since, or its port belongs to another program); nothing was trained: "
        "start the same command on every machine again, or wait longer with --worker-timeout SECONDS\n"
        if ended_by == "the timeout"
        else f"stopped: {ended_by} received while TensorFlow connected worker 0 to the cluster; nothing was trained\n"
    )
