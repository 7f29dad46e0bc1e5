"""What the console shows: live progress bars only on a terminal."""

import io
import sys

from cosent_tf.console import live_progress_on


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


class ClosedFile(io.StringIO):
    def isatty(self):
        raise ValueError("I/O operation on closed file")


def test_live_progress_is_drawn_on_a_terminal_and_never_into_a_file_or_pipe(tmp_path, monkeypatch):
    assert live_progress_on(FakeTerminal()) is True
    assert live_progress_on(io.StringIO()) is False
    with open(tmp_path / "log", "w") as log:
        assert live_progress_on(log) is False
    assert live_progress_on(ClosedFile()) is False
    assert live_progress_on(object()) is False  # a stream without isatty
    monkeypatch.setattr(sys, "stderr", FakeTerminal())
    assert live_progress_on() is True  # stderr by default, looked up when asked


def test_a_jupyter_cell_gets_live_progress_though_its_stream_is_no_terminal():
    notebook_stream = type("OutStream", (io.StringIO,), {"__module__": "ipykernel.iostream"})()
    assert notebook_stream.isatty() is False
    assert live_progress_on(notebook_stream) is True
