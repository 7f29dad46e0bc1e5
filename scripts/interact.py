#!/usr/bin/env python
"""Interaction model with a 2-way softmax and cross-entropy; Spearman and accuracy.

``python scripts/interact.py TASK [options]``
"""

from cosent_tf.experiments.scripts import train_main

if __name__ == "__main__":
    train_main(kind="interaction", loss="ce")
