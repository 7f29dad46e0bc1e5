#!/usr/bin/env python
"""Interaction model with CoSENT on its scalar score; Spearman and accuracy.

``python scripts/interact_cosent.py TASK [options]``
"""

from cosent_tf.experiments.scripts import train_main

if __name__ == "__main__":
    train_main(kind="interaction", loss="cosent")
