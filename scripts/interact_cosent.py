#!/usr/bin/env python
"""Interaction model with CoSENT on its scalar score; Spearman and accuracy: ``python scripts/interact_cosent.py TASK [options]``."""
from cosent_tf.training import main

if __name__ == "__main__":
    main(kind="interaction", loss="cosent")
