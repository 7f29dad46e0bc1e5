"""Sentence encoders on keras-hub backbones: :func:`build_encoder` (token ids in, one float32 vector
per text out, in any of the Keras 2 engine's poolings) and :class:`SentenceEncoder` (a folder loaded,
texts encoded as the Keras 2 engine's ``SentenceEncoder`` encodes them).

Texts are tokenised by cosent-tf's own :class:`~cosent_tf.models.tokenization.SentenceTokenizer`
(bert4keras's WordPiece, as in training), never keras-hub's: its NFKC lower-casing turns Chinese
punctuation (，？) into ASCII, which changes the ids of about a quarter of Chinese sentences.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

import numpy as np

from ..choices import POOLING_MODES
from ..errors import CheckpointError, ConfigError
from ..inference.texts import check_texts
from ..inference.vectors import l2_normalize
from ..models.checkpoint_files import VOCAB_FILE
from ..models.tokenization import SentenceTokenizer
from .backbones import LoadedBackbone, load_backbone
from .layers import PaddingMask, Pooling
from .runtime import checked_keras

keras: Any = checked_keras()

# The tokens per text of a folder that names none (a Google-format checkpoint): ModelSpec's default.
DEFAULT_MAXLEN = 64


class _BackboneInputs(keras.layers.Layer):
    """A keras-hub backbone's three inputs from token ids, their padding mask (:class:`PaddingMask`)
    and segment ids (None: all 0, one text); the mask keeps padding out of attention."""

    def call(self, token_ids: Any, mask: Any, segment_ids: Any = None) -> dict:
        token_ids = keras.ops.cast(token_ids, "int32")
        return {
            "token_ids": token_ids,
            "segment_ids": keras.ops.zeros_like(token_ids)
            if segment_ids is None
            else keras.ops.cast(segment_ids, "int32"),
            "padding_mask": keras.ops.cast(mask, "int32"),
        }


def _first_block_output(backbone: Any) -> Any:
    """The first transformer block's output in the backbone's graph, as the Keras 2 engine's
    first-last-avg takes it (``first_layer_output``): after the block's feed-forward norm; for
    ALBERT, its shared block's first application."""
    layers = backbone.transformer_layers
    first = layers[0][0] if isinstance(layers[0], list) else layers[0]
    return first.output  # a layer called several times (ALBERT's): its first call's output


def pooled(backbone: Any, pooling: str, token_ids: Any, segment_ids: Any = None, name: str = "encoder") -> Any:
    """``backbone``'s float32 vectors (B, H) of the symbolic ``token_ids`` (B, T) pooled by ``pooling``,
    computed as the Keras 2 engine pools (:data:`cosent_tf.choices.POOLING_MODES`): the one body of
    :func:`build_encoder`'s token-ids model and :func:`cosent_tf.keras3.models.build_from_spec`'s
    two-input models (whose interaction heads read the ``cls`` or ``pooler`` vector).

    The padding mask is ``token_ids != 0``; ``segment_ids`` None gives all 0 (one text).
    ``first-last-avg`` averages the first block's and the last block's token means, ``pooler`` is
    BERT's pooler (tanh dense on [CLS]). The layers are the backbone's: training them trains it.

    Raises:
        ConfigError: an unknown pooling.
    """
    if pooling not in POOLING_MODES:
        raise ConfigError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLING_MODES)}")
    outputs = backbone.output
    if pooling == "first-last-avg":
        wanted = [_first_block_output(backbone), outputs["sequence_output"]]
    elif pooling == "pooler":
        wanted = outputs["pooled_output"]
    else:
        wanted = outputs["sequence_output"]
    hidden_states = keras.Model(backbone.input, wanted, name=f"{name}_backbone")
    mask = PaddingMask(name="padding_mask")(token_ids)
    hidden = hidden_states(_BackboneInputs(name="backbone_inputs")(token_ids, mask, segment_ids))
    return Pooling(pooling, name="pooling")(hidden, mask=mask)


def build_encoder(backbone: Any, pooling: str = "cls", name: str = "encoder") -> Any:
    """A Keras model from token ids (B, T) int32 to one float32 vector per text (B, H).

    Segment ids are all 0 and the padding mask is ``token_ids != 0``, as the Keras 2 engine encodes
    one text; ``pooling`` is computed as the Keras 2 engine's (:func:`pooled`). The model shares the
    backbone's layers: training it trains the backbone.

    Args:
        backbone: a keras-hub BERT or ALBERT backbone (:func:`cosent_tf.keras3.backbones.load_backbone`).
        pooling: the pooling.
        name: the model's name.

    Raises:
        ConfigError: an unknown pooling.

    Example:
        >>> backbone = load_backbone("checkpoints/chinese-roberta-wwm-ext").backbone  # doctest: +SKIP
        >>> encoder = build_encoder(backbone, "cls")  # doctest: +SKIP
    """
    token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
    return keep_backbone(keras.Model(token_ids, pooled(backbone, pooling, token_ids, name=name), name=name), backbone)


def keep_backbone(model: Any, backbone: Any) -> Any:
    """``model`` with ``model.backbone`` set to the keras-hub backbone its layers are (which the
    Google names of its weights are read from: :func:`cosent_tf.keras3.models.model_arrays`).

    Set past Keras's attribute tracking: tracked, the backbone would add its variables that the
    model does not use (the pooler of a model that does not pool by it) to the model's, and so to
    what the optimizer trains. Returns ``model``."""
    object.__setattr__(model, "backbone", backbone)
    return model


class SentenceEncoder:
    """Sentence vectors from a keras-hub encoder, with the Keras 2 engine's ``SentenceEncoder``'s
    semantics: texts cut to ``maxlen`` tokens, encoded in length-sorted batches each padded to its
    own longest text, vectors L2-normalised by default.

    Args:
        model: a :func:`build_encoder` model.
        tokenizer: the :class:`~cosent_tf.models.tokenization.SentenceTokenizer` of its vocabulary.
        loaded: the backbone's source (:meth:`load` sets it).

    Example:
        >>> encoder = SentenceEncoder.load("runs/bq-cosent/model")  # doctest: +SKIP
        >>> encoder.similarity(["花呗如何还钱"], ["花呗怎么还款"])  # doctest: +SKIP
    """

    def __init__(self, model: Any, tokenizer: SentenceTokenizer, loaded: Optional[LoadedBackbone] = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.loaded = loaded

    @classmethod
    def load(
        cls, path: Any, pooling: Optional[str] = None, maxlen: Optional[int] = None, architecture: Optional[str] = None
    ) -> SentenceEncoder:
        """An encoder of a model folder, a Hugging Face / sentence-transformers folder or a
        Google-format checkpoint (:func:`~cosent_tf.keras3.backbones.load_backbone`).

        Args:
            path: the folder (or checkpoint prefix).
            pooling: None: the folder's own (a model folder's, a sentence-transformers folder's; the
                mean for a bare Hugging Face folder, ``cls`` for a checkpoint).
            maxlen: tokens per text; None: the folder's, else :data:`DEFAULT_MAXLEN` (or the positions, if fewer).
            architecture: a Google-format checkpoint's family (default ``bert``).

        Raises:
            ConfigError: as ``load_backbone``; an unknown pooling; a maxlen beyond the position
                embeddings; no vocabulary beside a checkpoint.
            CheckpointError: as ``load_backbone``; pooling ``pooler`` on a source without a pooler.
        """
        loaded = load_backbone(path, architecture)
        pooling = pooling or loaded.pooling or "cls"
        if pooling == "pooler" and not loaded.has_pooler:
            raise CheckpointError(
                f"{loaded.source}: this checkpoint has no pooler, so pooling 'pooler' cannot be used with it; "
                "choose cls, last-avg, first-last-avg or max"
            )
        positions = int(loaded.config.get("max_position_embeddings", 512))
        maxlen = int(maxlen or loaded.maxlen or min(DEFAULT_MAXLEN, positions))
        if maxlen > positions:
            raise ConfigError(f"{loaded.source}: maxlen {maxlen} is beyond the model's {positions} positions")
        if loaded.vocab_path is None:
            raise ConfigError(f"{loaded.source}: no vocabulary ({VOCAB_FILE}) beside the checkpoint")
        tokenizer = SentenceTokenizer(loaded.vocab_path, maxlen, do_lower_case=loaded.do_lower_case)
        return cls(build_encoder(loaded.backbone, pooling), tokenizer, loaded)

    @property
    def width(self) -> int:
        """The vectors' dimensions."""
        return int(self.model.output.shape[-1])

    def encode(self, texts: Iterable[str], batch_size: int = 64, normalize: bool = True) -> np.ndarray:
        """Vectors of ``texts``: float32, (len(texts), width), L2-normalised unless ``normalize`` is False.

        Raises:
            TypeError: ``texts`` is not a sequence of strings.
            ValueError: ``batch_size`` is not positive.
        """
        texts = check_texts(texts)
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        ids = self.tokenizer.encode_all(texts)
        order = np.argsort([len(row) for row in ids], kind="stable")
        vectors = np.zeros((len(texts), self.width), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            batch = np.zeros((len(rows), max(len(ids[row]) for row in rows)), dtype=np.int32)
            for i, row in enumerate(rows):
                batch[i, : len(ids[row])] = ids[row]
            vectors[rows] = np.asarray(keras.ops.convert_to_numpy(self.model.predict_on_batch(batch)), np.float32)
        return l2_normalize(vectors) if normalize else vectors

    def similarity(self, texts_a: Iterable[str], texts_b: Iterable[str], batch_size: int = 64) -> np.ndarray:
        """Cosine of each aligned pair (texts_a[i], texts_b[i]), float32.

        Raises:
            TypeError: either side is not a sequence of strings.
            ValueError: the two sides differ in length.
        """
        texts_a, texts_b = check_texts(texts_a, "texts_a"), check_texts(texts_b, "texts_b")
        if len(texts_a) != len(texts_b):
            raise ValueError(f"texts_a has {len(texts_a)} texts but texts_b has {len(texts_b)}; pairs must align")
        vectors = self.encode(texts_a + texts_b, batch_size)
        return np.sum(vectors[: len(texts_a)] * vectors[len(texts_a) :], axis=1)
