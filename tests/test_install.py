"""What the Makefile installs for each target: the main job (`make demo`) gets the package's own
dependencies only; the tests' extras (torch for pytorch_model.bin, pytest and the linters) come
with the targets that run the tests."""

import ast
import os
import re
import shlex
import shutil
import subprocess

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def setup_requirements():
    """setup.py's install_requires and extras_require, read without running it."""
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    call = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setup"
    )
    keywords = {keyword.arg: keyword.value for keyword in call.keywords}
    return ast.literal_eval(keywords["install_requires"]), ast.literal_eval(keywords["extras_require"])


def requirement_name(requirement):
    return re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def installed_by(target, tmp_path):
    """The names of the distributions every `pip install` of ``make target`` asks for, in a
    virtual environment that does not exist yet (so that each install step is listed)."""
    venv = tmp_path / "venv"
    result = subprocess.run(
        ["make", "-n", "-B", target, f"VENV={venv}", f"REF_VENV={tmp_path / 'reference'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    install_requires, extras = setup_requirements()
    names = set()
    for line in result.stdout.splitlines():
        if str(venv) not in line or " pip install " not in line:
            continue  # another environment's installs (the reference one) or not an install
        words = shlex.split(line)
        arguments = [word for word in words[words.index("install") + 1 :] if not word.startswith("-")]
        for argument in arguments:
            project = re.fullmatch(r"\.(?:\[(.*)\])?", argument)
            if project:  # the package itself, with the extras named
                names |= {requirement_name(r) for r in install_requires}
                for extra in filter(None, (project.group(1) or "").split(",")):
                    names |= {requirement_name(r) for r in extras[extra]}
            elif words[words.index(argument) - 1] in ("-r", "--requirement"):
                with open(os.path.join(ROOT, argument), encoding="utf-8") as f:
                    names |= {requirement_name(r) for r in f if r.strip() and not r.startswith("#")}
            else:
                names.add(requirement_name(argument))
    return names


@pytest.mark.heavy
def test_the_main_job_installs_the_package_without_the_test_extras(tmp_path):
    demo = installed_by("demo", tmp_path)
    assert {"tensorflow", "tensorflow-text", "bert4keras"} <= demo
    assert not demo & {"torch", "sentence-transformers", "transformers", "pytest", "hypothesis", "mypy", "ruff"}
    # what the tests need comes with the test targets
    for target in ("test", "test-quick", "lint"):
        assert demo <= installed_by(target, tmp_path), target
    assert {"torch", "pytest", "hypothesis"} <= installed_by("test", tmp_path)
    assert {"ruff", "mypy"} <= installed_by("lint", tmp_path)
