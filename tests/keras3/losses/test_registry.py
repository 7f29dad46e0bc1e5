"""tests/losses/test_registry.py, written once over both Kerases, on Keras 3 (this process's backend)."""

from tests.losses.test_registry import *  # noqa: F403  (its tests and fixtures, collected here)
