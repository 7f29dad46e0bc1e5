"""tf.data input pipelines: interleaved pair batches, concatenated-pair batches, sentences.

Token ids are produced once up front; each batch is padded only to its own longest
sequence. Batch order is a seeded shuffle that changes every epoch; with
``group_by_length`` the examples of a pool of batches are sorted by length before being
cut into batches (and the batches shuffled again), so little padding is computed.
"""

import numpy as np

from ..backend import tf

# How many batches' worth of examples are sorted together when grouping by length:
# large enough to find similar lengths, small enough to keep batches random.
LENGTH_POOL_BATCHES = 50


def pad_batch(sequences, padding_id=0):
    """Stack token id sequences into an int32 matrix padded to the longest of them."""
    longest = max(len(s) for s in sequences)
    batch = np.full((len(sequences), longest), padding_id, dtype=np.int32)
    for row, sequence in enumerate(sequences):
        batch[row, : len(sequence)] = sequence
    return batch


def batches_per_epoch(count: int, batch_size: int, replicas: int = 1) -> int:
    """Batches in one pass over ``count`` examples: the full ones, and the rest if at least
    ``replicas`` examples are left (see :func:`batch_indices`)."""
    full, rest = divmod(count, batch_size)
    return full + (rest >= replicas)


def batch_indices(lengths, batch_size, epoch, shuffle=True, group_by_length=False, seed=0, replicas=1):
    """Index arrays of the batches of one epoch (every example exactly once).

    With ``replicas`` > 1 every batch holds a multiple of ``replicas`` examples, so that
    tf.distribute can give each replica an equal slice: ``batch_size`` must be a multiple,
    and the last, partial batch leaves out its ``count % replicas`` examples that epoch (a
    different few each epoch when shuffling).
    """
    if batch_size % replicas:
        raise ValueError(f"batch_size {batch_size} is not a multiple of the {replicas} replicas")
    lengths = np.asarray(lengths)
    count = len(lengths)
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(count) if shuffle else np.arange(count)
    if group_by_length:
        pool = batch_size * LENGTH_POOL_BATCHES
        order = np.concatenate(
            [
                chunk[np.argsort(lengths[chunk], kind="stable")]
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


class _BatchStream:
    """Yields the batches of successive epochs, one pass per iteration or endlessly.

    ``start_step`` (an int, or a callable read when iteration starts, such as the
    optimizer's step counter) says which global batch to begin at, so a resumed run picks
    up the same shuffle where it stopped.
    """

    def __init__(self, lengths, batch_size, shuffle, group_by_length, seed, start_step, repeat, replicas):
        self.lengths, self.batch_size = lengths, batch_size
        self.order = {"shuffle": shuffle, "group_by_length": group_by_length, "seed": seed, "replicas": replicas}
        self.batches_per_epoch = batches_per_epoch(len(lengths), batch_size, replicas)
        self.start_step = start_step
        self.repeat = repeat
        self.passes = 0

    def __call__(self):
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


def _dataset(make_batches, num_batches, output_signature):
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
    labels,
    batch_size: int = 32,
    shuffle: bool = True,
    group_by_length: bool = True,
    seed: int = 0,
    start_step=0,
    repeat: bool = False,
    replicas: int = 1,
) -> tf.data.Dataset:
    """Interleaved sentence-pair batches for a feature model.

    Each element is ``((token_ids, segment_ids), labels)`` with token ids of shape
    (2B, T): rows 2k and 2k+1 are the two sentences of pair k, and each pair's label is
    repeated on both of its rows. ``batch_size`` counts pairs. Without ``repeat`` each
    iteration is one epoch (reshuffled every time); with it the stream is endless and
    starts at global batch ``start_step`` (see :class:`_BatchStream`). ``replicas``: every
    batch holds a multiple of this many pairs (see :func:`batch_indices`), so that each
    replica of a tf.distribute strategy gets the same number of whole pairs.
    """
    if not len(ids_a) == len(ids_b) == len(labels):
        raise ValueError(f"pair columns differ in length: {len(ids_a)}, {len(ids_b)}, {len(labels)}")
    labels = np.asarray(labels, dtype=np.float32)
    lengths = [max(len(a), len(b)) for a, b in zip(ids_a, ids_b)]
    stream = _BatchStream(lengths, batch_size, shuffle, group_by_length, seed, start_step, repeat, replicas)

    def make_batches():
        for index in stream():
            token_ids = pad_batch([s for i in index for s in (ids_a[i], ids_b[i])])
            yield (token_ids, np.zeros_like(token_ids)), np.repeat(labels[index], 2)

    return _dataset(make_batches, None if repeat else stream.batches_per_epoch, ((_IDS, _IDS), _LABELS))


def pair_segment_ids(token_ids, sep_id: int):
    """Segment ids of padded concatenated pairs ``[CLS] a [SEP] b [SEP]``: 1 on ``b`` and its
    [SEP], 0 elsewhere (padding included), as BERT's tokenizer and Hugging Face cross-encoders
    give them. Takes a NumPy array or a tensor (also inside a graph); returns an int32 tensor."""
    token_ids = tf.convert_to_tensor(token_ids, tf.int32)
    seps_before = tf.cumsum(tf.cast(tf.equal(token_ids, sep_id), tf.int32), axis=1, exclusive=True)
    return tf.cast((seps_before > 0) & tf.not_equal(token_ids, 0), tf.int32)


def segment_ids(token_ids: np.ndarray, sep_id: int = None) -> np.ndarray:
    """Segment ids of a padded batch: all 0 (``sep_id`` None, as the original interaction
    experiments), or those of concatenated pairs (:func:`pair_segment_ids`)."""
    if sep_id is None:
        return np.zeros_like(token_ids)
    return pair_segment_ids(token_ids, sep_id).numpy()


def interaction_dataset(
    pair_ids: list,
    labels,
    batch_size: int = 32,
    shuffle: bool = True,
    group_by_length: bool = True,
    seed: int = 0,
    start_step=0,
    repeat: bool = False,
    sep_id: int = None,
    replicas: int = 1,
) -> tf.data.Dataset:
    """Concatenated-pair batches for an interaction model: ``((token_ids, segment_ids), labels)``.

    Segment ids are all 0, as in the original interaction experiments, or with ``sep_id``
    (the [SEP] token's id) 1 on the second text (:func:`pair_segment_ids`). Batching
    options as for :func:`pair_dataset`.
    """
    if len(pair_ids) != len(labels):
        raise ValueError(f"{len(pair_ids)} token sequences but {len(labels)} labels")
    labels = np.asarray(labels, dtype=np.float32)
    lengths = [len(s) for s in pair_ids]
    stream = _BatchStream(lengths, batch_size, shuffle, group_by_length, seed, start_step, repeat, replicas)

    def make_batches():
        for index in stream():
            token_ids = pad_batch([pair_ids[i] for i in index])
            yield (token_ids, segment_ids(token_ids, sep_id)), labels[index]

    return _dataset(make_batches, None if repeat else stream.batches_per_epoch, ((_IDS, _IDS), _LABELS))


def length_sorted_batches(token_ids: list, batch_size: int = 64) -> tuple:
    """Inference batches sorted by length: ``(order, batches)``.

    ``batches`` yields ``(index, padded_ids)`` with each batch padded only to its own
    longest sequence; concatenated outputs are in ``order`` (row r belongs to input
    ``order[r]``): :func:`restore_order` puts them back in input order.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    order = np.argsort([len(s) for s in token_ids], kind="stable")

    def batches():
        for start in range(0, len(order), batch_size):
            index = order[start : start + batch_size]
            yield index, pad_batch([token_ids[i] for i in index])

    return order, batches()


def restore_order(predictions, order):
    restored = np.empty_like(predictions)
    restored[order] = predictions
    return restored
