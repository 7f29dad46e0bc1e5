"""Safe output: atomic files and folders that never replace what they should not.

A crash never leaves a truncated file where a good one was: output is written to a
temporary path beside the target, then renamed (atomic on POSIX file systems), so readers
see either the old file or the complete new one. An output folder replaces only an earlier
output of the same kind (a :class:`FolderKind`), and only when asked to; a folder holding
anything else, or an input, is refused before any work is done.
"""

import contextlib
import dataclasses
import fcntl
import fnmatch
import json
import math
import os
import shutil
import tempfile

from .errors import ConfigError


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary file path; on success it replaces ``path``, on error it is removed."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # Keep the whole extension (".weights.h5"): Keras picks the weights format from it.
    name = os.path.basename(path)
    suffix = "." + name.split(".", 1)[1] if "." in name else ""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=directory)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def read_json(path, what: str = "JSON", expect: type = dict):
    """The JSON value in ``path``, which must be a ``expect`` (dict, list, or None for any).

    Every way a file can fail to be that becomes a ConfigError naming the file and ``what`` it
    should hold: unreadable, not UTF-8, not JSON (with the line), nested too deep, or a value of
    another JSON type.
    """
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read {what} ({e.strerror or e})") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: {what} is not valid UTF-8 ({e.reason})") from e
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}, line {e.lineno}: {what} is not valid JSON ({e.msg})") from e
    except RecursionError:
        raise ConfigError(f"{path}: {what} is not usable JSON (nested too deeply)") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise ConfigError(f"{path}: {what} is not usable JSON ({e})") from e
    if expect is not None and not isinstance(value, expect):
        raise ConfigError(f"{path}: {what} must be a JSON {json_type(expect)}, not {json_type(type(value))}")
    return value


def json_type(python_type: type) -> str:
    """The JSON name of a Python type as ``json`` reads it, for messages."""
    names = {dict: "object", list: "array", str: "string", bool: "true/false", int: "integer", float: "number"}
    return names.get(python_type, "null" if python_type is type(None) else python_type.__name__)


def json_field(record: dict, key: str, expect, path, what: str = None, default=None):
    """``record[key]`` checked to be of type ``expect`` (a type or a tuple of types), or ``default``
    when missing; otherwise a ConfigError naming ``path`` and the key. A bool is never taken
    for a number."""
    if key not in record:
        return default
    value = record[key]
    types = expect if isinstance(expect, tuple) else (expect,)
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        wanted = " or ".join(json_type(t) for t in types)
        raise ConfigError(
            f"{path}: {what or repr(key)} must be a JSON {wanted}, not {json_type(type(value))} ({str(value)[:60]})"
        )
    return value


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path, text):
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)


def write_json(path, obj):
    """Write ``obj`` as JSON; NaN and infinities, which JSON lacks, are written as null."""
    write_text(path, json.dumps(_finite(obj), indent=2, ensure_ascii=False, sort_keys=True, allow_nan=False) + "\n")


def _finite(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {key: _finite(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(value) for value in obj]
    return obj


@dataclasses.dataclass(frozen=True)
class FolderKind:
    """One kind of output folder: what it is called, the file that marks it, what it holds.

    ``entries`` are glob patterns of every top-level name the kind writes: a folder with
    the marker and nothing else is an earlier output of this kind, which may be replaced.
    """

    description: str
    marker: str
    entries: tuple

    def holds_only_its_own(self, names):
        return self.marker in names and all(
            any(fnmatch.fnmatchcase(name, pattern) for pattern in self.entries) for name in names
        )


def is_inside(path, folder):
    """Whether ``path`` is ``folder`` or lies inside it (links resolved)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_output_folder(path, kind, overwrite=False, inputs=()):
    """Raise ConfigError unless ``path`` may become a ``kind`` folder; call it before the work.

    Allowed: a new path, an empty folder, or (with ``overwrite``) an earlier output of the
    same kind. Refused: a file, a folder holding anything else, and a folder that is, holds
    or lies inside one of ``inputs``.
    """
    path = os.fspath(path)
    for source in inputs:
        if source is not None and (is_inside(path, source) or is_inside(source, path)):
            raise ConfigError(
                f"{path}: the output folder would {'lie inside' if is_inside(path, source) else 'hold'} "
                f"the input {source}; choose an output folder apart from the inputs"
            )
    if not os.path.exists(path):
        return
    if not os.path.isdir(path):
        raise ConfigError(f"{path}: exists and is not a folder; nothing was written")
    names = sorted(os.listdir(path))
    if not names:
        return
    if not kind.holds_only_its_own(names):
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise ConfigError(
            f"{path}: already exists and is not {kind.description} (it holds {shown}); "
            "nothing was written: choose a new or empty folder"
        )
    if not overwrite:
        raise ConfigError(
            f"{path}: already holds {kind.description}; nothing was written: replace it "
            "with --overwrite (overwrite=True in Python) or choose another folder"
        )


def check_output_file(path, inputs=()):
    """Raise ConfigError if ``path`` is a folder or one of ``inputs``; call it before the work."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ConfigError(f"{path}: is a folder; give the path of a file to write")
    for source in inputs:
        if os.path.exists(path) and os.path.exists(source) and os.path.samefile(path, source):
            raise ConfigError(f"{path}: is also an input of this command; write the output to another file")


@contextlib.contextmanager
def atomic_directory(path, kind, overwrite=False, inputs=()):
    """Yield a temporary directory that becomes ``path`` once the block succeeds.

    ``path`` is checked with :func:`check_output_folder` first; an earlier output of the
    same kind that it replaces is removed only after the new folder is in its place.
    """
    check_output_folder(path, kind, overwrite, inputs)
    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-" + os.path.basename(path) + "-", dir=parent)
    try:
        yield tmp
        check_output_folder(path, kind, overwrite, inputs)  # it may have changed meanwhile
        old = None
        if os.path.exists(path):
            old = tempfile.mkdtemp(prefix=".old-" + os.path.basename(path) + "-", dir=parent)
            os.rmdir(old)
            os.replace(path, old)
        os.replace(tmp, path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def folder_lock(folder, what="run"):
    """Hold an exclusive lock on ``folder`` (created if needed) for the block.

    The lock is an ``flock`` on ``folder/.lock``, which records the holder's process id:
    the system releases it when the process ends, however it ends, so a killed run never
    leaves a stale lock. A second holder gets a ConfigError naming the folder and process.
    """
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise ConfigError(f"{folder}: exists and is not a folder")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            raise ConfigError(
                f"{folder}: in use by another {what} (process {holder}); wait for it to end or choose another folder"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
