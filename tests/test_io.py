import os

import pytest

from cosent_tf.io import atomic_directory, atomic_path, write_json


def test_atomic_path_keeps_old_file_on_failure(tmp_path):
    target = tmp_path / "metrics.json"
    write_json(target, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            with open(tmp, "w") as f:
                f.write('{"a": ')  # half-written
            raise RuntimeError("killed")
    assert target.read_text() == '{\n  "a": 1\n}\n'
    assert os.listdir(tmp_path) == ["metrics.json"]


def test_atomic_directory_replaces_whole_folder(tmp_path):
    target = tmp_path / "out"
    with atomic_directory(target) as tmp:
        open(os.path.join(tmp, "one"), "w").close()
    with atomic_directory(target) as tmp:
        open(os.path.join(tmp, "two"), "w").close()
    assert os.listdir(target) == ["two"]
    with pytest.raises(RuntimeError):
        with atomic_directory(target) as tmp:
            open(os.path.join(tmp, "three"), "w").close()
            raise RuntimeError
    assert os.listdir(target) == ["two"] and os.listdir(tmp_path) == ["out"]


def test_atomic_files_get_the_usual_mode(tmp_path):
    mask = os.umask(0o022)
    try:
        write_json(tmp_path / "m.json", {})
    finally:
        os.umask(mask)
    assert (os.stat(tmp_path / "m.json").st_mode & 0o777) == 0o644
