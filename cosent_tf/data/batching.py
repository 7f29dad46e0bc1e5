"""Which examples go into which batch, and padding: the batch order of the training pipelines,
plain NumPy, so that both Kerases' trainers (:mod:`cosent_tf.data.pipeline` for Keras 2,
:mod:`cosent_tf.keras3.training`) cut an epoch into the same batches.

Batch order is a seeded shuffle that changes every epoch; with ``group_by_length`` the examples
of a pool of batches are sorted by length before being cut into batches (and the batches shuffled
again), so little padding is computed. For an in-batch negatives loss, examples that share a text
can be kept in different batches (:func:`keep_duplicates_apart`).

Inference batches (:func:`length_sorted_batches`, :func:`segment_ids`) are here too: an ONNX export
runs on them without TensorFlow (:mod:`cosent_tf.inference.runtime`).
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Optional, Union

import numpy as np

# How many batches' worth of examples are sorted together when grouping by length:
# large enough to find similar lengths, small enough to keep batches random.
LENGTH_POOL_BATCHES = 50


def pad_batch(sequences: Sequence[Sequence[int]], padding_id: int = 0, multiple: int = 1) -> np.ndarray:
    """Stack token id sequences into an int32 matrix padded to the longest of them, rounded up to a
    multiple of ``multiple`` (fewer batch shapes, for a backend that compiles a program per shape).

    Args:
        sequences: token id lists, at least one.
        padding_id: the id the shorter rows are padded with.
        multiple: the width is a multiple of this.

    Returns:
        An int32 array of shape (len(sequences), width).

    Example:
        >>> pad_batch([[101, 872, 102], [101, 102]])
        array([[101, 872, 102],
               [101, 102,   0]], dtype=int32)
    """
    longest = -(-max(len(s) for s in sequences) // multiple) * multiple
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


def text_keys(*columns: Sequence[Union[str, Sequence[str]]]) -> list[frozenset[int]]:
    """Per example, the ids of the texts it holds, for keeping duplicates apart.

    Equal strings get equal ids (an exact match, as sentence-transformers' NO_DUPLICATES
    sampler compares them), so two examples share an id exactly when they share a text.

    Args:
        *columns: one entry per example each: a text, or a sequence of texts (such as an
            example's hard negatives).

    Returns:
        One frozenset of text ids per example.

    Raises:
        ValueError: the columns differ in length.

    Example:
        >>> text_keys(["a", "b"], ["x", "a"], [["y"], []])
        [frozenset({0, 1, 2}), frozenset({0, 3})]
    """
    counts = {len(column) for column in columns}
    if len(counts) > 1:
        raise ValueError(f"text columns differ in length: {', '.join(str(len(c)) for c in columns)}")
    ids: dict[str, int] = {}
    keys = []
    for row in zip(*columns):
        texts: list[str] = []
        for cell in row:
            if isinstance(cell, str):
                texts.append(cell)
            else:
                texts.extend(cell)
        keys.append(frozenset(ids.setdefault(text, len(ids)) for text in texts))
    return keys


# Bounds on the work of keep_duplicates_apart, so that it stays linear in the examples when
# many of them share one text: how many waiting examples one batch looks at, how many nearby
# batches are searched for ones without a clashing example's texts, and how many of those
# (and of third batches per candidate) an exchange is tried with.
_WAITING_LOOKS_PER_BATCH = 64
_SWAP_BATCHES = 64
_SWAP_TRIES_PER_EXAMPLE = 4
# Looks at a returning example a three-batch cycle may take in all, per example placed.
_CYCLE_LOOKS_PER_EXAMPLE = 64
# Batches (fullest first) a shared example is offered to when spreading examples afresh.
_SPREAD_LOOKS_PER_EXAMPLE = 64


def _conflicting(batch: Sequence[int], keys: Sequence[frozenset[int]]) -> int:
    """How many of ``batch``'s examples share a text with one before them that does not itself."""
    seen: set[int] = set()
    count = 0
    for example in batch:
        if keys[example].isdisjoint(seen):
            seen |= keys[example]
        else:
            count += 1
    return count


def keep_duplicates_apart(
    batches: list[np.ndarray], keys: Sequence[frozenset[int]]
) -> tuple[list[np.ndarray], int, int]:
    """Rearrange batches so that no batch holds two examples sharing a text, where it can.

    A text that occurs twice in one batch is a false negative for an in-batch loss (the
    same document is both an anchor's positive and another anchor's negative). Each example
    that shares a text with one before it in its batch swaps places with an example of a
    nearby batch (nearest first, so that batches cut from length-sorted examples stay of
    similar length) where both then fit, or, where no such pair is found, goes round a cycle
    of three batches. Where clashes remain, the examples are also walked in batch order (one
    whose texts the batch being filled holds waits and goes first into the next batch it
    fits; what still waits at the end fills the last slots as it is), the exchanges are
    tried again, and the arrangement leaving fewer clashes is kept; where clashes still remain,
    the examples are also spread afresh, those sharing the most used texts first, each into
    the batch with the most free slots that lacks its texts (which finds a split whenever one
    exists if each example shares at most one text), and that is kept if it leaves fewer.
    The batch sizes are kept
    and every example is placed exactly once; without clashes the batches come back
    unchanged. The work is bounded per example and per batch, so that many examples sharing
    one text cost a few looks each (see ``benchmarks/DUPLICATE_SAMPLER.md``); the result is
    deterministic.

    Args:
        batches: one index array per batch, as :func:`batch_indices` cuts them.
        keys: per example (by index), the ids of its texts (:func:`text_keys`).

    Returns:
        ``(batches, moved, left)``: the new batches (sizes as given), the examples placed in
        another batch than the one they were cut into, and the examples left sharing a text
        with another of their batch because no placement without was found (counted in
        batch order: each that shares a text with one before it that is not itself left).

    Example:
        >>> keys = [frozenset({0}), frozenset({0}), frozenset({1}), frozenset({2})]
        >>> batches, moved, left = keep_duplicates_apart([np.array([0, 1]), np.array([2, 3])], keys)
        >>> [b.tolist() for b in batches], moved, left
        ([[0, 2], [1, 3]], 2, 0)
    """
    cut = [batch.tolist() for batch in batches]
    if not any(_conflicting(batch, keys) for batch in cut):
        return list(batches), 0, 0
    swapped = [list(batch) for batch in cut]
    _swap_clashes_away(swapped, keys)
    placed, left = swapped, sum(_conflicting(batch, keys) for batch in swapped)
    if left:
        walked = _walk_apart(cut, keys)
        _swap_clashes_away(walked, keys)
        walked_left = sum(_conflicting(batch, keys) for batch in walked)
        if walked_left < left:
            placed, left = walked, walked_left
    if left:
        spread = _spread_apart(cut, keys)
        spread_left = sum(_conflicting(batch, keys) for batch in spread)
        if spread_left < left:
            placed, left = spread, spread_left
    home = {example: number for number, batch in enumerate(cut) for example in batch}
    moved = sum(home[example] != number for number, batch in enumerate(placed) for example in batch)
    return [np.asarray(batch, dtype=np.int64) for batch in placed], moved, left


def _spread_apart(cut: list[list[int]], keys: Sequence[frozenset[int]]) -> list[list[int]]:
    """Place the examples that share a text first, the most shared text's first, each into the
    batch with the most free slots that holds none of its texts (the greedy that finds a split
    whenever one exists when each example shares at most one text: Gale and Ryser's
    construction), then the others, each into its own batch where room is left, else anywhere.
    It may move many examples, so it is kept only where the nearer arrangements leave clashes."""
    uses = Counter(text for key in keys for text in key)
    pressure = {example: max((uses[text] for text in keys[example]), default=1) for batch in cut for example in batch}
    home = {example: number for number, batch in enumerate(cut) for example in batch}
    shared = sorted(
        (example for example in pressure if pressure[example] > 1),
        key=lambda example: (-pressure[example], min(keys[example], key=lambda text: -uses[text]), home[example]),
    )
    placed: list[list[int]] = [[] for _ in cut]
    texts: list[set[int]] = [set() for _ in cut]
    free = [(-len(batch), number) for number, batch in enumerate(cut)]  # (minus free slots, batch)
    heapq.heapify(free)
    for example in shared:
        looked: list[tuple[int, int]] = []
        chosen = None
        while free and len(looked) < _SPREAD_LOOKS_PER_EXAMPLE:
            entry = heapq.heappop(free)
            looked.append(entry)
            if keys[example].isdisjoint(texts[entry[1]]):
                chosen = entry
                break
        chosen = chosen or (looked[0] if looked else None)
        assert chosen is not None, "more examples than slots"
        looked.remove(chosen)
        number = chosen[1]
        placed[number].append(example)
        texts[number] |= keys[example]
        if chosen[0] + 1 < 0:
            looked.append((chosen[0] + 1, number))
        for entry in looked:
            heapq.heappush(free, entry)
    room = {number: len(batch) - len(placed[number]) for number, batch in enumerate(cut)}
    unplaced = []
    for example in (example for batch in cut for example in batch if pressure[example] == 1):
        if room[home[example]]:
            placed[home[example]].append(example)
            room[home[example]] -= 1
        else:
            unplaced.append(example)
    for number in range(len(cut)):
        while room[number]:
            placed[number].append(unplaced.pop())
            room[number] -= 1
    return placed


def _walk_apart(cut: list[list[int]], keys: Sequence[frozenset[int]]) -> list[list[int]]:
    """Walk the examples in batch order; one whose texts the batch being filled holds waits
    and goes first into the next batch it fits; what still waits at the end fills the last
    slots as it is."""
    walk = [example for batch in cut for example in batch]
    waiting: deque[int] = deque()
    placed: list[list[int]] = []
    position = 0
    for size in (len(batch) for batch in cut):
        batch: list[int] = []
        texts: set[int] = set()
        skipped: list[int] = []
        while waiting and len(batch) < size and len(skipped) < _WAITING_LOOKS_PER_BATCH:
            example = waiting.popleft()
            if keys[example].isdisjoint(texts):
                batch.append(example)
                texts |= keys[example]
            else:
                skipped.append(example)
        waiting.extendleft(reversed(skipped))
        while len(batch) < size and position < len(walk):
            example = walk[position]
            position += 1
            if keys[example].isdisjoint(texts):
                batch.append(example)
                texts |= keys[example]
            else:
                waiting.append(example)
        while len(batch) < size:  # nothing left to walk: the waiting ones go in as they are
            batch.append(waiting.popleft())
        placed.append(batch)
    return placed


class _Placement:
    """Batches being rearranged, with each batch's text counts and how many batches hold each
    text, kept in step as examples change places."""

    def __init__(self, placed: list[list[int]], keys: Sequence[frozenset[int]]) -> None:
        self.placed, self.keys = placed, keys
        self.counts = [Counter(text for example in batch for text in keys[example]) for batch in placed]
        self.holding: Counter[int] = Counter(text for count in self.counts for text in count)
        self.cycle_looks_left = _CYCLE_LOOKS_PER_EXAMPLE * sum(len(batch) for batch in placed)

    def fits(self, example: int, number: int, leaving: int) -> bool:
        """Whether ``example`` shares no text with batch ``number`` once ``leaving`` is out of it."""
        count, gone = self.counts[number], self.keys[leaving]
        return all(count[text] - (text in gone) == 0 for text in self.keys[example])

    def put(self, number: int, slot: int, example: int) -> None:
        """Place ``example`` in ``slot`` of batch ``number``, instead of its occupant."""
        count = self.counts[number]
        for text in self.keys[self.placed[number][slot]]:
            count[text] -= 1
            self.holding[text] -= count[text] == 0
        for text in self.keys[example]:
            self.holding[text] += count[text] == 0
            count[text] += 1
        self.placed[number][slot] = example


def _swap_clashes_away(placed: list[list[int]], keys: Sequence[frozenset[int]]) -> None:
    """Move each example that shares a text with one before it in its batch to a nearby batch
    where it fits, in exchange for one that fits in its place, or through a third batch
    (a cycle of three) where no direct exchange is found (in place)."""
    state = _Placement(placed, keys)
    for number, batch in enumerate(placed):
        seen: set[int] = set()
        for slot, example in enumerate(batch):
            if keys[example].isdisjoint(seen):
                seen |= keys[example]
                continue
            if any(state.holding[text] >= len(placed) for text in keys[example]):
                continue  # every batch holds one of its texts: no exchange can help
            if _exchange(state, number, slot):
                seen |= keys[batch[slot]]


def _exchange(state: _Placement, number: int, slot: int) -> bool:
    """Find and make an exchange that takes the example in ``slot`` of batch ``number`` out."""
    placed, keys = state.placed, state.keys
    example = placed[number][slot]
    lacking = (
        other for other in _nearby(number, len(placed)) if not any(state.counts[other][text] for text in keys[example])
    )
    targets = list(islice(lacking, _SWAP_TRIES_PER_EXAMPLE))
    for other in targets:
        for slot_there, candidate in enumerate(placed[other]):
            if state.fits(candidate, number, example):
                state.put(number, slot, candidate)
                state.put(other, slot_there, example)
                return True
    for other in targets:  # the candidate goes on to a third batch, which sends one back here
        for slot_there, candidate in enumerate(placed[other]):
            thirds = (third for third in _nearby(other, len(placed)) if third != number)
            for third in islice(thirds, _SWAP_TRIES_PER_EXAMPLE):
                if state.cycle_looks_left <= 0:
                    return False
                state.cycle_looks_left -= len(placed[third])
                for slot_third, returning in enumerate(placed[third]):
                    if state.fits(candidate, third, returning) and state.fits(returning, number, example):
                        state.put(number, slot, returning)
                        state.put(third, slot_third, candidate)
                        state.put(other, slot_there, example)
                        return True
    return False


def _nearby(number: int, count: int) -> Iterator[int]:
    """The other batch numbers by distance from ``number``, at most ``_SWAP_BATCHES`` of them."""
    given = 0
    for distance in range(1, count):
        for other in (number - distance, number + distance):
            if 0 <= other < count:
                yield other
                given += 1
                if given >= _SWAP_BATCHES:
                    return


def _epoch_batches(
    lengths: Sequence[int],
    batch_size: int,
    epoch: int,
    shuffle: bool,
    group_by_length: bool,
    seed: int,
    replicas: int,
    keys: Optional[Sequence[frozenset[int]]],
) -> tuple[list[np.ndarray], int, int]:
    """The batches of :func:`batch_indices`, with the duplicates moved and left."""
    if batch_size % replicas:
        raise ValueError(f"batch_size {batch_size} is not a multiple of the {replicas} replicas")
    length_of = np.asarray(lengths)
    count = len(length_of)
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if keys is not None and len(keys) != count:
        raise ValueError(f"{len(keys)} text keys for {count} examples")
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
    moved = left = 0
    if keys is not None and batches:
        # Before the batches are shuffled: a moved example goes to a neighbouring batch,
        # which length grouping filled with examples of similar length.
        batches, moved, left = keep_duplicates_apart(batches, keys)
    if group_by_length and shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches, moved, left


def batch_indices(
    lengths: Sequence[int],
    batch_size: int,
    epoch: int,
    shuffle: bool = True,
    group_by_length: bool = False,
    seed: int = 0,
    replicas: int = 1,
    keys: Optional[Sequence[frozenset[int]]] = None,
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
        keys: per example, the ids of its texts (:func:`text_keys`): examples sharing a text
            are kept in different batches where they can be (:func:`keep_duplicates_apart`,
            before the batches are shuffled). None: the batches as cut.

    Returns:
        One int64 index array per batch.

    Raises:
        ValueError: ``batch_size`` is not positive or not a multiple of ``replicas``, or
            ``keys`` is not one per example.

    Example:
        >>> [b.tolist() for b in batch_indices([3, 1, 2], batch_size=2, epoch=0, shuffle=False)]
        [[0, 1], [2]]
    """
    return _epoch_batches(lengths, batch_size, epoch, shuffle, group_by_length, seed, replicas, keys)[0]


def duplicates_moved(
    lengths: Sequence[int],
    batch_size: int,
    keys: Sequence[frozenset[int]],
    *,
    epoch: int = 0,
    shuffle: bool = True,
    group_by_length: bool = False,
    seed: int = 0,
    replicas: int = 1,
) -> tuple[int, int]:
    """How many examples keeping duplicates apart moves in one epoch, and how many it cannot.

    Args:
        lengths, batch_size, keys, epoch, shuffle, group_by_length, seed, replicas: as for
            :func:`batch_indices`.

    Returns:
        ``(moved, left)``: examples placed in another batch than the one they were cut into,
        and examples left sharing a text with another of their batch.

    Raises:
        ValueError: as :func:`batch_indices`.

    Example:
        >>> keys = text_keys(["q", "q", "r", "s"], ["a", "b", "c", "d"])
        >>> duplicates_moved([1, 1, 1, 1], 2, keys, shuffle=False)
        (2, 0)
    """
    _, moved, left = _epoch_batches(lengths, batch_size, epoch, shuffle, group_by_length, seed, replicas, keys)
    return moved, left


# Where a batch stream starts: a global batch number, or a callable read when iteration starts.


def pair_lengths(ids_a: Sequence[Sequence[int]], ids_b: Sequence[Sequence[int]]) -> list[int]:
    """Each pair's longer text in tokens: what :func:`pair_dataset` groups its batches by.

    Example:
        >>> pair_lengths([[1, 2, 3]], [[4]])
        [3]
    """
    return [max(len(a), len(b)) for a, b in zip(ids_a, ids_b)]


def segment_ids(token_ids: np.ndarray, sep_id: Optional[int] = None) -> np.ndarray:
    """Segment ids of a padded batch.

    Args:
        token_ids: the padded batch.
        sep_id: None: all 0, as the original interaction experiments; else the [SEP] token's
            id, and the ids are those of concatenated pairs, as
            :func:`cosent_tf.data.pipeline.pair_segment_ids` gives them in a graph: 1 on the second
            text and its [SEP], 0 elsewhere (padding included).

    Returns:
        An array of the batch's shape.

    Example:
        >>> segment_ids(np.array([[101, 7, 102]]))
        array([[0, 0, 0]])
    """
    if sep_id is None:
        return np.zeros_like(token_ids)
    token_ids = np.asarray(token_ids)
    is_sep = (token_ids == sep_id).astype(np.int32)
    seps_before = np.cumsum(is_sep, axis=1) - is_sep
    return ((seps_before > 0) & (token_ids != 0)).astype(np.int32)


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
