"""The one place that knows about bert4keras and TensorFlow quirks.

Everything else in the package imports ``keras`` and ``tf`` from here and reads as plain
Keras 2. What this module works around (see ../shared/docs/platform-notes.md):

* bert4keras needs Keras 2: ``TF_USE_LEGACY_KERAS=1`` makes ``tf.keras`` the tf-keras
  package and ``TF_KERAS=1`` makes bert4keras use it. Both must be set before TensorFlow
  resolves ``tf.keras``, so this module sets them at import time.
* Since Keras 2.10 an unseeded initializer instance repeats its values on every call,
  and bert4keras hands one instance to the query, key, value and output kernels of an
  attention block, so a model built from scratch starts with Q = K = V = O. The
  transformer classes built here draw fresh values on every call instead.
* ``Transformer.save_weights_as_checkpoint`` uses TF1 sessions and fails on TF2; Google
  format checkpoints are written here with the ``SaveV2`` op directly.
* bert4keras creates a Dropout layer inside the attention's ``call``, so it takes the
  global dtype policy of the moment the model is traced: a mixed-bfloat16 model traced
  under a float32 policy fails. ``model_precision`` restores the model's own policy.
* ``BackupAndRestore`` either backs up at epoch ends (and then resumes at the next
  epoch even from a mid-epoch save) or every N batches (and then never after the
  epoch-end callbacks, such as validation, have run). ``StepBackup`` uses its
  private hooks to do both, and to save on SIGTERM/SIGINT.
* tensorflow-text (WordPiece inside a graph, for export) is imported only when needed:
  it registers ops at import and is not needed for training.
* TensorFlow's default CPU allocator hands large buffers back to the system and faults
  them in again on the next step: with a 21128-row embedding that was a third of a small
  model's training step, spent in the kernel. ``TF_CPU_ALLOCATOR_USE_BFC=1`` (set here
  unless already set) keeps them in TensorFlow's own BFC pool (see benchmarks/RESULTS.md).
* oneDNN 3.7 (bundled with TensorFlow 2.21) can hand a matmul over a size-1 dimension a
  cached primitive made for the same shapes with other strides on that dimension, which
  may need a larger scratchpad than the one TensorFlow allocated (fixed in oneDNN 3.11,
  uxlfoundation/oneDNN#5043); the primitive then writes past the scratchpad into whatever
  tensor the allocator put next to it. [CLS] pooling's single query (``first_token_output``)
  makes such matmuls in every training step, and the garbage token ids and shape values
  seen on AVX-512/AMX CPUs were float32 bit patterns of magnitude 1e-4, as such a write
  would leave (the cause is inferred; see benchmarks/SOAK.md). oneDNN's own primitive
  cache is therefore off (``ONEDNN_PRIMITIVE_CACHE_CAPACITY=0``, set here unless already
  set); creating the primitives afresh costs no measurable speed (benchmarks/SOAK.md).
"""
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "1")
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "0")

import contextlib  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import signal  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

if os.environ["TF_USE_LEGACY_KERAS"] != "1" or tf.keras.__name__.split(".")[0] != "tf_keras":
    raise ImportError(
        "cosent_tf needs Keras 2 (tf-keras): set TF_USE_LEGACY_KERAS=1 before TensorFlow "
        "is first imported, or import cosent_tf first."
    )

from bert4keras import models as _b4k_models  # noqa: E402
from bert4keras.tokenizers import Tokenizer as Bert4kerasTokenizer  # noqa: E402,F401

from .errors import CheckpointError, ConfigError, TrainingInterrupted  # noqa: E402
from .io import is_inside  # noqa: E402

# Names accepted for ``model``: the bert4keras class, and whether its vocabulary is
# word-level (jieba pre-tokenisation, as WoBERT and the original RoFormer).
TRANSFORMERS = {
    "bert": (_b4k_models.BERT, False),
    "roberta": (_b4k_models.BERT, False),
    "wobert": (_b4k_models.BERT, True),
    "nezha": (_b4k_models.NEZHA, False),
    "albert": (_b4k_models.ALBERT, False),
    "roformer": (_b4k_models.RoFormer, True),
}


@keras.utils.register_keras_serializable(package="cosent_tf")
class IndependentTruncatedNormal(keras.initializers.Initializer):
    """BERT's truncated normal initializer, drawing new values on every call.

    Values come from TensorFlow's stateful generator, so ``keras.utils.set_random_seed``
    makes a whole model reproducible while every kernel still differs from the others.
    """

    def __init__(self, stddev=0.02):
        self.stddev = stddev

    def __call__(self, shape, dtype=None, **kwargs):
        dtype = tf.as_dtype(dtype or keras.backend.floatx())
        return tf.random.truncated_normal(shape, stddev=self.stddev, dtype=dtype)

    def get_config(self):
        return {"stddev": self.stddev}


class _IndependentInitializer:
    @property
    def initializer(self):
        return IndependentTruncatedNormal(stddev=0.02)


def transformer_class(model):
    """The bert4keras transformer class for ``model``, with a working initializer."""
    if model not in TRANSFORMERS:
        raise ConfigError(f"unknown model {model!r}; choose one of {sorted(TRANSFORMERS)}")
    base = TRANSFORMERS[model][0]
    return type(base.__name__, (_IndependentInitializer, base), {})


def import_tensorflow_text():
    try:
        import tensorflow_text
    except ImportError as e:
        raise ConfigError("in-graph tokenisation (export) needs tensorflow-text: "
                          f"pip install tensorflow-text=={tf.__version__.rsplit('.', 1)[0]}.*") from e
    return tensorflow_text


def is_word_level(model):
    if model not in TRANSFORMERS:
        raise ConfigError(f"unknown model {model!r}; choose one of {sorted(TRANSFORMERS)}")
    return TRANSFORMERS[model][1]


def read_config(config_path):
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except OSError as e:
        raise ConfigError(f"{config_path}: cannot read the model config ({e.strerror})") from e
    except json.JSONDecodeError as e:
        raise ConfigError(f"{config_path}, line {e.lineno}: not valid JSON ({e.msg})") from e
    required = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "hidden_act"]
    missing = [k for k in required if k not in config]
    if missing:
        raise ConfigError(f"{config_path}: model config lacks {', '.join(missing)}")
    for key in required[:-1]:
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{config_path}: {key} must be a positive integer, got {value!r}")
    if config["hidden_size"] % config["num_attention_heads"]:
        raise ConfigError(f"{config_path}: hidden_size {config['hidden_size']} is not a multiple of "
                          f"num_attention_heads {config['num_attention_heads']}")
    return config


def list_checkpoint_variables(checkpoint_prefix):
    """{name: shape} of a checkpoint; an unreadable one is a CheckpointError naming it."""
    try:
        return dict(tf.train.list_variables(checkpoint_prefix))
    except (tf.errors.OpError, ValueError, IndexError) as e:
        raise CheckpointError(f"{checkpoint_prefix}: cannot read this checkpoint ({_first_line(e)}); "
                              "it may be truncated or corrupted") from None


def _first_line(error):
    text = getattr(error, "message", None) or str(error)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def resolve_checkpoint(checkpoint_path):
    """Accept a checkpoint prefix (``.../bert_model.ckpt``) or the directory holding it."""
    path = os.fspath(checkpoint_path)
    if os.path.isdir(path):
        prefix = tf.train.latest_checkpoint(path)
        if prefix is not None and not is_inside(prefix, path):
            raise CheckpointError(f"{path}: its 'checkpoint' file names {prefix}, outside this folder; "
                                  "pass that checkpoint itself, or fix the file")
        if prefix is None:
            candidates = sorted(f[: -len(".index")] for f in os.listdir(path) if f.endswith(".index"))
            if len(candidates) != 1:
                raise CheckpointError(f"{path}: no TensorFlow checkpoint (*.index) in this directory")
            prefix = os.path.join(path, candidates[0])
        return prefix
    if not os.path.exists(path + ".index"):
        raise CheckpointError(f"{path}: checkpoint not found (no {os.path.basename(path)}.index)")
    return path


def _layer_variables(transformer, layer_name, checkpoint_names):
    layer = transformer.layers[layer_name]
    return list(zip(checkpoint_names, layer.trainable_weights))


def _mapped_variables(transformer):
    """(checkpoint name, Keras variable) for every variable the built model has."""
    mapping = {transformer.prefixed(k): v for k, v in transformer.variable_mapping().items()}
    pairs = []
    for layer_name, names in mapping.items():
        if layer_name in transformer.layers:
            pairs.extend(_layer_variables(transformer, layer_name, names))
    return pairs


def check_checkpoint(transformer, checkpoint_prefix):
    """Raise CheckpointError listing every variable the model needs that is absent or misshapen."""
    available = list_checkpoint_variables(checkpoint_prefix)
    missing, wrong_shape = [], []
    for name, variable in _mapped_variables(transformer):
        if name not in available:
            missing.append(name)
        elif tuple(available[name]) != tuple(variable.shape):
            wrong_shape.append(f"{name} {tuple(available[name])} != {tuple(variable.shape)}")
    problems = []
    if missing and all("pooler" in name for name in missing):
        raise CheckpointError(
            f"{checkpoint_prefix}: this checkpoint has no pooler ({', '.join(missing)} missing), so pooling "
            "'pooler' cannot be used with it; choose cls, last-avg, first-last-avg or max")
    if missing:
        problems.append(f"missing {len(missing)} variable(s): {', '.join(missing[:10])}"
                        + (" ..." if len(missing) > 10 else ""))
    if wrong_shape:
        problems.append("shape (checkpoint != config) differs for " + "; ".join(wrong_shape[:10]))
    layers = getattr(transformer, "num_hidden_layers", None)
    deeper = sorted(name for name in available if layers is not None and
                    (match := re.search(r"/encoder/layer_(\d+)/", name)) and int(match.group(1)) >= layers)
    if deeper:
        problems.append(f"the checkpoint has {len(deeper)} variable(s) of layers beyond the config's "
                        f"num_hidden_layers {layers} ({deeper[0]} ...)")
    if problems:
        raise CheckpointError(f"{checkpoint_prefix}: does not fit the model config: " + ". ".join(problems))


# Models whose position embeddings are a learned table of max_position_embeddings rows.
ABSOLUTE_POSITIONS = ("bert", "roberta", "wobert", "albert")


def check_maxlen(config_path, model, maxlen):
    """Raise ConfigError if ``maxlen`` tokens do not fit the model's position embeddings."""
    limit = read_config(config_path).get("max_position_embeddings", 512)
    if model in ABSOLUTE_POSITIONS and maxlen > limit:
        raise ConfigError(f"{config_path}: maxlen {maxlen} is longer than the model's "
                          f"{limit} position embeddings (max_position_embeddings); use --maxlen {limit} or less")


def build_transformer(config_path, checkpoint_path=None, model="bert", **overrides):
    """Build (and optionally load) a bert4keras transformer; returns the Transformer object."""
    config = read_config(config_path)
    config.update(overrides)
    config.setdefault("max_position", config.get("max_position_embeddings", 512))
    config.setdefault("dropout_rate", config.get("hidden_dropout_prob"))
    config.setdefault("attention_dropout_rate", config.get("attention_probs_dropout_prob"))
    config.setdefault("segment_vocab_size", config.get("type_vocab_size", 2))
    transformer = transformer_class(model)(**config)
    transformer.build(**config)
    if checkpoint_path is not None:
        prefix = resolve_checkpoint(checkpoint_path)
        check_checkpoint(transformer, prefix)
        try:
            transformer.load_weights_from_checkpoint(prefix)
        except (tf.errors.OpError, ValueError, IndexError) as e:
            raise CheckpointError(f"{prefix}: cannot read this checkpoint's weights ({_first_line(e)}); "
                                  "it may be truncated or corrupted") from None
    return transformer


def write_checkpoint_variables(keras_model, config, model, prefix, extra=None):
    """Write ``keras_model``'s transformer weights under Google checkpoint names to ``prefix``.

    ``keras_model`` is any Keras model containing the transformer's layers (an encoder
    or an interaction model built by this package). ``extra`` ({name: array}) adds
    variables of layers outside the transformer; loaders that do not know them ignore them.
    """
    transformer = transformer_class(model)(**_constructor_config(config))
    mapping = transformer.variable_mapping()
    names, values = [], []
    layer_names = {layer.name for layer in keras_model.layers}
    for layer_name, checkpoint_names in mapping.items():
        if layer_name not in layer_names:
            continue
        weights = keras_model.get_layer(layer_name).trainable_weights
        for name, weight in zip(checkpoint_names, weights):
            value = weight.numpy()
            if name == "cls/seq_relationship/output_weights":
                value = value.T
            names.append(name)
            values.append(tf.constant(value))
    for name, value in (extra or {}).items():
        names.append(name)
        values.append(tf.constant(value))
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names,
                      shape_and_slices=[""] * len(names), tensors=values)
    return names


def _constructor_config(config):
    config = dict(config)
    config.setdefault("max_position", config.get("max_position_embeddings", 512))
    return config


def first_layer_output(transformer):
    """Output of the first transformer block (for first-last-avg pooling)."""
    layers = transformer.layers
    if "Transformer-0-FeedForward-Norm" in layers:
        return layers["Transformer-0-FeedForward-Norm"].output
    # ALBERT shares one block across depths: take the block's first application.
    return layers["Transformer-FeedForward-Norm"].get_output_at(0)


def first_token_output(transformer):
    """The last block's output at the first ([CLS]) position only, (B, 1, H), or None.

    The last block's keys and values need every token, but its query, attention output,
    feed-forward and layer norms are needed at the first position only when only [CLS]
    is used. Applying that block's own layers (the same weights) to the [CLS] query skips
    about four fifths of the block, in training and inference; the result is the full
    model's [CLS] vector. Only for BERT-style models: NEZHA (relative positions), ALBERT
    (one shared block) and RoFormer (rotary positions) return None.
    """
    if type(transformer).__bases__[-1] is not _b4k_models.BERT:  # the class transformer_class derived from
        return None
    layers = transformer.layers
    attention = f"Transformer-{transformer.num_hidden_layers - 1}-MultiHeadSelfAttention"
    feed_forward = f"Transformer-{transformer.num_hidden_layers - 1}-FeedForward"
    hidden = layers[attention].get_input_at(0)[0]
    query = keras.layers.Lambda(lambda x: x[:, :1], name="First-Token-Query")(hidden)

    def dropout(name, x):  # bert4keras leaves the layer out when the rate is 0
        return layers[name](x) if name in layers else x

    x = dropout(f"{attention}-Dropout", layers[attention]([query, hidden, hidden]))
    x = layers[f"{attention}-Norm"](layers[f"{attention}-Add"]([query, x]))
    y = dropout(f"{feed_forward}-Dropout", layers[feed_forward](x))
    return layers[f"{feed_forward}-Norm"](layers[f"{feed_forward}-Add"]([x, y]))


def set_precision(policy):
    """Set the global Keras dtype policy ('float32' or 'mixed_bfloat16')."""
    keras.mixed_precision.set_global_policy(policy)


@contextlib.contextmanager
def model_precision(model):
    """Within the block the global dtype policy is the one ``model`` was built under.

    Trace a model's call inside this block (see the module docstring).
    """
    mixed = any(layer.dtype_policy.name == "mixed_bfloat16" for layer in model.layers)
    previous = keras.mixed_precision.global_policy()
    set_precision("mixed_bfloat16" if mixed else "float32")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)



class StepBackup(keras.callbacks.BackupAndRestore):
    """Keras BackupAndRestore that saves at the right moments for an exact resume.

    The training state (weights, optimizer, epoch and batch counters) is saved

    * at the end of every epoch, after the callbacks listed before this one have run
      their ``on_epoch_end`` (list it last, after validation);
    * every ``every_steps`` optimizer steps, if given (a crash then loses at most that many);
    * after the current step when SIGTERM or SIGINT arrives; training then stops with
      :class:`TrainingInterrupted`.

    The same ``fit`` call resumes from the last save, mid-epoch included. Callbacks that
    read the restored step must do so from ``on_epoch_begin`` on, since this one restores
    in ``on_train_begin`` after them. The backup outlives ``fit``: the caller removes it
    once everything that depends on the training is written.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, backup_dir, every_steps=0):
        # An integer save_freq makes the restore resume at the saved batch, not the next epoch.
        super().__init__(backup_dir, save_freq=1 << 62, delete_checkpoint=False)
        self.every_steps = int(every_steps or 0)
        self.received = None
        self._handlers = {}

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        self.received = None
        self._handlers = {number: signal.signal(number, self._receive) for number in self.SIGNALS}

    def _receive(self, number, frame):
        self.received = number

    def restore_signal_handlers(self):
        for number, handler in self._handlers.items():
            signal.signal(number, handler)
        self._handlers = {}

    def on_train_batch_end(self, batch, logs=None):
        if batch + 1 == self.params.get("steps"):
            return  # the epoch's end saves, once its validation has run
        step = int(self.model.optimizer.iterations.numpy())
        if self.received is not None or (self.every_steps and step % self.every_steps == 0):
            self._backup(epoch=self._current_epoch, batch=batch)
        self._stop_if_signalled()

    def on_epoch_end(self, epoch, logs=None):
        self._backup(epoch=epoch, batch=self.params.get("steps", 1) - 1)
        self._stop_if_signalled()

    def _stop_if_signalled(self):
        if self.received is None:
            return
        self.restore_signal_handlers()
        name = signal.Signals(self.received).name
        step = int(self.model.optimizer.iterations.numpy())
        raise TrainingInterrupted(self.received, f"{name} received: training state saved after step {step} in "
                                  f"{self.backup_dir}; run the same command again to resume from there")

    def on_train_end(self, logs=None):
        self.restore_signal_handlers()
        super().on_train_end(logs)


__all__ = ["tf", "keras", "np"]
