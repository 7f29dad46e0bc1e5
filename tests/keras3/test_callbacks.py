"""The Keras 2 suite's tests of the training callbacks, run on Keras 3 on this backend (the backup's
mid-epoch resume: tests/keras3/test_resume.py)."""

import pytest

from tests.test_callbacks import (  # noqa: F401  (collected here, on this process's Keras 3)
    test_a_log_file_gets_a_progress_line_within_the_epoch_with_its_eta,
    test_durations_read_as_people_read_them,
    test_every_evaluation_is_a_row_and_a_resumed_run_keeps_the_rows_up_to_its_step,
    test_the_best_epoch_is_the_one_of_the_metric_chosen_by_the_loss_or_the_option,
    test_the_best_weights_are_replaced_whole_or_not_at_all,
    test_validation_checkpoint_chooses_no_epoch_while_every_score_is_nan,
    test_validation_checkpoint_keeps_the_best_epoch,
)
from tests.test_callbacks import test_non_finite_loss_names_the_step_and_keeps_the_backup as non_finite_loss_test

# the test's own check restores a fresh model from the backup fitting it on no batch, which JAX cannot build on
test_non_finite_loss_names_the_step_and_keeps_the_backup = pytest.mark.backends("tensorflow")(non_finite_loss_test)
