"""tests/training/test_resume.py in a Keras 3 process (this process's backend): the same bodies show a
run on Keras 3 stopped within an epoch resuming at its saved step to the uninterrupted state, a resumed
run refusing other settings, a loss turned nan stopping and the same command resuming, and each output
arriving by rename."""

import pytest

from tests.training.test_resume import *  # noqa: F403  (its tests, collected here)

# The JAX run of these training runs: make test-full. The zoo's BQ run two of them read is built for
# test_learning on TensorFlow already; JAX compiles each tiny run's steps for each batch shape.
pytestmark = pytest.mark.ci_backend("tensorflow")
