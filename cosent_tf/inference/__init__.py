"""Trained models in use: the model folder, encoders and scorers, and the vector index."""

from __future__ import annotations

from ..api import lazy_names

# Each name loads its module on first use (see cosent_tf.api).
_HOMES = {
    "PROGRESS_FROM": ".matchers",
    "Hit": ".matchers",
    "inference_function": ".matchers",
    "batched_outputs": ".matchers",
    "l2_normalize": ".matchers",
    "cosine_scores": ".matchers",
    "interaction_scores": ".matchers",
    "check_texts": ".matchers",
    "check_pairs": ".matchers",
    "SentenceEncoder": ".matchers",
    "PairScorer": ".matchers",
    "MATCHERS": ".matchers",
    "load_matcher": ".matchers",
    "VectorIndex": ".matchers",
    "top_k_cosine": ".matchers",
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
