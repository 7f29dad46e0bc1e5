"""The Hugging Face and sentence-transformers file formats, read and written without Keras."""

from __future__ import annotations

from ..api import lazy_names

# Each name loads its module on first use (see cosent_tf.api).
_HOMES = {
    "CONFIG_FILE": ".folders",
    "SAFETENSORS_FILE": ".folders",
    "SAFETENSORS_INDEX": ".folders",
    "TORCH_FILE": ".folders",
    "VOCAB_FILE": ".folders",
    "TOKENIZER_FILE": ".folders",
    "TOKENIZER_CONFIG": ".folders",
    "MODULES_FILE": ".folders",
    "SENTENCE_CONFIG": ".folders",
    "WEIGHT_FILES": ".folders",
    "ACTIVATIONS": ".folders",
    "LAYER_NORM_EPS": ".folders",
    "OTHER_MODEL_TYPES": ".folders",
    "ST_POOLING": ".folders",
    "ST_MODULE_TYPES": ".folders",
    "CLASSIFIER_HEADS": ".folders",
    "POSITIVE_SIZES": ".folders",
    "RATES": ".folders",
    "NOTHING": ".folders",
    "check_bert_values": ".folders",
    "is_sentence_transformers_folder": ".folders",
    "is_hf_folder": ".folders",
    "looks_like_hub_name": ".folders",
    "SentenceTransformersModules": ".folders",
    "read_sentence_transformers": ".folders",
    "transformer_folder": ".folders",
    "bert_config": ".folders",
    "hf_config": ".folders",
    "read_hf_config": ".folders",
    "classifier_labels": ".folders",
    "bert_name_table": ".folders",
    "read_hf_weights": ".folders",
    "check_weight": ".folders",
    "google_arrays": ".folders",
    "hf_weights": ".folders",
    "vocab_path": ".folders",
    "read_tokenizer_json": ".folders",
    "do_lower_case": ".folders",
    "model_max_length": ".folders",
    "write_vocab": ".folders",
    "write_tokenizer": ".folders",
    "write_hf_folder": ".folders",
    "write_sentence_transformers_modules": ".folders",
}

__getattr__, __dir__ = lazy_names(__name__, _HOMES)
