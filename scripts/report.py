#!/usr/bin/env python
"""Tables and plots over finished runs: ``python scripts/report.py runs/* --output-dir docs/results``."""

from cosent_tf.experiments.scripts import report_main

if __name__ == "__main__":
    report_main()
