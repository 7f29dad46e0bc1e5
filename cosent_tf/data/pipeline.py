"""tf.data input pipelines: interleaved pair batches, concatenated-pair batches, sentences.

Token ids are produced once up front; each batch is padded only to its own longest
sequence. Batch order is a seeded shuffle that changes every epoch; with
``group_by_length`` the examples of a pool of batches are sorted by length before being
cut into batches (and the batches shuffled again), so little padding is computed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Callable, Optional, Union

import numpy as np

from ..backend import tf

# How many batches' worth of examples are sorted together when grouping by length:
# large enough to find similar lengths, small enough to keep batches random.
LENGTH_POOL_BATCHES = 50


def pad_batch(sequences: Sequence[Sequence[int]], padding_id: int = 0) -> np.ndarray:
    """Stack token id sequences into an int32 matrix padded to the longest of them.

    Args:
        sequences: token id lists, at least one.
        padding_id: the id the shorter rows are padded with.

    Returns:
        An int32 array of shape (len(sequences), longest).

    Example:
        >>> pad_batch([[101, 872, 102], [101, 102]])
        array([[101, 872, 102],
               [101, 102,   0]], dtype=int32)
    """
    longest = max(len(s) for s in sequences)
    batch = np.full((len(sequences), longest), padding_id, dtype=np.int32)
    for row, sequence in enumerate(sequences):
        batch[row, : len(sequence)] = sequence
    return batch


def batches_per_epoch(count: int, batch_size: int, replicas: int = 1) -> int:
    """Batches in one pass over ``count`` examples: the full ones, and the rest if at least
    ``replicas`` examples are left (see :func:`batch_indices`).

    Args:
        count: examples.
        batch_size: examples per batch.
        replicas: the replicas each batch is split between.

    Returns:
        The number of batches.

    Example:
        >>> batches_per_epoch(10, 4), batches_per_epoch(9, 4, replicas=2)
        (3, 2)
    """
    full, rest = divmod(count, batch_size)
    return full + (rest >= replicas)


def batch_indices(
    lengths: Sequence[int],
    batch_size: int,
    epoch: int,
    shuffle: bool = True,
    group_by_length: bool = False,
    seed: int = 0,
    replicas: int = 1,
) -> list[np.ndarray]:
    """Index arrays of the batches of one epoch (every example exactly once).

    With ``replicas`` > 1 every batch holds a multiple of ``replicas`` examples, so that
    tf.distribute can give each replica an equal slice: ``batch_size`` must be a multiple,
    and the last, partial batch leaves out its ``count % replicas`` examples that epoch (a
    different few each epoch when shuffling).

    Args:
        lengths: each example's length in tokens.
        batch_size: examples per batch.
        epoch: the epoch, which with ``seed`` seeds the shuffle.
        shuffle: shuffle the examples (else file order).
        group_by_length: sort each pool of :data:`LENGTH_POOL_BATCHES` batches' examples by
            length before cutting it into batches, and shuffle the batches.
        seed: the run's seed.
        replicas: the replicas each batch is split between.

    Returns:
        One int64 index array per batch.

    Raises:
        ValueError: ``batch_size`` is not positive or not a multiple of ``replicas``.

    Example:
        >>> [b.tolist() for b in batch_indices([3, 1, 2], batch_size=2, epoch=0, shuffle=False)]
        [[0, 1], [2]]
    """
    if batch_size % replicas:
        raise ValueError(f"batch_size {batch_size} is not a multiple of the {replicas} replicas")
    length_of = np.asarray(lengths)
    count = len(length_of)
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(count) if shuffle else np.arange(count)
    if group_by_length:
        pool = batch_size * LENGTH_POOL_BATCHES
        order = np.concatenate(
            [
                chunk[np.argsort(length_of[chunk], kind="stable")]
                for chunk in np.array_split(order, range(pool, count, pool))
            ]
        )
    batches = np.array_split(order, range(batch_size, count, batch_size))
    whole = len(batches[-1]) - len(batches[-1]) % replicas
    batches[-1] = batches[-1][:whole]
    if not whole:
        batches.pop()
    if group_by_length and shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


# Where a batch stream starts: a global batch number, or a callable read when iteration starts.
StartStep = Union[int, Callable[[], int]]


class _BatchStream:
    """Yields the batches of successive epochs, one pass per iteration or endlessly.

    ``start_step`` (an int, or a callable read when iteration starts, such as the
    optimizer's step counter) says which global batch to begin at, so a resumed run picks
    up the same shuffle where it stopped.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        shuffle: bool,
        group_by_length: bool,
        seed: int,
        start_step: StartStep,
        repeat: bool,
        replicas: int,
    ) -> None:
        self.lengths, self.batch_size = lengths, batch_size
        self.order: dict[str, Any] = {
            "shuffle": shuffle,
            "group_by_length": group_by_length,
            "seed": seed,
            "replicas": replicas,
        }
        self.batches_per_epoch = batches_per_epoch(len(lengths), batch_size, replicas)
        self.start_step = start_step
        self.repeat = repeat
        self.passes = 0

    def __call__(self) -> Iterator[np.ndarray]:
        start = self.start_step() if callable(self.start_step) else self.start_step
        if not self.repeat:  # Keras re-iterates a finite dataset once per epoch
            start += self.passes * self.batches_per_epoch
            self.passes += 1
        epoch, offset = divmod(int(start), self.batches_per_epoch)
        while True:
            yield from batch_indices(self.lengths, self.batch_size, epoch, **self.order)[offset:]
            if not self.repeat:
                return
            epoch, offset = epoch + 1, 0


def _dataset(make_batches: Callable[[], Iterator[Any]], num_batches: Optional[int], output_signature: Any) -> Any:
    dataset = tf.data.Dataset.from_generator(make_batches, output_signature=output_signature)
    if num_batches is not None:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(num_batches))
    # Under a multi-worker strategy every worker makes the same seeded batches and keeps its own
    # slice of each (a generator has no files to shard by).
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)


_IDS = tf.TensorSpec(shape=(None, None), dtype=tf.int32)
_LABELS = tf.TensorSpec(shape=(None,), dtype=tf.float32)


def pair_dataset(
    ids_a: list,
    ids_b: list,
    labels: Sequence[float] | np.ndarray,
    batch_size: int = 32,
    shuffle: bool = True,
    group_by_length: bool = True,
    seed: int = 0,
    start_step: StartStep = 0,
    repeat: bool = False,
    replicas: int = 1,
) -> tf.data.Dataset:
    """Interleaved sentence-pair batches for a feature model.

    Each element is ``((token_ids, segment_ids), labels)`` with token ids of shape
    (2B, T): rows 2k and 2k+1 are the two sentences of pair k, and each pair's label is
    repeated on both of its rows. Each batch is padded to its own longest sentence.

    Args:
        ids_a: the first sentences' token ids.
        ids_b: the second sentences' token ids.
        labels: one label per pair.
        batch_size: pairs per batch.
        shuffle: a seeded shuffle that changes every epoch (else file order).
        group_by_length: batch sentences of similar length together (see :func:`batch_indices`).
        seed: the run's seed.
        start_step: the global batch to start at, or a callable giving it when iteration starts
            (the optimizer's step counter), so that a resumed run continues the same shuffle.
        repeat: an endless stream starting at ``start_step``; without it each iteration is one
            epoch, reshuffled every time.
        replicas: every batch holds a multiple of this many pairs (see :func:`batch_indices`),
            so that each replica of a tf.distribute strategy gets the same number of whole pairs.

    Returns:
        The dataset, of known cardinality without ``repeat``.

    Raises:
        ValueError: the three columns differ in length.

    Example:
        >>> dataset = pair_dataset([[101, 872, 102]], [[101, 102]], [1.0], batch_size=1)
        >>> (token_ids, segment_ids), labels = next(iter(dataset))
        >>> token_ids.shape, labels.numpy().tolist()
        (TensorShape([2, 3]), [1.0, 1.0])
    """
    if not len(ids_a) == len(ids_b) == len(labels):
        raise ValueError(f"pair columns differ in length: {len(ids_a)}, {len(ids_b)}, {len(labels)}")
    labels = np.asarray(labels, dtype=np.float32)
    lengths = [max(len(a), len(b)) for a, b in zip(ids_a, ids_b)]
    stream = _BatchStream(lengths, batch_size, shuffle, group_by_length, seed, start_step, repeat, replicas)

    def make_batches() -> Iterator[Any]:
        for index in stream():
            token_ids = pad_batch([s for i in index for s in (ids_a[i], ids_b[i])])
            yield (token_ids, np.zeros_like(token_ids)), np.repeat(labels[index], 2)

    return _dataset(make_batches, None if repeat else stream.batches_per_epoch, ((_IDS, _IDS), _LABELS))


def pair_segment_ids(token_ids: Union[np.ndarray, tf.Tensor], sep_id: int) -> tf.Tensor:
    """Segment ids of padded concatenated pairs ``[CLS] a [SEP] b [SEP]``: 1 on ``b`` and its
    [SEP], 0 elsewhere (padding included), as BERT's tokenizer and Hugging Face cross-encoders
    give them.

    Args:
        token_ids: a padded batch, a NumPy array or a tensor (also inside a graph).
        sep_id: the [SEP] token's id.

    Returns:
        An int32 tensor of the batch's shape.

    Example:
        >>> pair_segment_ids(np.array([[101, 7, 102, 8, 102, 0]]), sep_id=102).numpy()
        array([[0, 0, 0, 1, 1, 0]], dtype=int32)
    """
    token_ids = tf.convert_to_tensor(token_ids, tf.int32)
    seps_before = tf.cumsum(tf.cast(tf.equal(token_ids, sep_id), tf.int32), axis=1, exclusive=True)
    return tf.cast((seps_before > 0) & tf.not_equal(token_ids, 0), tf.int32)


def segment_ids(token_ids: np.ndarray, sep_id: Optional[int] = None) -> np.ndarray:
    """Segment ids of a padded batch.

    Args:
        token_ids: the padded batch.
        sep_id: None: all 0, as the original interaction experiments; else the [SEP] token's
            id, and the ids are those of concatenated pairs (:func:`pair_segment_ids`).

    Returns:
        An array of the batch's shape.

    Example:
        >>> segment_ids(np.array([[101, 7, 102]]))
        array([[0, 0, 0]])
    """
    if sep_id is None:
        return np.zeros_like(token_ids)
    return pair_segment_ids(token_ids, sep_id).numpy()


def interaction_dataset(
    pair_ids: list[list[int]],
    labels: Sequence[float] | np.ndarray,
    batch_size: int = 32,
    shuffle: bool = True,
    group_by_length: bool = True,
    seed: int = 0,
    start_step: StartStep = 0,
    repeat: bool = False,
    sep_id: Optional[int] = None,
    replicas: int = 1,
) -> tf.data.Dataset:
    """Concatenated-pair batches for an interaction model: ``((token_ids, segment_ids), labels)``.

    Args:
        pair_ids: each pair's token ids, ``[CLS] a [SEP] b [SEP]``.
        labels: one label per pair.
        batch_size, shuffle, group_by_length, seed, start_step, repeat, replicas: as for
            :func:`pair_dataset`.
        sep_id: None: segment ids all 0, as in the original interaction experiments; else the
            [SEP] token's id, and the second text's segment ids are 1 (:func:`pair_segment_ids`).

    Returns:
        The dataset, of known cardinality without ``repeat``.

    Raises:
        ValueError: ``pair_ids`` and ``labels`` differ in length.

    Example:
        >>> dataset = interaction_dataset([[101, 7, 102, 8, 102]], [1.0], batch_size=1, sep_id=102)
        >>> (token_ids, segment_ids), labels = next(iter(dataset))
        >>> segment_ids.numpy().tolist()
        [[0, 0, 0, 1, 1]]
    """
    if len(pair_ids) != len(labels):
        raise ValueError(f"{len(pair_ids)} token sequences but {len(labels)} labels")
    labels = np.asarray(labels, dtype=np.float32)
    lengths = [len(s) for s in pair_ids]
    stream = _BatchStream(lengths, batch_size, shuffle, group_by_length, seed, start_step, repeat, replicas)

    def make_batches() -> Iterator[Any]:
        for index in stream():
            token_ids = pad_batch([pair_ids[i] for i in index])
            yield (token_ids, segment_ids(token_ids, sep_id)), labels[index]

    return _dataset(make_batches, None if repeat else stream.batches_per_epoch, ((_IDS, _IDS), _LABELS))


def length_sorted_batches(
    token_ids: Sequence[Sequence[int]], batch_size: int = 64
) -> tuple[np.ndarray, Iterator[tuple[np.ndarray, np.ndarray]]]:
    """Inference batches sorted by length, each padded only to its own longest sequence.

    Args:
        token_ids: the inputs' token ids.
        batch_size: inputs per batch.

    Returns:
        ``(order, batches)``: ``batches`` yields ``(index, padded_ids)``; concatenated outputs
        are in ``order`` (row r belongs to input ``order[r]``), which :func:`restore_order`
        undoes.

    Raises:
        ValueError: ``batch_size`` is not positive.

    Example:
        >>> order, batches = length_sorted_batches([[1, 2, 3], [4]], batch_size=2)
        >>> order.tolist(), [ids.shape for _, ids in batches]
        ([1, 0], [(2, 3)])
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    order = np.argsort([len(s) for s in token_ids], kind="stable")

    def batches() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for start in range(0, len(order), batch_size):
            index = order[start : start + batch_size]
            yield index, pad_batch([token_ids[i] for i in index])

    return order, batches()


def restore_order(predictions: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Rows in the order of :func:`length_sorted_batches`' inputs.

    Args:
        predictions: rows in length-sorted order.
        order: the order :func:`length_sorted_batches` returned.

    Returns:
        The rows in input order.

    Example:
        >>> restore_order(np.array([10, 20]), np.array([1, 0])).tolist()
        [20, 10]
    """
    restored = np.empty_like(predictions)
    restored[order] = predictions
    return restored
