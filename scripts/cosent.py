#!/usr/bin/env python
"""Feature model trained with CoSENT: ``python scripts/cosent.py TASK [options]``."""
from cosent_tf.training import main

if __name__ == "__main__":
    main(loss="cosent")
