import json
import os

import numpy as np
import pytest

from cosent_tf import CheckpointError, ConfigError, load_model_dir
from cosent_tf.inference.model_dir import SPEC_FILE, read_spec
from tests.helpers import make_model_dir, write_config


def outputs(model, token_ids):
    ids = np.asarray([token_ids], dtype=np.int32)
    return model.predict([ids, np.zeros_like(ids)], verbose=0)


@pytest.mark.parametrize(
    "kind, pooling, head",
    [
        ("feature", "cls", None),
        ("feature", "pooler", None),
        ("feature", "last-avg", None),
        ("interaction", None, "score"),
        ("interaction", None, "softmax"),
    ],
)
def test_model_folder_round_trips_outputs_and_settings(kind, pooling, head, tiny_config, tmp_path):
    original = make_model_dir(tmp_path / "model", tiny_config, kind, pooling, head, maxlen=20, threshold=0.25)
    spec, loaded, tokenizer = load_model_dir(tmp_path / "model")
    assert (spec.kind, spec.maxlen, spec.threshold, tokenizer.maxlen) == (kind, 20, 0.25, 20)
    assert (spec.pooling if kind == "feature" else spec.head) == (pooling or head)
    token_ids = tokenizer.encode("今天天气怎么样？ABC123")
    np.testing.assert_array_equal(outputs(loaded, token_ids), outputs(original, token_ids))
    assert sorted(os.listdir(tmp_path / "model")) == [
        "bert_config.json",
        "bert_model.ckpt.data-00000-of-00001",
        "bert_model.ckpt.index",
        "checkpoint",
        SPEC_FILE,
        "vocab.txt",
    ]


def test_missing_and_incomplete_folders_are_named(tiny_config, tmp_path):
    with pytest.raises(ConfigError, match="nowhere: model folder not found"):
        read_spec(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=f"not a cosent-tf model folder \\(no {SPEC_FILE};"):
        read_spec(str(tmp_path / "empty"))
    make_model_dir(tmp_path / "model", tiny_config)
    os.remove(tmp_path / "model" / "vocab.txt")
    os.remove(tmp_path / "model" / "bert_model.ckpt.index")
    with pytest.raises(ConfigError, match="incomplete model folder, missing vocab.txt, bert_model.ckpt.index"):
        load_model_dir(tmp_path / "model")
    make_model_dir(tmp_path / "linked", tiny_config)
    (tmp_path / "elsewhere.txt").write_bytes((tmp_path / "linked" / "vocab.txt").read_bytes())
    os.remove(tmp_path / "linked" / "vocab.txt")
    os.symlink(tmp_path / "elsewhere.txt", tmp_path / "linked" / "vocab.txt")
    with pytest.raises(ConfigError, match="linked: vocab.txt link\\(s\\) to outside the model folder"):
        load_model_dir(tmp_path / "linked")


def edit_spec(folder, **changes):
    path = folder / SPEC_FILE
    record = json.loads(path.read_text())
    record.update(changes)
    path.write_text(json.dumps(record, indent=2))


def test_bad_descriptions_are_explained(tiny_config, tmp_path):
    folder = tmp_path / "model"
    make_model_dir(folder, tiny_config)
    text = (folder / SPEC_FILE).read_text()
    (folder / SPEC_FILE).write_text(text.replace('"kind"', "kind", 1))
    with pytest.raises(ConfigError, match=r"cosent_model.json, line \d+: the model description is not valid JSON"):
        read_spec(folder)
    (folder / SPEC_FILE).write_text(text)
    for changes, message in [
        ({"kind": "siamese"}, "kind 'siamese' is not one of feature, interaction"),
        ({"format_version": 99}, "format version 99 is newer"),
        ({"format": "other"}, "not a cosent-tf model description"),
        ({"maxlen": 2}, "maxlen must be an integer of at least 3"),
        ({"architecture": "gpt"}, "unknown architecture 'gpt'"),
        ({"threshold": float("nan")}, "threshold must be a finite number or null, got nan"),
        ({"threshold": "0.5"}, r"'threshold' must be a JSON integer or number or null, not string \(0.5\)"),
        ({"do_lower_case": "false"}, r"'do_lower_case' must be a JSON true/false, not string \(false\)"),
        ({"architecture": ["bert"]}, r"'architecture' must be a JSON string, not array"),
        ({"maxlen": True}, r"'maxlen' must be a JSON integer, not true/false"),
        ({"pooling": "mean"}, "pooling 'mean' is not one of"),
    ]:
        (folder / SPEC_FILE).write_text(text)
        edit_spec(folder, **changes)
        with pytest.raises(ConfigError, match=message):
            read_spec(folder)


def test_maxlen_beyond_position_embeddings_is_refused(tmp_path):
    config = write_config(tmp_path / "config.json", max_position=16)
    make_model_dir(tmp_path / "model", config, maxlen=16)
    edit_spec(tmp_path / "model", maxlen=17)
    with pytest.raises(ConfigError, match="maxlen 17 is longer than the model's 16 position embeddings"):
        load_model_dir(tmp_path / "model")


def test_interaction_head_weights_must_be_present(tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config, kind="interaction", head="score")
    edit_spec(tmp_path / "model", head="softmax")  # the checkpoint holds the score head's weights only
    with pytest.raises(CheckpointError, match="the interaction head's variable cosent/Match-Softmax/kernel is missing"):
        load_model_dir(tmp_path / "model")


def test_a_numpy_threshold_is_saved_as_a_plain_number(tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config, threshold=np.float32(0.25))
    assert read_spec(tmp_path / "model").threshold == 0.25


def test_a_format_1_description_names_the_architecture_model(tiny_config, tmp_path):
    folder = tmp_path / "model"
    make_model_dir(folder, tiny_config)
    record = json.loads((folder / SPEC_FILE).read_text())
    del record["architecture"]
    record.update(model="roberta", format_version=1)
    (folder / SPEC_FILE).write_text(json.dumps(record))
    assert read_spec(folder).architecture == "roberta"
