#!/usr/bin/env python
"""Feature model trained with CoSENT (``--loss mse|contrastive|sbert`` for the baselines).

``python scripts/cosent.py TASK [options]``
"""

from cosent_tf.experiments.scripts import train_main

if __name__ == "__main__":
    train_main(kind="feature", loss="cosent")
