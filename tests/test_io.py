import json
import os
import re
import subprocess
import sys

import pytest

from cosent_tf import ConfigError
from cosent_tf.io import (
    FolderKind,
    atomic_directory,
    atomic_path,
    check_output_file,
    check_output_folder,
    folder_lock,
    json_field,
    read_json,
    write_json,
)
from tests.helpers import umask

KIND = FolderKind("a test output", "marker", ("marker", "part-*"))


def test_atomic_path_keeps_old_file_on_failure(tmp_path):
    target = tmp_path / "metrics.json"
    write_json(target, {"a": 1})
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        with open(tmp, "w") as f:
            f.write('{"a": ')  # half-written
        raise RuntimeError("killed")
    assert target.read_text() == '{\n  "a": 1\n}\n'
    assert os.listdir(tmp_path) == ["metrics.json"]


def test_atomic_directory_replaces_only_an_output_of_its_kind_when_asked(tmp_path):
    target = tmp_path / "out"
    with atomic_directory(target, KIND) as tmp:
        for name in ("marker", "part-1"):
            open(os.path.join(tmp, name), "w").close()
    with (
        pytest.raises(
            ConfigError, match="already holds a test output; nothing was written: replace it with --overwrite"
        ),
        atomic_directory(target, KIND) as tmp,
    ):
        raise AssertionError("the block must not run")
    with atomic_directory(target, KIND, overwrite=True) as tmp:
        for name in ("marker", "part-2"):
            open(os.path.join(tmp, name), "w").close()
    assert sorted(os.listdir(target)) == ["marker", "part-2"]
    with pytest.raises(RuntimeError), atomic_directory(target, KIND, overwrite=True) as tmp:
        open(os.path.join(tmp, "marker"), "w").close()
        raise RuntimeError
    assert sorted(os.listdir(target)) == ["marker", "part-2"] and os.listdir(tmp_path) == ["out"]


def test_a_folder_holding_anything_else_is_never_replaced(tmp_path):
    target = tmp_path / "run"
    target.mkdir()
    for name in ("marker", "metrics.json"):
        (target / name).write_text("keep me")
    for overwrite in (False, True):
        with (
            pytest.raises(
                ConfigError,
                match=r"run: already exists and is not a test output \(it holds marker, "
                r"metrics.json\); nothing was written",
            ),
            atomic_directory(target, KIND, overwrite=overwrite),
        ):
            raise AssertionError("the block must not run")
    assert sorted(os.listdir(target)) == ["marker", "metrics.json"] and os.listdir(tmp_path) == ["run"]
    (tmp_path / "a-file").write_text("keep me")
    with pytest.raises(ConfigError, match="a-file: exists and is not a folder"):
        check_output_folder(tmp_path / "a-file", KIND)
    empty = tmp_path / "empty"
    empty.mkdir()
    check_output_folder(empty, KIND)  # an empty folder may be used


def test_an_output_folder_may_not_hold_or_lie_inside_an_input(tmp_path):
    source = tmp_path / "model"
    source.mkdir()
    (source / "marker").write_text("")
    with pytest.raises(ConfigError, match="would lie inside the input"):
        check_output_folder(source, KIND, overwrite=True, inputs=[source])
    with pytest.raises(ConfigError, match="would lie inside the input"):
        check_output_folder(source / "export", KIND, inputs=[source])
    with pytest.raises(ConfigError, match="would hold the input"):
        check_output_folder(tmp_path, KIND, overwrite=True, inputs=[source / "marker"])


def test_an_output_file_may_not_be_a_folder_or_an_input(tmp_path):
    (tmp_path / "in.txt").write_text("x")
    with pytest.raises(ConfigError, match="is a folder; give the path of a file"):
        check_output_file(tmp_path)
    with pytest.raises(ConfigError, match="is also an input of this command"):
        check_output_file(tmp_path / "in.txt", [tmp_path / "in.txt"])
    check_output_file(tmp_path / "out.txt", [tmp_path / "in.txt"])


HOLD_LOCK = """
import sys, time
from cosent_tf.io import folder_lock
with folder_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(60)
"""


@pytest.mark.slow
def test_folder_lock_names_its_holder_and_dies_with_it(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path / "run")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ConfigError, match=f"run: in use by another run \\(process {holder.pid}\\)"):
            with folder_lock(tmp_path / "run"):
                raise AssertionError("the block must not run")
    finally:
        holder.kill()
        holder.wait()
    with folder_lock(tmp_path / "run"):  # a killed holder leaves no stale lock
        assert (tmp_path / "run" / ".lock").read_text() == f"{os.getpid()}\n"


def test_json_has_no_nan_so_non_finite_numbers_are_written_as_null(tmp_path):
    write_json(tmp_path / "m.json", {"spearman": float("nan"), "rows": [1.5, float("inf")]})
    assert json.loads((tmp_path / "m.json").read_text()) == {"spearman": None, "rows": [1.5, None]}


def test_atomic_files_get_the_usual_mode(tmp_path):
    with umask(0o022):
        write_json(tmp_path / "m.json", {})
    assert (os.stat(tmp_path / "m.json").st_mode & 0o777) == 0o644


@pytest.mark.parametrize(
    "text, expect, message",
    [
        ("[1, 2]", dict, "must be a JSON object, not array"),
        ('{"a": 1}', list, "must be a JSON array, not object"),
        ("[" * 100000, dict, "nested too deeply"),
        ('{"a": 1', dict, "line 1: the settings is not valid JSON"),
        ("", dict, "not valid JSON"),
    ],
)
def test_read_json_names_the_file_and_what_is_wrong(tmp_path, text, expect, message):
    path = tmp_path / "settings.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(message)) as error:
        read_json(path, "the settings", expect)
    assert str(path) in str(error.value)


def test_read_json_refuses_bytes_that_are_not_utf8_and_a_missing_file(tmp_path):
    path = tmp_path / "latin.json"
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ConfigError, match="not valid UTF-8"):
        read_json(path)
    with pytest.raises(ConfigError, match="cannot read"):
        read_json(tmp_path / "missing.json")


def test_json_field_checks_the_type_and_never_takes_a_bool_for_a_number(tmp_path):
    record = {"layers": 2, "flag": True, "name": "x"}
    assert json_field(record, "layers", int, "c.json") == 2
    assert json_field(record, "missing", int, "c.json", default=7) == 7
    with pytest.raises(ConfigError, match=r"c.json: 'flag' must be a JSON integer, not true/false"):
        json_field(record, "flag", int, "c.json")
    with pytest.raises(ConfigError, match=r"'name' must be a JSON integer or number, not string"):
        json_field(record, "name", (int, float), "c.json")


def test_read_json_reads_a_bounded_amount(monkeypatch, tmp_path):
    import cosent_tf.io

    monkeypatch.setattr(cosent_tf.io, "MAX_JSON_BYTES", 1 << 20)
    with pytest.raises(ConfigError, match=r"^/dev/zero: the model config is larger than 1 MB; is this a JSON file\?$"):
        read_json("/dev/zero", "the model config")
    path = tmp_path / "exactly.json"
    path.write_text('"' + "a" * ((1 << 20) - 2) + '"')
    assert len(read_json(path, expect=str)) == (1 << 20) - 2
