"""``cosent_tf.keras3.export``: a model folder as a SavedModel on raw strings (TensorFlow backend) and
as a sentence-transformers folder, each giving the vectors ``SentenceEncoder.encode`` gives."""

import os
import subprocess

import numpy as np
import pytest

from cosent_tf.errors import ConfigError
from cosent_tf.keras3.export import export_saved_model, export_sentence_transformers
from cosent_tf.keras3.training import save_model_folder
from tests.helpers import reference_python  # Keras-free at import, as support.py is
from tests.keras3.support import SHARED_VOCAB
from tests.reference_cache import cached, contents, interpreter

TINY = {
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 16,
    "initializer_range": 0.02,
    "intermediate_size": 32,
    "max_position_embeddings": 32,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "type_vocab_size": 2,
    "vocab_size": 21128,
}
# Chinese with full-width punctuation, Latin letters to lower-case, and a text longer than maxlen.
TEXTS = ["花呗如何还钱？", "我想，还款。", "Hello World 你好", "短", "这是一个很长的句子" * 4, "ÀÉ accents"]


@pytest.fixture
def model_dir(tmp_path):
    from cosent_tf.keras3.backbones import backbone_from_config

    folder = str(tmp_path / "model")
    save_model_folder(
        folder,
        backbone_from_config(TINY),
        "bert",
        TINY,
        SHARED_VOCAB,
        pooling="last-avg",
        maxlen=16,
        do_lower_case=True,
    )
    return folder


@pytest.mark.backends("tensorflow")
def test_saved_model_on_raw_strings_encodes_as_sentence_encoder(model_dir, tmp_path):
    import tensorflow as tf

    from cosent_tf.export.graph_tokenization import import_tensorflow_text
    from cosent_tf.keras3.encoder import SentenceEncoder

    out = export_saved_model(model_dir, str(tmp_path / "saved"))
    import_tensorflow_text()  # registers the WordPiece op the graph holds
    served = tf.saved_model.load(out).signatures["serving_default"]
    vectors = served(texts=tf.constant(TEXTS))["vectors"].numpy()
    expected = SentenceEncoder.load(model_dir).encode(TEXTS)
    assert vectors.shape == (len(TEXTS), 16)
    np.testing.assert_allclose(vectors, expected, atol=1e-5)
    with pytest.raises(ConfigError, match="already|export"):
        export_saved_model(model_dir, out)  # an earlier export is replaced only when asked
    export_saved_model(model_dir, out, overwrite=True)


@pytest.mark.backends("jax")
def test_saved_model_export_needs_the_tensorflow_backend(model_dir, tmp_path):
    with pytest.raises(ConfigError, match="KERAS_BACKEND=tensorflow"):
        export_saved_model(model_dir, str(tmp_path / "saved"))
    assert not os.path.exists(tmp_path / "saved")


def test_sentence_transformers_folder_loads_back_with_the_same_weights_and_vectors(model_dir, tmp_path):
    from cosent_tf.keras3.backbones import google_arrays, load_backbone
    from cosent_tf.keras3.encoder import SentenceEncoder

    out = export_sentence_transformers(model_dir, str(tmp_path / "st"))
    assert {"modules.json", "model.safetensors", "vocab.txt", "1_Pooling"} <= set(os.listdir(out))
    exported, original = load_backbone(out), load_backbone(model_dir)
    assert exported.pooling == "last-avg" and exported.maxlen == 16
    mine, theirs = google_arrays(exported.backbone), google_arrays(original.backbone)
    assert sorted(mine) == sorted(theirs)
    for name in mine:
        np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)
    np.testing.assert_allclose(
        SentenceEncoder.load(out).encode(TEXTS), SentenceEncoder.load(model_dir).encode(TEXTS), atol=1e-5
    )


def test_sentence_transformers_encode_the_same(model_dir, tmp_path):
    """sentence-transformers itself, in the reference environment (COSENT_REFERENCE_PYTHON), encodes
    the export as the Keras 3 SentenceEncoder encodes the folder."""
    reference = reference_python("the sentence-transformers export is checked")
    from cosent_tf.keras3.encoder import SentenceEncoder

    out = export_sentence_transformers(model_dir, str(tmp_path / "st"))
    np.save(tmp_path / "texts.npy", np.array(TEXTS))
    script = (
        "import sys, numpy as np\n"
        "from sentence_transformers import SentenceTransformer\n"
        "texts = list(np.load(sys.argv[2]))\n"
        "np.save(sys.argv[3], SentenceTransformer(sys.argv[1], device='cpu').encode(texts))\n"
    )

    def produce():
        done = subprocess.run(
            [reference, "-c", script, out, str(tmp_path / "texts.npy"), str(tmp_path / "st.npy")],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return {"st": np.load(tmp_path / "st.npy")}

    # cached (tests/reference_cache.py), so that the second backend's run reuses the first's
    key = [script, interpreter(reference), contents(out, hide=[model_dir]), contents(tmp_path / "texts.npy")]
    theirs = cached("st-export-reference", key, produce)["st"]
    np.testing.assert_allclose(theirs, SentenceEncoder.load(model_dir).encode(TEXTS), atol=1e-5)


def test_an_interaction_or_unexpressible_model_is_refused(model_dir, tmp_path):
    import json

    spec_path = os.path.join(model_dir, "cosent_model.json")
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    spec["pooling"] = "first-last-avg"
    with open(spec_path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    with pytest.raises(ConfigError, match="pooling 'first-last-avg' cannot be expressed in sentence-transformers"):
        export_sentence_transformers(model_dir, str(tmp_path / "st"))
    assert not os.path.exists(tmp_path / "st")
