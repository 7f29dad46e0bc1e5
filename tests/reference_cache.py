"""Reference outputs computed once and kept on disk, keyed by the content of what they depend on.

A reference subprocess (torch and sentence-transformers, or the Keras 2 engine for the Keras 3
tests) costs seconds to minutes, and a rerun, a second pytest-xdist worker and the Keras 3 suite's
second backend would start the same one again for the same answer. :func:`cached` keeps its
outputs (arrays, and the folder it wrote, where the test reads one) under
``COSENT_TEST_CACHE`` (default ``<repo>/.cache/test-references``; ``off`` computes every time).

Keras-free on purpose: Keras 3 processes import it, and they must never import the Keras 2 engine.
"""

import functools
import glob
import hashlib
import os
import shutil
import tempfile

import numpy as np
from filelock import FileLock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "cosent_tf")
OUTPUTS = "outputs.npz"
FOLDER = "folder"
WRITTEN_AT = "folder-path.txt"
# What an entry holds; a change to it must miss the entries written before it, not misread them.
LAYOUT = 2


def cache_folder():
    """Where entries live, or None when ``COSENT_TEST_CACHE=off``."""
    setting = os.environ.get("COSENT_TEST_CACHE", "")
    if setting.strip().lower() == "off":
        return None
    return os.path.abspath(setting or os.path.join(ROOT, ".cache", "test-references"))


def _files(path):
    """(path relative to ``path``, absolute path) of every file under a folder, sorted; a file alone
    is itself under the name "" so that its own name (often a tmp one) stays out of the key."""
    path = os.fspath(path)
    if os.path.isfile(path):
        return [("", path)]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path}: a cache key names it, but it does not exist")
    found = []
    for folder, folders, names in os.walk(path):
        folders[:] = [name for name in folders if name != "__pycache__"]
        for name in names:
            full = os.path.join(folder, name)
            found.append((os.path.relpath(full, path).replace(os.sep, "/"), full))
    return sorted(found)


def contents(path, hide=()):
    """A digest of a file's bytes or of a folder's files (relative names and bytes): the absolute
    path is left out, since tmp folders differ on every run while their content does not.

    ``hide``: paths whose text in the files is replaced before hashing, such as the tmp model
    folder an export names as its source in its README and record; else every export would miss.
    """
    hidden = sorted((os.fsencode(os.fspath(hidden_path)) for hidden_path in hide), key=len, reverse=True)
    digest = hashlib.sha256()
    for name, full in _files(path):
        digest.update(f"{len(name)}:{name}:".encode())
        with open(full, "rb") as f:
            data = f.read()
        for index, text in enumerate(hidden):
            data = data.replace(text, f"<hidden {index}>".encode())
        digest.update(f"{len(data)}:".encode() + data)
    return "content:" + digest.hexdigest()


@functools.cache
def package_sources():
    """A digest of cosent_tf's sources, so that any change to the library misses the Keras 2 side's
    entries (its outputs are the library's). Read once per process: the package does not change
    while the tests run."""
    digest = hashlib.sha256()
    for name, full in _files(PACKAGE):
        if name.endswith((".pyc", ".pyo")):
            continue
        with open(full, "rb") as f:
            data = f.read()
        digest.update(f"{len(name)}:{name}:{len(data)}:".encode() + data)
    return "cosent_tf:" + digest.hexdigest()


@functools.cache
def interpreter(python):
    """Who ``python`` is, without starting it (a start costs seconds): the interpreter it resolves
    to, and the names (so the versions) of every distribution in its environment's site-packages,
    so that an upgrade of torch, transformers or sentence-transformers misses."""
    python = os.path.abspath(os.fspath(python))
    prefix = os.path.dirname(os.path.dirname(python))
    installed = []
    for pattern in ("lib/python*/site-packages/*.dist-info", "lib/python*/dist-packages/*.dist-info"):
        installed.extend(os.path.basename(path) for path in glob.glob(os.path.join(prefix, pattern)))
    config = os.path.join(prefix, "pyvenv.cfg")
    venv = ""
    if os.path.exists(config):
        with open(config, encoding="utf-8") as f:
            venv = f.read()
    return repr(("interpreter", os.path.realpath(python), venv, sorted(installed)))


def _feed(digest, part):
    """Feeds ``part`` to ``digest`` with its type and length, so that different structures never
    give the same bytes (["ab"] and ["a", "b"] differ)."""
    if isinstance(part, (np.ndarray, np.generic)):
        array = np.asarray(part)
        if array.dtype.hasobject:
            raise TypeError("an object array has no stable bytes to key a cache entry by")
        data = np.ascontiguousarray(array).tobytes()
        digest.update(f"array:{array.dtype.str}:{array.shape}:{len(data)}:".encode() + data)
    elif isinstance(part, bytes):
        digest.update(f"bytes:{len(part)}:".encode() + part)
    elif isinstance(part, str):
        data = part.encode("utf-8")
        digest.update(f"str:{len(data)}:".encode() + data)
    elif isinstance(part, dict):
        digest.update(f"dict:{len(part)}:".encode())
        for name in sorted(part):
            _feed(digest, name)
            _feed(digest, part[name])
    elif isinstance(part, (list, tuple)):
        digest.update(f"list:{len(part)}:".encode())
        for item in part:
            _feed(digest, item)
    elif part is None or isinstance(part, (bool, int, float)):
        digest.update(f"scalar:{part!r}:".encode())
    elif isinstance(part, os.PathLike):
        # A path's text would key by a tmp name that changes every run; its content is what counts.
        raise TypeError(f"{part}: key a path by contents(path), not by its name")
    else:
        raise TypeError(f"cannot key a cache entry by {type(part).__name__}")


def key_of(kind, key_parts):
    digest = hashlib.sha256()
    _feed(digest, [LAYOUT, kind, key_parts])
    return digest.hexdigest()


def _read(entry, folder):
    if folder is not None:
        stored = os.path.join(entry, FOLDER)
        if os.path.isdir(stored):
            shutil.copytree(stored, os.fspath(folder), dirs_exist_ok=True)
            with open(os.path.join(entry, WRITTEN_AT), encoding="utf-8") as f:
                _move_paths(stored, f.read(), os.path.abspath(os.fspath(folder)))
    with np.load(os.path.join(entry, OUTPUTS)) as loaded:
        return {name: loaded[name] for name in loaded.files}


def _move_paths(stored, old, new):
    """Where a restored text file names the folder it was written in (an export names its source
    folder), makes it name the folder it is restored to, as the child would have written it.
    Binary files are left alone: a path's length may be encoded beside it."""
    if old == new:
        return
    old_bytes, new_bytes = os.fsencode(old), os.fsencode(new)
    for name, full in _files(stored):
        with open(full, "rb") as f:
            data = f.read()
        if old_bytes not in data:
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        with open(os.path.join(new, name), "wb") as f:
            f.write(data.replace(old_bytes, new_bytes))


def _store(entry, outputs, folder):
    """Writes the entry beside its final place and renames it there, so that a reader sees all of
    it or none of it, even after a crash halfway."""
    staging = tempfile.mkdtemp(prefix=".tmp-", dir=os.path.dirname(entry))
    try:
        np.savez(os.path.join(staging, OUTPUTS), **{name: np.asarray(value) for name, value in outputs.items()})
        if folder is not None:
            shutil.copytree(os.fspath(folder), os.path.join(staging, FOLDER), symlinks=True)
            with open(os.path.join(staging, WRITTEN_AT), "w", encoding="utf-8") as f:
                f.write(os.path.abspath(os.fspath(folder)))
        os.replace(staging, entry)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def cached(kind, key_parts, produce, folder=None):
    """``produce()``'s outputs (a dict of arrays), computed only where no entry has the same key.

    The key is a sha256 of ``kind`` and ``key_parts`` (strings, bytes, numbers, arrays with their
    dtype and shape, lists and dicts of them, and :func:`contents`, :func:`package_sources` and
    :func:`interpreter` for what lives in files): everything the result depends on must be in it.
    Where ``produce`` also writes ``folder`` and the test reads it afterwards, the folder is kept
    with the outputs and copied back on a hit. Processes and threads asking for one key take its
    lock, so that one computes and the others read what it stored; a ``produce`` that raises stores
    nothing. Outputs come back as read from the entry, on a miss too, so both give the same types.
    """
    root = cache_folder()
    if root is None:
        return {name: np.asarray(value) for name, value in (produce() or {}).items()}
    key = key_of(kind, key_parts)
    shelf = os.path.join(root, kind)
    os.makedirs(shelf, exist_ok=True)
    entry = os.path.join(shelf, key)
    computed = False
    if not os.path.isdir(entry):
        with FileLock(entry + ".lock"):
            # Another process may have stored it while this one waited for the lock.
            if not os.path.isdir(entry):
                _store(entry, dict(produce() or {}), folder)
                computed = True
    # produce() has just written the folder itself; only a hit must copy it back.
    return _read(entry, None if computed else folder)
