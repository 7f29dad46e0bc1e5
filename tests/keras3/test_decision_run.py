"""tests/training/test_decision_run.py in a Keras 3 process (this process's backend): the same bodies
show a run on Keras 3 shipping the match decision fitted on valid, measured on test and warned of, a
calibration map where valid has pairs enough, and a graded run's expected-label map."""

import pytest

from tests.training.test_decision_run import *  # noqa: F403  (its tests, collected here)

# The JAX run of these training runs: make test-full. Each tiny run costs JAX far more than TensorFlow
# (its steps are compiled for each batch shape), and the zoo's BQ run two of them read is built for
# test_learning on TensorFlow already.
pytestmark = pytest.mark.ci_backend("tensorflow")
