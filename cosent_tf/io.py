"""Safe output: atomic files and folders that never replace what they should not.

A crash never leaves a truncated file where a good one was: output is written to a
temporary path beside the target, then renamed (atomic on POSIX file systems), so readers
see either the old file or the complete new one; a device or pipe, which a rename would
destroy, is written as a stream. An output folder replaces only an earlier output of the same
kind (a :class:`FolderKind`), and only when asked to; a folder holding anything else, or an
input, is refused before any work is done, and so is an output inside a folder this tool
wrote. What a killed writer left beside its output is cleared by the next one.

A folder is replaced in one step where the system can swap two names (Linux's
``renameat2``), so a reader never finds it missing; :func:`read_whole_folder` reads a folder
that may be replaced meanwhile and gives what one whole build of it holds, never a mix.
"""

from __future__ import annotations

import contextlib
import csv
import ctypes
import dataclasses
import errno
import fcntl
import fnmatch
import hashlib
import json
import math
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional, TypeVar, Union

from .errors import ConfigError, DataError

# A path as the functions of os take it.
PathLike = Union[str, "os.PathLike[str]"]
Read = TypeVar("Read")

# How often a folder read is started again when the folder was replaced during it.
FOLDER_READ_ATTEMPTS = 4


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[str]:
    """Yield the path to write the output ``path`` through.

    A regular file (or a new path) is written to a temporary file beside it, which replaces it once
    the block succeeds and is removed on error; a symlink is followed, so the file it points to is
    replaced, not the link. A character device (``/dev/null``, ``/dev/stdout`` on a terminal) or a
    FIFO (``/dev/stdout`` in a pipe) would be destroyed by a rename: the block writes to it
    directly, as a stream. A folder, a block device or a socket is refused. An OSError of the
    block that names no file, or the temporary one, is made to name ``path``.
    """
    path = os.fspath(path)
    target, stream = output_target(path)
    if stream:
        with _naming(path, path):
            yield path
        return
    tmp = None
    try:
        with _naming(path, target):
            make_folder(os.path.dirname(target), path)
            # Keep the whole extension (".weights.h5"): Keras picks the weights format from it.
            name = os.path.basename(target)
            suffix = "." + name.split(".", 1)[1] if "." in name else ""
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=os.path.dirname(target))
            os.close(fd)
            yield tmp
            os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
            os.replace(tmp, target)
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)


@contextlib.contextmanager
def _naming(path: str, *written: str) -> Iterator[None]:
    """An OSError of the block that names no file, or a temporary one, names ``path`` instead:
    the message should say which output failed (a full disk raises with no file name at all)."""
    try:
        yield
    except OSError as error:
        name = error.filename
        if name is None or os.path.basename(os.fspath(name)).startswith(".tmp-") or name in written:
            error.filename = path
        raise


def output_target(path: PathLike) -> tuple[str, bool]:
    """(the path to write, whether to write it as a stream) for the output file ``path``: see
    :func:`atomic_path`. Raises ConfigError for what cannot be an output file."""
    path = os.fspath(path)
    try:
        status = os.stat(path)
    except OSError:  # not there yet (a dangling link: where it points); a file in the way is found later
        return os.path.realpath(path), False
    if stat.S_ISREG(status.st_mode):
        real = os.path.realpath(path)
        if os.path.exists(real) and os.path.samestat(os.stat(real), status):
            return real, False
        return path, True  # reached only through a link of /proc (a deleted file open as stdout)
    if stat.S_ISCHR(status.st_mode) or stat.S_ISFIFO(status.st_mode):
        return path, True
    if stat.S_ISDIR(status.st_mode):
        raise ConfigError(f"{path}: is a folder; give the path of a file to write")
    what = {stat.S_IFBLK: "block device", stat.S_IFSOCK: "socket"}.get(stat.S_IFMT(status.st_mode), "special file")
    raise ConfigError(
        f"{path}: is a {what}, which an output may not replace or be written into; nothing was written: "
        "give the path of a file (or a character device or pipe such as /dev/stdout)"
    )


def _nearest_existing(folder: str, output: PathLike) -> str:
    """The nearest folder that exists on the way to ``folder``; a file in the way is a ConfigError
    naming it, rather than the system's "File exists" or "Not a directory"."""
    folder = os.path.abspath(folder)
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise ConfigError(f"{output}: cannot be written: {folder} is a file, not a folder; nothing was written")
    return folder


def make_folder(folder: str, output: PathLike) -> None:
    """Create ``folder`` (and its parents) to write ``output`` in; errors name ``output``."""
    _nearest_existing(folder, output)
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as error:  # say which output it was for, and which folder failed
        error.strerror = f"cannot create its folder {error.filename or folder}: {error.strerror}"
        error.filename = output
        raise


def check_can_write_in(folder: str, output: PathLike) -> None:
    """Raise ConfigError if ``output`` could not be created in ``folder`` (made if needed): a file in
    the way, a read-only file system, no permission. Checked before the work, so that it is not lost."""
    nearest = _nearest_existing(folder, output)
    if os.statvfs(nearest).f_flag & os.ST_RDONLY:
        raise ConfigError(f"{output}: cannot be written: {nearest} is on a read-only file system; nothing was written")
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise ConfigError(f"{output}: cannot be written: no permission to write in {nearest}; nothing was written")


# The largest JSON file read whole: settings, configs, tokenizers and indexes' descriptions.
MAX_JSON_BYTES = 256 << 20


def read_json(path: PathLike, what: str = "JSON", expect: Optional[type] = dict) -> Any:
    """The JSON value in ``path``, which must be a ``expect`` (dict, list, or None for any).

    Every way a file can fail to be that becomes a ConfigError naming the file and ``what`` it
    should hold: unreadable, larger than :data:`MAX_JSON_BYTES`, not UTF-8, not JSON (with the
    line), nested too deep, or a value of another JSON type.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)  # bounded: /dev/zero or a stray huge file is no JSON of ours
        value = None if len(data) > MAX_JSON_BYTES else json.loads(data.decode("utf-8"))
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
    if len(data) > MAX_JSON_BYTES:
        raise ConfigError(f"{path}: {what} is larger than {MAX_JSON_BYTES >> 20} MB; is this a JSON file?")
    if expect is not None and not isinstance(value, expect):
        raise ConfigError(f"{path}: {what} must be a JSON {json_type(expect)}, not {json_type(type(value))}")
    return value


def json_type(python_type: type) -> str:
    """The JSON name of a Python type as ``json`` reads it, for messages."""
    names = {dict: "object", list: "array", str: "string", bool: "true/false", int: "integer", float: "number"}
    return names.get(python_type, "null" if python_type is type(None) else python_type.__name__)


def json_field(
    record: dict,
    key: str,
    expect: Union[type, tuple[type, ...]],
    path: PathLike,
    what: Optional[str] = None,
    default: Any = None,
) -> Any:
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


def _umask() -> int:
    """The process's umask, read without changing it where the system shows it (Linux): setting it
    to read it would, for an instant, give files made by other threads the wrong mode."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def write_text(path: PathLike, text: str) -> None:
    """Write ``text`` to ``path`` as UTF-8, through :func:`atomic_path`."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)


def json_text(obj: Any, **options: Any) -> str:
    """``obj`` as JSON text; NaN and infinities, which JSON lacks (``json`` would write a bare
    ``NaN`` that strict readers refuse), become null."""
    return json.dumps(_finite(obj), allow_nan=False, **options)


def file_digest(path: PathLike) -> str:
    """``sha256:<hex>`` of the file at ``path``, read in blocks: what tells one file's content from another's."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def write_json(path: PathLike, obj: Any) -> None:
    """Write ``obj`` as JSON; NaN and infinities, which JSON lacks, are written as null."""
    write_text(path, json_text(obj, indent=2, ensure_ascii=False, sort_keys=True) + "\n")


def _finite(obj: Any) -> Any:
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

    def holds_only_its_own(self, names: Iterable[str]) -> bool:
        """Whether ``names`` (a folder's entries) are this kind's marker and names it writes."""
        names = list(names)
        return self.marker in names and all(
            any(fnmatch.fnmatchcase(name, pattern) for pattern in self.entries) for name in names
        )


def is_inside(path: PathLike, folder: PathLike) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it (links resolved)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_not_in_tool_folder(path: PathLike, kinds: Iterable[FolderKind], start: Optional[PathLike] = None) -> None:
    """Raise ConfigError if ``path`` lies inside a folder of one of ``kinds`` (the folders this
    tool writes: a model folder, an index, an export, a training run), found by the kind's marker
    file in ``start`` (default: the folder ``path`` is in) or any folder above it, links
    resolved. A file added there would be lost when the folder is replaced, and would make it
    look like someone else's; one with a name the kind writes would replace the folder's own.
    A folder that already holds other files than its kind's (the tool no longer replaces it) is
    refused only the names its kind writes, so that a common marker name (``index.json``) in a
    folder of other things does not bar it."""
    target = os.path.realpath(path)
    folder = os.path.realpath(start if start is not None else os.path.dirname(os.path.abspath(path)))
    while True:
        first = None if target == folder else os.path.relpath(target, folder).split(os.sep)[0]
        for kind in kinds:
            if not os.path.isfile(os.path.join(folder, kind.marker)):
                continue
            own_name = first is not None and any(fnmatch.fnmatchcase(first, pattern) for pattern in kind.entries)
            if own_name or kind.holds_only_its_own(os.listdir(folder)):
                raise ConfigError(
                    f"{path}: lies inside {kind.description} ({folder}), which an output may not change; "
                    "nothing was written: choose a path outside it"
                )
        if os.path.dirname(folder) == folder:
            return
        folder = os.path.dirname(folder)


def check_folder_apart(path: PathLike, inputs: Iterable[PathLike]) -> None:
    """Raise ConfigError if the output folder ``path`` is, holds or lies inside one of ``inputs``."""
    for source in inputs:
        if source is not None and (is_inside(path, source) or is_inside(source, path)):
            raise ConfigError(
                f"{path}: the output folder would {'lie inside' if is_inside(path, source) else 'hold'} "
                f"the input {source}; choose an output folder apart from the inputs"
            )


def check_output_folder(
    path: PathLike,
    kind: FolderKind,
    overwrite: bool = False,
    inputs: Iterable[PathLike] = (),
    kinds: Iterable[FolderKind] = (),
) -> None:
    """Raise ConfigError unless ``path`` may become a ``kind`` folder; call it before the work.

    Allowed: a new path, an empty folder, or (with ``overwrite``) an earlier output of the
    same kind. Refused: a file, a folder holding anything else, a folder that is, holds
    or lies inside one of ``inputs``, and one inside a folder of one of ``kinds``
    (:func:`check_not_in_tool_folder`).
    """
    path = os.fspath(path)
    check_folder_apart(path, inputs)
    check_not_in_tool_folder(path, kinds)
    if not os.path.exists(path):
        check_can_write_in(os.path.dirname(os.path.abspath(path)), path)
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


def check_output_file(
    path: PathLike, inputs: Iterable[PathLike] = (), kinds: Iterable[FolderKind] = (), overwrite: bool = False
) -> None:
    """Raise ConfigError unless ``path`` may be written as an output file; call it before the work.

    Refused: a folder, a block device or socket (:func:`output_target`); a path that is one of
    ``inputs`` or lies inside one (an input folder: a model folder, an index), links resolved;
    a path inside a folder of one of ``kinds`` (:func:`check_not_in_tool_folder`); a file that
    exists, unless ``overwrite`` (the rule of output folders: nothing is replaced unasked); and a
    path whose folder cannot be made or written in. A character device or pipe (``/dev/stdout``)
    is a stream, never refused for being there.
    """
    path = os.fspath(path)
    target, stream = output_target(path)
    for source in inputs:
        if source is None:
            continue
        if is_inside(path, source) and not os.path.isdir(source) or _same_file(path, source):
            raise ConfigError(f"{path}: is also an input of this command; write the output to another file")
        if is_inside(path, source):
            raise ConfigError(
                f"{path}: lies inside the input {source}; nothing was written: write the output outside it"
            )
    check_not_in_tool_folder(path, kinds)
    if stream:
        return
    if os.path.exists(target) and not overwrite:
        raise ConfigError(
            f"{path}: exists; nothing was written: pass --overwrite to replace it, or choose another name"
        )
    check_can_write_in(os.path.dirname(target), path)


def _same_file(path: PathLike, source: PathLike) -> bool:
    try:
        return os.path.samefile(path, source)
    except OSError:
        return False


@contextlib.contextmanager
def atomic_directory(
    path: PathLike, kind: FolderKind, overwrite: bool = False, inputs: Iterable[PathLike] = ()
) -> Iterator[str]:
    """Yield a temporary directory that becomes ``path`` once the block succeeds.

    ``path`` is checked with :func:`check_output_folder` first; an earlier output of the
    same kind that it replaces is swapped for the new folder in one step where the system can
    (:func:`_exchange`; else it is moved aside just before), and removed only after the new
    folder is in its place. The finished folder gets the mode the umask gives. Temporary folders left beside ``path`` by
    a writer that was killed are removed first (:func:`_writers_held`).
    """
    path = os.path.abspath(os.fspath(path))
    parent, name = os.path.dirname(path), os.path.basename(path)
    with contextlib.ExitStack() as held:
        if os.path.isdir(parent):
            held.enter_context(_writers_held(parent, name))
        check_output_folder(path, kind, overwrite, inputs)
        if not os.path.isdir(parent):
            make_folder(parent, path)
            held.enter_context(_writers_held(parent, name))
        tmp = tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=parent)
        try:
            yield tmp
            check_output_folder(path, kind, overwrite, inputs)  # it may have changed meanwhile
            os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700: others (a server) could not read it
            old = None
            if os.path.exists(path) and _exchange(tmp, path):
                pass  # the earlier output is now at tmp, which the finally block removes
            elif os.path.exists(path):
                old = _unused_name(parent, f".old-{name}-")
                os.replace(path, old)
                os.replace(tmp, path)
            else:
                os.replace(tmp, path)
            if old is not None:
                # Renamed before it is removed: a killed removal leaves a .tmp- folder, which is
                # removed, not a half-removed .old- one, which could be put back.
                doomed = _unused_name(parent, f".tmp-{name}-")
                os.replace(old, doomed)
                shutil.rmtree(doomed, ignore_errors=True)
        finally:
            if os.path.exists(tmp):
                shutil.rmtree(tmp, ignore_errors=True)


# renameat2's flag that swaps the two names (linux/fs.h), and its "current directory" file descriptor.
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Swap the entries ``a`` and ``b`` in one step, so that a reader of ``b`` finds the old or the new
    one and never nothing; False where the system or the file system cannot (then nothing changed)."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # not Linux, or a C library without it
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):  # a file system that cannot swap
        return False
    raise OSError(error, os.strerror(error), b)


def read_whole_folder(directory: PathLike, read: Callable[[str], Read], what: str = "folder") -> Read:
    """``read(directory)``, from one whole build of ``directory`` though a writer may replace it meanwhile.

    Output folders are written aside and replace the earlier one whole (:func:`atomic_directory`), and
    nothing changes in a folder once it is in place; a read that began and ended on the same folder
    therefore read that folder only. The folder is held open during the read, so that its identity
    cannot pass to a new one; a read during which the folder was replaced is started again (a file
    it missed because the old folder was being removed included), up to
    :data:`FOLDER_READ_ATTEMPTS` times.

    Raises:
        ConfigError: ``directory`` was replaced during every attempt.
        What ``read`` raises for a folder that stayed in place (its fault is the folder's own).
    """
    directory = os.fspath(directory)
    for attempt in range(FOLDER_READ_ATTEMPTS):
        if attempt:
            time.sleep(0.01 * attempt)  # gives a writer's rename and removal time to finish
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            if attempt + 1 < FOLDER_READ_ATTEMPTS and not os.path.isdir(directory):
                continue  # a writer that cannot swap names may be between its two renames
            return read(directory)  # not a folder: read's own error names what is wrong
        try:
            held = os.fstat(fd)
            try:
                result = read(directory)
            except Exception:
                if _still(directory, held):
                    raise
                continue
            if _still(directory, held):
                return result
        finally:
            os.close(fd)
    raise ConfigError(
        f"{directory}: replaced by a writer each of the {FOLDER_READ_ATTEMPTS} times the {what} was read; "
        "read it again when the writer has finished"
    )


def _still(directory: str, held: os.stat_result) -> bool:
    """Whether ``directory`` is still the folder ``held`` describes."""
    try:
        now = os.stat(directory)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def _unused_name(parent: str, prefix: str) -> str:
    name = tempfile.mkdtemp(prefix=prefix, dir=parent)
    os.rmdir(name)
    return name


@contextlib.contextmanager
def _writers_held(parent: str, name: str) -> Iterator[None]:
    """Take part, for the block, in the writers of output folders in ``parent``: a shared
    ``flock`` on ``parent``, which the system drops when a writer dies however it dies.

    Before, if no other writer holds it, the ``.tmp-NAME-*`` and ``.old-NAME-*`` folders there
    are leftovers of killed writers: the temporary ones are removed, and an earlier output
    that was moved aside, whole, for its replacement (``.old-``) goes back to ``NAME`` if the
    replacement never arrived, else is removed. A concurrent writer's folders are never
    touched. Where the file system has no ``flock``, nothing is removed.
    """
    try:
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        fd = None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                alone = True
            except BlockingIOError:  # another writer is at work here
                alone = False
            except OSError:  # no flock here: no leftover can be known to be stale
                alone = None
            if alone:
                _remove_leftovers(parent, name)
            if alone is not None:
                fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while another writer removes leftovers
        yield
    finally:
        if fd is not None:
            os.close(fd)


def _remove_leftovers(parent: str, name: str) -> None:
    # tempfile.mkdtemp's names: the prefix, then 8 characters of this set.
    leftover = re.compile(r"\.(tmp|old)-" + re.escape(name) + r"-[a-z0-9_]{8}")
    target = os.path.join(parent, name)
    for entry in sorted(os.listdir(parent)):
        match = leftover.fullmatch(entry)
        folder = os.path.join(parent, entry)
        if not match or os.path.islink(folder) or not os.path.isdir(folder):
            continue
        if match.group(1) == "old" and not os.path.lexists(target):
            with contextlib.suppress(OSError):  # left as it is: the user can still move it back
                os.replace(folder, target)
        else:
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def folder_lock(folder: PathLike, what: str = "run") -> Iterator[None]:
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


def write_history(path: str, rows: list[dict[str, Any]]) -> None:
    """``rows`` (epoch, step, end_of_epoch, metrics...) written atomically as a ``valid_metrics.csv``
    (read back by :func:`read_history`)."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def read_history(path: str, columns: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Rows of a ``valid_metrics.csv`` written by :class:`cosent_tf.callbacks.ValidationCheckpoint`; a DataError naming
    the file (and line) if it is unreadable or damaged: cut off, a header without ``columns``, a
    row of other fields than the header's, a value that is no number. A missing file raises
    FileNotFoundError."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            text = f.read()
        lines = list(csv.reader(text.splitlines()))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise DataError(path, f"not readable as a validation history ({error})") from None
    if text and not text.endswith("\n"):
        raise DataError(path, "cut off (the last line is not whole)", line=text.count("\n") + 1)
    header: list[str] = lines[0] if lines else []
    rows: list[dict[str, Any]] = []
    if not set(columns) <= set(header):
        raise DataError(path, f"no {' and '.join(repr(c) for c in columns)} columns", line=1)
    for number, row in enumerate(lines[1:], 2):
        if len(row) != len(header):
            raise DataError(path, f"{len(row)} values where the header names {len(header)}", line=number)
        rows.append({key: _history_value(path, number, key, value) for key, value in zip(header, row)})
    return rows


def _history_value(path: str, number: int, key: str, value: str) -> Any:
    if key == "end_of_epoch":
        return value == "True"
    whole = key in ("epoch", "step")
    try:
        return (int if whole else float)(value)
    except ValueError:
        raise DataError(path, f"{key} {value!r} is not {'a whole' if whole else 'a'} number", line=number) from None
