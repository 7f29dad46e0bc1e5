"""Issue 33: the outputs of every command, and the error every entry point shows.

An output never replaces an input or lands in a folder this tool writes; a device or pipe is
written as a stream, never renamed over; a failed file operation is one ``error:`` line naming
the file; JSON has no bare NaN; no option takes nan or inf; finished folders get the umask's
mode; a killed writer's temporary folders are cleared by the next write, a live one's never.
"""

import argparse
import hashlib
import io
import json
import os
import pathlib
import re
import signal
import socket
import stat
import subprocess
import sys
import threading

import numpy as np
import pytest

from cosent_tf import ConfigError, SentenceEncoder, VectorIndex
from cosent_tf.cli import _run_training, argument_parser, main, output_kinds, report_main, train_main
from cosent_tf.huggingface.folders import write_hf_folder, write_slice_module
from cosent_tf.io import FolderKind, atomic_directory, write_json, write_text
from cosent_tf.training.config import RunConfig
from cosent_tf.training.run_folder import RUN_FOLDER
from tests.helpers import ROOT, make_model_dir, umask

KIND = FolderKind("a test output", "marker", ("marker", "part-*"))
TEXTS = ["今天天气怎么样", "我想换手机", "明天会下雨吗"]


def tree(folder):
    """Every path under ``folder`` with its type and content: what a refused command must keep."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            if os.path.islink(path):
                found[path] = "link " + os.readlink(path)
            elif os.path.isfile(path):
                found[path] = hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()
            else:
                found[path] = "folder"
    return found


@pytest.fixture
def place(tiny_config, tmp_path):
    """A model folder, a text and a pair file, an index of the model, a finished training run and
    a SavedModel-like export, each as this tool writes it (by the markers of output_kinds())."""
    make_model_dir(tmp_path / "model", tiny_config, threshold=0.5)
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    (tmp_path / "pairs.tsv").write_text("你好\t你好呀\t1\n天气\t下雨\t0\n", encoding="utf-8")
    vectors = np.eye(3, 16, dtype=np.float32)
    VectorIndex(vectors, TEXTS, model_dir=str(tmp_path / "model")).save(tmp_path / "index")
    run = tmp_path / "run"
    run.mkdir()
    for name in {RUN_FOLDER.marker, "config.json", "metrics.json"}:
        (run / name).write_text("{}")
    make_model_dir(run / "model", tiny_config)
    export = tmp_path / "export"
    export.mkdir()
    saved_model = next(kind for kind in output_kinds() if kind.description == "a SavedModel export")
    (export / saved_model.marker).write_text("")
    (tmp_path / "link-to-model").symlink_to(tmp_path / "model")
    return tmp_path


@pytest.mark.parametrize(
    "arguments, message",
    [
        # The review's cases: each destroyed the model, the index or the run.
        (["encode", "{tmp}/model", "{tmp}/texts.txt", "{tmp}/model/vocab.txt"], "lies inside the input {tmp}/model"),
        (
            ["evaluate", "{tmp}/model", "{tmp}/pairs.tsv", "--output", "{tmp}/model/cosent_model"],
            "lies inside the input {tmp}/model",
        ),
        (
            ["similarity", "{tmp}/model", "{tmp}/pairs.tsv", "{tmp}/model/bert_config.json"],
            "lies inside the input {tmp}/model",
        ),
        (
            ["search", "query", "{tmp}/index", "{tmp}/texts.txt", "{tmp}/index/texts.jsonl"],
            "lies inside the input {tmp}/index",
        ),
        (
            ["encode", "{tmp}/model", "{tmp}/texts.txt", "{tmp}/run/metrics.json"],
            "lies inside a cosent-tf training run",
        ),
        # The same through a link, and into folders that are not inputs of the command.
        (
            ["encode", "{tmp}/model", "{tmp}/texts.txt", "{tmp}/link-to-model/out.npy"],
            "lies inside the input {tmp}/model",
        ),
        (
            ["encode", "{tmp}/model", "{tmp}/texts.txt", "{tmp}/run/out/vectors.npy"],
            "lies inside a cosent-tf training run",
        ),
        (["encode", "{tmp}/run/model", "{tmp}/texts.txt", "{tmp}/export/v.npy"], "lies inside a SavedModel export"),
        (["similarity", "{tmp}/model", "{tmp}/pairs.tsv", "{tmp}/index/s.tsv"], "lies inside a cosent-tf index"),
        (["search", "query", "{tmp}/index", "{tmp}/texts.txt", "{tmp}/run/model/h.jsonl"], "lies inside a cosent-tf"),
        (["evaluate", "{tmp}/model", "{tmp}/pairs.tsv", "--output", "{tmp}/run/eval"], "lies inside a cosent-tf"),
        (
            ["search", "build", "{tmp}/model", "{tmp}/texts.txt", "{tmp}/run/index"],
            "lies inside a cosent-tf training run",
        ),
        (["export", "{tmp}/model", "{tmp}/index/exported"], "lies inside a cosent-tf index"),
        (["encode", "{tmp}/model", "{tmp}/texts.txt", "{tmp}/texts.txt"], "is also an input of this command"),
    ],
)
def test_an_output_never_lands_in_an_input_or_a_folder_this_tool_writes(arguments, message, place, capsys):
    before = tree(place)
    arguments = [a.format(tmp=place) for a in arguments]
    with pytest.raises(SystemExit) as refused:
        main(arguments)
    said = str(refused.value.code)
    assert said.startswith("error: ") and message.format(tmp=place) in said, said
    output = arguments[-1] if arguments[-2] != "--output" else arguments[-1] + ".json"
    assert output in said  # the message names the output it refused
    assert tree(place) == before and "Traceback" not in capsys.readouterr().err


def test_every_kind_of_folder_this_tool_writes_is_recognised_by_its_marker(model_and_texts):
    tmp = model_and_texts
    kinds = output_kinds()
    for number, kind in enumerate(kinds):
        folder = tmp / f"kind-{number}"
        folder.mkdir()
        (folder / kind.marker).write_text("")
        # Kinds that share a marker (the two exports) cannot be told apart by it: either name will do.
        described = "|".join(re.escape(k.description) for k in kinds if k.marker == kind.marker)
        for output in (folder / "out.npy", folder / "deeper" / "out.npy"):
            with pytest.raises(SystemExit, match=f"error: {output}: lies inside ({described}) \\({folder}\\)"):
                main(["encode", str(tmp / "model"), str(tmp / "texts.txt"), str(output)])
        assert sorted(os.listdir(folder)) == [kind.marker]


def test_a_folder_of_other_files_with_a_common_marker_name_is_barred_only_its_kinds_names(tmp_path):
    from cosent_tf.io import check_output_file

    index = VectorIndex.FOLDER
    site = tmp_path / "site"  # a web project's folder: an index.json among other files
    (site / "data").mkdir(parents=True)
    (site / index.marker).write_text("{}")
    (site / "page.html").write_text("<p>")
    check_output_file(site / "data" / "vectors.npy", (), output_kinds())
    check_output_file(site / "out.npy", (), output_kinds())
    for name in index.entries:  # a name an index writes would replace the folder's own, were it one
        with pytest.raises(ConfigError, match=f"{name}: lies inside a cosent-tf index"):
            check_output_file(site / name, (), output_kinds())


def read_fifo(path, into):
    with open(path, "rb") as f:
        into.append(f.read())


def test_a_fifo_is_written_as_a_stream_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=read_fifo, args=(fifo, received), daemon=True)
    reader.start()
    write_json(fifo, {"spearman": float("nan")})
    reader.join(timeout=30)
    assert received == [b'{\n  "spearman": null\n}\n']  # a reader that waits gets the output
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and os.listdir(tmp_path) == ["pipe"]


@pytest.fixture
def devices(tmp_path):
    """/dev/null and /dev/full to write to. As root, who could rename over the system's own (a
    regression would replace them for the whole machine), copies made in ``tmp_path``."""
    if os.geteuid() != 0:
        return {"null": "/dev/null", "full": "/dev/full"}
    (tmp_path / "dev").mkdir()
    for name, minor in (("null", 3), ("full", 7)):
        os.mknod(tmp_path / "dev" / name, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    return {name: str(tmp_path / "dev" / name) for name in ("null", "full")}


def test_a_character_device_is_written_and_kept(devices):
    write_text(devices["null"], "nothing\n")
    assert stat.S_ISCHR(os.stat(devices["null"]).st_mode)
    with pytest.raises(OSError) as full:  # written into, not renamed over: the device's own error
        write_text(devices["full"], "x" * 100000)
    assert full.value.filename == devices["full"] and full.value.strerror == "No space left on device"
    assert stat.S_ISCHR(os.stat(devices["full"]).st_mode)
    folder = os.path.dirname(devices["null"])
    assert not [name for name in os.listdir(folder) if name.startswith(".tmp-")]


def test_a_socket_is_refused_not_replaced(tmp_path):
    path = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        with pytest.raises(ConfigError, match=r"sock: is a socket, which an output may not replace"):
            write_text(path, "x")
        assert stat.S_ISSOCK(os.stat(path).st_mode) and os.listdir(tmp_path) == ["sock"]
    finally:
        server.close()


@pytest.mark.slow
def test_encode_writes_to_stdout_and_says_so_on_stderr(tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config)
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    script = os.path.join(os.path.dirname(sys.executable), "cosent-tf")
    # /dev/stdout is a link to /proc/self/fd/1, named directly here: a regression that renames
    # over it then fails (nothing can be created in /proc) rather than replace /dev/stdout as root.
    result = subprocess.run(
        [script, "encode", str(tmp_path / "model"), str(tmp_path / "texts.txt"), "/proc/self/fd/1"],
        capture_output=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    vectors = np.load(io.BytesIO(result.stdout))  # stdout holds the .npy and nothing else
    np.testing.assert_allclose(vectors, SentenceEncoder.load(tmp_path / "model").encode(TEXTS), atol=1e-6)
    assert "/proc/self/fd/1: 3 vectors of dimension 16" in result.stderr.decode()


@pytest.fixture
def model_and_texts(tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config)
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    (tmp_path / "a-file").write_text("keep me")
    return tmp_path


@pytest.mark.parametrize(
    "output, message",
    [
        ("{tmp}/a-file/out.npy", r"{tmp}/a-file/out.npy: cannot be written: {tmp}/a-file is a file, not a folder"),
        (
            "{tmp}/a-file/deeper/out.npy",
            r"{tmp}/a-file/deeper/out.npy: cannot be written: {tmp}/a-file is a file, not a folder",
        ),
        (
            "/proc/cosent-tf-none/out.npy",
            r"/proc/cosent-tf-none/out.npy: (cannot create its folder /proc/cosent-tf-none: "
            r"No such file or directory|cannot be written: no permission to write in /proc)",
        ),
        ("/sys/out.npy", r"/sys/out.npy: (Permission denied|cannot be written: (no permission|.* read-only))"),
        ("{full}", r"{full}: No space left on device"),
    ],
)
def test_a_failed_write_is_one_error_line_naming_the_output(output, message, model_and_texts, devices, capsys):
    tmp = model_and_texts
    output = output.format(tmp=tmp, full=devices["full"])
    with pytest.raises(SystemExit) as failed:
        main(["encode", str(tmp / "model"), str(tmp / "texts.txt"), output])
    assert failed.value.code.startswith("error: ")
    assert re.match("error: " + message.format(tmp=tmp, full=devices["full"]), failed.value.code), failed.value.code
    assert "Traceback" not in capsys.readouterr().err
    assert (tmp / "a-file").read_text() == "keep me" and not os.path.exists("/sys/out.npy")


def test_verbose_adds_the_traceback_to_the_error_line(model_and_texts, devices, capsys):
    tmp = model_and_texts
    arguments = ["encode", str(tmp / "model"), str(tmp / "texts.txt"), devices["full"]]
    with pytest.raises(SystemExit, match=re.escape(f"error: {devices['full']}: No space left on device")):
        main(["--verbose"] + arguments)
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "OSError" in err


def test_the_report_script_turns_errors_into_one_line(tmp_path, capsys):
    (tmp_path / "a-file").write_text("keep me")
    run = tmp_path / "run"
    run.mkdir()
    (run / RUN_FOLDER.marker).write_text("{}")
    cases = [
        (tmp_path / "nothing", tmp_path / "report", f"error: {tmp_path}/nothing"),
        (run, run / "report", f"error: {run}/report: lies inside the run {run}"),
        (run, tmp_path / "a-file" / "r", f"error: {tmp_path}/a-file/r: cannot be written: {tmp_path}/a-file is a file"),
    ]
    for source, output, message in cases:
        with pytest.raises(SystemExit, match=re.escape(message)):
            report_main([str(source), "--output-dir", str(output)])
        assert "Traceback" not in capsys.readouterr().err
    with pytest.raises(SystemExit, match=re.escape(f"error: {tmp_path}/nothing")):
        report_main([str(tmp_path / "nothing"), "--verbose", "--output-dir", str(tmp_path / "report")])
    assert "Traceback (most recent call last)" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["a-file", "run"] and os.listdir(run) == [RUN_FOLDER.marker]


def test_the_training_scripts_turn_an_os_error_into_one_line(tiny_setup, capsys):
    tmp_path, options = tiny_setup
    (tmp_path / "a-file").write_text("keep me")
    with pytest.raises(SystemExit) as failed:
        train_main(["BQ", "--output-dir", str(tmp_path / "a-file" / "run")] + options)
    assert failed.value.code.startswith(f"error: {tmp_path}/a-file/run: "), failed.value.code
    assert "Traceback" not in capsys.readouterr().err and (tmp_path / "a-file").read_text() == "keep me"


def test_training_prints_its_final_metrics_as_strict_json(monkeypatch, capsys):
    from cosent_tf.training import engine as training

    metrics = {"valid": {"spearman": float("nan")}, "test": {"spearman": float("inf")}, "best_epoch": 1}
    monkeypatch.setattr(training, "train", lambda cfg, overwrite: dict(metrics, wall_seconds=2.5))

    def no_bare_constants(name):
        raise AssertionError(f"bare {name} in the printed JSON")

    _run_training(RunConfig(), False)
    printed = json.loads(capsys.readouterr().out, parse_constant=no_bare_constants)
    assert printed == {"valid": {"spearman": None}, "test": {"spearman": None}, "best_epoch": 1, "wall_seconds": 2.5}


def every_option():
    """(command, option, its argparse type) of every option of every cosent-tf command and of
    the training scripts."""
    from cosent_tf.cli import training_parser

    def walk(parser, command):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, f"{command} {name}".strip())
            elif action.type is not None and action.option_strings:
                yield command, action.option_strings[0], action.type

    return list(walk(argument_parser(), "")) + list(walk(training_parser(), "scripts/cosent.py"))


def test_no_option_of_any_command_takes_nan_or_inf():
    options = every_option()
    assert ("evaluate", "--threshold") in {(command, option) for command, option, _ in options}
    for command, option, parse in options:
        for text in ("nan", "NaN", "inf", "-inf", "Infinity"):
            with pytest.raises((argparse.ArgumentTypeError, ValueError)):
                value = parse(text)
                pytest.fail(f"cosent-tf {command} {option} took {text!r} as {value!r}")


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["evaluate", "m", "p.tsv", "--threshold", "nan"], "argument --threshold: must be a finite number, got nan"),
        (["evaluate", "m", "p.tsv", "--threshold=-inf"], "argument --threshold: must be a finite number, got -inf"),
        (["train", "--train", "t.tsv", "--epsilon", "inf"], "argument --epsilon: must be a finite number, got inf"),
        (["encode", "m", "t.txt", "v.npy", "--batch-size", "0"], "argument --batch-size: must be at least 1, got 0"),
        (["search", "query", "i", "q.txt", "h.jsonl", "--top-k", "0"], "argument --top-k: must be at least 1, got 0"),
    ],
)
def test_option_values_that_mean_nothing_are_refused_naming_the_option(arguments, message, capsys):
    with pytest.raises(SystemExit) as refused:
        argument_parser().parse_args(arguments)
    assert refused.value.code == 2 and message in capsys.readouterr().err
    assert argument_parser().parse_args(["evaluate", "m", "--threshold", "0.25"]).threshold == 0.25


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_finished_folders_and_files_get_the_mode_the_umask_gives(tmp_path, mask):
    with umask(mask):
        with atomic_directory(tmp_path / "out", KIND) as tmp:
            open(os.path.join(tmp, "marker"), "w").close()
        write_json(tmp_path / "m.json", {})
        assert os.umask(mask) == mask  # reading the umask left it as it was
    assert stat.S_IMODE(os.stat(tmp_path / "out").st_mode) == 0o777 & ~mask
    assert stat.S_IMODE(os.stat(tmp_path / "m.json").st_mode) == 0o666 & ~mask


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_the_weights_of_hugging_face_folders_get_the_mode_the_umask_gives(tmp_path, mask):
    """model.safetensors of an HF or ONNX export and of a sentence-transformers slice module:
    safetensors' own writer makes them 0600, unreadable to a server running as another user."""
    (tmp_path / "hf").mkdir()
    with umask(mask):
        write_hf_folder(tmp_path / "hf", {"w": np.zeros((2, 3), np.float32)}, {"model_type": "bert"})
        write_slice_module(str(tmp_path / "slice"), 4, 2)
    for written in ("hf/model.safetensors", "hf/config.json", "slice/model.safetensors", "slice/config.json"):
        assert stat.S_IMODE(os.stat(tmp_path / written).st_mode) == 0o666 & ~mask, written
    assert not [name for name in os.listdir(tmp_path / "hf") if name.startswith(".tmp-")]


WRITER = """
import os, signal, sys, time
from cosent_tf.io import FolderKind, atomic_directory
with atomic_directory(sys.argv[1], FolderKind("a test output", "marker", ("marker", "part-*"))) as tmp:
    open(os.path.join(tmp, "marker"), "w").close()
    if sys.argv[2] == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    print("writing", flush=True)
    time.sleep(120)
"""


def writer(target, how):
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target), how],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )


def leftovers(folder):
    return sorted(name for name in os.listdir(folder) if name.startswith((".tmp-", ".old-")))


@pytest.mark.slow
def test_a_killed_writers_folders_are_removed_by_the_next_write_and_a_live_ones_kept(tmp_path):
    target = tmp_path / "out"
    killed = writer(target, "die")
    assert killed.wait(timeout=120) == -signal.SIGKILL
    [stale] = leftovers(tmp_path)
    assert stale.startswith(".tmp-out-")
    live = writer(target, "live")  # the next write: it removes what the killed one left
    try:
        assert live.stdout.readline() == "writing\n"
        [busy] = leftovers(tmp_path)
        assert busy != stale
        with atomic_directory(target, KIND) as tmp:  # another writer is at work: nothing is removed
            open(os.path.join(tmp, "marker"), "w").close()
        assert leftovers(tmp_path) == [busy] and os.listdir(target) == ["marker"]
    finally:
        live.kill()
        live.wait()
    with atomic_directory(target, KIND, overwrite=True) as tmp:
        open(os.path.join(tmp, "part-2"), "w").close()
        open(os.path.join(tmp, "marker"), "w").close()
    assert leftovers(tmp_path) == [] and sorted(os.listdir(target)) == ["marker", "part-2"]


def test_an_output_moved_aside_for_a_replacement_that_never_came_is_put_back(tmp_path):
    aside = tmp_path / ".old-out-abcd_123"
    aside.mkdir()
    (aside / "marker").write_text("the earlier output")
    (tmp_path / ".tmp-out-notes").mkdir()  # not a name this tool makes: kept
    (tmp_path / ".tmp-out-abcdefgh").write_text("a file, not a folder: kept")
    with pytest.raises(ConfigError, match="out: already holds a test output; nothing was written"):
        with atomic_directory(tmp_path / "out", KIND):
            raise AssertionError("the block must not run")
    assert (tmp_path / "out" / "marker").read_text() == "the earlier output"
    assert leftovers(tmp_path) == [".tmp-out-abcdefgh", ".tmp-out-notes"]
    aside.mkdir()  # moved aside, and its replacement arrived: only the removal was missed
    (aside / "marker").write_text("older")
    with atomic_directory(tmp_path / "out", KIND, overwrite=True) as tmp:
        open(os.path.join(tmp, "marker"), "w").close()
    assert leftovers(tmp_path) == [".tmp-out-abcdefgh", ".tmp-out-notes"]
    assert (tmp_path / "out" / "marker").read_text() == ""


def test_a_read_only_or_forbidden_folder_is_refused_before_the_work(model_and_texts, monkeypatch):
    import cosent_tf.io as cosent_io
    from cosent_tf.inference import matchers as inference

    tmp = model_and_texts
    monkeypatch.setattr(inference.SentenceEncoder, "load", lambda *a: pytest.fail("the model was loaded"))
    statvfs = os.statvfs
    read_only = type("ReadOnly", (), {"f_flag": os.ST_RDONLY})
    monkeypatch.setattr(cosent_io.os, "statvfs", lambda path: read_only if path == str(tmp) else statvfs(path))
    output = tmp / "new" / "v.npy"
    with pytest.raises(SystemExit, match=re.escape(f"error: {output}: cannot be written: {tmp} is on a read-only")):
        main(["encode", str(tmp / "model"), str(tmp / "texts.txt"), str(output)])
    monkeypatch.setattr(cosent_io.os, "statvfs", statvfs)
    monkeypatch.setattr(cosent_io.os, "access", lambda path, mode: path != str(tmp))
    with pytest.raises(SystemExit, match=re.escape(f"error: {output}: cannot be written: no permission to write in")):
        main(["encode", str(tmp / "model"), str(tmp / "texts.txt"), str(output)])
    assert not (tmp / "new").exists()
