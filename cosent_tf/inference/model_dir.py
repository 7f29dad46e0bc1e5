"""A trained matcher's folder: everything needed to use it again, and nothing from elsewhere.

Layout (a Google-format checkpoint folder plus one file)::

    MODEL_DIR/
      cosent_model.json        kind, architecture, pooling or head (and what the head reads),
                               maxlen, tokenizer settings, tuned threshold (when known), and
                               the run it came from
      bert_config.json         the transformer's config
      bert_model.ckpt.*        the transformer's weights under Google names (an
                               interaction model's head under ``cosent/<layer>/...``)
      vocab.txt

Because the weights are a Google-format checkpoint, the folder also serves as
``--checkpoint`` for further fine-tuning and loads in bert4keras itself.

:func:`load_model_dir` also loads a Hugging Face folder as a model: a sentence-transformers
folder (or a bare ``BertModel``, mean-pooled as sentence-transformers would) as a feature
model, and a ``BertForSequenceClassification`` as an interaction model with its head.
"""

import dataclasses
import json
import math
import numbers
import os

from .. import huggingface
from ..backend import dtype_policy, inference_policy_name, keras
from ..errors import ConfigError
from ..io import FolderKind, atomic_directory, is_inside, json_field, read_json
from ..layers import POOLING_MODES
from ..losses.registry import KINDS
from ..models.architectures import get_architecture
from ..models.builders import (
    HEAD_INPUTS,
    INTERACTION_HEADS,
    build_encoder,
    build_interaction_model,
    check_maxlen,
    head_layer_name,
)
from ..models.checkpoints import (
    CHECKPOINT_ENTRIES,
    CHECKPOINT_PREFIX,
    CONFIG_FILE,
    VOCAB_FILE,
    checkpoint_files,
    head_variables,
    write_checkpoint_folder,
)
from ..models.tokenization import SentenceTokenizer

SPEC_FILE = "cosent_model.json"
FORMAT = "cosent-tf-model"
# Version 2 (cosent-tf 0.2) renamed "model" to "architecture"; version 3 (0.3) added
# "head_input" and "pair_segments". Older folders still load.
FORMAT_VERSION = 3
MODEL_FOLDER = FolderKind("a cosent-tf model folder", SPEC_FILE, CHECKPOINT_ENTRIES + (SPEC_FILE,))


# The JSON type of each field of cosent_model.json (None: null).
SPEC_TYPES = {
    "kind": str,
    "architecture": str,
    "pooling": (str, type(None)),
    "head": (str, type(None)),
    "head_input": str,
    "pair_segments": bool,
    "maxlen": int,
    "do_lower_case": bool,
    "word_level": bool,
    "threshold": (int, float, type(None)),
    "source": dict,
}


@dataclasses.dataclass
class ModelSpec:
    """What, besides weights, a model needs to be used: the content of ``cosent_model.json``.

    ``threshold`` is the score above which a pair counts as similar, tuned for accuracy
    on valid during training (a cosine for feature models, the head's output for
    interaction models); ``None`` when the training task had no binary labels.
    ``head_input`` is what an interaction head reads (:data:`cosent_tf.models.builders.HEAD_INPUTS`);
    ``pair_segments``: the second text of a pair has segment id 1 (as in BERT's pre-training and
    Hugging Face cross-encoders), rather than 0 as in the original interaction experiments.
    """

    kind: str = "feature"
    architecture: str = "bert"
    pooling: str = "cls"
    head: str = None
    head_input: str = "cls"
    pair_segments: bool = False
    maxlen: int = 64
    do_lower_case: bool = True
    word_level: bool = False
    threshold: float = None
    source: dict = dataclasses.field(default_factory=dict)

    def check(self, where):
        """Raise ConfigError naming ``where`` and the field for a value of the wrong type or range."""
        for name, expected in SPEC_TYPES.items():
            if name in ("maxlen", "threshold"):  # NumPy numbers are welcome here; checked below
                continue
            if not isinstance(getattr(self, name), expected):
                raise ConfigError(f"{where}: {name} has the wrong type ({getattr(self, name)!r})")
        threshold = self.threshold
        if threshold is not None and (
            isinstance(threshold, bool) or not isinstance(threshold, numbers.Real) or not math.isfinite(threshold)
        ):
            raise ConfigError(f"{where}: threshold must be a finite number or null, got {threshold!r}")
        if self.kind not in KINDS:
            raise ConfigError(f"{where}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.kind == "interaction" and self.head not in INTERACTION_HEADS:
            raise ConfigError(f"{where}: an interaction model needs head in {INTERACTION_HEADS}, got {self.head!r}")
        if self.head_input not in HEAD_INPUTS:
            raise ConfigError(f"{where}: head_input {self.head_input!r} is not one of {', '.join(HEAD_INPUTS)}")
        try:
            get_architecture(self.architecture)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        if self.kind == "feature" and self.pooling not in POOLING_MODES:
            raise ConfigError(f"{where}: pooling {self.pooling!r} is not one of {', '.join(POOLING_MODES)}")
        if isinstance(self.maxlen, bool) or not isinstance(self.maxlen, int) or self.maxlen < 3:
            raise ConfigError(f"{where}: maxlen must be an integer of at least 3, got {self.maxlen!r}")


def save_model_dir(
    directory: str, keras_model: keras.Model, spec: ModelSpec, config, vocab_path: str, overwrite: bool = False
) -> None:
    """Write a model folder for ``keras_model`` (from build_encoder / build_interaction_model).

    An existing ``directory`` must be empty, or a model folder and ``overwrite`` true.
    """
    spec.check(SPEC_FILE)
    extra = {}
    if spec.kind == "interaction":
        extra = {name: weight.numpy() for name, weight in head_variables(keras_model, head_layer_name(spec.head))}
    with atomic_directory(directory, MODEL_FOLDER, overwrite) as tmp:
        write_checkpoint_folder(keras_model, tmp, config, spec.architecture, vocab_path, extra)
        record = {"format": FORMAT, "format_version": FORMAT_VERSION, **dataclasses.asdict(spec)}
        if spec.threshold is not None:  # a NumPy scalar is not JSON
            record["threshold"] = float(spec.threshold)
        with open(os.path.join(tmp, SPEC_FILE), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2, ensure_ascii=False, sort_keys=True)
            f.write("\n")


def read_spec(directory: str) -> ModelSpec:
    """The :class:`ModelSpec` of a model folder, or of a Hugging Face folder (see
    :func:`hf_spec`); errors name the folder and what is wrong."""
    if not os.path.isdir(directory):
        raise ConfigError(f"{directory}: model folder not found")
    spec_path = os.path.join(directory, SPEC_FILE)
    if not os.path.exists(spec_path) and huggingface.is_hf_folder(directory):
        return hf_spec(directory)
    if not os.path.exists(spec_path):
        raise ConfigError(
            f"{directory}: not a cosent-tf model folder (no {SPEC_FILE}; a training run writes one as "
            "OUTPUT_DIR/model), nor a Hugging Face or sentence-transformers folder (config.json with "
            "model.safetensors or pytorch_model.bin)"
        )
    record = read_json(spec_path, "the model description")
    if json_field(record, "format", str, spec_path) != FORMAT:
        raise ConfigError(f"{spec_path}: not a cosent-tf model description (format is not {FORMAT!r})")
    version = json_field(record, "format_version", int, spec_path, default=0)
    if version > FORMAT_VERSION:
        raise ConfigError(
            f"{spec_path}: format version {version} is newer than this cosent-tf reads ({FORMAT_VERSION}); "
            "upgrade cosent-tf"
        )
    if "model" in record:  # format version 1
        record.setdefault("architecture", json_field(record, "model", str, spec_path))
    spec = ModelSpec(
        **{
            name: json_field(record, name, expected, spec_path)
            for name, expected in SPEC_TYPES.items()
            if name in record
        }
    )
    spec.check(spec_path)
    missing = [
        name
        for name in (CONFIG_FILE, VOCAB_FILE, CHECKPOINT_PREFIX + ".index")
        if not os.path.exists(os.path.join(directory, name))
    ]
    if missing:
        raise ConfigError(f"{directory}: incomplete model folder, missing {', '.join(missing)}")
    outside = [
        name for name in sorted(os.listdir(directory)) if not is_inside(os.path.join(directory, name), directory)
    ]
    if outside:  # a model folder holds its own files: a link elsewhere may change under it
        raise ConfigError(
            f"{directory}: {', '.join(outside)} link(s) to outside the model folder; copy the files in instead"
        )
    return spec


def hf_spec(directory: str) -> ModelSpec:
    """The :class:`ModelSpec` a Hugging Face folder is used as.

    A ``BertForSequenceClassification`` (num_labels 1: a score; 2: P(label 1)) is an interaction
    model with its head on the pooler; anything else is a feature model pooled as its
    sentence-transformers modules say, or (a bare transformers folder) by the mean, as
    sentence-transformers does. maxlen is ``max_seq_length``, else the tokenizer's
    ``model_max_length``, else the position embeddings' count.
    """
    config = huggingface.read_hf_config(directory)
    where = os.path.join(huggingface.transformer_folder(directory), huggingface.CONFIG_FILE)
    huggingface.bert_config(config, where)  # refuses what cannot be built, before anything else
    modules = None
    if huggingface.is_sentence_transformers_folder(directory):
        modules = huggingface.read_sentence_transformers(directory)
    positions = int(config.get("max_position_embeddings", 512))
    maxlen = (modules and modules.maxlen) or huggingface.model_max_length(directory) or positions
    settings = dict(
        architecture="bert",
        maxlen=min(maxlen, positions),
        do_lower_case=huggingface.do_lower_case(directory),
        source={"huggingface": os.path.abspath(directory)},
    )
    labels = huggingface.classifier_labels(config, where)
    if labels is not None:
        if labels not in huggingface.CLASSIFIER_HEADS:
            raise ConfigError(
                f"{where}: a classifier of {labels} labels cannot be used as a pair scorer; "
                f"cosent-tf reads 1 (a score) or 2 (label 1 is 'similar')"
            )
        head = huggingface.CLASSIFIER_HEADS[labels]
        return ModelSpec("interaction", pooling=None, head=head, head_input="pooler", pair_segments=True, **settings)
    return ModelSpec("feature", pooling=modules.pooling if modules else "last-avg", **settings)


def load_model_dir(directory: str, precision: str = "float32") -> tuple:
    """(spec, Keras model, SentenceTokenizer) of a model folder (or a Hugging Face folder),
    for inference: ``precision='bf16'`` builds the model to compute in bfloat16 with its
    weights stored in bfloat16 (the same outputs as mixed bfloat16; not for training)."""
    directory = os.fspath(directory)
    spec = read_spec(directory)
    config_path, checkpoint, vocab_path = checkpoint_files(directory)
    check_maxlen(config_path, spec.architecture, spec.maxlen)
    with dtype_policy(inference_policy_name(precision)):
        if spec.kind == "feature":
            model = build_encoder(config_path, checkpoint, spec.architecture, spec.pooling, vocab_path=vocab_path)
        else:
            model = build_interaction_model(
                config_path,
                checkpoint,
                spec.architecture,
                spec.head,
                vocab_path=vocab_path,
                head_input=spec.head_input,
                require_head=True,
            )
    tokenizer = SentenceTokenizer(vocab_path, spec.maxlen, spec.word_level, spec.do_lower_case)
    return spec, model, tokenizer
