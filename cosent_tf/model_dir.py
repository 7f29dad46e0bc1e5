"""A trained matcher's folder: everything needed to use it again, and nothing from elsewhere.

Layout (a Google-format checkpoint folder plus one file)::

    MODEL_DIR/
      cosent_model.json        kind, architecture, pooling or head, maxlen, tokenizer settings,
                               tuned threshold (when known), and the run it came from
      bert_config.json         the transformer's config
      bert_model.ckpt.*        the transformer's weights under Google names (an
                               interaction model's head under ``cosent/<layer>/...``)
      vocab.txt

Because the weights are a Google-format checkpoint, the folder also serves as
``--checkpoint`` for further fine-tuning and loads in bert4keras itself.
"""

import dataclasses
import json
import math
import numbers
import os

from .backend import dtype_policy, get_architecture, keras, policy_name, tf
from .checkpoints import (
    CHECKPOINT_ENTRIES,
    CHECKPOINT_PREFIX,
    CONFIG_FILE,
    VOCAB_FILE,
    list_checkpoint_variables,
    write_checkpoint_folder,
)
from .errors import CheckpointError, ConfigError
from .io import FolderKind, atomic_directory, is_inside
from .layers import POOLING_MODES
from .losses.registry import KINDS
from .models import INTERACTION_HEADS, build_encoder, build_interaction_model, check_maxlen
from .tokenization import SentenceTokenizer

SPEC_FILE = "cosent_model.json"
FORMAT = "cosent-tf-model"
# Version 2 (cosent-tf 0.2) renamed "model" to "architecture"; version 1 folders still load.
FORMAT_VERSION = 2
HEAD_PREFIX = "cosent/"
MODEL_FOLDER = FolderKind("a cosent-tf model folder", SPEC_FILE, CHECKPOINT_ENTRIES + (SPEC_FILE,))


@dataclasses.dataclass
class ModelSpec:
    """What, besides weights, a model needs to be used: the content of ``cosent_model.json``.

    ``threshold`` is the score above which a pair counts as similar, tuned for accuracy
    on valid during training (a cosine for feature models, the head's output for
    interaction models); ``None`` when the training task had no binary labels.
    """

    kind: str = "feature"
    architecture: str = "bert"
    pooling: str = "cls"
    head: str = None
    maxlen: int = 64
    do_lower_case: bool = True
    word_level: bool = False
    threshold: float = None
    source: dict = dataclasses.field(default_factory=dict)

    def check(self, where):
        """Raise ConfigError naming ``where`` and the field for a value of the wrong type or range."""
        types = {
            "kind": str,
            "architecture": str,
            "pooling": (str, type(None)),
            "head": (str, type(None)),
            "do_lower_case": bool,
            "word_level": bool,
            "source": dict,
        }
        for name, expected in types.items():
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
        extra = {name: weight.numpy() for name, weight in _head_variables(keras_model, spec.head)}
    with atomic_directory(directory, MODEL_FOLDER, overwrite) as tmp:
        write_checkpoint_folder(keras_model, tmp, config, spec.architecture, vocab_path, extra)
        record = {"format": FORMAT, "format_version": FORMAT_VERSION, **dataclasses.asdict(spec)}
        if spec.threshold is not None:  # a NumPy scalar is not JSON
            record["threshold"] = float(spec.threshold)
        with open(os.path.join(tmp, SPEC_FILE), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=2, ensure_ascii=False, sort_keys=True)
            f.write("\n")


def read_spec(directory: str) -> ModelSpec:
    """The :class:`ModelSpec` of a model folder; errors name the folder and what is wrong."""
    if not os.path.isdir(directory):
        raise ConfigError(f"{directory}: model folder not found")
    spec_path = os.path.join(directory, SPEC_FILE)
    if not os.path.exists(spec_path):
        raise ConfigError(
            f"{directory}: not a cosent-tf model folder (no {SPEC_FILE}); a training run writes one as OUTPUT_DIR/model"
        )
    try:
        with open(spec_path, encoding="utf-8") as f:
            record = json.load(f)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{spec_path}, line {e.lineno}: not valid JSON ({e.msg})") from e
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{spec_path}: cannot read ({e})") from e
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise ConfigError(f"{spec_path}: not a cosent-tf model description (format is not {FORMAT!r})")
    if record.get("format_version", 0) > FORMAT_VERSION:
        raise ConfigError(
            f"{spec_path}: format version {record['format_version']} is newer than this "
            f"cosent-tf reads ({FORMAT_VERSION}); upgrade cosent-tf"
        )
    if "model" in record:  # format version 1
        record.setdefault("architecture", record.pop("model"))
    fields = {f.name for f in dataclasses.fields(ModelSpec)}
    spec = ModelSpec(**{k: v for k, v in record.items() if k in fields})
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


def load_model_dir(directory: str, precision: str = "float32") -> tuple:
    """(spec, Keras model, SentenceTokenizer) of a model folder; ``precision='bf16'`` builds the
    model to compute in mixed bfloat16."""
    directory = os.fspath(directory)
    spec = read_spec(directory)
    config_path, prefix, vocab_path = (
        os.path.join(directory, name) for name in (CONFIG_FILE, CHECKPOINT_PREFIX, VOCAB_FILE)
    )
    check_maxlen(config_path, spec.architecture, spec.maxlen)
    with dtype_policy(policy_name(precision)):
        if spec.kind == "feature":
            model = build_encoder(config_path, prefix, spec.architecture, spec.pooling, vocab_path=vocab_path)
        else:
            model = build_interaction_model(config_path, prefix, spec.architecture, spec.head, vocab_path=vocab_path)
            _load_head(model, spec.head, prefix)
    tokenizer = SentenceTokenizer(vocab_path, spec.maxlen, spec.word_level, spec.do_lower_case)
    return spec, model, tokenizer


def _head_variables(model, head):
    """(checkpoint name, variable) of an interaction model's head (the layer outside the transformer)."""
    layer = model.get_layer("Match-" + head.capitalize())
    return [
        (f"{HEAD_PREFIX}{layer.name}/{weight.name.split('/')[-1].split(':')[0]}", weight) for weight in layer.weights
    ]


def _load_head(model, head, prefix):
    available = list_checkpoint_variables(prefix)
    variables = _head_variables(model, head)
    values = []
    for name, weight in variables:
        if name not in available:
            raise CheckpointError(f"{prefix}: the interaction head's variable {name} is missing")
        if tuple(available[name]) != tuple(weight.shape):
            raise CheckpointError(
                f"{prefix}: {name} has shape {tuple(available[name])}, the model needs {tuple(weight.shape)}"
            )
        values.append(tf.train.load_variable(prefix, name))
    for (_, weight), value in zip(variables, values):
        weight.assign(value)
