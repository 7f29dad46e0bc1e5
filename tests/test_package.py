"""The package's names: each of ``__all__`` loads from its module on first use."""

import importlib
import sys

import pytest

import cosent_tf


@pytest.mark.parametrize("name", cosent_tf.__all__)
def test_every_exported_name_is_its_modules_object(name):
    module = importlib.import_module(cosent_tf._HOMES[name], "cosent_tf")
    assert getattr(cosent_tf, name) is getattr(module, name)


def test_submodules_load_as_attributes_and_unknown_names_are_refused():
    assert cosent_tf.losses.cosent_loss is importlib.import_module("cosent_tf.losses").cosent_loss
    with pytest.raises(AttributeError, match="has no attribute 'build_model'"):
        cosent_tf.build_model  # noqa: B018
    assert set(cosent_tf.__all__) <= set(dir(cosent_tf))


@pytest.mark.parametrize("old", sorted(cosent_tf.compat.MOVED_MODULES))
def test_a_moved_module_imports_from_its_old_path_with_a_deprecation_warning(old):
    home = importlib.import_module(f"cosent_tf.{cosent_tf.compat.MOVED_MODULES[old]}")
    sys.modules.pop(f"cosent_tf.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"cosent_tf.{old} moved to {home.__name__}"):
        moved = importlib.import_module(f"cosent_tf.{old}")
    assert moved is home
    assert home.__spec__.name == home.__name__  # the alias did not rename the module


@pytest.mark.parametrize(
    "package, name",
    [("training", "train"), ("training", "RunConfig"), ("models", "build_encoder"), ("data", "read_senteval")]
    + [("inference", "SentenceEncoder"), ("export", "export_saved_model"), ("huggingface", "is_hf_folder")],
)
def test_names_of_the_modules_that_became_packages_still_import_from_them(package, name):
    module = importlib.import_module(f"cosent_tf.{package}")
    assert getattr(module, name) is getattr(importlib.import_module(module._HOMES[name], module.__name__), name)


@pytest.mark.parametrize(
    "module",
    [
        "losses.cosent",
        "losses.mse",
        "losses.contrastive",
        "losses.interaction_cosent",
        "losses.softmax",
        "losses.matryoshka",
    ]
    + ["losses.mnrl", "losses.angle", "losses.cosent_ibn"]
    + ["layers", "optimizers", "callbacks", "errors", "data.pipeline", "data.groups", "training.gradient_cache"]
    + ["mining", "data.pairs"],
)
def test_docstring_examples_run(module):
    import doctest

    from cosent_tf.backend import keras, tf

    loaded = importlib.import_module(f"cosent_tf.{module}")
    results = doctest.testmod(loaded, extraglobs={"tf": tf, "keras": keras}, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert results.failed == 0
