"""The BERT config between the Hugging Face and Google formats, and the weight names both ways."""

import json

import numpy as np
import pytest

from cosent_tf import ConfigError
from cosent_tf.huggingface.bert import bert_config, google_arrays, hf_config, hf_weights
from cosent_tf.huggingface.folders import write_hf_folder
from cosent_tf.models.checkpoints import read_config
from tests.helpers import write_config
from tests.huggingface.helpers import SMALL, random_arrays


def test_names_round_trip_and_linear_weights_are_transposed(tmp_path):
    arrays = random_arrays(head_scope="cosent/Match-Softmax")
    weights = hf_weights(arrays, 2, "cosent/Match-Softmax", prefix="bert.")
    query = arrays["bert/encoder/layer_1/attention/self/query/kernel"]
    np.testing.assert_array_equal(weights["bert.encoder.layer.1.attention.self.query.weight"], query.T)
    np.testing.assert_array_equal(weights["classifier.weight"], arrays["cosent/Match-Softmax/kernel"].T)
    assert "bert.embeddings.LayerNorm.weight" in weights and "classifier.bias" in weights
    write_hf_folder(tmp_path, weights, hf_config(SMALL))
    back, unused, names = google_arrays(tmp_path, "cosent/Match-Softmax")
    assert unused == [] and set(back) == set(arrays)
    for name, value in arrays.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)
    assert names["bert/pooler/dense/kernel"] == "pooler.dense.weight"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_type": "roberta"}, "model_type 'roberta' is not supported from Hugging Face folders"),
        ({"model_type": "albert"}, "builds albert only from a Google-format TF checkpoint"),
        ({"hidden_act": "silu"}, "hidden_act 'silu' is not supported"),
        ({"layer_norm_eps": 1e-5}, "layer_norm_eps 1e-05 is not supported"),
        ({"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key' is not supported"),
    ],
)
def test_settings_bert4keras_cannot_build_are_named(change, message, tmp_path):
    config = {**hf_config(read_config(write_config(tmp_path / "c.json"))), **change}
    with pytest.raises(ConfigError, match=message):
        bert_config(config, "config.json")


def test_a_hugging_face_config_reads_as_the_google_one(tmp_path):
    google = read_config(write_config(tmp_path / "google.json"))
    (tmp_path / "config.json").write_text(json.dumps(hf_config(google)))
    translated = read_config(tmp_path / "config.json")
    assert {key: translated[key] for key in google} == google
    tanh = dict(google, hidden_act="gelu_tanh")
    assert bert_config(hf_config(tanh), "x")["hidden_act"] == "gelu_tanh"
