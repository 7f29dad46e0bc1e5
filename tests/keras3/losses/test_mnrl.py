"""tests/losses/test_mnrl.py, written once over both Kerases, on Keras 3 (this process's backend)."""

from tests.losses.test_mnrl import *  # noqa: F403  (its tests and fixtures, collected here)
