"""tf.data input pipelines: interleaved pair batches, groups of an anchor, its positive and
hard negatives, concatenated-pair batches, sentences.

Token ids are produced once up front; each batch is padded only to its own longest
sequence. Batch order is a seeded shuffle that changes every epoch; with
``group_by_length`` the examples of a pool of batches are sorted by length before being
cut into batches (and the batches shuffled again), so little padding is computed. For an
in-batch negatives loss, examples that share a text can be kept in different batches
(:func:`keep_duplicates_apart`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Callable, Optional, Union

import numpy as np

from ..process_keras import tf
from .batching import (  # the batch order, TF-free; re-exported: the Keras 2 pipeline's names since 0.1
    batch_indices,
    batches_per_epoch,
    length_sorted_batches,  # noqa: F401 (inference's batches, which need no TensorFlow: kept at their old home)
    pad_batch,
    pair_lengths,
    restore_order,  # noqa: F401
    segment_ids,
)

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
        keys: Optional[Sequence[frozenset[int]]] = None,
    ) -> None:
        if keys is not None and len(keys) != len(lengths):
            raise ValueError(f"{len(keys)} text keys for {len(lengths)} examples")
        self.lengths, self.batch_size = lengths, batch_size
        self.order: dict[str, Any] = {
            "shuffle": shuffle,
            "group_by_length": group_by_length,
            "seed": seed,
            "replicas": replicas,
            "keys": keys,
        }
        self.batches_per_epoch = batches_per_epoch(len(lengths), batch_size, replicas)
        self.start_step = start_step
        self.repeat = repeat
        self.passes = 0

    def __call__(self) -> Iterator[np.ndarray]:
        for _, index in self.with_epochs():
            yield index

    def with_epochs(self) -> Iterator[tuple[int, np.ndarray]]:
        """The batches as ``(epoch, index)``, for what changes every epoch beyond the order."""
        start = self.start_step() if callable(self.start_step) else self.start_step
        if not self.repeat:  # Keras re-iterates a finite dataset once per epoch
            start += self.passes * self.batches_per_epoch
            self.passes += 1
        epoch, offset = divmod(int(start), self.batches_per_epoch)
        while True:
            for index in batch_indices(self.lengths, self.batch_size, epoch, **self.order)[offset:]:
                yield epoch, index
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


def group_lengths(
    anchor_ids: Sequence[Sequence[int]],
    positive_ids: Sequence[Sequence[int]],
    negative_ids: Sequence[Sequence[Sequence[int]]],
) -> list[int]:
    """Each example's longest text in tokens, its negatives' included: what :func:`group_dataset`
    groups its batches by.

    Example:
        >>> group_lengths([[1, 2]], [[3]], [[[4, 5, 6]]])
        [3]
    """
    return [
        max(len(anchor), len(positive), *(len(n) for n in negatives))
        for anchor, positive, negatives in zip(anchor_ids, positive_ids, negative_ids)
    ]


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
    keys: Optional[Sequence[frozenset[int]]] = None,
    width_multiple: int = 1,
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
        keys: per pair, the ids of its texts (:func:`text_keys`): pairs sharing a text are kept
            in different batches where they can be, for an in-batch loss (see
            :func:`keep_duplicates_apart`). None: no such rearranging.
        width_multiple: each batch is padded to its longest sentence rounded up to a multiple of
            this (see :func:`pad_batch`).

    Returns:
        The dataset, of known cardinality without ``repeat``.

    Raises:
        ValueError: the three columns differ in length, or ``keys`` is not one per pair.

    Example:
        >>> dataset = pair_dataset([[101, 872, 102]], [[101, 102]], [1.0], batch_size=1)
        >>> (token_ids, segment_ids), labels = next(iter(dataset))
        >>> token_ids.shape, labels.numpy().tolist()
        (TensorShape([2, 3]), [1.0, 1.0])
    """
    if not len(ids_a) == len(ids_b) == len(labels):
        raise ValueError(f"pair columns differ in length: {len(ids_a)}, {len(ids_b)}, {len(labels)}")
    labels = np.asarray(labels, dtype=np.float32)
    stream = _BatchStream(
        pair_lengths(ids_a, ids_b), batch_size, shuffle, group_by_length, seed, start_step, repeat, replicas, keys
    )

    def make_batches() -> Iterator[Any]:
        for index in stream():
            token_ids = pad_batch([s for i in index for s in (ids_a[i], ids_b[i])], multiple=width_multiple)
            yield (token_ids, np.zeros_like(token_ids)), np.repeat(labels[index], 2)

    return _dataset(make_batches, None if repeat else stream.batches_per_epoch, ((_IDS, _IDS), _LABELS))


def group_dataset(
    anchor_ids: Sequence[Sequence[int]],
    positive_ids: Sequence[Sequence[int]],
    negative_ids: Optional[Sequence[Sequence[Sequence[int]]]],
    group_size: int,
    batch_size: int = 32,
    shuffle: bool = True,
    group_by_length: bool = True,
    seed: int = 0,
    start_step: StartStep = 0,
    repeat: bool = False,
    replicas: int = 1,
    keys: Optional[Sequence[frozenset[int]]] = None,
    width_multiple: int = 1,
) -> tf.data.Dataset:
    """Batches of examples in groups of ``group_size`` rows, for an in-batch negatives loss.

    Each element is ``((token_ids, segment_ids), labels)`` with token ids of shape
    (B * group_size, T): rows ``g*k`` to ``g*k + g - 1`` are example k's anchor, its positive
    and ``g - 2`` hard negatives, padded to the batch's longest text; the labels are zeros
    (the loss reads the layout, not labels). An example with exactly ``g - 2`` negatives
    gives them all, in file order; one with more gives a draw of ``g - 2`` of them (in file
    order) that changes every epoch, seeded by the seed, the epoch and the example's index
    only, so that a run resumed at ``start_step`` draws what the uninterrupted run drew.
    Grouping by length uses each example's longest text.

    Args:
        anchor_ids: each example's anchor's token ids.
        positive_ids: each example's positive's token ids.
        negative_ids: per example, the token ids of each of its hard negatives (at least
            ``group_size - 2``); None when ``group_size`` is 2.
        group_size: rows per example: anchor, positive and ``group_size - 2`` negatives.
        batch_size: examples per batch.
        shuffle, group_by_length, seed, start_step, repeat: as for :func:`pair_dataset`.
        replicas: every batch holds a multiple of this many whole examples.
        width_multiple: as for :func:`pair_dataset`.
        keys: per example, the ids of its texts (:func:`text_keys` of the anchors, positives
            and negatives): examples sharing a text are kept in different batches where they
            can be (:func:`keep_duplicates_apart`). None: no such rearranging.

    Returns:
        The dataset, of known cardinality without ``repeat``.

    Raises:
        ValueError: the columns differ in length, ``group_size`` is below 2, an example has
            fewer than ``group_size - 2`` negatives (the message names its index), or ``keys``
            is not one per example.

    Example:
        >>> dataset = group_dataset([[101, 7, 102]], [[101, 8, 102]], [[[101, 9, 9, 102]]], group_size=3, batch_size=1)
        >>> (token_ids, segment_ids), labels = next(iter(dataset))
        >>> token_ids.numpy().tolist(), labels.numpy().tolist()
        ([[101, 7, 102, 0], [101, 8, 102, 0], [101, 9, 9, 102]], [0.0, 0.0, 0.0])
    """
    if group_size < 2:
        raise ValueError(f"group_size must be at least 2 (anchor and positive), got {group_size}")
    hard = group_size - 2
    if negative_ids is None:
        if hard:
            raise ValueError(f"group_size {group_size} needs {hard} negatives per example, and none were given")
        negative_ids = [[] for _ in anchor_ids]
    if not len(anchor_ids) == len(positive_ids) == len(negative_ids):
        raise ValueError(f"group columns differ in length: {len(anchor_ids)}, {len(positive_ids)}, {len(negative_ids)}")
    for index, negatives in enumerate(negative_ids):
        if len(negatives) < hard:
            raise ValueError(
                f"example {index} has {len(negatives)} negatives, fewer than the {hard} of group_size {group_size}"
            )
    lengths = group_lengths(anchor_ids, positive_ids, negative_ids)
    stream = _BatchStream(lengths, batch_size, shuffle, group_by_length, seed, start_step, repeat, replicas, keys)
    all_negatives = negative_ids

    def drawn(index: int, epoch: int) -> Sequence[Sequence[int]]:
        negatives = all_negatives[index]
        if len(negatives) == hard or not hard:
            return negatives[:hard]
        chosen = np.random.default_rng([seed, epoch, index]).choice(len(negatives), hard, replace=False)
        return [negatives[i] for i in np.sort(chosen)]

    def make_batches() -> Iterator[Any]:
        for epoch, index in stream.with_epochs():
            rows: list[Sequence[int]] = []
            for i in index.tolist():
                rows += [anchor_ids[i], positive_ids[i], *drawn(i, epoch)]
            token_ids = pad_batch(rows, multiple=width_multiple)
            yield (token_ids, np.zeros_like(token_ids)), np.zeros(len(rows), dtype=np.float32)

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
    width_multiple: int = 1,
) -> tf.data.Dataset:
    """Concatenated-pair batches for an interaction model: ``((token_ids, segment_ids), labels)``.

    Args:
        pair_ids: each pair's token ids, ``[CLS] a [SEP] b [SEP]``.
        labels: one label per pair.
        batch_size, shuffle, group_by_length, seed, start_step, repeat, replicas, width_multiple: as for
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
            token_ids = pad_batch([pair_ids[i] for i in index], multiple=width_multiple)
            yield (token_ids, segment_ids(token_ids, sep_id)), labels[index]

    return _dataset(make_batches, None if repeat else stream.batches_per_epoch, ((_IDS, _IDS), _LABELS))
