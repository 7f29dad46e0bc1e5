"""A Keras model run for its outputs: the batched, length-sorted inference that the matchers,
evaluation and training's validation share, and the cosine and cross-encoder scores built on it.

On several devices, a ``tf.distribute`` strategy (made by the caller: the command line takes the
training engine's, :func:`cosent_tf.training.distribute.get_strategy`) shares each batch among
its replicas (:func:`replicated_function`); the outputs are the one-device ones, in input order.

TensorFlow is imported when a Keras model is run: an ONNX export
(:class:`~cosent_tf.inference.onnx_model.OnnxModel`) goes through the same batches without it.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from tqdm.auto import tqdm

from ..console import live_progress_on
from ..data.batching import length_sorted_batches, restore_order, segment_ids
from .onnx_model import OnnxModel
from .vectors import l2_normalize, row_cosines  # noqa: F401  (l2_normalize: its callers import it from here)

if TYPE_CHECKING:
    from ..backend import keras, tf

_INFERENCE_FUNCTIONS: weakref.WeakKeyDictionary[keras.Model, Callable[..., Any]] = weakref.WeakKeyDictionary()
_REPLICATED_FUNCTIONS: weakref.WeakKeyDictionary[
    keras.Model, tuple[tf.distribute.Strategy, Callable[..., np.ndarray]]
] = weakref.WeakKeyDictionary()


def inference_function(model: Any) -> Callable[..., Any]:
    """``model`` in inference mode as a tf.function traced once for every batch shape; a model that is
    no Keras model but a runner of its own (:class:`~cosent_tf.inference.onnx_model.OnnxModel`) is
    returned as it is.

    The batch's two halves go through the model as two independent subgraphs, which
    TensorFlow's executor runs side by side. TensorFlow runs a oneDNN matmul on one thread
    when its operands fit in the L2 cache (``ExecuteSingleThreadedGemm``); where a core's L2
    holds most of a batch's matmul operands, one core would otherwise idle (see
    docs/performance.md, 'Two halves'). Rows never
    interact in the model, so the outputs are the whole batch's (a batch of one leaves an
    empty half).
    """
    if isinstance(model, OnnxModel):  # a runner of its own
        return model
    cached = _INFERENCE_FUNCTIONS.get(model)
    if cached is not None:
        return cached
    from ..process_keras import KERAS_MAJOR, keras, tf

    if KERAS_MAJOR == 3 and keras.backend.backend() != "tensorflow":
        # no tf.function for another backend's model: it runs as it is, one call a batch
        def direct(token_ids: Any, segment_ids: Any) -> np.ndarray:
            outputs = model([np.asarray(token_ids, np.int32), np.asarray(segment_ids, np.int32)], training=False)
            return np.asarray(keras.ops.convert_to_numpy(outputs), np.float32)

        _INFERENCE_FUNCTIONS[model] = direct
        return direct
    ids = tf.TensorSpec(shape=(None, None), dtype=tf.int32)

    # A function of its own, called on each half: the model is traced once, not once per half
    # (tracing is most of a small model's first batch); Grappler inlines both calls, so the
    # halves are still two independent subgraphs.
    @tf.function(input_signature=[ids, ids])
    def outputs(token_ids: tf.Tensor, segment_ids: tf.Tensor) -> tf.Tensor:
        return _model_outputs(model, token_ids, segment_ids)

    @tf.function(input_signature=[ids, ids])
    def function(token_ids: tf.Tensor, segment_ids: tf.Tensor) -> tf.Tensor:
        return _in_halves(outputs, token_ids, segment_ids)

    _INFERENCE_FUNCTIONS[model] = function
    return function


def _model_outputs(model: keras.Model, token_ids: tf.Tensor, segment_ids: tf.Tensor) -> tf.Tensor:
    """The model's float32 outputs of a batch, in inference mode; traced inside a tf.function."""
    from ..process_keras import KERAS_MAJOR, tf

    if KERAS_MAJOR == 3:  # Keras 3 layers keep the policy they were built under
        return tf.cast(model([token_ids, segment_ids], training=False), tf.float32)
    from ..backend import model_precision

    with model_precision(model):  # runs while tracing
        return tf.cast(model([token_ids, segment_ids], training=False), tf.float32)


def _in_halves(
    compute: Callable[[tf.Tensor, tf.Tensor], tf.Tensor], token_ids: tf.Tensor, segment_ids: tf.Tensor
) -> tf.Tensor:
    """``compute``'s float32 outputs of a batch run as two independent halves (see
    :func:`inference_function`); traced inside a tf.function."""
    from ..process_keras import tf

    half = (tf.shape(token_ids)[0] + 1) // 2
    halves = [compute(token_ids[:half], segment_ids[:half]), compute(token_ids[half:], segment_ids[half:])]
    return tf.concat(halves, axis=0)


def replicated_function(model: keras.Model, strategy: tf.distribute.Strategy) -> Callable[..., np.ndarray]:
    """``model`` in inference mode on every replica of ``strategy``: a function of one padded batch
    (token ids, segment ids; numpy) that gives each replica an equal share of its rows (the first
    replica the first rows; a replica may get none) and returns the outputs of the whole batch in
    its own order, float32 numpy.

    The model must have been built in ``strategy.scope()``, so that every replica holds a copy of
    its weights. Each replica runs its share as :func:`inference_function` runs a batch.

    Args:
        model: a Keras model of (token ids, segment ids), built in ``strategy.scope()``.
        strategy: the strategy whose replicas share each batch (a ``MirroredStrategy``).

    Returns:
        The function, made once per model and strategy.

    Raises:
        ValueError: ``model`` is no Keras model (an ONNX model runs on ONNX Runtime's own threads).

    Example:
        >>> with strategy.scope():
        ...     spec, model, tokenizer = load_model_dir("runs/bq-cosent/model")
        >>> ids = np.array([[101, 2769, 102], [101, 872, 102]], dtype=np.int32)
        >>> replicated_function(model, strategy)(ids, np.zeros_like(ids)).shape
        (2, 768)
    """
    if isinstance(model, OnnxModel):
        raise ValueError(f"a tf.distribute strategy runs a Keras model, not a {type(model).__name__}")
    from ..process_keras import tf

    cached = _REPLICATED_FUNCTIONS.get(model)
    if cached is not None and cached[0] is strategy:
        return cached[1]
    replicas = strategy.num_replicas_in_sync

    # reduce_retracing: each batch has its own length, and the replicas' shares their own sizes
    @tf.function(reduce_retracing=True)
    def on_every_replica(token_ids: Any, segment_ids: Any) -> Any:
        return strategy.run(
            lambda ids, segments: _in_halves(lambda *batch: _model_outputs(model, *batch), ids, segments),
            args=(token_ids, segment_ids),
        )

    def function(token_ids: np.ndarray, segment_ids: np.ndarray) -> np.ndarray:
        shares = np.array_split(np.arange(len(token_ids)), replicas)

        def shared(rows: np.ndarray) -> Any:
            return strategy.experimental_distribute_values_from_function(
                lambda context: tf.constant(rows[shares[context.replica_id_in_sync_group]], tf.int32)
            )

        outputs = on_every_replica(shared(token_ids), shared(segment_ids))
        return np.concatenate([np.asarray(share) for share in strategy.experimental_local_results(outputs)])

    _REPLICATED_FUNCTIONS[model] = (strategy, function)
    return function


def batched_outputs(
    model: Any,
    token_ids: Sequence[Sequence[int]],
    batch_size: int = 64,
    show_progress: bool = False,
    sep_id: int | None = None,
    strategy: tf.distribute.Strategy | None = None,
) -> np.ndarray:
    """A model's outputs (float32 numpy) in input order, computed in length-sorted batches.

    Each batch is padded only to its own longest sequence; segment ids are all 0, or with
    ``sep_id`` those of concatenated pairs (:func:`cosent_tf.data.pipeline.segment_ids`).

    Args:
        model: a Keras model of (token ids, segment ids), or a model with its own runner called so
            (:class:`~cosent_tf.inference.onnx_model.OnnxModel`).
        token_ids: one token-id sequence per input, unpadded.
        batch_size: inputs per model call.
        show_progress: show a progress bar on stderr, when it is a terminal (or a Jupyter cell).
        sep_id: the [SEP] id, for models that mark a pair's second text with segment id 1.
        strategy: a ``tf.distribute`` strategy ``model`` was built under: each batch is shared
            among its replicas (:func:`replicated_function`), so ``batch_size`` is the batch of all
            devices together. None (or a strategy of one replica): one device.

    Returns:
        float32 array, one row of outputs per input, in input order.

    Raises:
        ValueError: a strategy of several replicas with a model that is no Keras model.

    Example:
        >>> vectors = batched_outputs(encoder, tokenizer.encode_all(["花呗如何还钱", "借呗额度"]))
    """
    if strategy is not None and strategy.num_replicas_in_sync > 1:
        function = replicated_function(model, strategy)
    else:
        function = inference_function(model)
    order, batches = length_sorted_batches(list(token_ids), batch_size)
    drawn = show_progress and live_progress_on(sys.stderr)  # tqdm's stream; a log file would keep every redraw
    outputs = [
        np.asarray(function(ids, segment_ids(ids, sep_id)))
        for _, ids in tqdm(
            batches, total=-(-len(order) // batch_size), unit="batch", desc="encoding", disable=not drawn
        )
    ]
    if not outputs:
        return np.zeros((0,) + tuple(model.output_shape[1:]), dtype=np.float32)
    return restore_order(np.concatenate(outputs), order)


def cosine_scores(
    encoder: keras.Model,
    ids_a: Sequence[Sequence[int]],
    ids_b: Sequence[Sequence[int]],
    batch_size: int = 64,
    show_progress: bool = False,
) -> np.ndarray:
    """Cosine of each pair's two sentence vectors (both sides encoded in one pass).

    Args:
        encoder: a feature model of (token ids, segment ids).
        ids_a: the pairs' first token-id sequences.
        ids_b: the pairs' second token-id sequences, aligned with ``ids_a``.
        batch_size: inputs per model call.
        show_progress: show a progress bar.

    Returns:
        float32 array, one cosine per pair.

    Example:
        >>> cosine_scores(encoder, tokenizer.encode_all(["花呗如何还钱"]), tokenizer.encode_all(["花呗怎么还款"]))
    """
    vectors = batched_outputs(encoder, list(ids_a) + list(ids_b), batch_size, show_progress)
    return row_cosines(vectors[: len(ids_a)], vectors[len(ids_a) :])


def interaction_scores(
    model: keras.Model,
    pair_ids: Sequence[Sequence[int]],
    batch_size: int = 64,
    show_progress: bool = False,
    sep_id: int | None = None,
    strategy: tf.distribute.Strategy | None = None,
) -> np.ndarray:
    """A cross-encoder's score per pair: the scalar, or P(similar) for a two-way softmax.

    Args:
        model: an interaction model of (token ids, segment ids).
        pair_ids: each pair's concatenated token ids (``SentenceTokenizer.encode_pairs``).
        batch_size: pairs per model call.
        show_progress: show a progress bar.
        sep_id: marks the second text with segment id 1 (models with ``pair_segments``).
        strategy: the strategy ``model`` was built under, whose replicas share each batch
            (:func:`batched_outputs`).

    Returns:
        float32 array, one score per pair.

    Example:
        >>> interaction_scores(model, tokenizer.encode_pairs(["花呗如何还钱"], ["花呗怎么还款"]))
    """
    return batched_outputs(model, pair_ids, batch_size, show_progress, sep_id, strategy)[:, -1]
