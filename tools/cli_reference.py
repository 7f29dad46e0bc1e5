"""Write docs/cli.md, the command-line reference, from the parsers themselves.

``python tools/cli_reference.py`` rewrites the page; ``tests/test_cli.py`` checks that the
committed page equals what this prints now, so an option added without regenerating fails
there. Each command's help is argparse's own, formatted at a fixed width so that the page does
not depend on the terminal that wrote it.
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "cli.md")
REGENERATE = "python tools/cli_reference.py"
WIDTH = "100"

# The training scripts: (script, kind, default loss, task fixed by the script).
SCRIPTS = [
    ("cosent.py", "feature", "cosent", None),
    ("sbert.py", "feature", "sbert", None),
    ("cosent_nli.py", "feature", "cosent", "NLI"),
    ("sbert_nli.py", "feature", "sbert", "NLI"),
    ("interact.py", "interaction", "ce", None),
    ("interact_cosent.py", "interaction", "cosent", None),
]


def _help(parser: argparse.ArgumentParser, prog: str) -> str:
    parser.prog = prog
    return parser.format_help().rstrip()


def _subparsers(parser: argparse.ArgumentParser) -> dict:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def reference() -> str:
    """The page's text: every cosent-tf command's help, then each script's (training, report, subset)."""
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH  # argparse wraps at the terminal's width
    try:
        from cosent_tf.cli import argument_parser
        from cosent_tf.experiments.scripts import report_parser, subset_parser, training_parser

        sections = [
            "# Command-line reference",
            "",
            f"Generated from the parsers by `{REGENERATE}`; do not edit by hand (a test compares).",
            "The training options are `RunConfig`'s fields (`cosent_tf/training/config.py`): each is "
            "declared there once, with its help and choices, for `cosent-tf train` and the scripts alike.",
        ]

        def block(title: str, text: str) -> None:
            sections.extend(["", f"## {title}", "", "```text", text, "```"])

        parser = argument_parser()
        block("cosent-tf", _help(parser, "cosent-tf"))
        for name, sub in _subparsers(parser).items():
            actions = _subparsers(sub)
            if actions:
                block(f"cosent-tf {name}", _help(sub, f"cosent-tf {name}"))
                for action, action_parser in actions.items():
                    block(f"cosent-tf {name} {action}", _help(action_parser, f"cosent-tf {name} {action}"))
            else:
                block(f"cosent-tf {name}", _help(sub, f"cosent-tf {name}"))
        from cosent_tf.losses import loss_names

        # The scripts share every option but --loss's default and choices, and whether the task
        # is an argument: the first in full, then what sets each apart.
        script, kind, loss, task = SCRIPTS[0]
        block(f"scripts/{script}", _help(training_parser(kind, loss, task), f"python scripts/{script}"))
        sections.extend(
            [
                "",
                "## The other training scripts",
                "",
                "| script | kind | --loss (bold: its default) | task |",
                "|---|---|---|---|",
            ]
        )
        for script, kind, loss, task in SCRIPTS:
            choices = ", ".join(name if name != loss else f"**{name}**" for name in loss_names(kind))
            sections.append(f"| scripts/{script} | {kind} | {choices} | {task or 'first argument'} |")
        block("scripts/report.py", _help(report_parser(), "python scripts/report.py"))
        block("scripts/subset.py", _help(subset_parser(), "python scripts/subset.py"))
        return "\n".join(sections) + "\n"
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous


def main() -> int:
    with open(PAGE, "w", encoding="utf-8") as page:
        page.write(reference())
    print(PAGE)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    sys.exit(main())
