"""Keras 3 encoders on keras-hub backbones against the Keras 2 engine's encoders of the same folders.

One Keras 2 process (module fixture) makes a tiny BERT and a tiny ALBERT with large random weights
(so that a swapped weight, a wrong activation or epsilon, or padding reaching attention would show
far above 1e-5), writes them as model folders, a sentence-transformers folder and a Google-format
checkpoint, and encodes fixed Chinese sentences with its SentenceEncoder in every pooling, in one
padded batch and unpadded (one sentence; sentences of one length); it also tokenises STS-B's test
sentences. This process loads the same folders on Keras 3 and must give the same vectors and ids.
"""

import os
import sys

import keras
import numpy as np
import pytest

from cosent_tf.choices import POOLING_MODES
from cosent_tf.errors import ConfigError
from cosent_tf.keras3.backbones import google_arrays, load_backbone
from cosent_tf.keras3.encoder import SentenceEncoder, build_encoder
from cosent_tf.models.checkpoint_files import read_checkpoint_arrays
from cosent_tf.models.tokenization import SentenceTokenizer
from tests.keras3.support import SHARED_DATA, SHARED_VOCAB, run_keras2

# Lengths differ (a padded batch), and EQUAL_LENGTH share one (an unpadded batch); full-width
# punctuation and Latin letters go through the tokenizer's lower-casing.
TEXTS = ["花呗如何还钱", "借呗额度怎么提升？", "你好", "今天天气很好，我们去公园散步吧。", "ABC的价格", "我想退款"]
EQUAL_LENGTH = ["我想退款", "怎么还钱", "额度多少"]
SINGLE = ["借呗额度怎么提升？"]
MAXLEN = 24
# name: (architecture, the model folder's own pooling, hidden_act)
MODELS = {"bert": ("bert", "max", "gelu"), "albert": ("albert", "first-last-avg", "gelu_tanh")}
STS_B = os.path.join(SHARED_DATA, "senteval_cn", "STS-B", "STS-B.test.data")

KERAS2 = """
import json, os
from cosent_tf import ModelSpec, SentenceEncoder, SentenceTokenizer, build_encoder, save_checkpoint, save_model_dir
from cosent_tf.choices import POOLING_MODES
from cosent_tf.data.batching import pad_batch
from cosent_tf.export.huggingface import export_hf
from cosent_tf.models.sources import open_source

vocab = str(inputs["vocab"])
groups = {name: [str(text) for text in inputs[name]] for name in ("texts", "equal", "single")}


def randomise(model, seed):
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        value = rng.normal(0.0, 0.5, weight.shape)
        if "gamma" in weight.name:
            value = 1.0 + 0.4 * value
        weight.assign(value.astype("float32"))


def encode_all(prefix, source, architecture):
    # The encoder's outputs on the batches SentenceEncoder.encode makes (one batch per group, padded
    # to its longest text), called eagerly: tracing SentenceEncoder's tf.function per model would
    # take most of this process's time.
    tokenizer = SentenceTokenizer(source, int(inputs["maxlen"]))
    batches = {group: pad_batch(tokenizer.encode_all(texts)) for group, texts in groups.items()}
    for pooling in POOLING_MODES:
        model = build_encoder(source, pooling=pooling, architecture=architecture)
        for group, batch in batches.items():
            outputs[f"{prefix}/{pooling}/{group}"] = model([batch, np.zeros_like(batch)], training=False).numpy()


for name, (architecture, pooling, activation) in json.loads(str(inputs["models"])).items():
    config = dict(vocab_size=21128, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=32, hidden_act=activation, max_position_embeddings=64, type_vocab_size=2)
    if architecture == "albert":
        config["embedding_size"] = 8
    config_path = os.path.join(tmp, name + "_config.json")
    with open(config_path, "w") as f:
        json.dump(config, f)
    model = build_encoder(config_path, architecture=architecture, pooling="pooler")
    randomise(model, len(name))
    folder = os.path.join(tmp, name + "-model")
    spec = ModelSpec("feature", architecture=architecture, pooling=pooling, maxlen=int(inputs["maxlen"]))
    save_model_dir(folder, model, spec, config_path, vocab)
    encode_all(name + "-model", open_source(folder), architecture)
    if architecture == "bert":
        export_hf(folder, os.path.join(tmp, "bert-st"))
        encode_all("bert-st", open_source(os.path.join(tmp, "bert-st")), architecture)
        outputs["bert-st/default"] = SentenceEncoder.load(os.path.join(tmp, "bert-st")).encode(groups["texts"])
        save_checkpoint(model, os.path.join(tmp, "bert-ckpt"), config_path, vocab_path=vocab)

tokenizer = SentenceTokenizer(vocab, maxlen=64)
ids = tokenizer.encode_all([str(text) for text in inputs["sentences"]])
outputs["ids"] = np.concatenate(ids)
outputs["lengths"] = np.array([len(row) for row in ids])
"""


def sts_sentences():
    sentences = []
    with open(STS_B, encoding="utf-8") as f:
        for line in f:
            sentences.extend(line.rstrip("\n").split("\t")[:2])
    return sorted(set(sentences))


@pytest.fixture(scope="module")
def keras2(tmp_path_factory):
    """(the Keras 2 process's outputs, its folder)."""
    import json

    tmp = tmp_path_factory.mktemp("keras2")
    outputs = run_keras2(
        KERAS2,
        tmp,
        reads=[SHARED_VOCAB],
        writes=True,  # the model folders the tests load
        vocab=np.array(SHARED_VOCAB),
        texts=np.array(TEXTS),
        equal=np.array(EQUAL_LENGTH),
        single=np.array(SINGLE),
        maxlen=np.array(MAXLEN),
        models=np.array(json.dumps(MODELS)),
        sentences=np.array(sts_sentences()),
    )
    return outputs, tmp


@pytest.fixture(scope="module")
def loaded(keras2):
    """The Keras 3 backbone of each source, loaded once."""
    _, tmp = keras2
    sources = {f"{name}-model": tmp / f"{name}-model" for name in MODELS}
    sources["bert-st"] = tmp / "bert-st"
    sources["bert-ckpt"] = tmp / "bert-ckpt"
    return {name: load_backbone(path) for name, path in sources.items()}


GROUPS = {"texts": TEXTS, "equal": EQUAL_LENGTH, "single": SINGLE}


@pytest.mark.parametrize("source", ["bert-model", "bert-st", "albert-model"])
def test_every_pooling_encodes_as_the_keras2_encoder_padded_and_unpadded(keras2, loaded, source):
    outputs, _ = keras2
    backbone = loaded[source]
    tokenizer = SentenceTokenizer(backbone.vocab_path, MAXLEN, do_lower_case=backbone.do_lower_case)
    # every pooling's encoder in one model, so that each batch shape is compiled once
    token_ids = keras.Input(shape=(None,), dtype="int32")
    encoders = [
        build_encoder(backbone.backbone, pooling, name=f"encoder_{i}") for i, pooling in enumerate(POOLING_MODES)
    ]
    every_pooling = keras.Model(token_ids, [encoder(token_ids) for encoder in encoders])
    compared = 0
    for group, texts in GROUPS.items():
        ids = tokenizer.encode_all(texts)
        batch = np.zeros((len(ids), max(len(row) for row in ids)), np.int32)
        for i, row in enumerate(ids):
            batch[i, : len(row)] = row
        assert (batch == 0).any() == (group == "texts")  # padded, or not at all
        for pooling, vectors in zip(POOLING_MODES, every_pooling.predict_on_batch(batch)):
            vectors = np.asarray(vectors)
            expected = outputs[f"{source}/{pooling}/{group}"]
            assert vectors.dtype == np.float32 and vectors.shape == expected.shape
            np.testing.assert_allclose(vectors, expected, rtol=0, atol=1e-5, err_msg=f"{source} {pooling} {group}")
            if (source, pooling) != ("bert-st", "pooler"):  # the export's pooler is zeros (Keras 2's too)
                assert np.abs(expected).max() > 0.1  # vectors of substance, not near zero
            compared += 1
    assert compared == 3 * len(POOLING_MODES)


def test_pooling_modes_differ(keras2):
    """The comparisons above would not notice a pooling computed as another."""
    outputs, _ = keras2
    vectors = [outputs[f"bert-model/{pooling}/texts"] for pooling in POOLING_MODES]
    for i in range(len(vectors)):
        for j in range(i):
            assert np.abs(vectors[i] - vectors[j]).max() > 1e-2


@pytest.mark.parametrize("source", ["bert-model", "bert-st", "albert-model"])
def test_a_folder_loads_with_its_own_pooling_and_maxlen(keras2, source):
    """SentenceEncoder.load takes the folder's pooling and maxlen and normalises, as Keras 2's: for the
    sentence-transformers folder, against Keras 2's SentenceEncoder.load itself (its modules name
    the pooling); for model folders, against Keras 2's vectors of the pooling their spec names."""
    outputs, tmp = keras2
    encoder = SentenceEncoder.load(tmp / source)
    vectors = encoder.encode(TEXTS, batch_size=4)  # two length-sorted batches
    own = MODELS[source.split("-")[0]][1]
    expected = outputs[f"{source}/{own}/texts"]
    expected = expected / np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(vectors, expected, rtol=0, atol=1e-5)
    if source == "bert-st":
        np.testing.assert_allclose(vectors, outputs["bert-st/default"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)  # normalised, as Keras 2's
    assert encoder.tokenizer.maxlen == MAXLEN
    assert encoder.loaded.pooling == own


def test_a_google_checkpoint_loads_the_same_weights_and_vectors(keras2, loaded):
    outputs, tmp = keras2
    checkpoint, folder = loaded["bert-ckpt"], loaded["bert-model"]
    assert checkpoint.pooling is None and checkpoint.maxlen is None and folder.maxlen == MAXLEN
    arrays = google_arrays(checkpoint.backbone, "bert")
    for name, value in google_arrays(folder.backbone, "bert").items():
        np.testing.assert_array_equal(arrays[name], value, err_msg=name)
    for pooling in ("cls", "pooler"):
        encoder = SentenceEncoder.load(tmp / "bert-ckpt", pooling=pooling, maxlen=MAXLEN)
        np.testing.assert_allclose(
            encoder.encode(TEXTS, normalize=False), outputs[f"bert-model/{pooling}/texts"], rtol=0, atol=1e-5
        )


@pytest.mark.parametrize("source", ["bert-model", "albert-model", "bert-ckpt"])
def test_google_arrays_of_a_loaded_backbone_are_the_checkpoint_exactly(keras2, loaded, source):
    _, tmp = keras2
    written = read_checkpoint_arrays(str(tmp / source / "bert_model.ckpt"))
    arrays = google_arrays(loaded[source].backbone, loaded[source].architecture)
    assert sorted(arrays) == sorted(written)
    for name, value in arrays.items():
        assert value.dtype == written[name].dtype
        np.testing.assert_array_equal(value, written[name], err_msg=name)


def test_similarity_is_the_cosine_of_the_encoded_pairs(keras2):
    _, tmp = keras2
    encoder = SentenceEncoder.load(tmp / "bert-model")
    scores = encoder.similarity(TEXTS[:3], TEXTS[3:])
    vectors = encoder.encode(TEXTS).astype(np.float64)
    expected = [a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in zip(vectors[:3], vectors[3:])]
    np.testing.assert_allclose(scores, expected, atol=1e-6)
    with pytest.raises(ValueError, match="texts_a has 3 texts but texts_b has 2"):
        encoder.similarity(TEXTS[:3], TEXTS[3:5])
    with pytest.raises(TypeError, match="not a single str"):
        encoder.encode("花呗如何还钱")
    assert encoder.encode([]).shape == (0, 16)


def test_bad_arguments_are_named(keras2, loaded):
    _, tmp = keras2
    with pytest.raises(ConfigError, match="unknown pooling 'mean'"):
        build_encoder(loaded["bert-model"].backbone, "mean")
    with pytest.raises(ConfigError, match="maxlen 65 is beyond the model's 64 positions"):
        SentenceEncoder.load(tmp / "bert-model", maxlen=65)
    with pytest.raises(ConfigError, match="holds a 'bert' model, but architecture 'albert' was asked for"):
        load_backbone(tmp / "bert-model", "albert")


def test_the_tokenizer_gives_the_keras2_ids_and_leaves_keras_3_in_place(keras2):
    outputs, _ = keras2
    import keras

    from cosent_tf.keras3.runtime import checked_keras

    sentences = sts_sentences()
    assert len(sentences) > 2000
    ids = SentenceTokenizer(SHARED_VOCAB, maxlen=64).encode_all(sentences)
    np.testing.assert_array_equal([len(row) for row in ids], outputs["lengths"])
    np.testing.assert_array_equal(np.concatenate(ids), outputs["ids"])
    assert sys.modules["keras"] is keras and keras.__version__.startswith("3.")
    assert checked_keras() is keras  # neither bert4keras's backend nor the Keras 2 engine is in the way
    assert "cosent_tf.backend" not in sys.modules and "bert4keras.backend" not in sys.modules
