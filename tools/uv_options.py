"""Print the `uv pip install` options that give uv the package sources pip is configured with here.

The Makefile installs with uv, which does not read pip's configuration: a machine whose pip
takes wheels from a local folder or index (find-links, extra-index-url, a constraints file in
pip.conf or PIP_* variables) gives uv the same sources this way, and pip's rule of taking the best
version across all indexes. Prints nothing but that rule where pip has no such settings.
"""

import ast
import shlex
import subprocess
import sys

# pip's setting -> uv's option; each may hold several values, separated by white space.
OPTIONS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


def pip_settings(listing):
    """(setting, value) pairs of `pip config list` output, lines such as global.find-links='/opt/wheels'."""
    for line in listing.splitlines():
        key, separator, value = line.partition("=")
        if not separator:
            continue
        yield key.rpartition(".")[2], str(ast.literal_eval(value))


def uv_options(listing):
    options = ["--index-strategy", "unsafe-best-match"]
    seen = set()
    for setting, value in pip_settings(listing):
        if setting not in OPTIONS:
            continue
        for item in value.split():
            if (setting, item) not in seen:
                seen.add((setting, item))
                options += [OPTIONS[setting], item]
    return options


def main():
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    print(shlex.join(uv_options(listing)))


if __name__ == "__main__":
    main()
