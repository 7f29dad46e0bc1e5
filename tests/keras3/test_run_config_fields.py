"""tests/training/test_run_config_fields.py in a Keras 3 process (this process's backend): the same
refusals of options given where a run would not read them, and keras_support's refusals by name."""

from tests.training.test_run_config_fields import *  # noqa: F403  (its tests, collected here)


def test_this_process_holds_keras3():
    """So that the tests above check what a run on Keras 3 refuses, not what tf-keras's does."""
    from cosent_tf.environment import keras3_process

    assert keras3_process()
