"""tests/reference_cache.py: an entry is reused only for the same inputs, and computed once."""

import os
import sys
import threading
import time

import numpy as np
import pytest

from tests import reference_cache
from tests.reference_cache import cached, contents, interpreter, package_sources


@pytest.fixture(autouse=True)
def cache_in(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("COSENT_TEST_CACHE", str(folder))
    return folder


class Producer:
    """A produce() that counts its calls and gives ``value`` (the number of calls, by default)."""

    def __init__(self, value=None, delay=0.0):
        self.calls, self.value, self.delay = 0, value, delay
        self.guard = threading.Lock()

    def __call__(self):
        with self.guard:
            self.calls += 1
            calls = self.calls
        time.sleep(self.delay)
        return {"value": np.array(calls if self.value is None else self.value)}


def test_the_same_inputs_read_the_entry_and_do_not_compute_again():
    produce = Producer()
    key = ["code", {"x": np.arange(4, dtype=np.float32)}]
    first = cached("kind", key, produce)
    second = cached("kind", ["code", {"x": np.arange(4, dtype=np.float32)}], produce)
    assert produce.calls == 1
    assert int(first["value"]) == int(second["value"]) == 1


@pytest.mark.parametrize(
    "changed",
    [
        np.arange(4, dtype=np.float32) + 1e-6,  # a value
        np.arange(4, dtype=np.float64),  # the dtype
        np.arange(4, dtype=np.float32).view(np.int32),  # the dtype alone: the same bytes
        np.arange(4, dtype=np.float32).reshape(2, 2),  # the shape
        np.arange(5, dtype=np.float32),  # the length
    ],
)
def test_a_changed_input_array_misses(changed):
    produce = Producer()
    cached("kind", ["code", {"x": np.arange(4, dtype=np.float32)}], produce)
    cached("kind", ["code", {"x": changed}], produce)
    assert produce.calls == 2


def test_changed_code_text_or_another_kind_misses():
    produce = Producer()
    cached("kind", ["outputs['a'] = 1"], produce)
    cached("kind", ["outputs['a'] = 2"], produce)
    cached("other", ["outputs['a'] = 2"], produce)
    assert produce.calls == 3


def test_structure_is_part_of_the_key():
    produce = Producer()
    cached("kind", [["ab"]], produce)
    cached("kind", [["a", "b"]], produce)
    cached("kind", [{"a": "b"}], produce)
    cached("kind", [1], produce)
    cached("kind", ["1"], produce)
    assert produce.calls == 5


def test_changed_file_content_misses_and_the_same_content_elsewhere_hits(tmp_path):
    produce = Producer()
    first, second = tmp_path / "run-1", tmp_path / "run-2"
    for folder in (first, second):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "weights.bin").write_bytes(b"\x00\x01")
        (folder / "texts.json").write_text("[]", encoding="utf-8")
    cached("kind", [contents(first)], produce)
    cached("kind", [contents(second)], produce)  # another tmp path, the same bytes
    assert produce.calls == 1
    (second / "sub" / "weights.bin").write_bytes(b"\x00\x02")
    cached("kind", [contents(second)], produce)
    assert produce.calls == 2
    (second / "sub" / "weights.bin").rename(second / "sub" / "other.bin")  # a file's name counts too
    cached("kind", [contents(second)], produce)
    assert produce.calls == 3
    cached("kind", [contents(first / "texts.json")], produce)
    (first / "texts.json").write_text("[1]", encoding="utf-8")
    cached("kind", [contents(first / "texts.json")], produce)
    assert produce.calls == 5


def test_a_path_itself_cannot_be_a_key_part(tmp_path):
    with pytest.raises(TypeError, match="contents"):
        cached("kind", [tmp_path], Producer())


def test_a_change_to_the_package_sources_misses(tmp_path, monkeypatch):
    package = tmp_path / "cosent_tf"
    (package / "losses").mkdir(parents=True)
    (package / "losses" / "cosent.py").write_text("SCALE = 20\n", encoding="utf-8")
    monkeypatch.setattr(reference_cache, "PACKAGE", str(package))
    produce = Producer()
    try:
        package_sources.cache_clear()
        cached("keras2", ["code", package_sources()], produce)
        package_sources.cache_clear()
        cached("keras2", ["code", package_sources()], produce)
        assert produce.calls == 1
        (package / "losses" / "cosent.py").write_text("SCALE = 30\n", encoding="utf-8")
        package_sources.cache_clear()
        cached("keras2", ["code", package_sources()], produce)
        assert produce.calls == 2
    finally:
        package_sources.cache_clear()  # the real package's digest for the rest of this process


def test_another_reference_environment_misses(tmp_path):
    """An upgrade of torch in the reference environment changes its dist-info names, so the key."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "torch-2.0.0.dist-info").mkdir(parents=True)
    before = interpreter(str(venv / "bin" / "python"))
    (site / "torch-2.0.0.dist-info").rename(site / "torch-2.1.0.dist-info")
    interpreter.cache_clear()
    after = interpreter(str(venv / "bin" / "python"))
    assert "torch-2.0.0.dist-info" in before and "torch-2.1.0.dist-info" in after
    produce = Producer()
    cached("reference", ["script", before], produce)
    cached("reference", ["script", after], produce)
    assert produce.calls == 2


def test_threads_asking_for_one_key_compute_it_once():
    produce = Producer(delay=0.3)  # long enough that every thread asks while the first computes
    results, start = [], threading.Barrier(6)

    def ask():
        start.wait()
        results.append(int(cached("kind", ["shared key"], produce)["value"]))

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert produce.calls == 1
    assert results == [1] * 6


def test_a_produce_that_raises_stores_nothing(cache_in):
    def fails():
        raise RuntimeError("the reference process failed")

    with pytest.raises(RuntimeError, match="reference process failed"):
        cached("kind", ["key"], fails)
    stored = [name for name in os.listdir(cache_in / "kind") if not name.endswith(".lock")]
    assert stored == []
    produce = Producer()
    cached("kind", ["key"], produce)
    assert produce.calls == 1


def test_off_computes_every_time_and_writes_nothing(cache_in, monkeypatch):
    monkeypatch.setenv("COSENT_TEST_CACHE", "off")
    monkeypatch.chdir(cache_in.parent)  # where a cache named "off" would land if the word were not read
    produce = Producer()
    assert [int(cached("kind", ["key"], produce)["value"]) for _ in range(2)] == [1, 2]
    assert not cache_in.exists() and not (cache_in.parent / "off").exists()


def test_a_folder_the_child_wrote_comes_back_on_a_hit(tmp_path):
    def writes(folder):
        def produce():
            (folder / "model").mkdir(parents=True)
            (folder / "model" / "weights.bin").write_bytes(b"weights")
            return {"vectors": np.ones((2, 3), np.float32)}

        return produce

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    cached("kind", ["key"], writes(first), folder=first)
    calls = []
    outputs = cached("kind", ["key"], lambda: calls.append(1), folder=second)
    assert calls == []
    assert (second / "model" / "weights.bin").read_bytes() == b"weights"
    np.testing.assert_array_equal(outputs["vectors"], np.ones((2, 3), np.float32))
    assert outputs["vectors"].dtype == np.float32


def test_a_hidden_tmp_path_in_a_file_does_not_miss_but_other_text_does(tmp_path):
    """An export names its tmp source folder, which differs on every run; the rest of its text counts."""
    produce = Producer()
    for run in ("run-1", "run-2"):
        export = tmp_path / run / "export"
        export.mkdir(parents=True)
        (export / "README.md").write_text(f"Exported from {tmp_path / run / 'model'}.", encoding="utf-8")
        cached("kind", [contents(export, hide=[tmp_path / run / "model"])], produce)
    assert produce.calls == 1
    (export / "README.md").write_text(f"Exported from {tmp_path / 'run-2' / 'model'}!", encoding="utf-8")
    cached("kind", [contents(export, hide=[tmp_path / "run-2" / "model"])], produce)
    cached("kind", [contents(export)], produce)  # not hidden: the path counts
    assert produce.calls == 3


def test_a_restored_text_file_names_the_folder_it_is_restored_to(tmp_path):
    """An export the child wrote names its source folder; on a hit in another tmp folder it must
    name that one, as the child would have written it, and a binary file is copied as it was."""
    first, second = tmp_path / "first", tmp_path / "second"

    def produce():
        (first / "export").mkdir()
        (first / "export" / "record.json").write_text(f'{{"model_dir": "{first / "model"}"}}', encoding="utf-8")
        (first / "export" / "weights.bin").write_bytes(b"\xff\xfe" + os.fsencode(str(first)))
        return {}

    first.mkdir()
    second.mkdir()
    cached("kind", ["key"], produce, folder=first)
    cached("kind", ["key"], produce, folder=second)
    record = (second / "export" / "record.json").read_text(encoding="utf-8")
    assert record == f'{{"model_dir": "{second / "model"}"}}'
    assert (second / "export" / "weights.bin").read_bytes() == b"\xff\xfe" + os.fsencode(str(first))
