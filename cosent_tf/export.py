"""Export a model folder as a TensorFlow SavedModel that takes raw UTF-8 strings.

Serving needs TensorFlow and tensorflow-text only (tensorflow-text's WordPiece op is in
the graph): ``import tensorflow_text`` before ``tf.saved_model.load``. Signatures:

* feature model: ``serving_default(sentences: string[batch]) -> {"embeddings": float32[batch, dim],
  "truncated": bool[batch]}`` (L2-normalised; ``truncated``: the text was longer than the model's
  maxlen and was cut), and ``encode_ids(token_ids, segment_ids)`` for pre-tokenised input;
* interaction model: ``serving_default(first: string[batch], second: string[batch])
  -> {"scores": float32[batch], "truncated": bool[batch]}``, and ``score_ids(token_ids, segment_ids)``.

Word-level (jieba) models cannot tokenise inside a graph and are refused.
"""

import json
import os

from .backend import model_precision, tf
from .errors import ConfigError
from .graph_tokenization import GraphTokenizer
from .io import FolderKind, atomic_directory, check_output_folder
from .model_dir import load_model_dir

_TEXTS = tf.TensorSpec(shape=[None], dtype=tf.string)
_IDS = tf.TensorSpec(shape=[None, None], dtype=tf.int32)


class _Served(tf.Module):
    def __init__(self, model, tokenizer):
        super().__init__(name="cosent_tf")
        self.model = model
        self.tokenizer = tokenizer

    def _outputs(self, token_ids, segment_ids):
        with model_precision(self.model):
            return tf.cast(self.model([token_ids, segment_ids], training=False), tf.float32)

    def _vectors(self, token_ids, segment_ids):
        return tf.math.l2_normalize(self._outputs(token_ids, segment_ids), axis=1, epsilon=1e-24)

    def _scores(self, token_ids, segment_ids):
        return self._outputs(token_ids, segment_ids)[:, -1]

    @tf.function(input_signature=[_TEXTS])
    def embed(self, sentences):
        token_ids, truncated = self.tokenizer.encode_and_flag(sentences)
        return {"embeddings": self._vectors(token_ids, tf.zeros_like(token_ids)), "truncated": truncated}

    @tf.function(input_signature=[_IDS, _IDS])
    def embed_ids(self, token_ids, segment_ids):
        return {"embeddings": self._vectors(token_ids, segment_ids)}

    @tf.function(input_signature=[_TEXTS, _TEXTS])
    def score(self, first, second):
        token_ids, truncated = self.tokenizer.encode_pairs_and_flag(first, second)
        return {"scores": self._scores(token_ids, tf.zeros_like(token_ids)), "truncated": truncated}

    @tf.function(input_signature=[_IDS, _IDS])
    def score_ids(self, token_ids, segment_ids):
        return {"scores": self._scores(token_ids, segment_ids)}


SAVED_MODEL = FolderKind(
    "a SavedModel export", "saved_model.pb", ("saved_model.pb", "fingerprint.pb", "variables", "assets", "assets.extra")
)


def export_saved_model(model_dir: str, out_dir: str, overwrite: bool = False, precision: str = "float32") -> list:
    """Write ``out_dir`` (atomically) as a SavedModel of the model folder ``model_dir``.

    Returns the signature names. Also writes ``assets.extra/cosent_model.json`` (the
    model's description, with the tuned threshold) for the serving side. An existing
    ``out_dir`` must be empty, or a SavedModel and ``overwrite`` true; it may not hold or
    lie inside ``model_dir``. ``precision='bf16'`` serves the model in mixed bfloat16 (outputs
    stay float32), as ``SentenceEncoder.load(..., precision='bf16')`` computes.
    """
    check_output_folder(out_dir, SAVED_MODEL, overwrite, inputs=[model_dir])
    spec, model, sentence_tokenizer = load_model_dir(model_dir, precision)
    if spec.word_level:
        raise ConfigError(
            f"{model_dir}: a word-level ({spec.architecture}) model pre-tokenises with jieba, which "
            "cannot run inside a TensorFlow graph; serve it with cosent_tf.SentenceEncoder"
        )
    token_dict = sentence_tokenizer.token_dict
    served = _Served(model, GraphTokenizer(token_dict, spec.maxlen, spec.do_lower_case))
    if spec.kind == "feature":
        signatures = {"serving_default": served.embed, "encode_ids": served.embed_ids}
    else:
        signatures = {"serving_default": served.score, "score_ids": served.score_ids}
    with atomic_directory(out_dir, SAVED_MODEL, overwrite, inputs=[model_dir]) as tmp:
        tf.saved_model.save(served, tmp, signatures=signatures)
        os.makedirs(os.path.join(tmp, "assets.extra"), exist_ok=True)
        with open(os.path.join(tmp, "assets.extra", "cosent_model.json"), "w", encoding="utf-8") as f:
            json.dump(
                {
                    "signatures": sorted(signatures),
                    "kind": spec.kind,
                    "maxlen": spec.maxlen,
                    "precision": precision,
                    "threshold": spec.threshold,
                    "source": spec.source,
                },
                f,
                indent=2,
                ensure_ascii=False,
            )
    return sorted(signatures)
