"""tests/training/test_options.py in a Keras 3 process (this process's backend): the same bodies show
each run option reaching the model the one engine fits on Keras 3, and missing or bad inputs stopping
a run before it reads data."""

import pytest

from tests.training.test_options import *  # noqa: F403  (its tests, collected here)

pytestmark = pytest.mark.ci_backend("tensorflow")  # the JAX run of these training runs: make test-full
