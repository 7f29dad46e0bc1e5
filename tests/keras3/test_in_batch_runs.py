"""tests/training/test_in_batch_runs.py in a Keras 3 process (this process's backend): the same
bodies train the in-batch losses (mnrl, angle, cosent-ibn, NLI) on Keras 3, check what their options
reach, resume a killed run and refuse bad input."""

import pytest

from tests.training.test_in_batch_runs import *  # noqa: F403  (its tests, collected here)

pytestmark = pytest.mark.ci_backend("tensorflow")  # the JAX run of these training runs: make test-full
