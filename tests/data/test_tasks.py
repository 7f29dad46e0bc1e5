import numpy as np
import pytest

from cosent_tf import ConfigError, Task
from cosent_tf.data.benchmarks import task_file
from cosent_tf.data.tasks import BINARY_TASKS, MATCHING_TASKS, TASKS, get_task


def test_graded_scores_are_split_into_classes_and_class_labels_are_kept():
    np.testing.assert_array_equal(get_task("STS-B").classes([0, 2.5, 3, 5]), [0, 0, 1, 1])
    np.testing.assert_array_equal(get_task("BQ").classes([0, 1, 1]), [0, 1, 1])
    np.testing.assert_array_equal(get_task("NLI").classes([0, 1, 2]), [0, 1, 2])  # three ordinal classes


def test_positive_pairs_are_those_above_the_tasks_threshold():
    np.testing.assert_array_equal(get_task("STS-B").positive([2.5, 2.6]), [False, True])
    np.testing.assert_array_equal(get_task("ATEC").positive([0, 1]), [False, True])
    np.testing.assert_array_equal(get_task("NLI").positive([0, 1, 2]), [False, False, True])


def test_the_table_holds_the_original_experiments_settings():
    assert MATCHING_TASKS == ("ATEC", "BQ", "LCQMC", "PAWSX", "STS-B")
    assert BINARY_TASKS == ("ATEC", "BQ", "LCQMC", "PAWSX")
    assert (TASKS["PAWSX"].maxlen, TASKS["PAWSX"].interaction_maxlen) == (128, 256)
    assert (TASKS["BQ"].maxlen, TASKS["BQ"].interaction_maxlen, TASKS["BQ"].batch_size, TASKS["BQ"].epochs) == (
        64,
        128,
        32,
        5,
    )
    nli = TASKS["NLI"]
    assert (nli.batch_size, nli.epochs, nli.steps_per_epoch, nli.max_label) == (64, 10, 5000, 2.0)
    assert TASKS["STS-B"].max_label == 5.0 and not TASKS["STS-B"].binary


def test_an_unknown_task_names_the_choices():
    with pytest.raises(ConfigError, match="unknown task 'MRPC'; choose one of ATEC"):
        get_task("MRPC")
    custom = Task("MINE", label_range=(0.0, 3.0), binary=False)
    assert get_task(custom) is custom


def test_only_senteval_tasks_have_senteval_files():
    with pytest.raises(ValueError, match="no senteval files"):
        task_file("/d", "NLI", "train")


def test_hard_negatives_are_the_pairs_not_similar_unless_a_task_bounds_them():
    np.testing.assert_array_equal(get_task("BQ").negative([0, 1]), [True, False])
    np.testing.assert_array_equal(get_task("STS-B").negative([0, 2.5, 2.6, 5]), [True, True, False, False])
    # NLI: contradiction only, neither neutral nor entailment (supervised SimCSE's triples)
    np.testing.assert_array_equal(get_task("NLI").negative([0, 1, 2]), [True, False, False])
    np.testing.assert_array_equal(Task.for_labels("mine", "nli").negative([0, 1, 2]), [True, False, False])
    np.testing.assert_array_equal(Task("MINE", negative_at_most=0.2).negative([0.1, 0.3, 1]), [True, False, False])


def test_only_nli_takes_hard_negatives_from_its_labels_by_default():
    assert [name for name, task in TASKS.items() if task.hard_negatives_from_labels] == ["NLI"]
    assert Task.for_labels("mine", "nli").hard_negatives_from_labels
    assert not any(Task.for_labels("mine", kind).hard_negatives_from_labels for kind in ("binary", "graded"))


def test_the_task_tables_docstring_examples_run():
    import doctest

    from cosent_tf.data import tasks

    assert doctest.testmod(tasks, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0
