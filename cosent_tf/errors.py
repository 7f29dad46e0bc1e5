"""Error types raised for bad input. Every message names the file (and line) at fault."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Optional, TypeVar, Union

Entry = TypeVar("Entry")


def where(path: Union[str, os.PathLike[str]]) -> str:
    """``path`` for a message: a relative one also names the folder it is relative to, which is
    what a user needs when a file is not found."""
    path = os.fspath(path)
    return path if os.path.isabs(path) else f"{path} (from {os.getcwd()})"


class CosentError(Exception):
    """Base class of the errors this package raises on purpose."""


class DataError(CosentError, ValueError):
    """A data file is missing, unreadable or has a line that cannot be used."""

    def __init__(self, path: Union[str, os.PathLike[str]], message: str, line: Optional[int] = None) -> None:
        self.path = str(path)
        self.line = line
        self.reason = message
        where = self.path if line is None else f"{self.path}, line {line}"
        super().__init__(f"{where}: {message}")


class ConfigError(CosentError, ValueError):
    """A model config, vocabulary or option does not fit with the others."""


class CheckpointError(CosentError, ValueError):
    """A checkpoint is missing or does not match the model config."""


class NonFiniteLossError(CosentError, FloatingPointError):
    """Training produced a NaN or infinite loss."""


class WorkerLostError(CosentError):
    """A worker of a multi-worker run lost contact with another while training."""


class TrainingInterrupted(CosentError):
    """Training stopped on SIGTERM or SIGINT after saving its state."""

    def __init__(self, signal_number: int, message: str) -> None:
        self.signal_number = signal_number
        super().__init__(message)


def lookup(table: Mapping[str, Entry], name: str, what: str, choices: Optional[Iterable[str]] = None) -> Entry:
    """The entry ``name`` of one of the package's tables (tasks, losses, architectures, ...).

    Args:
        table: the table, by name.
        name: the name asked for.
        what: what the table holds, for the message ("task", "recipe").
        choices: the names to offer, where not all of the table's (default: its keys).

    Returns:
        ``table[name]``.

    Raises:
        ConfigError: ``name`` is not in the table; the message lists the choices.

    Example:
        >>> lookup({"cosent": 1}, "cosent", "loss")
        1
    """
    if name in table:
        return table[name]
    raise ConfigError(f"unknown {what} {name!r}; choose one of {', '.join(choices if choices is not None else table)}")
