"""The fixture zoo: folders that many tests read (tiny models, finished runs, exports, indexes),
each built once per test run and shared by every pytest-xdist worker.

``built_once(tmp_path_factory, name, build)`` calls ``build(folder)`` the first time any worker
asks for ``name`` (the others wait on a file lock) and returns the folder. A zoo folder is
read-only by contract: a test that writes takes :func:`copy_of` it. Every file and folder of a
zoo folder must have the permissions the umask gives everyone (the suite runs under 022,
tests/conftest.py: others may read it), or its build fails. The contract is checked:
each folder's fingerprint (every file's path, size and modification time) is taken when it is
built, and after every test tests/conftest.py fails the test that changed one.
"""

import json
import os
import shutil

from filelock import FileLock

from .helpers import kept_from_others

_BUILT_FINGERPRINTS = {}  # zoo folder this process handed out -> its fingerprint when built


def zoo_root(tmp_path_factory):
    """The folder of this run's zoo, the same for every xdist worker of one run."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # each worker's basetemp is a child of the run's
    return base / "zoo"


def fingerprint(folder):
    rows = []
    for top, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(top, name)
            stat = os.lstat(path)
            rows.append([os.path.relpath(path, folder), stat.st_size, stat.st_mtime_ns])
    return rows


def built_once(tmp_path_factory, name, build):
    """The zoo folder ``name``, made by ``build(folder)`` if no worker of this run made it yet.

    A build that fails leaves no folder behind, so the next worker that asks tries again and
    fails the same way (each test needing it reports the error)."""
    root = zoo_root(tmp_path_factory)
    root.mkdir(parents=True, exist_ok=True)
    folder = root / name
    done = root / f"{name}.built"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            if folder.exists():
                shutil.rmtree(folder)
            folder.mkdir()
            try:
                build(folder)
                # Every output the zoo holds (runs, model folders, checkpoints, exports) is one a
                # server running as another user may have to read.
                kept = kept_from_others(folder)
                assert not kept, f"zoo folder {name}: written readable by its owner only: {kept}"
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.write_text(json.dumps(fingerprint(folder)))
    if str(folder) not in _BUILT_FINGERPRINTS:
        _BUILT_FINGERPRINTS[str(folder)] = json.loads(done.read_text())
    return folder


def copy_of(folder, destination):
    """A writable copy of the zoo folder ``folder`` at ``destination`` (a path that does not exist)."""
    shutil.copytree(folder, destination, symlinks=True)
    return destination


def changed_folders():
    """The zoo folders this process handed out whose files changed since they were built; each is
    named once (the test that changed it fails, not every later one)."""
    changed = [folder for folder, built in sorted(_BUILT_FINGERPRINTS.items()) if fingerprint(folder) != built]
    for folder in changed:
        del _BUILT_FINGERPRINTS[folder]
    return changed
