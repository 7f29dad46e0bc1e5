#!/usr/bin/env python
"""Feature model trained with CoSENT on Chinese NLI, tested on all five tasks.

``python scripts/cosent_nli.py [options]``
"""

from cosent_tf.experiments.scripts import train_main

if __name__ == "__main__":
    train_main(kind="feature", loss="cosent", task="NLI")
