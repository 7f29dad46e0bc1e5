import json

import numpy as np
import pytest

from cosent_tf import ConfigError, PairScorer, SentenceEncoder, VectorIndex, build_encoder
from cosent_tf.backend import dtype_policy, tf
from cosent_tf.calibration import format_threshold
from cosent_tf.inference.matchers import MATCHERS
from cosent_tf.inference.runtime import batched_outputs
from cosent_tf.models.builders import head_layer_name
from cosent_tf.models.kinds import KINDS
from tests.helpers import distinct_texts, make_model_dir

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
    with pytest.raises(TypeError, match="texts_b must be a sequence of strings, not a single str; wrap it in a list"):
        encoder.similarity(["好"], "好")  # one pair is two strings; a list and a string are not
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


def test_every_model_kind_has_the_matcher_that_loads_it():
    assert set(MATCHERS) == set(KINDS)
    assert all(kind == matcher.KIND for kind, matcher in MATCHERS.items())


@pytest.mark.heavy
def test_one_text_or_one_pair_gives_its_result_without_the_lists_axis(mining_models):
    encoder = SentenceEncoder.load(mining_models / "encoder")
    scorer = PairScorer.load(mining_models / "scorer")
    vector = encoder.encode("今天天气怎么样")
    listed = encoder.encode(["今天天气怎么样", "明天会下雨吗"])
    assert vector.shape == (listed.shape[1],) and vector.dtype == np.float32
    np.testing.assert_allclose(vector, listed[0], atol=1e-6)
    np.testing.assert_allclose(encoder.encode("今天天气怎么样", dim=4), encoder.encode(["今天天气怎么样"], dim=4)[0])
    cosine = encoder.similarity("今天天气怎么样", "明天会下雨吗")
    assert isinstance(cosine, float) and cosine == pytest.approx(float(listed[0] @ listed[1]), abs=1e-6)
    score = scorer.similarity("今天天气怎么样", "明天会下雨吗")
    assert isinstance(score, float)
    assert score == pytest.approx(float(scorer.score(["今天天气怎么样"], ["明天会下雨吗"])[0]), abs=1e-6)
    prediction = encoder.predict("今天天气怎么样", "明天会下雨吗", threshold=cosine - 0.01)
    assert isinstance(prediction, int) and prediction == 1
    assert encoder.predict("今天天气怎么样", "明天会下雨吗", threshold=cosine + 0.01) == 0


def calibration_pairs(count=60):
    texts_a, texts_b = distinct_texts(0, count), distinct_texts(100, count)
    return texts_a, texts_b, np.random.default_rng(0).permutation([1] * 25 + [0] * (count - 25)).astype(float)


def test_one_pair_gets_its_decision_probability_and_match(mining_models):
    encoder = SentenceEncoder.load(mining_models / "encoder")
    texts_a, texts_b, labels = calibration_pairs()
    encoder.calibrate(texts_a, texts_b, labels, "pairs.tsv")  # held in memory: the zoo folder is not written
    probability = encoder.predict_proba(texts_a[0], texts_b[0])
    assert isinstance(probability, float)
    assert probability == pytest.approx(float(encoder.predict_proba(texts_a[:1], texts_b[:1])[0]))
    decided = encoder.decide(texts_a[0], texts_b[0])
    expected = encoder.decide(texts_a[:1], texts_b[:1])
    assert len(decided) == 1 and decided.matches.tolist() == expected.matches.tolist()
    np.testing.assert_allclose(decided.scores, expected.scores, atol=1e-6)


@pytest.mark.heavy
def test_a_matchers_repr_names_its_folder_kind_pooling_width_maxlen_and_decision(mining_models, tiny_config):
    from cosent_tf.calibration import fit_decision

    encoder = SentenceEncoder.load(mining_models / "encoder")
    width = encoder.encode(["好"]).shape[1]
    folder = str(mining_models / "encoder")
    assert repr(encoder) == (
        f"SentenceEncoder(model={folder!r}, kind=feature, pooling=last-avg, width={width}, maxlen=16, decision=none)"
    )
    texts_a, texts_b, labels = calibration_pairs()
    fitted = fit_decision(encoder.similarity(texts_a, texts_b), labels, "pairs.tsv")
    encoder.calibrate(texts_a, texts_b, labels, "pairs.tsv")
    assert fitted.calibration is not None
    assert repr(encoder).endswith(
        f"maxlen=16, decision=accuracy threshold {format_threshold(fitted.thresholds['accuracy'])}, "
        f"{fitted.calibration.method} calibration)"
    )
    scorer = PairScorer.load(mining_models / "scorer")
    head = json.loads((mining_models / "scorer" / "cosent_model.json").read_text())["head"]
    assert repr(scorer) == (
        f"PairScorer(model={str(mining_models / 'scorer')!r}, kind=interaction, head={head}, maxlen=32, decision=none)"
    )
    in_memory = SentenceEncoder(build_encoder(tiny_config, pooling="cls"), encoder.tokenizer)
    assert repr(in_memory) == "SentenceEncoder(model=None (held in memory), decision=none)"
