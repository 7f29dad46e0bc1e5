import json
import os
import tracemalloc

import numpy as np
import pytest

from cosent_tf import ConfigError, DataError, PairScorer, SentenceEncoder, VectorIndex, build_encoder
from cosent_tf.backend import dtype_policy, tf
from cosent_tf.inference.matchers import batched_outputs, cosine_scores, inference_function, top_k_cosine
from cosent_tf.models.builders import head_layer_name
from tests.helpers import make_model_dir

TEXTS = ["今天天气怎么样", "", "ＱＱ号码是多少？", "iPhone 6s 多少钱", "今天天气怎么样", "好"]


@pytest.fixture
def encoder_and_model(tiny_config, tmp_path):
    model = make_model_dir(tmp_path / "model", tiny_config, pooling="last-avg", maxlen=12, threshold=0.9)
    return SentenceEncoder.load(tmp_path / "model"), model


def one_by_one(model, tokenizer, texts):
    rows = []
    for text in texts:
        ids = np.asarray([tokenizer.encode(text)], dtype=np.int32)
        rows.append(model.predict([ids, np.zeros_like(ids)], verbose=0)[0])
    return np.asarray(rows)


def unit(vectors):
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_encode_is_in_input_order_and_matches_single_sentences(encoder_and_model):
    encoder, model = encoder_and_model
    raw = encoder.encode(TEXTS, batch_size=4, normalize=False)
    np.testing.assert_allclose(raw, one_by_one(model, encoder.tokenizer, TEXTS), atol=1e-5)
    normalised = encoder.encode(TEXTS, batch_size=4)
    assert normalised.dtype == np.float32
    np.testing.assert_allclose(normalised, unit(raw), atol=1e-6)
    np.testing.assert_array_equal(normalised[0], normalised[4])  # same text, same vector
    assert encoder.encode([]).shape == (0, 16)


def test_long_texts_are_truncated_as_in_training(encoder_and_model):
    encoder, _ = encoder_and_model
    long_text = "一二三四五六七八九十" * 5
    assert len(encoder.tokenizer.encode(long_text)) == 12  # maxlen: [CLS] + 10 characters + [SEP]
    np.testing.assert_allclose(encoder.encode([long_text]), encoder.encode([long_text[:10]]), atol=1e-6)


def test_non_strings_are_refused_with_their_position(encoder_and_model):
    encoder, _ = encoder_and_model
    with pytest.raises(TypeError, match=r"texts\[1\] is a int \(3\), not a str"):
        encoder.encode(["好", 3])
    with pytest.raises(TypeError, match="not a single str; wrap it in a list"):
        encoder.encode("好")
    with pytest.raises(TypeError, match=r"texts\[0\] is a bytes"):
        encoder.encode([b"abc"])
    with pytest.raises(ValueError, match="texts_a has 2 texts but texts_b has 1"):
        encoder.similarity(["a", "b"], ["c"])


def test_similarity_and_predict_use_cosine_and_the_tuned_threshold(encoder_and_model):
    encoder, _ = encoder_and_model
    vectors = encoder.encode(TEXTS)
    cosines = encoder.similarity(TEXTS[:3], TEXTS[3:])
    np.testing.assert_allclose(cosines, np.sum(vectors[:3] * vectors[3:], axis=1), atol=1e-6)
    assert encoder.threshold == 0.9
    np.testing.assert_array_equal(encoder.predict(TEXTS[:3], TEXTS[3:]), (cosines > 0.9).astype(int))
    np.testing.assert_array_equal(encoder.predict(TEXTS[:3], TEXTS[3:], threshold=-2), [1, 1, 1])


def test_predict_without_a_threshold_says_so(tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config, kind="interaction", head="softmax")
    scorer = PairScorer.load(tmp_path / "model")
    scores = scorer.score(TEXTS[:3], TEXTS[3:])
    assert scores.shape == (3,) and np.all((scores > 0) & (scores < 1))  # P(similar)
    pair_ids = [np.asarray([scorer.tokenizer.encode_pair(a, b)], np.int32) for a, b in zip(TEXTS[:3], TEXTS[3:])]
    expected = [scorer.model.predict([ids, np.zeros_like(ids)], verbose=0)[0, 1] for ids in pair_ids]
    np.testing.assert_allclose(scores, expected, atol=1e-6)
    with pytest.raises(ConfigError, match="no tuned threshold"):
        scorer.predict(TEXTS[:3], TEXTS[3:])


def test_loading_the_wrong_kind_names_the_right_class(encoder_and_model, tmp_path):
    with pytest.raises(ConfigError, match="holds a model of kind 'feature'; load it with SentenceEncoder"):
        PairScorer.load(tmp_path / "model")


def test_search_finds_the_text_itself_first(encoder_and_model, tmp_path):
    encoder, _ = encoder_and_model
    corpus = ["今天天气怎么样", "明天会下雨吗", "ＱＱ号码是多少？", "我想换手机"]
    hits = encoder.search(["ＱＱ号码是多少？", "我想换手机"], corpus, top_k=2)
    assert [[h.index for h in row][0] for row in hits] == [2, 3]
    assert hits[0][0].text == "ＱＱ号码是多少？" and hits[0][0].score == pytest.approx(1.0, abs=1e-5)
    index = encoder.build_index(corpus)
    index.save(tmp_path / "index")
    loaded = VectorIndex.load(tmp_path / "index")
    assert loaded.texts == corpus and loaded.model_dir == str(tmp_path / "model")
    assert isinstance(loaded.vectors, np.memmap)
    assert encoder.search(["我想换手机"], loaded, top_k=10)[0] == encoder.search(["我想换手机"], index, top_k=10)[0]
    assert len(encoder.search(["我想换手机"], loaded, top_k=10)[0]) == 4  # top_k beyond the corpus size


def random_units(rng, count, dim):
    vectors = rng.normal(size=(count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_top_k_equals_brute_force_on_120k_vectors_in_bounded_memory():
    rng = np.random.default_rng(0)
    corpus, queries = random_units(rng, 120_000, 48), random_units(rng, 300, 48)
    corpus[[5000, 90000]] = corpus[7]  # exact ties: the lower index must come first
    queries[0] = corpus[7]
    tracemalloc.start()
    scores, indices = top_k_cosine(queries, corpus, top_k=10, query_chunk=128, corpus_chunk=8192)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    full = queries @ corpus.T
    expected = np.argsort(-full, axis=1, kind="stable")[:, :10]
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(full, expected, axis=1), atol=1e-5)
    assert list(indices[0, :3]) == [7, 5000, 90000]
    # Blocks of 128 x 8192 scores, not the 300 x 120000 matrix (144 MB).
    assert peak < full.nbytes / 8, f"peak {peak / 1e6:.1f} MB"


def test_index_problems_are_explained(encoder_and_model, tmp_path):
    encoder, _ = encoder_and_model
    index = encoder.build_index(["a", "b"])
    with pytest.raises(ValueError, match=r"query vectors of shape \(1, 3\) do not fit this index's dimension 16"):
        index.search(np.ones((1, 3), np.float32))
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        index.search(encoder.encode(["a"]), top_k=0)
    index.save(tmp_path / "index")
    (tmp_path / "index" / "texts.jsonl").write_text('"a"\nb\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"texts.jsonl, line 2: not a JSON string"):
        VectorIndex.load(tmp_path / "index")
    (tmp_path / "index" / "texts.jsonl").write_text(json.dumps("a") + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="2 vectors, 1 texts and a count of 2 do not agree"):
        VectorIndex.load(tmp_path / "index")
    (tmp_path / "index" / "texts.jsonl").write_text('"a"\n"b"\n', encoding="utf-8")
    vectors = (tmp_path / "index" / "vectors.npy").read_bytes()
    (tmp_path / "index" / "vectors.npy").write_bytes(vectors[:100])
    with pytest.raises(DataError, match=r"vectors.npy: not a readable .npy matrix .*; rebuild the index"):
        VectorIndex.load(tmp_path / "index")
    np.save(tmp_path / "index" / "vectors.npy", np.ones((2, 16), np.float64))
    with pytest.raises(DataError, match=r"vectors.npy: holds a float64 array of shape \(2, 16\), not a float32"):
        VectorIndex.load(tmp_path / "index")
    (tmp_path / "index" / "vectors.npy").write_bytes(vectors)
    info = (tmp_path / "index" / "index.json").read_text()
    (tmp_path / "index" / "index.json").write_text(info[:-5])
    with pytest.raises(ConfigError, match=r"index.json, line \d+: the index description is not valid JSON"):
        VectorIndex.load(tmp_path / "index")
    (tmp_path / "index" / "index.json").write_text(info)
    assert len(VectorIndex.load(tmp_path / "index")) == 2
    (tmp_path / "index" / "vectors.npy").unlink()
    with pytest.raises(ConfigError, match=r"not a complete cosent-tf index \(missing vectors.npy\)"):
        VectorIndex.load(tmp_path / "index")


def test_bf16_encoder_traces_under_its_own_policy_and_stays_close(encoder_and_model, tmp_path):
    encoder, _ = encoder_and_model
    bf16 = SentenceEncoder.load(tmp_path / "model", precision="bf16")
    assert bf16.model.get_layer("Embedding-Token").dtype_policy.name == "bfloat16"
    vectors = bf16.encode(TEXTS)  # traced while the global policy is float32 again
    assert vectors.dtype == np.float32
    assert np.min(np.sum(vectors * encoder.encode(TEXTS), axis=1)) > 0.99


def test_a_bf16_encoder_stores_bf16_weights_and_computes_exactly_as_mixed_bfloat16(
    encoder_and_model, tiny_config, tmp_path
):
    encoder, _ = encoder_and_model
    bf16 = SentenceEncoder.load(tmp_path / "model", precision="bf16")
    transformer_weights = [
        w for layer in bf16.model.layers if layer.name.startswith("Transformer") for w in layer.weights
    ]
    assert transformer_weights and {w.dtype for w in transformer_weights} == {tf.bfloat16}
    with dtype_policy("mixed_bfloat16"):
        mixed = build_encoder(tiny_config, pooling="last-avg")
    mixed.set_weights(encoder.model.get_weights())
    assert {w.dtype for w in mixed.get_layer("Transformer-0-FeedForward").weights} == {tf.float32}
    ids = bf16.tokenizer.encode_all(TEXTS)
    np.testing.assert_array_equal(batched_outputs(bf16.model, ids), batched_outputs(mixed, ids))


@pytest.mark.parametrize("head", ["score", "softmax"])
def test_a_bf16_pair_scorer_keeps_its_head_in_float32_and_scores_like_float32(head, tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config, kind="interaction", head=head, maxlen=24)
    full, bf16 = PairScorer.load(tmp_path / "model"), PairScorer.load(tmp_path / "model", precision="bf16")
    assert bf16.model.get_layer("Transformer-0-FeedForward").dtype_policy.name == "bfloat16"
    assert {w.dtype for w in bf16.model.get_layer(head_layer_name(head)).weights} == {tf.float32}
    texts_a, texts_b = TEXTS[:4], TEXTS[2:]
    expected, scores = full.similarity(texts_a, texts_b), bf16.similarity(texts_a, texts_b)
    assert scores.dtype == np.float32
    np.testing.assert_allclose(scores, expected, atol=0.02 * max(1.0, float(np.abs(expected).max())))


@pytest.mark.parametrize("rows", [1, 2, 3, 8])
def test_a_batch_computed_in_two_halves_equals_the_model_on_the_whole_batch(tiny_config, rows):
    encoder = build_encoder(tiny_config, pooling="cls")
    rng = np.random.default_rng(rows)
    token_ids = rng.integers(672, 2000, size=(rows, 9)).astype(np.int32)
    token_ids[:, 0], token_ids[:, -1] = 101, 102
    token_ids[0, 5:] = 0  # padding: the first half's longest row is not the batch's
    segment_ids = np.zeros_like(token_ids)
    function = inference_function(encoder)
    np.testing.assert_allclose(
        function(token_ids, segment_ids).numpy(), encoder([token_ids, segment_ids], training=False).numpy(), atol=1e-6
    )

    # the traced graph calls the model twice: two halves the executor can run side by side
    def softmaxes(function):
        return sum(
            op.type == "Softmax" for op in function.get_concrete_function(token_ids, segment_ids).graph.get_operations()
        )

    whole = tf.function(lambda ids, segments: encoder([ids, segments], training=False))
    assert softmaxes(whole) > 0 and softmaxes(function) == 2 * softmaxes(whole)


def test_batched_outputs_come_back_in_input_order(tiny_config):
    encoder = build_encoder(tiny_config, pooling="last-avg")
    token_ids = [np.array([101] + [672 + i] * n + [102], np.int32) for i, n in enumerate([5, 1, 9, 3, 3, 7])]
    vectors = batched_outputs(encoder, token_ids, batch_size=4)
    for ids, vector in zip(token_ids, vectors):
        single = encoder.predict([ids[None], np.zeros_like(ids)[None]], verbose=0)[0]
        np.testing.assert_allclose(vector, single, atol=1e-5)
    cosines = cosine_scores(encoder, token_ids[:3], token_ids[3:], batch_size=4)
    expected = [
        np.dot(vectors[i], vectors[i + 3]) / np.linalg.norm(vectors[i]) / np.linalg.norm(vectors[i + 3])
        for i in range(3)
    ]
    np.testing.assert_allclose(cosines, expected, rtol=1e-5)


def test_a_failed_index_save_leaves_the_previous_index_whole(tmp_path, monkeypatch):
    index = VectorIndex(np.eye(3, dtype=np.float32), ["a", "b", "c"])
    index.save(tmp_path / "index")
    before = {name: (tmp_path / "index" / name).read_bytes() for name in os.listdir(tmp_path / "index")}

    def crash(path, array, **kwargs):
        with open(path, "wb") as f:
            f.write(b"\x93NUMPY partial")
        raise KeyboardInterrupt  # as if the process were stopped while writing the vectors

    monkeypatch.setattr(np, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        VectorIndex(np.ones((2, 3), dtype=np.float32), ["x", "y"]).save(tmp_path / "index", overwrite=True)
    monkeypatch.undo()
    assert {name: (tmp_path / "index" / name).read_bytes() for name in os.listdir(tmp_path / "index")} == before
    assert sorted(os.listdir(tmp_path)) == ["index"]  # no temporary folder left behind
    assert VectorIndex.load(tmp_path / "index").texts == ["a", "b", "c"]
