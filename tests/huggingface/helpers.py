"""What the Hugging Face tests share: a small BERT config, its arrays, a folder exported from a model."""

import numpy as np

from cosent_tf import export_hf
from cosent_tf.huggingface.bert import bert_name_table
from tests.helpers import make_model_dir

SMALL = {"vocab_size": 30, "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 16}


def random_arrays(layers=2, hidden=8, intermediate=16, vocab=30, head_scope=None):
    """Google-named arrays of a BERT of that size, each different (so a swap would show)."""
    rng = np.random.default_rng(0)
    shapes = {
        "bert/embeddings/word_embeddings": (vocab, hidden),
        "bert/embeddings/position_embeddings": (16, hidden),
        "bert/embeddings/token_type_embeddings": (2, hidden),
    }
    for google, _, _ in bert_name_table(layers, head_scope):
        if google not in shapes:
            out = intermediate if "intermediate" in google else 2 if google.startswith("cosent/") else hidden
            inp = intermediate if "/output/dense/kernel" in google and "attention" not in google else hidden
            shapes[google] = (inp, out) if google.endswith("kernel") else (out,)
    return {name: rng.normal(size=shape).astype(np.float32) for name, shape in shapes.items()}


def hf_folder(tmp_path, tiny_config):
    """A bare transformers folder (no sentence-transformers files) exported from a tiny model."""
    make_model_dir(tmp_path / "source", tiny_config, pooling="last-avg")
    export_hf(str(tmp_path / "source"), str(tmp_path / "hf"))
    for name in ("modules.json", "sentence_bert_config.json"):
        (tmp_path / "hf" / name).unlink()
    return tmp_path / "hf"
