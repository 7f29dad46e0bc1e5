"""Every RunConfig field is honoured or refused by name, on both Kerases (issue 55).

:data:`FIELDS` classifies each field: the test that shows it reaching a run, each way of giving it
where the run would not read it (refused by :meth:`RunConfig.resolve` with the words quoted), and
what a run on Keras 3 refuses (:mod:`cosent_tf.training.keras_support`, the Keras 2-only
architectures). The tests below hold in either Keras's process: tests/keras3/test_run_config_fields.py
collects them in a Keras 3 process, on each backend. Nothing here imports Keras: resolving opens
the model source, which reads a config and a vocabulary.
"""

import ast
import dataclasses
import os
from typing import Any

import pytest

from cosent_tf.environment import keras3_process
from cosent_tf.errors import ConfigError
from cosent_tf.training.config import RunConfig, option_names
from tests.helpers import ROOT, SHARED_DATA


@dataclasses.dataclass(frozen=True)
class Unread:
    """The field given as ``value`` where the run would not read it: with the settings ``where``
    (on top of a plain STS-B run's); its refusal starts with ``words``."""

    value: Any
    words: str
    where: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class KerasThreeRefusal:
    """The field given as ``value``, which a run on Keras 3's ``backends`` refuses with ``words``."""

    value: Any
    words: str
    backends: tuple[str, ...] = ("tensorflow", "jax")


@dataclasses.dataclass(frozen=True)
class Field:
    """How a RunConfig field is honoured (``shown_by``: the node id of a test that shows it reaching
    a run), refused where unread, and refused on Keras 3."""

    shown_by: str
    unread: tuple[Unread, ...] = ()
    keras3: tuple[KerasThreeRefusal, ...] = ()


LEARNING = "tests/training/test_learning.py::"
OPTIONS = "tests/training/test_options.py::"
PRECISION_RUN = (
    OPTIONS + "test_precision_pooling_and_scale_reach_the_model_and_the_run_leaves_policy_and_generators_as_they_were"
)
IN_BATCH = "tests/training/test_in_batch_runs.py::"
OWN_FILES = "tests/training/test_own_files.py::"
LOSS_OPTIONS = OPTIONS + "test_loss_options_and_label_handling_reach_the_fitted_model"
SOURCE_READ_ONCE = "tests/training/test_model_source.py::test_a_run_reads_its_config_vocabulary_and_checkpoint_once"
OPTIMIZER = "tests/training/test_recipes.py::test_the_recipe_and_optimizer_options_reach_the_optimizer"
MIX_WEIGHTS = IN_BATCH + "test_the_mix_weights_reach_the_loss"
IN_BATCH_OPTIONS = IN_BATCH + "test_symmetric_group_size_and_micro_batches_reach_the_loss_the_batches_and_the_model"
OWN_FILES_RUN = OWN_FILES + "test_own_files_train_from_the_command_line_resume_and_evaluate"
MATRYOSHKA = "tests/training/test_matryoshka_run.py::test_the_engine_trains_the_runs_loss_at_its_widths"

# The words of the refusals (RunConfig._refuse_unread), each quoted once.
LOSS_OPTION = "{}: not an option of --loss {}, which would ignore it; {} is an option of --loss {} of feature models"
MIX = "cosent-ibn"
OWN_FILES_ONLY = "{}: an option of your own files (--train FILE); the task STS-B's run reads the benchmark's own files"
WITH_FILES = {"train_file": "pairs.tsv"}  # resolving reads no data file


def unread_loss_option(value, flag, loss, readers):
    """``flag`` given to ``loss``, which does not read it (the feature models' ``readers`` do)."""
    return Unread(value, LOSS_OPTION.format(flag, loss, flag, readers), {"loss": loss})


FIELDS = {
    "task": Field(LEARNING + "test_training_learns_what_the_untrained_model_cannot"),
    "kind": Field(LOSS_OPTIONS),
    "loss": Field(LOSS_OPTIONS),
    "data_dir": Field(OPTIONS + "test_nli_files_are_read_once_through_links_back_up_the_tree"),
    "config": Field(SOURCE_READ_ONCE),
    "checkpoint": Field(OPTIONS + "test_trains_from_a_checkpoint_with_its_config_and_vocab"),
    "vocab": Field(SOURCE_READ_ONCE),
    # No training run of another architecture: its models are built (and Keras 3 refuses those keras-hub lacks).
    "architecture": Field(
        "tests/models/test_builders.py::test_every_model_family_builds",
        keras3=(KerasThreeRefusal("roformer", "architecture 'roformer' is on the Keras 2 engine only"),),
    ),
    "keras": Field(
        "tests/keras3/test_training.py::test_the_command_trains_on_keras3_on_this_backend",
        keras3=(KerasThreeRefusal(2, "--keras 2: this process holds Keras 3"),),
    ),
    "pooling": Field(
        PRECISION_RUN,
        unread=(
            Unread(
                "last-avg",
                "--pooling: an option of feature models (--kind feature), which pool a text's token vectors into its "
                "vector; an interaction model pools nothing",
                {"kind": "interaction", "loss": "ce"},
            ),
        ),
    ),
    "head_input": Field(
        "tests/huggingface/test_parity.py::test_models_trained_here_export_to_what_sentence_transformers_and_cross_"
        "encoder_load",
        unread=(
            Unread(
                "pooler",
                "--head: an option of interaction models (--kind interaction), what their head reads; a feature model "
                "has no head: it pools its vectors (--pooling)",
            ),
        ),
    ),
    "maxlen": Field(
        "tests/huggingface/test_folders.py::test_a_run_from_a_sentence_transformers_folder_takes_its_length_unless_"
        "an_option_overrides_it"
    ),
    "batch_size": Field(IN_BATCH_OPTIONS),
    "epochs": Field(LEARNING + "test_training_learns_what_the_untrained_model_cannot"),
    "steps_per_epoch": Field(LEARNING + "test_a_run_trains_first_on_the_first_batch_of_its_stream"),
    "recipe": Field(OPTIMIZER),
    "lr": Field(OPTIMIZER),
    "weight_decay": Field(OPTIMIZER),
    "warmup": Field(OPTIMIZER),
    "schedule": Field(OPTIMIZER),
    "scale": Field(
        LOSS_OPTIONS,
        unread=(
            unread_loss_option(10.0, "--scale", "mse", "cosent, mnrl, angle or cosent-ibn"),
            Unread(
                10.0,
                "--scale: not an option of --kind interaction --loss cosent, which would ignore it; --scale is an "
                "option of --loss cosent, mnrl, angle or cosent-ibn of feature models",
                {"kind": "interaction", "loss": "cosent"},
            ),
        ),
    ),
    "epsilon": Field(LOSS_OPTIONS, unread=(unread_loss_option(0.2, "--epsilon", "cosent", "contrastive"),)),
    "group_size": Field(IN_BATCH_OPTIONS, unread=(unread_loss_option(3, "--group-size", "cosent", "mnrl"),)),
    "hard_negatives_from_labels": Field(
        IN_BATCH + "test_the_scripts_train_the_in_batch_losses",
        unread=(
            unread_loss_option(True, "--hard-negatives-from-labels", "cosent", "mnrl"),
            unread_loss_option(False, "--no-hard-negatives-from-labels", "angle", "mnrl"),
        ),
    ),
    "symmetric": Field(
        IN_BATCH_OPTIONS, unread=(unread_loss_option(True, "--symmetric", "cosent", "mnrl or cosent-ibn"),)
    ),
    "cosine_weight": Field(MIX_WEIGHTS, unread=(unread_loss_option(1.0, "--cosine-weight", "mnrl", MIX),)),
    "ibn_weight": Field(MIX_WEIGHTS, unread=(unread_loss_option(1.0, "--ibn-weight", "cosent", MIX),)),
    "angle_weight": Field(MIX_WEIGHTS, unread=(unread_loss_option(1.0, "--angle-weight", "angle", MIX),)),
    "matryoshka_dims": Field(MATRYOSHKA),
    "matryoshka_weights": Field(
        MATRYOSHKA,
        unread=(Unread([1.0, 0.5], "--matryoshka-weights weighs the widths of --matryoshka-dims: give those too"),),
    ),
    "keep_duplicates_apart": Field(
        IN_BATCH + "test_batches_keep_duplicate_texts_apart_unless_allowed",
        unread=(unread_loss_option(False, "--allow-duplicates-in-batch", "angle", "mnrl or cosent-ibn"),),
    ),
    "seed": Field(LEARNING + "test_same_seed_same_result_and_periodic_validation"),
    "max_train_pairs": Field(SOURCE_READ_ONCE),
    "max_eval_pairs": Field(SOURCE_READ_ONCE),
    "train_from_valid": Field(
        OPTIONS + "test_missing_train_split_is_named_unless_carving_from_valid",
        unread=(
            Unread(
                0.5,
                "--train-from-valid: an option of a benchmark task without a train split; with --train FILE, "
                "--valid-fraction holds a part of it out as valid",
                WITH_FILES,
            ),
        ),
    ),
    "eval_every": Field(LEARNING + "test_same_seed_same_result_and_periodic_validation"),
    "best_metric": Field(
        "tests/test_callbacks.py::test_the_best_epoch_is_the_one_of_the_metric_chosen_by_the_loss_or_the_option"
    ),
    "group_by_length": Field(LOSS_OPTIONS),
    "strict": Field(OPTIONS + "test_strict_turns_a_skipped_line_into_an_error"),
    "backup_every": Field(
        "tests/training/test_resume.py::test_a_run_in_micro_batches_with_dropout_killed_mid_epoch_and_after_training_resumes_to_the_same_result"
    ),
    "precision": Field(
        PRECISION_RUN,
        keras3=(
            KerasThreeRefusal("fp16", "--keras 3 cannot run this: --precision fp16 on the jax backend's CPU", ("jax",)),
        ),
    ),
    "strategy": Field(
        "tests/training/test_distribute.py::test_a_script_trains_under_a_mirrored_strategy",
        keras3=(
            # multi-worker trains on Keras 3's TensorFlow backend (tests/keras3/test_multi_worker.py)
            KerasThreeRefusal(
                "multi-worker", "--keras 3 cannot run this: --strategy multi-worker on the jax backend", ("jax",)
            ),
        ),
    ),
    "global_batch_loss": Field(
        LOSS_OPTIONS,
        unread=(
            Unread(
                False,
                "--per-replica-loss: --strategy default trains on one replica, whose share of each batch is the whole "
                "batch, so the loss would be the same; it is an option of --strategy mirrored or multi-worker",
            ),
            Unread(
                False,
                "--per-replica-loss: not an option of --loss sbert, which would ignore it; --per-replica-loss is an "
                "option of --loss cosent, mnrl, angle or cosent-ibn of feature models and --loss cosent of "
                "interaction models",
                {"loss": "sbert"},
            ),
        ),
    ),
    "worker_timeout": Field(
        "tests/training/test_trust_distribute.py::test_a_script_whose_other_worker_never_starts_times_out_or_stops_"
        "on_sigterm",
        unread=(
            Unread(
                30.0,
                "--worker-timeout: an option of --strategy multi-worker, how long a worker waits for the others to "
                "start; --strategy default starts no other worker",
            ),
        ),
    ),
    "micro_batch_size": Field(IN_BATCH_OPTIONS),
    "output_dir": Field("tests/training/test_run_folder.py::test_a_finished_run_is_replaced_only_when_asked"),
    "train_file": Field(OWN_FILES_RUN),
    "valid_file": Field(
        IN_BATCH + "test_groups_are_validated_on_what_the_valid_files_labels_mean",
        unread=(Unread("valid.tsv", OWN_FILES_ONLY.format("--valid")),),
    ),
    "test_file": Field(OWN_FILES_RUN, unread=(Unread("test.tsv", OWN_FILES_ONLY.format("--test")),)),
    "file_format": Field(
        IN_BATCH + "test_mnrl_trains_on_flagembedding_queries_and_exports_what_the_encoder_gives",
        unread=(Unread("csv", OWN_FILES_ONLY.format("--format")),),
    ),
    "text_a_field": Field(OWN_FILES_RUN, unread=(Unread("q1", OWN_FILES_ONLY.format("--text-a-field")),)),
    "text_b_field": Field(OWN_FILES_RUN, unread=(Unread("q2", OWN_FILES_ONLY.format("--text-b-field")),)),
    "label_field": Field(OWN_FILES_RUN, unread=(Unread("same", OWN_FILES_ONLY.format("--label-field")),)),
    "valid_fraction": Field(
        IN_BATCH + "test_a_query_with_several_positives_is_held_out_whole",
        unread=(
            Unread(0.2, OWN_FILES_ONLY.format("--valid-fraction")),
            Unread(
                0.2,
                "--valid-fraction: the part of --train held out as valid when no --valid file is given; here --valid "
                "FILE gives valid",
                {**WITH_FILES, "valid_file": "valid.tsv"},
            ),
        ),
    ),
    "allow_single_label": Field(
        OWN_FILES + "test_own_files_that_cannot_train_are_refused_before_anything_is_written",
        unread=(
            Unread(True, OWN_FILES_ONLY.format("--allow-single-label")),
            Unread(
                True,
                "--allow-single-label: not an option of --loss mnrl, which trains on an anchor, its positive and its "
                "negatives, and ranks no labels",
                {**WITH_FILES, "loss": "mnrl"},
            ),
        ),
    ),
}

UNREAD = [(name, unread) for name, field in FIELDS.items() for unread in field.unread]
KERAS3_REFUSED = [(name, refusal) for name, field in FIELDS.items() for refusal in field.keras3]


def plain_run(tmp_path, **settings):
    """A run of STS-B (the default task) on the shared vocabulary into tmp_path/run, with ``settings``."""
    return RunConfig(**{"data_dir": SHARED_DATA, "output_dir": str(tmp_path / "run"), **settings})


def test_the_table_classifies_every_field_of_run_config():
    assert list(FIELDS) == [field.name for field in dataclasses.fields(RunConfig)]


def test_each_test_that_shows_a_field_honoured_exists():
    defined = {}
    for name, field in FIELDS.items():
        path, function = field.shown_by.split("::")
        if path not in defined:
            with open(os.path.join(ROOT, path), encoding="utf-8") as f:
                tree = ast.parse(f.read())
            defined[path] = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert function.startswith("test_") and function in defined[path], f"{name}: {field.shown_by} is no test"


@pytest.mark.parametrize("name, unread", UNREAD, ids=[f"{name}-{i}" for i, (name, _) in enumerate(UNREAD)])
def test_an_option_given_where_the_run_would_not_read_it_is_refused_by_name(name, unread, tmp_path):
    flag = option_names([RunConfig.__dataclass_fields__[name]])[0]
    with pytest.raises(ConfigError) as refused:
        plain_run(tmp_path, **unread.where, **{name: unread.value}).resolve()
    assert str(refused.value).startswith(unread.words) and flag.lstrip("-") in unread.words.split(":")[0]
    assert not (tmp_path / "run").exists()
    # The same run without it resolves, and keeps the field's default.
    resolved, _ = plain_run(tmp_path, **unread.where).resolve()
    assert getattr(resolved, name) != unread.value


@pytest.mark.parametrize("name, refusal", KERAS3_REFUSED, ids=[f"{name}-{r.value}" for name, r in KERAS3_REFUSED])
def test_what_keras3_cannot_run_is_refused_there_by_name_and_runs_on_keras2(name, refusal, tmp_path):
    given = plain_run(tmp_path, **{name: refusal.value})
    refused_here = False
    if keras3_process():
        from cosent_tf.keras3.runtime import backend_name

        refused_here = backend_name() in refusal.backends
    if refused_here:
        with pytest.raises(ConfigError) as refused:
            given.resolve()
        assert str(refused.value).startswith(refusal.words)
        assert not (tmp_path / "run").exists()
    else:
        assert getattr(given.resolved(), name) == refusal.value


@pytest.mark.parametrize("kind, loss", [("feature", "cosent"), ("interaction", "cosent"), ("feature", "mnrl")])
def test_a_resolved_configuration_resolves_again_to_itself(kind, loss, tmp_path):
    """Only the setting a kind reads is recorded (a sentence encoder's pooling, a cross-encoder's head
    input), so that the refusals of unread options do not refuse a run's own resolved settings."""
    resolved = plain_run(tmp_path, kind=kind, loss=loss).resolved()
    assert resolved.resolved() == resolved
    assert (resolved.pooling is None) == (kind == "interaction") and (resolved.head_input is None) == (
        kind == "feature"
    )
