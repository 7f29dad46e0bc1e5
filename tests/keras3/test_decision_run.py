"""tests/training/test_decision_run.py in a Keras 3 process (this process's backend): the same bodies
show a run on Keras 3 shipping the match decision fitted on valid, measured on test and warned of, a
calibration map where valid has pairs enough, and a graded run's expected-label map."""

import pytest

from tests.training.test_decision_run import *  # noqa: F403  (its tests, collected here)

pytestmark = pytest.mark.ci_backend("jax")  # the TensorFlow run of these training runs: make test-full
