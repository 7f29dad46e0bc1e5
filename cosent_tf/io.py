"""Atomic file output: write to a temporary path beside the target, then rename.

A crash never leaves a truncated file where a good one was: the rename is atomic on
POSIX file systems, so readers see either the old file or the complete new one.
"""
import contextlib
import json
import os
import shutil
import tempfile


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


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path, text):
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)


def write_json(path, obj):
    write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=True) + "\n")


@contextlib.contextmanager
def atomic_directory(path):
    """Yield a temporary directory that replaces directory ``path`` once the block succeeds."""
    path = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp-" + os.path.basename(path) + "-", dir=parent)
    try:
        yield tmp
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
