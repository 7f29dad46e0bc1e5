"""Model folders and SavedModel exports that several export test modules read (and tests/test_cli.py),
each built once per test run in the fixture zoo (tests/zoo.py): read-only, so a test that writes
takes ``tests.zoo.copy_of`` of one.

An export's folder holds ``exported`` (the SavedModel) and ``made.json``: what making it returned
(the CLI's exit status, or ``export_saved_model``'s signatures), for the tests that assert on it.
"""

import json

import pytest

from tests.helpers import make_model_dir, write_config
from tests.zoo import built_once

EXPORTED = "exported"
MADE = "made.json"


def _model_folder(tmp_path_factory, name, **options):
    def build(folder):
        from cosent_tf.backend import keras

        # the same weights whichever test and worker builds it, so that reference caches keyed by
        # the folder's content (tests/reference_cache.py) hit on the next run
        keras.utils.set_random_seed(1234)
        make_model_dir(folder / "model", write_config(folder / "config.json"), **options)

    return built_once(tmp_path_factory, name, build) / "model"


def feature_model(tmp_path_factory):
    """A random tiny feature model, mean pooling (a random model's [CLS] vectors hardly differ), maxlen 16."""
    return _model_folder(tmp_path_factory, "feature-model", pooling="last-avg", maxlen=16)


def interaction_model(tmp_path_factory, head="score"):
    """A random tiny interaction model with ``head``, read through BERT's pooler (pairs carry segment
    ids, as a Hugging Face export needs), maxlen 24."""
    return _model_folder(
        tmp_path_factory, f"interaction-{head}-model", kind="interaction", head=head, head_input="pooler", maxlen=24
    )


def _cli_export(tmp_path_factory, name, model_dir, *options):
    def build(folder):
        from cosent_tf.cli import main

        status = main(["export", *options, str(model_dir), str(folder / EXPORTED)])
        (folder / MADE).write_text(json.dumps({"status": status}), encoding="utf-8")

    return built_once(tmp_path_factory, name, build)


def _api_export(tmp_path_factory, name, model_dir, **options):
    def build(folder):
        from cosent_tf.export.savedmodel import export_saved_model

        signatures = export_saved_model(str(model_dir), str(folder / EXPORTED), **options)
        (folder / MADE).write_text(json.dumps({"signatures": signatures}), encoding="utf-8")

    return built_once(tmp_path_factory, name, build)


def feature_string_export(tmp_path_factory):
    """The feature model's string SavedModel, written as users ask for it: ``cosent-tf export``."""
    return _cli_export(tmp_path_factory, "feature-string-export", feature_model(tmp_path_factory))


def made(export):
    """What making the zoo export ``export`` returned."""
    return json.loads((export / MADE).read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def feature_model_folder(tmp_path_factory):
    return feature_model(tmp_path_factory)


@pytest.fixture(scope="session")
def interaction_model_folder(tmp_path_factory):
    return interaction_model(tmp_path_factory)


@pytest.fixture(scope="session")
def softmax_model_folder(tmp_path_factory):
    return interaction_model(tmp_path_factory, head="softmax")


@pytest.fixture(scope="session")
def feature_strings(tmp_path_factory):
    return feature_string_export(tmp_path_factory)


@pytest.fixture(scope="session")
def feature_ids(tmp_path_factory):
    """The feature model's ids SavedModel, by ``cosent-tf export --inputs ids``."""
    return _cli_export(tmp_path_factory, "feature-ids-export", feature_model(tmp_path_factory), "--inputs", "ids")


@pytest.fixture(scope="session")
def interaction_strings(tmp_path_factory):
    return _api_export(tmp_path_factory, "interaction-string-export", interaction_model(tmp_path_factory))


@pytest.fixture(scope="session")
def interaction_ids(tmp_path_factory):
    """The interaction model's ids SavedModel, by ``cosent-tf export --inputs ids``."""
    model = interaction_model(tmp_path_factory)
    return _cli_export(tmp_path_factory, "interaction-ids-export", model, "--inputs", "ids")
