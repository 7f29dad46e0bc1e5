"""tests/training/test_learning.py in a Keras 3 process (this process's backend): the same bodies
show the one engine learning, repeating a seed, validating mid-epoch and tuning the threshold on valid
when it runs on Keras 3."""

import pytest

from tests.training.test_learning import *  # noqa: F403  (its tests, collected here)

pytestmark = pytest.mark.ci_backend("tensorflow")  # the JAX run of these training runs: make test-full
