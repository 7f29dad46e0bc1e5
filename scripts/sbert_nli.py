#!/usr/bin/env python
"""Feature model trained with the 3-way Sentence-BERT head on Chinese NLI, tested on all five tasks.

``python scripts/sbert_nli.py [options]``
"""

from cosent_tf.experiments.scripts import train_main

if __name__ == "__main__":
    train_main(kind="feature", loss="sbert", task="NLI")
