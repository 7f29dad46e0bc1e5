"""The Keras 3 models of a spec (cosent_tf.keras3.models) against the Keras 2 engine's of the same folders.

One Keras 2 process (module fixture, cached) writes three model folders of a tiny BERT with large
random weights (a swapped weight, a segment id lost or a head on the wrong input would show far above
1e-5): a feature model pooled first-last-avg (no pooler in its folder), an interaction model with a
score head on [CLS] (segment ids all 0) and one with a softmax head on the pooler (segment 1 on the
second text), this last also exported as a Hugging Face BertForSequenceClassification folder. It gives
its builders' outputs for fixed texts and pairs, its inputs made as the engine makes them
(SentenceTokenizer, pad_batch, segment_ids); this process makes its own and must give the same outputs.
"""

import json
import logging

import keras
import numpy as np
import pytest

from cosent_tf.data.batching import pad_batch, segment_ids
from cosent_tf.errors import CheckpointError, ConfigError
from cosent_tf.keras3.models import INPUT_NAMES, build_from_spec, model_arrays, not_decayed_variables
from cosent_tf.models.checkpoint_files import CHECKPOINT_PREFIX, HEAD_SCOPE, read_checkpoint_arrays
from cosent_tf.models.sources import open_source
from cosent_tf.models.spec import ModelSpec, read_spec, write_model_folder
from cosent_tf.models.tokenization import SentenceTokenizer
from tests.keras3.support import SHARED_VOCAB, run_keras2, tiny_bert_config

TEXTS = ["花呗如何还钱", "借呗额度怎么提升？", "你好", "今天天气很好，我们去公园散步吧。"]
PAIRS = [("花呗如何还钱", "花呗怎么还款"), ("你好", "今天天气很好，我们去公园散步吧。"), ("借呗额度", "ABC的价格")]
MAXLEN = 32
CONFIG = tiny_bert_config()
# folder: the spec's fields (kind, pooling or head and head_input, pair_segments)
FOLDERS = {
    "feature": dict(kind="feature", pooling="first-last-avg"),
    "score-cls": dict(kind="interaction", pooling=None, head="score", head_input="cls"),
    "softmax-pooler": dict(kind="interaction", pooling=None, head="softmax", head_input="pooler", pair_segments=True),
}

KERAS2 = """
import json, os
from cosent_tf import ModelSpec, SentenceTokenizer, build_encoder, build_interaction_model, save_model_dir
from cosent_tf.data.batching import pad_batch, segment_ids
from cosent_tf.export.huggingface import export_hf

vocab, maxlen = str(inputs["vocab"]), int(inputs["maxlen"])
config_path = os.path.join(tmp, "config.json")
with open(config_path, "w") as f:
    json.dump(json.loads(str(inputs["config"])), f)
tokenizer = SentenceTokenizer(vocab, maxlen)
texts = [str(text) for text in inputs["texts"]]
pairs = [(str(a), str(b)) for a, b in inputs["pairs"]]
rng = np.random.default_rng(7)
for name, fields in json.loads(str(inputs["folders"])).items():
    spec = ModelSpec(maxlen=maxlen, **fields)
    if spec.kind == "feature":
        model = build_encoder(config_path, pooling=spec.pooling)
        ids = pad_batch(tokenizer.encode_all(texts))
        segments = segment_ids(ids)
    else:
        model = build_interaction_model(config_path, head=spec.head, head_input=spec.head_input)
        ids = pad_batch(tokenizer.encode_pairs([a for a, _ in pairs], [b for _, b in pairs]))
        segments = segment_ids(ids, tokenizer.sep_id if spec.pair_segments else None)
    for weight in model.weights:
        value = rng.normal(0.0, 0.5, weight.shape)
        if "gamma" in weight.name:
            value = 1.0 + 0.4 * value
        weight.assign(value.astype("float32"))
    save_model_dir(os.path.join(tmp, name), model, spec, config_path, vocab)
    outputs[name] = model([ids, segments], training=False).numpy()
    outputs[name + "/segments"] = segments
export_hf(os.path.join(tmp, "softmax-pooler"), os.path.join(tmp, "softmax-pooler-hf"))
"""


@pytest.fixture(scope="module")
def keras2(tmp_path_factory):
    """(the Keras 2 process's outputs, its folder of model folders)."""
    tmp = tmp_path_factory.mktemp("keras2-models")
    outputs = run_keras2(
        KERAS2,
        tmp,
        reads=[SHARED_VOCAB],
        writes=True,  # the model folders the tests build from
        vocab=np.array(SHARED_VOCAB),
        maxlen=np.array(MAXLEN),
        config=np.array(json.dumps(CONFIG)),
        texts=np.array(TEXTS),
        pairs=np.array(PAIRS),
        folders=np.array(json.dumps(FOLDERS)),
    )
    return outputs, tmp


def engine_inputs(spec, source):
    """[token ids, segment ids] of TEXTS (a feature model) or PAIRS (an interaction model), as the
    Keras 2 engine makes them."""
    tokenizer = SentenceTokenizer(source, spec.maxlen, do_lower_case=spec.do_lower_case)
    if spec.kind == "feature":
        ids = pad_batch(tokenizer.encode_all(TEXTS))
        return [ids, segment_ids(ids)]
    ids = pad_batch(tokenizer.encode_pairs([a for a, _ in PAIRS], [b for _, b in PAIRS]))
    return [ids, segment_ids(ids, tokenizer.sep_id if spec.pair_segments else None)]


def outputs_of(folder):
    """(the model built from ``folder`` by build_from_spec, its spec, its outputs on the engine's inputs)."""
    source = open_source(folder)
    spec = read_spec(source)
    model = build_from_spec(spec, source)
    inputs = engine_inputs(spec, source)
    return model, spec, inputs, np.asarray(model(inputs, training=False))


@pytest.mark.parametrize("name", list(FOLDERS))
def test_a_keras2_model_folder_gives_the_keras2_outputs(keras2, name):
    """A feature folder's vectors, a score head's scores on [CLS], a softmax head's probabilities on the
    pooler with pair segment ids: as the Keras 2 engine's model of the same folder, to 1e-5."""
    expected, tmp = keras2
    model, spec, inputs, got = outputs_of(tmp / name)
    assert [tensor.name for tensor in model.inputs] == list(INPUT_NAMES)
    np.testing.assert_array_equal(inputs[1], expected[name + "/segments"])
    if spec.pair_segments:
        assert inputs[1].any()  # the second texts are segment 1: the segment input is exercised
    assert got.dtype == np.float32 and got.shape == expected[name].shape
    np.testing.assert_allclose(got, expected[name], rtol=0, atol=1e-5)
    assert np.ptp(expected[name], axis=0).max() > 0.05  # outputs that differ by input, not saturated


def test_a_hugging_face_classifier_folder_scores_with_its_classifier(keras2):
    """The softmax-pooler model exported as a BertForSequenceClassification: its classifier is read
    as the head (a Hugging Face name table's head scope), pair segments as the folder's spec says."""
    expected, tmp = keras2
    model, spec, _, got = outputs_of(tmp / "softmax-pooler-hf")
    assert (spec.kind, spec.head, spec.head_input, spec.pair_segments) == ("interaction", "softmax", "pooler", True)
    np.testing.assert_allclose(got, expected["softmax-pooler"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", list(FOLDERS))
def test_model_arrays_hold_what_the_keras2_engine_writes_and_round_trip(keras2, tmp_path, name):
    """model_arrays of a built folder are the folder's own arrays (names, shapes, values: the Keras 2
    engine's for the spec, no pooler where the model reads none); written as a model folder and built
    again, they give the same outputs."""
    _, tmp = keras2
    source = open_source(tmp / name)
    model, spec, inputs, got = outputs_of(tmp / name)
    arrays = model_arrays(model, spec)
    written_by_keras2 = read_checkpoint_arrays(str(tmp / name / CHECKPOINT_PREFIX))
    assert {key: value.shape for key, value in arrays.items()} == {
        key: value.shape for key, value in written_by_keras2.items()
    }
    assert ("bert/pooler/dense/kernel" in arrays) == (name == "softmax-pooler")
    for key, value in arrays.items():
        assert value.dtype == np.float32, key
        np.testing.assert_array_equal(value, written_by_keras2[key], err_msg=key)
    write_model_folder(str(tmp_path / "again"), arrays, spec, source.config, source.vocab_path)
    again = build_from_spec(read_spec(str(tmp_path / "again")), open_source(tmp_path / "again"))
    np.testing.assert_array_equal(np.asarray(again(inputs, training=False)), got)


@pytest.fixture(scope="module")
def bare_source(tmp_path_factory):
    """A source of a config alone (the bundled config's kind, tiny): random weights."""
    path = tmp_path_factory.mktemp("bare") / "bert_config.json"
    path.write_text(json.dumps(CONFIG), encoding="utf-8")
    return open_source(None, config=str(path))


@pytest.mark.parametrize(
    "spec, width, reads_pooler",
    [
        (ModelSpec("feature", pooling="pooler"), 16, True),
        (ModelSpec("interaction", pooling=None, head="softmax", head_input="cls"), 2, False),
        (ModelSpec("interaction", pooling=None, head="score", head_input="pooler"), 1, True),
    ],
)
def test_a_bare_config_builds_random_weights_of_the_right_shapes(bare_source, spec, width, reads_pooler):
    """A config without a checkpoint: random weights; float32 outputs of (B, width); the random
    pooler is written when the model reads it (it is trained), else left out, as on Keras 2."""
    assert bare_source.checkpoint is None
    model = build_from_spec(spec, bare_source)
    ids = np.array([[101, 872, 1962, 102, 0], [101, 2769, 102, 0, 0]], np.int32)
    out = model([ids, np.zeros_like(ids)], training=False)
    assert tuple(out.shape) == (2, width) and keras.backend.standardize_dtype(out.dtype) == "float32"
    assert [tuple(tensor.shape) for tensor in model.inputs] == [(None, None), (None, None)]
    assert {keras.backend.standardize_dtype(tensor.dtype) for tensor in model.inputs} == {"int32"}
    arrays = model_arrays(model, spec)
    assert ("bert/pooler/dense/kernel" in arrays) == reads_pooler
    assert arrays["bert/embeddings/word_embeddings"].shape == (21128, 16)
    if spec.kind == "interaction":
        assert arrays[f"{HEAD_SCOPE}Match-{spec.head.capitalize()}/kernel"].shape == (16, width)


def test_under_mixed_bfloat16_the_outputs_and_saved_weights_are_float32(bare_source):
    spec = ModelSpec("interaction", pooling=None, head="softmax", head_input="cls")
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = build_from_spec(spec, bare_source)
    finally:
        keras.config.set_dtype_policy("float32")
    ids = np.array([[101, 872, 1962, 102]], np.int32)
    out = model([ids, np.zeros_like(ids)], training=False)
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    assert model.backbone.compute_dtype == "bfloat16"  # the backbone computes in bfloat16
    assert {value.dtype for value in model_arrays(model, spec).values()} == {np.dtype(np.float32)}


def test_a_model_reading_a_pooler_its_checkpoint_lacks_is_refused_as_on_keras2(keras2):
    """The feature folder (first-last-avg) holds no pooler: pooling 'pooler' on it, or a head on it,
    is the Keras 2 builder's error."""
    _, tmp = keras2
    source = open_source(tmp / "feature")
    message = r"feature/bert_model.ckpt: this checkpoint has no pooler \(bert/pooler/dense/kernel, .* missing\)"
    with pytest.raises(CheckpointError, match=message):
        build_from_spec(ModelSpec("feature", pooling="pooler"), source)
    with pytest.raises(CheckpointError, match=message):
        build_from_spec(ModelSpec("interaction", pooling=None, head="score", head_input="pooler"), source)


def test_a_head_the_checkpoint_lacks_starts_random_or_is_required(keras2, caplog):
    _, tmp = keras2
    source = open_source(tmp / "feature")
    spec = ModelSpec("interaction", pooling=None, head="score")
    with caplog.at_level(logging.INFO, logger="cosent_tf.keras3.models"):
        build_from_spec(spec, source)
    assert "the interaction head's variable cosent/Match-Score/kernel is missing" in caplog.text
    assert "the head starts from random weights" in caplog.text
    with pytest.raises(CheckpointError, match="feature/bert_model.ckpt: the interaction head's variable"):
        build_from_spec(spec, source, require_head=True)
    # the score folder's head is no softmax head (another layer name): random, not a misfit
    with pytest.raises(CheckpointError, match="cosent/Match-Softmax/kernel is missing"):
        build_from_spec(ModelSpec("interaction", pooling=None, head="softmax"), open_source(tmp / "score-cls"), True)


def test_weight_decay_skips_the_heads_bias_and_decays_its_kernel(bare_source):
    model = build_from_spec(ModelSpec("interaction", pooling=None, head="score"), bare_source)
    head = model.get_layer("Match-Score")
    skipped = {id(variable) for variable in not_decayed_variables(model)}
    assert id(head.bias) in skipped and id(head.kernel) not in skipped
    embeddings = model.backbone.token_embedding.embeddings
    query = model.backbone.transformer_layers[0]._self_attention_layer._query_dense.kernel
    assert id(embeddings) in skipped and id(query) not in skipped
    assert skipped <= {id(variable) for variable in model.trainable_variables}


def test_a_config_that_does_not_fit_its_vocabulary_is_refused_as_on_keras2(tmp_path):
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(dict(CONFIG, vocab_size=40)), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bert_config.json: vocab_size is 40 but .*vocab.txt has 21128 tokens"):
        build_from_spec(ModelSpec("feature"), open_source(None, config=str(path), vocab=SHARED_VOCAB))
