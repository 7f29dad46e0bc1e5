#!/usr/bin/env python
"""Feature model trained with the Sentence-BERT softmax head, evaluated by cosine.

``python scripts/sbert.py TASK [options]``
"""

from cosent_tf.experiments.scripts import train_main

if __name__ == "__main__":
    train_main(kind="feature", loss="sbert")
