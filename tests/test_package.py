"""The package's names: each of ``__all__`` loads from its module on first use."""

import importlib

import pytest

import cosent_tf


@pytest.mark.parametrize("name", cosent_tf.__all__)
def test_every_exported_name_is_its_modules_object(name):
    module = importlib.import_module(cosent_tf._MODULES[name], "cosent_tf")
    assert getattr(cosent_tf, name) is getattr(module, name)


def test_submodules_load_as_attributes_and_unknown_names_are_refused():
    assert cosent_tf.losses.cosent_loss is importlib.import_module("cosent_tf.losses").cosent_loss
    with pytest.raises(AttributeError, match="has no attribute 'build_model'"):
        cosent_tf.build_model  # noqa: B018
    assert set(cosent_tf.__all__) <= set(dir(cosent_tf))
