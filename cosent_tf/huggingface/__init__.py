"""The Hugging Face and sentence-transformers file formats, read and written without Keras.

``folders``: the files of a folder, recognising one, sentence-transformers modules, the tokenizer;
``bert``: the BERT config and weight names both ways; ``weights``: reading the weight files.
"""

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
    "ACTIVATIONS": ".bert",
    "LAYER_NORM_EPS": ".bert",
    "OTHER_MODEL_TYPES": ".bert",
    "ST_POOLING": ".folders",
    "ST_MODULE_TYPES": ".folders",
    "CLASSIFIER_HEADS": ".bert",
    "POSITIVE_SIZES": ".bert",
    "RATES": ".bert",
    "NOTHING": ".folders",
    "PathLike": ".folders",
    "json_object": ".folders",
    "check_bert_values": ".bert",
    "is_sentence_transformers_folder": ".folders",
    "is_hf_folder": ".folders",
    "looks_like_hub_name": ".folders",
    "SentenceTransformersModules": ".folders",
    "read_sentence_transformers": ".folders",
    "transformer_folder": ".folders",
    "bert_config": ".bert",
    "hf_config": ".bert",
    "read_hf_config": ".bert",
    "classifier_labels": ".bert",
    "bert_name_table": ".bert",
    "read_hf_weights": ".weights",
    "check_weight": ".weights",
    "weight_files": ".weights",
    "google_arrays": ".bert",
    "hf_weights": ".bert",
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
