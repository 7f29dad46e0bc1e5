"""Trained models in use: the model folder (model_dir), batched inference (runtime), encoders and
scorers (matchers), the vector index (index), and reranking a search's hits (rerank)."""

from __future__ import annotations

from ..api import lazy_names

# Each name loads its module on first use (see cosent_tf.api).
_HOMES = {
    "PROGRESS_FROM": ".matchers",
    "Hit": ".index",
    "inference_function": ".runtime",
    "batched_outputs": ".runtime",
    "l2_normalize": ".runtime",
    "cosine_scores": ".runtime",
    "interaction_scores": ".runtime",
    "check_texts": ".texts",
    "check_pairs": ".matchers",
    "SentenceEncoder": ".matchers",
    "PairScorer": ".matchers",
    "Decisions": ".matchers",
    "MATCHERS": ".matchers",
    "load_matcher": ".matchers",
    "VectorIndex": ".index",
    "top_k_cosine": ".index",
    # The function rerank is not named here: the package's attribute rerank is its module.
    "RERANK_TOP": ".index",
    "rerank_depth": ".index",
    "RerankedHit": ".index",
    "rerank": ".matchers",
    "SPEC_FILE": ".model_dir",
    "FORMAT": ".model_dir",
    "FORMAT_VERSION": ".model_dir",
    "MODEL_FOLDER": ".model_dir",
    "SPEC_TYPES": ".model_dir",
    "ModelSpec": ".model_dir",
    "save_model_dir": ".model_dir",
    "read_spec": ".model_dir",
    "hf_spec": ".model_dir",
    "load_model_dir": ".model_dir",
}

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
