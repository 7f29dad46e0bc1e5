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


def _names_in_messages():
    """Every ``cosent_tf.X`` (``cosent_tf.X.Y`` ...) that a string of the package other than a
    docstring names: the messages and hints a user reads and may type."""
    import ast
    import pathlib
    import re

    package = pathlib.Path(cosent_tf.__file__).parent
    named = set()
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                named.update(re.findall(r"\bcosent_tf(?:\.[A-Za-z_]\w*)+", node.value))
    return sorted(named)


MESSAGE_NAMES = _names_in_messages()


def test_the_messages_name_the_top_level_names_that_users_were_sent_to():
    assert {"cosent_tf.load_matcher", "cosent_tf.SentenceEncoder", "cosent_tf.read_pair_file"} <= set(MESSAGE_NAMES)


def _defined_in_keras3(names):
    """Whether ``names`` (after ``cosent_tf.keras3``) are that package's, read from its source: this
    process holds Keras 2, and a process imports one Keras (docs/keras3.md)."""
    import ast
    import pathlib

    folder = pathlib.Path(cosent_tf.__file__).parent / "keras3"
    if not names:
        return folder.is_dir()
    tree = ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))
    table = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and [target.id for target in node.targets] == ["_HOMES"]
    )
    homes = {}
    for key, value in zip(table.keys, table.values):
        if key is None:  # **dict.fromkeys(_LOSS_CLASSES, ".losses"): the package's loss classes
            homes.update(dict.fromkeys(cosent_tf.losses.CLASSES, ast.literal_eval(value.args[1])))
        else:
            homes[ast.literal_eval(key)] = ast.literal_eval(value)
    if len(names) == 2 and (folder / f"{names[0]}.py").is_file():  # a name of one of its modules
        module, name = names[0], names[1]
    elif len(names) == 1 and names[0] in homes:
        module, name = homes[names[0]].lstrip("."), names[0]
    else:
        return False
    home = ast.parse((folder / f"{module}.py").read_text(encoding="utf-8"))
    defined = {getattr(node, "name", None) for node in home.body}
    imported = {alias.name for node in home.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    return name in defined | imported


@pytest.mark.parametrize("dotted", MESSAGE_NAMES)
def test_every_name_a_message_of_the_package_names_imports(dotted):
    parts = dotted.split(".")
    if parts[:2] == ["cosent_tf", "keras3"]:
        assert _defined_in_keras3(parts[2:]), f"{dotted} is not a name of cosent_tf.keras3"
        return
    for length in range(len(parts), 0, -1):  # the longest module, then attributes of it
        try:
            found = importlib.import_module(".".join(parts[:length]))
        except ImportError:
            continue
        for attribute in parts[length:]:
            found = getattr(found, attribute)
        return
    raise AssertionError(f"{dotted} does not import")


@pytest.mark.parametrize("name", ["load_matcher", "MultipleNegativesRankingLoss", "AnglELoss", "CoSENTIBNLoss"])
def test_the_matcher_loader_and_the_in_batch_losses_import_from_the_top_level(name):
    assert name in cosent_tf.__all__
    from cosent_tf import losses
    from cosent_tf.inference import matchers

    assert getattr(cosent_tf, name) is getattr(matchers if name == "load_matcher" else losses, name)
