import hashlib
import itertools

import numpy as np
import pytest

from cosent_tf import interaction_dataset, pair_dataset
from cosent_tf.data import batching
from cosent_tf.data.batching import batch_indices, batches_per_epoch, pad_batch, text_keys
from cosent_tf.data.pipeline import length_sorted_batches, pair_segment_ids, restore_order


def make_pairs(count, seed=0):
    rng = np.random.default_rng(seed)
    # Token ids encode (pair index, side) so every row can be traced back to its pair.
    ids_a = [np.array([101] + [1000 + k] * int(rng.integers(1, 30)) + [102], np.int32) for k in range(count)]
    ids_b = [np.array([101] + [5000 + k] * int(rng.integers(1, 30)) + [102], np.int32) for k in range(count)]
    return ids_a, ids_b, np.arange(count, dtype=np.float32)


@pytest.mark.parametrize("group", [False, True])
def test_pair_batches_are_interleaved_and_complete(group):
    ids_a, ids_b, labels = make_pairs(103)
    dataset = pair_dataset(ids_a, ids_b, labels, batch_size=8, group_by_length=group, seed=3)
    seen = []
    for (token_ids, segment_ids), batch_labels in dataset.as_numpy_iterator():
        assert token_ids.shape[0] % 2 == 0 and not segment_ids.any()
        for row in range(0, len(token_ids), 2):
            k = int(batch_labels[row])
            assert batch_labels[row + 1] == k
            np.testing.assert_array_equal(token_ids[row][: len(ids_a[k])], ids_a[k])
            np.testing.assert_array_equal(token_ids[row + 1][: len(ids_b[k])], ids_b[k])
            assert not token_ids[row][len(ids_a[k]) :].any() and not token_ids[row + 1][len(ids_b[k]) :].any()
            seen.append(k)
        # Padded only to this batch's own longest sequence.
        longest = max(max(len(ids_a[int(k)]), len(ids_b[int(k)])) for k in batch_labels[::2])
        assert token_ids.shape[1] == longest
    assert sorted(seen) == list(range(103))


def test_shuffle_is_seeded_and_changes_per_epoch():
    ids_a, ids_b, labels = make_pairs(64)

    def epoch_orders(seed):
        dataset = pair_dataset(ids_a, ids_b, labels, batch_size=8, seed=seed)
        return [[int(x) for _, y in dataset.as_numpy_iterator() for x in y[::2]] for _ in range(2)]

    first, again, other = epoch_orders(1), epoch_orders(1), epoch_orders(2)
    assert first == again
    assert first[0] != first[1]
    assert first != other


def test_grouping_by_length_cuts_padding():
    lengths = np.random.default_rng(0).integers(3, 60, 3200)

    def padded_tokens(group):
        return sum(len(b) * lengths[b].max() for b in batch_indices(lengths, 32, 0, True, group, seed=0))

    assert padded_tokens(True) < 0.7 * padded_tokens(False)
    batches = batch_indices(lengths, 32, 0, True, True, seed=0)
    assert sorted(np.concatenate(batches)) == list(range(3200))


@pytest.mark.parametrize("group", [False, True])
def test_batches_for_replicas_hold_a_multiple_of_them(group):
    # 45 examples, batches of 8 for 4 replicas: five full batches, and the last 5 cut to 4.
    lengths = np.random.default_rng(1).integers(3, 30, 45)
    for epoch in range(3):
        batches = batch_indices(lengths, 8, epoch, True, group, seed=0, replicas=4)
        assert sorted(len(b) for b in batches) == [4, 8, 8, 8, 8, 8]
        assert len(batches) == batches_per_epoch(45, 8, replicas=4)
        assert len(set(np.concatenate(batches))) == 44  # one example sits this epoch out
    assert batches_per_epoch(45, 8) == 6 and batches_per_epoch(43, 8, replicas=4) == 5  # 3 left: no batch
    assert len(batch_indices(np.ones(43), 8, 0, replicas=4)) == 5
    with pytest.raises(ValueError, match="not a multiple of the 4 replicas"):
        batch_indices(lengths, 6, 0, replicas=4)


def test_a_pair_stream_for_replicas_keeps_pairs_whole():
    ids_a, ids_b, labels = make_pairs(13)
    dataset = pair_dataset(ids_a, ids_b, labels, batch_size=4, replicas=2)
    rows = [len(y) for _, y in dataset.as_numpy_iterator()]
    assert rows == [8, 8, 8]  # 13 pairs: three batches of 4 pairs, the 13th left out
    assert dataset.cardinality().numpy() == 3


def test_interaction_batches():
    pair_ids = [np.arange(1, n + 1, dtype=np.int32) for n in (3, 7, 5, 2, 9)]
    dataset = interaction_dataset(pair_ids, np.arange(5), batch_size=2, shuffle=False, group_by_length=False)
    batches = list(dataset.as_numpy_iterator())
    assert [b[0][0].shape for b in batches] == [(2, 7), (2, 5), (1, 9)]
    assert [list(b[1]) for b in batches] == [[0, 1], [2, 3], [4]]


def test_sentence_batches_sorted_and_restorable():
    token_ids = [np.arange(1, n + 1, dtype=np.int32) for n in (5, 2, 9, 3, 7)]
    order, batches = length_sorted_batches(token_ids, batch_size=2)
    batches = list(batches)
    assert [ids.shape[1] for _, ids in batches] == [3, 7, 9]
    assert [list(index) for index, _ in batches] == [[1, 3], [0, 4], [2]]
    np.testing.assert_array_equal(batches[0][1], [[1, 2, 0], [1, 2, 3]])
    lengths_in_batch_order = np.array([len(token_ids[i]) for i in order], dtype=np.float32)
    np.testing.assert_array_equal(restore_order(lengths_in_batch_order, order), [5, 2, 9, 3, 7])


def test_element_spec_has_free_dimensions_so_keras_traces_once():
    ids_a, ids_b, labels = make_pairs(4)
    (token_spec, _), _ = pair_dataset(ids_a, ids_b, labels).element_spec
    assert token_spec.shape.as_list() == [None, None]


def test_pad_batch_and_bad_input():
    np.testing.assert_array_equal(pad_batch([[1, 2], [3]]), [[1, 2], [3, 0]])
    with pytest.raises(ValueError, match="differ in length"):
        pair_dataset([[1]], [[1], [2]], [0.0])
    with pytest.raises(ValueError, match="batch_size must be positive"):
        batch_indices([1, 2], 0, 0)


def test_repeated_stream_resumes_where_it_stopped():
    ids_a, ids_b, labels = make_pairs(20)

    def order(dataset, count):
        return [int(y[0]) for _, y in dataset.take(count).as_numpy_iterator()]

    full = order(pair_dataset(ids_a, ids_b, labels, batch_size=4, seed=5, repeat=True), 12)
    # 5 batches an epoch: starting at global batch 7 is epoch 1, third batch.
    resumed = order(pair_dataset(ids_a, ids_b, labels, batch_size=4, seed=5, repeat=True, start_step=lambda: 7), 5)
    assert resumed == full[7:12]
    # The endless stream runs through epochs in the same order as one pass per iteration.
    single = pair_dataset(ids_a, ids_b, labels, batch_size=4, seed=5)
    assert order(single, 5) + order(single, 5) == full[:10]


def _checksum(token_ids, labels):
    """Sum of every id times its (row, column) position, and of the labels: what a batch holds."""
    token_ids = np.asarray(token_ids, np.int64)
    weights = np.arange(1, token_ids.shape[0] + 1)[:, None] * 131 + np.arange(1, token_ids.shape[1] + 1)[None, :]
    return int((token_ids * weights).sum()), float(np.asarray(labels, np.float64).sum())


@pytest.mark.heavy
@pytest.mark.parametrize("kind", ["feature", "interaction"])
def test_batches_reach_the_model_as_made_while_training(kind, tiny_config):
    """Every batch a training step receives equals the arrays the pipeline made it from.

    Training (forward, backward, the fused optimizer) runs while the next batches are being
    made, as in ``fit``: a buffer of the pipeline reused or overwritten while still in use
    would show here as a step seeing other ids than the batch it was given.
    """
    from cosent_tf import CoSENTLoss, FusedAdam, InteractionCoSENTLoss, build_encoder, build_interaction_model
    from cosent_tf.backend import keras, tf

    class Recording(keras.Model):
        def train_step(self, data):
            (token_ids, _), labels = data
            rows, columns = tf.shape(token_ids)[0], tf.shape(token_ids)[1]
            weights = (
                tf.range(1, rows + 1, dtype=tf.int64)[:, None] * 131 + tf.range(1, columns + 1, dtype=tf.int64)[None, :]
            )
            received = {
                "ids": tf.reduce_sum(tf.cast(token_ids, tf.int64) * weights),
                "labels": tf.reduce_sum(tf.cast(labels, tf.float64)),
            }
            super().train_step(data)
            return received

    rng = np.random.default_rng(0)
    ids_a = [rng.integers(1, 20000, int(rng.integers(1, 30))).astype(np.int32) for _ in range(96)]
    ids_b = [rng.integers(1, 20000, int(rng.integers(1, 30))).astype(np.int32) for _ in range(96)]
    labels = rng.integers(0, 2, 96).astype(np.float32)
    if kind == "feature":
        model, loss = build_encoder(tiny_config), CoSENTLoss()
        make = lambda: pair_dataset(ids_a, ids_b, labels, batch_size=3, seed=1, repeat=True)  # noqa: E731
    else:
        model, loss = build_interaction_model(tiny_config), InteractionCoSENTLoss()
        joined = [np.concatenate([a, b]) for a, b in zip(ids_a, ids_b)]
        make = lambda: interaction_dataset(joined, labels, batch_size=3, seed=1, repeat=True)  # noqa: E731
    steps = 120
    expected = [_checksum(ids, y) for (ids, _), y in make().take(steps).as_numpy_iterator()]
    model = Recording(model.inputs, model.outputs)
    model.compile(optimizer=FusedAdam(1e-3), loss=loss)
    seen = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: seen.append((int(logs["ids"]), float(logs["labels"])))
    )
    model.fit(make(), epochs=1, steps_per_epoch=steps, callbacks=[record], verbose=0)
    assert seen == expected


def test_shuffled_and_grouped_interaction_batches_keep_each_pairs_label():
    # Pair k's tokens are all k + 1, so every row names the pair it came from.
    lengths = np.random.default_rng(4).integers(2, 40, 203)
    pair_ids = [np.full(n, k + 1, np.int32) for k, n in enumerate(lengths)]
    labels = np.arange(203, dtype=np.float32) * 10
    for group in (False, True):
        dataset = interaction_dataset(pair_ids, labels, batch_size=8, shuffle=True, group_by_length=group, seed=9)
        seen = []
        for (token_ids, _), batch_labels in dataset.as_numpy_iterator():
            pairs = token_ids[:, 0] - 1
            np.testing.assert_array_equal(batch_labels, labels[pairs])
            seen.extend(pairs)
        assert sorted(seen) == list(range(203)) and seen != sorted(seen)  # all of them, shuffled


def test_pair_segment_ids_mark_the_second_text_and_its_sep_only():
    # [CLS] a a [SEP] b [SEP] pad pad / [CLS] a [SEP] b b b [SEP] pad, with [SEP] = 102
    ids = np.array([[101, 7, 8, 102, 9, 102, 0, 0], [101, 7, 102, 9, 9, 9, 102, 0]])
    expected = [[0, 0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 1, 0]]
    np.testing.assert_array_equal(pair_segment_ids(ids, 102).numpy(), expected)
    # the NumPy twin the inference batches use (an ONNX export runs them without TensorFlow)
    numpy_ids = batching.segment_ids(ids, 102)
    np.testing.assert_array_equal(numpy_ids, expected)
    assert numpy_ids.dtype == np.int32


def test_interaction_batches_carry_pair_segments_only_when_asked():
    pairs = [np.array([101, 7, 102, 9, 102]), np.array([101, 8, 8, 102, 9, 9, 102])]
    plain = next(iter(interaction_dataset(pairs, [1.0, 0.0], batch_size=2, shuffle=False)))
    paired = next(iter(interaction_dataset(pairs, [1.0, 0.0], batch_size=2, shuffle=False, sep_id=102)))
    assert not plain[0][1].numpy().any()
    np.testing.assert_array_equal(paired[0][1].numpy(), pair_segment_ids(paired[0][0], 102).numpy())
    assert paired[0][1].numpy().sum() == 2 + 3


# Digests of batch_indices' batches as 0.5.0 cut them, before keeping duplicates apart was
# added: without keys the batches must stay exactly these (runs resumed across the upgrade
# continue the same shuffle). Key: (seed, epoch, shuffle, group_by_length, batch_size, replicas).
BATCHES_OF_0_5_0 = {
    (0, 0, True, True, 32, 1): "ed16d38a4cecb450",
    (0, 0, True, True, 8, 4): "02e60bb1abcf49b0",
    (0, 0, True, False, 32, 1): "3cf04488a22cfdfc",
    (0, 0, True, False, 8, 4): "5f913b12bdf7ffdb",
    (0, 0, False, True, 32, 1): "90bd753bb5d8464e",
    (0, 0, False, True, 8, 4): "dabbaf89c7d57965",
    (0, 0, False, False, 32, 1): "02b0220692243211",
    (0, 0, False, False, 8, 4): "38f086824b03d7e9",
    (0, 3, True, True, 32, 1): "33c40e5b7982121d",
    (0, 3, True, True, 8, 4): "c3cdbaa2161a0127",
    (0, 3, True, False, 32, 1): "7a52bb2d903aff3c",
    (0, 3, True, False, 8, 4): "3e51d86660520333",
    (5, 0, True, True, 32, 1): "cc516490ec81da91",
    (5, 0, True, True, 8, 4): "d21c8f526ae7c119",
    (5, 0, True, False, 32, 1): "59a13031f14db2f2",
    (5, 0, True, False, 8, 4): "87b6f23024e542d5",
    (5, 3, True, True, 32, 1): "e3834da71ea48b76",
    (5, 3, True, True, 8, 4): "3ba3da7b6ce7253c",
    (5, 3, True, False, 32, 1): "a671470352e55eee",
    (5, 3, True, False, 8, 4): "e385a0246b1dd2af",
}


def batches_digest(batches):
    digest = hashlib.sha256()
    for batch in batches:
        digest.update(np.asarray(batch, np.int64).tobytes())
        digest.update(b"|")
    return digest.hexdigest()[:16]


def test_batches_without_keys_are_those_of_0_5_0():
    lengths = np.random.default_rng(7).integers(2, 60, 1003).tolist()
    for (seed, epoch, shuffle, group, size, replicas), expected in BATCHES_OF_0_5_0.items():
        batches = batch_indices(lengths, size, epoch, shuffle, group, seed=seed, replicas=replicas)
        assert batches_digest(batches) == expected, (seed, epoch, shuffle, group, size, replicas)


def test_keys_without_shared_texts_leave_the_batches_as_cut():
    lengths = np.random.default_rng(3).integers(2, 60, 301)
    keys = text_keys([f"a{k}" for k in range(301)], [f"b{k}" for k in range(301)])
    for shuffle, group, replicas in itertools.product((True, False), (True, False), (1, 4)):
        options = dict(shuffle=shuffle, group_by_length=group, seed=2, replicas=replicas)
        plain = batch_indices(lengths, 8, 1, **options)
        assert batches_digest(batch_indices(lengths, 8, 1, keys=keys, **options)) == batches_digest(plain)


def test_pair_batches_keep_pairs_sharing_a_text_apart():
    ids_a, ids_b, labels = make_pairs(96)
    texts_a = [f"q{k % 12}" for k in range(96)]  # each first sentence in eight pairs
    keys = text_keys(texts_a, [f"d{k}" for k in range(96)])

    def batches(keys):
        dataset = pair_dataset(ids_a, ids_b, labels, batch_size=8, seed=5, keys=keys)
        return [[int(k) for k in y[::2]] for _, y in dataset.as_numpy_iterator()]

    apart, plain = batches(keys), batches(None)
    assert sorted(k for b in apart for k in b) == list(range(96))
    assert all(len({texts_a[k] for k in b}) == len(b) for b in apart)
    assert any(len({texts_a[k] for k in b}) < len(b) for b in plain)
    with pytest.raises(ValueError, match="5 text keys for 96 examples"):
        pair_dataset(ids_a, ids_b, labels, batch_size=8, keys=keys[:5])
