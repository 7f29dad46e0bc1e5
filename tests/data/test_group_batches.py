"""Batches for in-batch negatives: keeping examples that share a text apart, and group batches."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example as hypothesis_example
from hypothesis import given, settings
from hypothesis import strategies as st

from cosent_tf.data.batching import batch_indices, duplicates_moved, keep_duplicates_apart, text_keys
from cosent_tf.data.pipeline import group_dataset


def clashing(batch, keys):
    """Examples of ``batch`` that share a text with one before them that does not itself."""
    seen, count = set(), 0
    for example in batch:
        if keys[example] & seen:
            count += 1
        else:
            seen |= keys[example]
    return count


def assert_a_rearrangement(cut, placed, count):
    assert [len(b) for b in placed] == [len(b) for b in cut]
    assert sorted(np.concatenate(placed).tolist()) == sorted(np.concatenate(cut).tolist())
    assert len(np.concatenate(placed)) == len(set(np.concatenate(placed).tolist()))


# Found by hypothesis: the nearby exchanges and the walk each left a clash; spreading the examples
# by their texts' use finds the split (texts 0 and 1 are each shared by one example of 7 batches).
SPLIT_ONLY_SPREADING_FINDS = (
    [np.array(batch) for batch in [[11, 8, 18], [17, 2, 14], [10, 7, 12], [5, 13, 0], [6, 15, 16], [4, 1, 9], [3]]],
    [
        frozenset(key)
        for key in [
            [0, 1000],
            [1, 1001],
            [1002],
            [1, 1003],
            [0, 1004],
            [1005],
            [0, 1006],
            [1, 1007],
            [1008],
            [0, 1009],
            [1, 1010],
            [1011],
            [0, 1012],
            [1, 1013],
            [1014],
            [0, 1015],
            [1, 1016],
            [1017],
            [0, 1018],
        ]
    ],
    False,
)


@st.composite
def splittable(draw):
    """Examples, their batches as cut, and texts that a duplicate-free split of those batch
    sizes exists for: an own text each, and shared texts (a repeated query or document) each
    given to at most one example per batch of a split made first, the examples then relabelled."""
    batches = draw(st.integers(1, 8))
    size = draw(st.integers(1, 6))
    short = draw(st.integers(0, size - 1)) if batches > 1 else 0
    count = batches * size - short
    target = np.array([b for b in range(batches) for _ in range(size if b < batches - 1 else size - short)])
    texts = [{1000 + k} for k in range(count)]
    several = draw(st.booleans())  # examples holding several shared texts, or at most one
    for shared in range(draw(st.integers(1, 5))):
        holders = draw(st.lists(st.integers(0, batches - 1), min_size=1, max_size=batches, unique=True))
        for b in holders:
            members = [k for k in np.flatnonzero(target == b) if several or len(texts[k]) == 1]
            if members:
                texts[members[draw(st.integers(0, len(members) - 1))]].add(shared)
    relabel = draw(st.permutations(range(count)))
    keys = [frozenset(texts[relabel[k]]) for k in range(count)]
    cut = batch_indices(np.ones(count), size, epoch=0, seed=draw(st.integers(0, 100)))
    return cut, keys, several


@pytest.mark.heavy
@settings(max_examples=300, deadline=None)
@given(splittable())
@hypothesis_example(case=SPLIT_ONLY_SPREADING_FINDS)
def test_examples_sharing_a_text_go_to_different_batches_where_a_split_exists(case):
    cut, keys, several = case
    placed, moved, left = keep_duplicates_apart(cut, keys)
    assert_a_rearrangement(cut, placed, len(keys))
    assert left == sum(clashing(b.tolist(), keys) for b in placed)
    home = {int(e): n for n, b in enumerate(cut) for e in b}
    assert moved == sum(home[int(e)] != n for n, b in enumerate(placed) for e in b)
    if not several:  # one shared text each: the spread finds a split (with several it may miss one)
        assert left == 0


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda count: st.tuples(
            st.lists(st.frozensets(st.integers(0, 12), min_size=1, max_size=4), min_size=count, max_size=count),
            st.integers(1, 7),
            st.integers(0, 3),
            st.booleans(),
        )
    )
)
def test_every_example_is_placed_once_and_the_counts_are_right(case):
    keys, size, seed, group = case
    lengths = np.random.default_rng(seed).integers(1, 50, len(keys))
    cut = batch_indices(lengths, size, epoch=1, seed=seed, group_by_length=group)
    placed, moved, left = keep_duplicates_apart(cut, keys)
    assert_a_rearrangement(cut, placed, len(keys))
    before = sum(clashing(b.tolist(), keys) for b in cut)
    assert left == sum(clashing(b.tolist(), keys) for b in placed) <= before
    home = {int(e): n for n, b in enumerate(cut) for e in b}
    assert moved == sum(home[int(e)] != n for n, b in enumerate(placed) for e in b)
    if not before:
        assert [b.tolist() for b in placed] == [b.tolist() for b in cut] and moved == 0
    # The same input gives the same batches: no randomness of its own.
    again, _, _ = keep_duplicates_apart(cut, keys)
    assert [b.tolist() for b in again] == [b.tolist() for b in placed]


def test_a_clash_no_exchange_of_two_can_solve_goes_round_three_batches():
    # Batch 1 holds "t" twice. Only batch 2 lacks "t", and its one example holds "u", which
    # batch 1 holds too: it must go on to batch 0, which sends a free example to batch 1.
    texts = [{"t", "r"}, {"s"}, {"w"}, {"t", "a"}, {"t", "a2"}, {"u", "p"}, {"u", "q"}]
    keys = [frozenset(t) for t in texts]
    cut = [np.array([0, 1, 2]), np.array([3, 4, 5]), np.array([6])]
    placed, moved, left = keep_duplicates_apart(cut, keys)
    assert left == 0 and moved == 3
    assert all(clashing(b.tolist(), keys) == 0 for b in placed)
    assert_a_rearrangement(cut, placed, len(keys))


def test_where_no_exchange_takes_a_clash_out_the_examples_are_walked_again():
    # Example 1 clashes with example 0 on "x", and the other batch holds its "y": no batch
    # takes it. Walked, example 1 waits for the second batch, where example 3 then clashes
    # on "y" and can be exchanged for example 2.
    keys = [frozenset(t) for t in ({"x"}, {"x", "y"}, {"z"}, {"y"})]
    cut = [np.array([0, 1]), np.array([2, 3])]
    placed, moved, left = keep_duplicates_apart(cut, keys)
    assert left == 0 and moved == 2
    assert all(clashing(b.tolist(), keys) == 0 for b in placed)


def test_text_keys_match_exact_texts_across_columns():
    keys = text_keys(["北京", "上海", "北京 "], ["天津", "北京", "广州"], [["上海", "深圳"], [], ["天津"]])
    assert [len(k) for k in keys] == [4, 2, 3]
    assert len(keys[0] & keys[1]) == 2  # 北京 and 上海, from different columns
    assert len(keys[0] & keys[2]) == 1  # 天津
    assert keys[1] & keys[2] == frozenset()  # "北京 " with a space is another text
    with pytest.raises(ValueError, match="differ in length"):
        text_keys(["a"], ["b", "c"])


def repeated_queries(count, seed=0):
    """Pairs whose queries repeat (a query with several positives), as retrieval data has."""
    rng = np.random.default_rng(seed)
    queries = [f"q{int(rng.integers(0, count // 8))}" for _ in range(count)]
    documents = [f"d{k}" for k in range(count)]
    lengths = rng.integers(3, 60, count)
    return queries, documents, lengths


def test_repeated_queries_are_spread_and_length_grouping_still_holds():
    queries, documents, lengths = repeated_queries(3200)
    keys = text_keys(queries, documents)
    for epoch in range(2):
        plain = batch_indices(lengths, 32, epoch, group_by_length=True, seed=1)
        apart = batch_indices(lengths, 32, epoch, group_by_length=True, seed=1, keys=keys)
        assert sum(clashing(b.tolist(), keys) for b in plain) > 20
        assert sum(clashing(b.tolist(), keys) for b in apart) == 0
        assert sorted(np.concatenate(apart).tolist()) == list(range(3200))
        assert [len(b) for b in apart] == [len(b) for b in plain]

        def padded(batches):
            return sum(len(b) * lengths[b].max() for b in batches)

        ungrouped = batch_indices(lengths, 32, epoch, group_by_length=False, seed=1)
        assert padded(apart) < 0.7 * padded(ungrouped)
        assert padded(apart) < 1.1 * padded(plain)


def test_duplicates_moved_reports_what_the_batches_did():
    queries, documents, lengths = repeated_queries(600, seed=2)
    keys = text_keys(queries, documents)
    for group in (False, True):
        options = dict(group_by_length=group, seed=4, replicas=2)
        plain = batch_indices(lengths, 16, 3, **options)
        apart = batch_indices(lengths, 16, 3, keys=keys, **options)
        changed = sum(len(set(a.tolist()) - set(p.tolist())) for a, p in zip(apart, plain))
        left = sum(clashing(b.tolist(), keys) for b in apart)
        assert duplicates_moved(lengths, 16, keys, epoch=3, **options) == (changed, left)
        assert changed > 0
    with pytest.raises(ValueError, match="3 text keys for 600 examples"):
        duplicates_moved(lengths, 16, keys[:3])


def test_a_text_in_every_example_is_left_and_counted():
    keys = text_keys(["same"] * 12, [f"d{k}" for k in range(12)])
    moved, left = duplicates_moved(np.ones(12), 4, keys)
    assert left == 12 - 3  # one per batch can have it
    assert moved == 0


# Token ids that name the example and the row: anchor 10000+k, positive 20000+k, negative j
# of example k 100000+10k+j, each repeated to a length of its own.
def make_groups(count, negatives_of, seed=0):
    rng = np.random.default_rng(seed)

    def text(token):
        return [token] * int(rng.integers(1, 20))

    anchors = [text(10000 + k) for k in range(count)]
    positives = [text(20000 + k) for k in range(count)]
    negatives = [[text(100000 + 10 * k + j) for j in range(negatives_of(k))] for k in range(count)]
    return anchors, positives, negatives


def read_groups(dataset, group_size):
    """Per batch, per example: (example, negative numbers), after checking the rows' layout."""
    batches = []
    for (token_ids, segment_ids), labels in dataset.as_numpy_iterator():
        assert labels.dtype == np.float32 and labels.shape == (len(token_ids),) and not labels.any()
        assert not segment_ids.any() and len(token_ids) % group_size == 0
        firsts = token_ids[:, 0]
        lengths = (token_ids != 0).sum(axis=1)
        assert token_ids.shape[1] == lengths.max()  # padded to this batch's longest text only
        examples = []
        for start in range(0, len(token_ids), group_size):
            k = int(firsts[start]) - 10000
            assert 0 <= k < 10000 and firsts[start + 1] == 20000 + k
            drawn = [int(t) - 100000 - 10 * k for t in firsts[start + 2 : start + group_size]]
            assert all(0 <= j < 10 for j in drawn)
            examples.append((k, tuple(drawn)))
        batches.append(examples)
    return batches


@pytest.mark.parametrize("group", [False, True])
def test_group_rows_are_anchor_positive_and_negatives(group):
    anchors, positives, negatives = make_groups(23, lambda k: 2)
    dataset = group_dataset(anchors, positives, negatives, group_size=4, batch_size=5, group_by_length=group, seed=1)
    batches = read_groups(dataset, 4)
    assert sorted(k for b in batches for k, _ in b) == list(range(23))
    assert {drawn for b in batches for _, drawn in b} == {(0, 1)}  # exactly two: both, in file order
    assert sorted(len(b) for b in batches) == [3, 5, 5, 5, 5]
    assert dataset.cardinality().numpy() == 5
    for (token_ids, _), _ in dataset.take(1).as_numpy_iterator():
        k = int(token_ids[0, 0]) - 10000
        np.testing.assert_array_equal(token_ids[0][: len(anchors[k])], anchors[k])
        np.testing.assert_array_equal(token_ids[3][: len(negatives[k][1])], negatives[k][1])
        assert not token_ids[3][len(negatives[k][1]) :].any()


def test_groups_are_grouped_by_their_longest_text():
    # Anchors and positives of one length, negatives of lengths from 1 to 99: grouping must
    # look at the negatives to save padding.
    count = 640
    lengths = np.random.default_rng(4).integers(1, 100, count)
    anchors = [[10000 + k] * 5 for k in range(count)]
    positives = [[20000 + k] * 5 for k in range(count)]
    negatives = [[[100000 + 10 * k] * int(lengths[k])] for k in range(count)]

    def padded(group):
        dataset = group_dataset(anchors, positives, negatives, 3, batch_size=16, group_by_length=group, seed=1)
        return sum(token_ids.size for (token_ids, _), _ in dataset.as_numpy_iterator())

    assert padded(True) < 0.7 * padded(False)


def test_extra_negatives_are_drawn_anew_each_epoch_and_again_on_resume():
    anchors, positives, negatives = make_groups(40, lambda k: 2 + k % 5)
    dataset = group_dataset(anchors, positives, negatives, group_size=3, batch_size=8, seed=7)
    epochs = [read_groups(dataset, 3) for _ in range(3)]
    draws = [dict(e for b in epoch for e in b) for epoch in epochs]
    assert all(len(d) == 40 for d in draws)
    assert draws[0] != draws[1] and draws[1] != draws[2]
    assert all(0 <= d[k][0] < 2 + k % 5 for d in draws for k in range(40))
    assert {d[k] for d in draws for k in range(40) if k % 5 == 0} == {(0,), (1,)}  # one of two
    # A run resumed in its second epoch (start_step = 5 + 2) gets what the whole run got.
    resumed = group_dataset(anchors, positives, negatives, 3, batch_size=8, seed=7, start_step=7, repeat=True)
    assert read_groups(resumed.take(3), 3) == epochs[1][2:]
    # The draw depends on the seed, the epoch and the example only, not on the batches.
    other_batches = read_groups(group_dataset(anchors, positives, negatives, 3, batch_size=5, seed=7), 3)
    assert dict(e for b in other_batches for e in b) == draws[0]
    other_seed = read_groups(group_dataset(anchors, positives, negatives, 3, batch_size=8, seed=8), 3)
    assert dict(e for b in other_seed for e in b) != draws[0]


def test_group_batches_for_replicas_hold_whole_examples():
    anchors, positives, negatives = make_groups(13, lambda k: 1)
    dataset = group_dataset(anchors, positives, negatives, group_size=3, batch_size=4, replicas=2)
    batches = read_groups(dataset, 3)
    assert [len(b) for b in batches] == [4, 4, 4]  # 13 examples: the 13th sits the epoch out
    assert dataset.cardinality().numpy() == 3
    stream = group_dataset(anchors, positives, negatives, group_size=3, batch_size=4, replicas=2, repeat=True)
    assert [len(y) for _, y in stream.take(7).as_numpy_iterator()] == [12] * 7


def test_group_batches_keep_examples_sharing_a_text_apart():
    count = 64
    anchors, positives, negatives = make_groups(count, lambda k: 1)
    queries = [f"q{k % 16}" for k in range(count)]  # each query has four positives
    keys = text_keys(queries, [f"d{k}" for k in range(count)], [[f"n{k}"] for k in range(count)])
    dataset = group_dataset(anchors, positives, negatives, 3, batch_size=8, seed=3, keys=keys)
    batches = read_groups(dataset, 3)
    assert sorted(k for b in batches for k, _ in b) == list(range(count))
    assert all(len({queries[k] for k, _ in b}) == len(b) for b in batches)
    plain = read_groups(group_dataset(anchors, positives, negatives, 3, batch_size=8, seed=3), 3)
    assert any(len({queries[k] for k, _ in b}) < len(b) for b in plain)


def test_pairs_make_groups_of_two_without_negatives():
    anchors, positives, _ = make_groups(6, lambda k: 0)
    batches = read_groups(group_dataset(anchors, positives, None, group_size=2, batch_size=4), 2)
    assert sorted(k for b in batches for k, _ in b) == list(range(6))


def test_group_input_is_checked():
    anchors, positives, negatives = make_groups(5, lambda k: 3 if k != 3 else 1)
    with pytest.raises(ValueError, match="example 3 has 1 negatives, fewer than the 2 of group_size 4"):
        group_dataset(anchors, positives, negatives, group_size=4)
    with pytest.raises(ValueError, match="differ in length: 5, 4, 5"):
        group_dataset(anchors, positives[:4], negatives, group_size=2)
    with pytest.raises(ValueError, match="group_size must be at least 2"):
        group_dataset(anchors, positives, negatives, group_size=1)
    with pytest.raises(ValueError, match="needs 1 negatives per example"):
        group_dataset(anchors, positives, None, group_size=3)
    with pytest.raises(ValueError, match="2 text keys for 5 examples"):
        group_dataset(anchors, positives, negatives, group_size=3, keys=text_keys(["a", "b"]))
