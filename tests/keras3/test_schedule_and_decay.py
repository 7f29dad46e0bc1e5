"""The Keras 2 suite's tests of the schedule and the optimizer's weight decay, run on Keras 3, and
what Keras 3 cannot do as tf-keras does."""

import pytest

from cosent_tf.optimizers import build_optimizer
from tests.test_schedule_and_decay import (  # noqa: F401  (collected here, on this process's Keras 3)
    test_the_schedule_is_saved_with_its_settings,
    test_the_warmup_schedule_is_the_formula,
    test_weight_decay_skips_the_variables_it_is_given_and_the_update_is_adamw_under_the_schedule,
)


def test_weight_decay_is_refused_without_the_variables_it_skips():
    # Keras 3 names a variable by its own short name ("kernel", "bias"): no name says whose it is
    with pytest.raises(ValueError, match="on Keras 3 weight decay needs the variables it skips"):
        build_optimizer(1e-3, 10, weight_decay=0.01)
