#!/usr/bin/env python
"""A task's seeded subset, as the runs read it, written as a file:
``python scripts/subset.py BQ test --count 2000 --output runs/subsets/BQ.test.tsv``."""

from cosent_tf.experiments.scripts import subset_main

if __name__ == "__main__":
    subset_main()
