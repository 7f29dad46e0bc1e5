"""Model kinds are one table: each kind's fields, and the spec checks that read them."""

import warnings

import pytest

from cosent_tf import ConfigError, build_encoder, build_interaction_model
from cosent_tf.compat import renamed_keyword
from cosent_tf.losses.registry import KINDS as LOSS_KINDS
from cosent_tf.losses.registry import get_loss
from cosent_tf.models.builders import BUILDERS
from cosent_tf.models.kinds import FEATURE, INTERACTION, KINDS, get_kind
from cosent_tf.models.spec import ModelSpec


def test_the_table_holds_each_kind_once_with_its_differences():
    assert list(KINDS) == ["feature", "interaction"]
    assert (FEATURE.rows_per_pair, INTERACTION.rows_per_pair) == (2, 1)
    assert [BUILDERS[name] for name in KINDS] == [build_encoder, build_interaction_model]
    assert (FEATURE.output_prefix, INTERACTION.output_prefix) == ("", "interact-")
    assert INTERACTION.concatenated_pairs and not FEATURE.concatenated_pairs
    assert FEATURE.sentence_vectors and FEATURE.trains_on_nli and not INTERACTION.trains_on_nli
    assert LOSS_KINDS is KINDS  # the loss table names the same kinds


def test_get_kind_lists_the_kinds():
    assert get_kind("interaction") is INTERACTION
    with pytest.raises(ConfigError, match="unknown model kind 'bi'; choose one of feature, interaction"):
        get_kind("bi")
    with pytest.raises(ConfigError, match="unknown model kind 'bi'; choose one of feature, interaction"):
        get_loss("bi", "cosent")


def test_a_kind_checks_what_its_spec_scores_with():
    class Task:
        maxlen, interaction_maxlen = 64, 128

    assert (FEATURE.maxlen(Task), INTERACTION.maxlen(Task)) == (64, 128)
    with pytest.raises(ConfigError, match="x: pooling 'nope' is not one of cls"):
        ModelSpec("feature", pooling="nope").check("x")
    with pytest.raises(ConfigError, match=r"x: an interaction model needs head in \('score', 'softmax'\), got None"):
        ModelSpec("interaction", pooling=None).check("x")
    ModelSpec("interaction", pooling=None, head="score").check("x")


def test_renamed_keyword_warns_only_when_the_old_name_is_used():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert renamed_keyword("model", "architecture", None, "bert") == "bert"
    with pytest.warns(DeprecationWarning, match="model_type= is deprecated; use architecture="):
        assert renamed_keyword("model_type", "architecture", "nezha", "bert") == "nezha"


def test_the_models_package_imports_downwards_only():
    """kinds < spec < tokenization, checkpoints < sources < builders: no module imports one
    above it, at the top or inside a function (a loop would make the import order matter)."""
    import ast
    import os

    import cosent_tf.models

    floors = ["architectures", "kinds", "checkpoints", "spec", "tokenization", "sources", "builders"]
    folder = os.path.dirname(cosent_tf.models.__file__)
    for floor, name in enumerate(floors):
        with open(os.path.join(folder, name + ".py"), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        imported = {
            (node.module or "").split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 1
        }
        above = imported & set(floors[floor:])
        assert not above, f"models/{name}.py imports {sorted(above)}, which sit on its floor or above"
