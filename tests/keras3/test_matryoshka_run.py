"""tests/training/test_matryoshka_run.py in a Keras 3 process (this process's backend): the same
bodies check the widths' options, the loss the engine trains at its widths, resuming with them, and
a run that learns at its narrow width, on Keras 3."""

import pytest

from tests.training.test_matryoshka_run import *  # noqa: F403  (its tests, collected here)

pytestmark = pytest.mark.ci_backend("jax")  # the TensorFlow run of these training runs: make test-full
