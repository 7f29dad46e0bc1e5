"""ONNX exports against the engine: the float32 file's outputs within 1e-5 of the Keras model's for
every pooling and interaction head, both layouts, padded and unpadded batches, fed by OnnxModel and
by a bare onnxruntime session; the architectures tf2onnx converts; the match decision an export
carries. The references are the model folder's Keras model run one text at a time (unpadded).

Each export takes seconds, so each model is exported once per test run, in the zoo (``zoo_export``;
tests/export/test_onnx_export.py reads one too), four of them carrying a match decision for the
decision test; the rarer settings are marked slow."""

import dataclasses
import functools
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from cosent_tf import ConfigError, ModelSpec, PairScorer, SentenceEncoder, build_encoder, build_interaction_model
from cosent_tf.backend import keras
from cosent_tf.calibration import MatchDecision, ScoreMap, read_decision, write_decision
from cosent_tf.export.onnx_export import OnnxExport, export_onnx
from cosent_tf.inference.matchers import load_matcher
from cosent_tf.inference.model_dir import save_model_dir
from cosent_tf.inference.onnx_model import load_onnx_dir
from cosent_tf.inference.runtime import batched_outputs
from cosent_tf.models.builders import head_layer_name
from tests.helpers import made_vocab, write_config
from tests.zoo import built_once

TOLERANCE = 1e-5
# What an interaction model's random head is scaled by (make_folder).
HEAD_SCALE = 100.0
MAXLEN = 16
# Texts of different lengths (a padded batch), an empty one, one past maxlen, Latin letters.
TEXTS = ["花呗如何还钱", "我想换手机了，可以吗？", "", "为什么我的花呗不能用了" * 4, "Café au LAIT 123", "好"]
SECONDS = ["借呗", "", "花呗怎么还款呢", "好", "为什么" * 9, "手机号码是多少"]

SLOW = pytest.mark.slow
# name: (the model's settings, the export's layout). The rarer settings are each exported on another
# architecture than BERT, so that one conversion serves both the parity test of the setting and the
# architectures test (a conversion is most of a case's time): the pooling and the head are the same
# layers whichever backbone they read, and the backbones' pooler is bert4keras's BERT final layer,
# which ALBERT, NEZHA and RoFormer inherit (the quick settings stay on BERT).
FEATURES = {
    "cls": ({"pooling": "cls"}, "sentence-transformers"),
    "last-avg": ({"pooling": "last-avg"}, "sentence-transformers"),
    "roberta-max": ({"architecture": "roberta", "pooling": "max"}, "sentence-transformers"),
    "first-last-avg": ({"pooling": "first-last-avg"}, "onnx"),
    "pooler": ({"pooling": "pooler"}, "onnx"),
}
INTERACTIONS = {
    "score-cls": ({"head": "score", "head_input": "cls", "pair_segments": False}, "onnx"),
    "albert-score-cls-segments": (
        {"architecture": "albert", "head": "score", "head_input": "cls", "pair_segments": True},
        "onnx",
    ),
    "score-pooler": ({"head": "score", "head_input": "pooler", "pair_segments": False}, "onnx"),
    "roberta-score-pooler-segments": (
        {"architecture": "roberta", "head": "score", "head_input": "pooler", "pair_segments": True},
        "sequence-classification",
    ),
    "nezha-softmax-cls": (
        {"architecture": "nezha", "head": "softmax", "head_input": "cls", "pair_segments": False},
        "onnx",
    ),
    "softmax-pooler-segments": (
        {"head": "softmax", "head_input": "pooler", "pair_segments": True},
        "sequence-classification",
    ),
    "roformer-softmax-pooler": (
        {"architecture": "roformer", "head": "softmax", "head_input": "pooler", "pair_segments": False},
        "onnx",
    ),
}
# Each architecture as a feature model and as an interaction model: roberta's as Hugging Face folders
# (sentence-transformers, sequence-classification), the others in the onnx layout. The interaction
# models (and roberta's feature model) are the parity cases above on that architecture.
ARCHITECTURES = {
    "roberta-max": "sentence-transformers",
    "roberta-score-pooler-segments": "sequence-classification",
    "albert-score-cls-segments": "onnx",
    "nezha-softmax-cls": "onnx",
    "roformer-softmax-pooler": "onnx",
    **{f"{architecture}-last-avg": "onnx" for architecture in ("albert", "nezha", "roformer")},
}
CASES = {
    **FEATURES,
    **{name: ({"kind": "interaction", **settings}, layout) for name, (settings, layout) in INTERACTIONS.items()},
    **{
        name: ({"architecture": name.split("-")[0], "pooling": "last-avg"}, layout)
        for name, layout in ARCHITECTURES.items()
        if name.endswith("-last-avg")
    },
}
# The settings a quick run checks; the others are marked slow.
QUICK = ("cls", "first-last-avg", "score-cls", "softmax-pooler-segments")


def cases(names):
    return [pytest.param(name, marks=() if name in QUICK else SLOW) for name in names]


def make_folder(
    directory,
    config,
    kind="feature",
    pooling="cls",
    head="score",
    head_input="cls",
    pair_segments=False,
    architecture="bert",
    word_level=False,
    maxlen=MAXLEN,
):
    """A model folder holding a random tiny model of any architecture and settings; (its Keras model, spec)."""
    if kind == "feature":
        model = build_encoder(config, architecture=architecture, pooling=pooling)
        spec = ModelSpec("feature", architecture=architecture, pooling=pooling, maxlen=maxlen, word_level=word_level)
    else:
        model = build_interaction_model(config, architecture=architecture, head=head, head_input=head_input)
        # a random head's outputs hardly move (a softmax head's probabilities stay within 1e-5 of each
        # other): scaled up, a wrong segment id or mask moves them well past the tolerance (not so far
        # that its probabilities saturate, where float32 would lose the log-odds)
        head_layer = model.get_layer(head_layer_name(head))
        head_layer.set_weights([HEAD_SCALE * weight for weight in head_layer.get_weights()])
        spec = ModelSpec(
            "interaction",
            architecture=architecture,
            head=head,
            head_input=head_input,
            pair_segments=pair_segments,
            maxlen=2 * maxlen,
            word_level=word_level,
        )
    save_model_dir(str(directory), model, spec, config, made_vocab())
    return model, spec


# The cases whose model folder carries a match decision, so that the decision test reads their
# exports instead of converting four models of its own: (the decision's score, the export's layout).
DECIDED = {
    "last-avg": "cosine",
    "first-last-avg": "cosine",
    "softmax-pooler-segments": "head",
    "score-cls": "head",
}


def zoo_export(tmp_path_factory, name):
    """(model folder, its ONNX export, what export_onnx returned) of the case ``name``, converted once
    per test run in the zoo (tests/zoo.py): other modules read these exports too."""

    def build(folder):
        keras.utils.set_random_seed(len(name))  # the same weights whichever worker builds it
        config = write_config(folder / "config.json", layers=2)
        make_folder(folder / name, config, **CASES[name][0])
        if name in DECIDED:
            scores = load_matcher(str(folder / name)).similarity(PAIRS_A, PAIRS_B)
            write_decision(str(folder / name), gentle_decision(scores, DECIDED[name]))
        exported = export_onnx(str(folder / name), str(folder / f"{name}-onnx"))
        (folder / "exported.json").write_text(json.dumps(dataclasses.asdict(exported)), encoding="utf-8")

    folder = built_once(tmp_path_factory, f"onnx-model-{name}", build)
    exported = OnnxExport(**json.loads((folder / "exported.json").read_text(encoding="utf-8")))
    return str(folder / name), str(folder / f"{name}-onnx"), exported


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    yield lambda name: zoo_export(tmp_path_factory, name)
    engine_matcher.cache_clear()  # the module's models are not kept for the rest of the run


# ---- the engine's side of a case, loaded once per case: several tests compare the same export with it


@functools.cache
def engine_matcher(model_dir):
    """The engine's matcher of a zoo model folder (``load_matcher``: SentenceEncoder.load or
    PairScorer.load, as its kind says), loaded and traced once for the tests that read it."""
    return load_matcher(model_dir)


def loaded(model_dir):
    """(spec, Keras model, tokenizer) of a zoo model folder: ``load_model_dir``'s, as the engine's
    matcher holds them (its ``load`` calls ``load_model_dir``; the tests only call the model)."""
    matcher = engine_matcher(model_dir)
    return matcher.spec, matcher.model, matcher.tokenizer


# ---- independent computations


def pad(rows, fill=0):
    """A batch of the id lists ``rows`` padded with ``fill`` to the longest, and its attention mask."""
    length = max(len(row) for row in rows)
    ids = np.full((len(rows), length), fill, np.int64)
    mask = np.zeros((len(rows), length), np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


def pair_segments(rows, sep_id):
    """Segment ids of concatenated pairs by hand: 1 after the first [SEP] up to the row's end."""
    segments = []
    for row in rows:
        first_sep = row.index(sep_id)
        segments.append([0] * (first_sep + 1) + [1] * (len(row) - first_sep - 1))
    return segments


def inputs_of(spec, tokenizer):
    """The test texts as the model's id rows and segment rows (unpadded)."""
    if spec.kind == "feature":
        rows = [tokenizer.encode(text) for text in TEXTS]
        return rows, [[0] * len(row) for row in rows]
    rows = [tokenizer.encode_pair(a, b) for a, b in zip(TEXTS, SECONDS)]
    if spec.pair_segments:
        return rows, pair_segments(rows, tokenizer.sep_id)
    return rows, [[0] * len(row) for row in rows]


def keras_reference(model, rows, segments):
    """The engine's Keras model on each row alone, unpadded: one output row per input."""
    return np.concatenate(
        [
            model([np.array([row], np.int32), np.array([seg], np.int32)], training=False).numpy()
            for row, seg in zip(rows, segments)
        ]
    )


def unit(vectors):
    vectors = np.asarray(vectors, np.float64)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def softmax(logits):
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def session_of(folder, precision="float32"):
    name = {"float32": "model.onnx", "int8": "model_qint8.onnx"}[precision]
    return onnxruntime.InferenceSession(os.path.join(folder, "onnx", name), providers=["CPUExecutionProvider"])


def run_session(session, ids, mask, segments, names=None):
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": segments}
    return dict(zip(names or [o.name for o in session.get_outputs()], session.run(names, feed)))


def engine_outputs(spec, outputs):
    """The engine model's outputs from a session's: the pooled vector, the score, or (softmax head)
    the probabilities of the logits."""
    if spec.kind == "feature":
        return outputs["sentence_embedding"]
    return softmax(outputs["logits"]) if spec.head == "softmax" else outputs["logits"]


def comparable(spec, outputs):
    """The engine model's outputs as they are compared: a feature model's unit vectors, a score head's
    scores, and a softmax head's probabilities as log-odds (a random head's probabilities lie close
    together, so that a probability would hide differences its log-odds show)."""
    outputs = np.asarray(outputs, np.float64)
    if spec.kind == "feature":
        return unit(outputs)
    if spec.head == "softmax":
        return np.log(outputs[:, 1:]) - np.log(outputs[:, :1])
    return outputs


def same_outputs(spec, got, expected, what):
    """The outputs ``got`` within TOLERANCE of ``expected``, compared as :func:`comparable`."""
    difference = np.max(np.abs(comparable(spec, got) - comparable(spec, expected)))
    assert difference <= TOLERANCE, f"{what}: differs by {difference:.3g}"


# ---- parity


@pytest.mark.heavy
@pytest.mark.parametrize("name", cases([*FEATURES, *INTERACTIONS]))
def test_the_float32_file_computes_what_the_engine_computes(name, exports):
    model_dir, out, exported = exports(name)
    spec, model, tokenizer = loaded(model_dir)
    assert exported.layout == CASES[name][1]
    assert exported.files == {"onnx/model.onnx": "float32"} and exported.check is None
    rows, segments = inputs_of(spec, tokenizer)
    assert max(map(len, rows)) == spec.maxlen and min(map(len, rows)) < spec.maxlen / 2  # cut, and padded
    expected = keras_reference(model, rows, segments)
    sep_id = tokenizer.sep_id if spec.pair_segments else None
    batched = batched_outputs(model, rows, batch_size=len(rows), sep_id=sep_id)  # the engine's padded batch
    np.testing.assert_allclose(batched, expected, atol=TOLERANCE, rtol=0)

    # OnnxModel, as the matchers call it: a padded batch, and each text alone
    onnx_spec, onnx_model, onnx_tokenizer = load_onnx_dir(out)
    assert dataclasses.asdict(onnx_spec) == dataclasses.asdict(spec)
    assert [onnx_tokenizer.encode(text) for text in TEXTS] == [tokenizer.encode(text) for text in TEXTS]
    ids, mask = pad(rows)
    segment_batch, _ = pad(segments)
    same_outputs(spec, onnx_model(ids, segment_batch), expected, "OnnxModel, padded")
    alone = np.concatenate([onnx_model(np.array([r]), np.array([s])) for r, s in zip(rows, segments)])
    same_outputs(spec, alone, expected, "OnnxModel, one at a time")

    # a bare onnxruntime session fed by hand
    session = session_of(out)
    assert [(i.name, i.type, len(i.shape)) for i in session.get_inputs()] == [
        (n, "tensor(int64)", 2) for n in ("input_ids", "attention_mask", "token_type_ids")
    ]
    assert all(not isinstance(d, int) for i in session.get_inputs() for d in i.shape)  # dynamic batch and length
    outputs = run_session(session, ids, mask, segment_batch)
    if spec.kind == "feature":
        names = ["last_hidden_state", "sentence_embedding"] if exported.layout == "sentence-transformers" else None
        assert list(outputs) == (names or ["sentence_embedding"])
    else:
        assert list(outputs) == ["logits"]
        assert outputs["logits"].shape == (len(rows), 1 if spec.head == "score" else 2)
    same_outputs(spec, engine_outputs(spec, outputs), expected, "onnxruntime, padded")
    for row, seg, want in zip(rows, segments, expected):  # unpadded: a batch of one
        one = run_session(session, np.array([row]), np.ones((1, len(row)), np.int64), np.array([seg]))
        same_outputs(spec, engine_outputs(spec, one), want[None], "onnxruntime, alone")

    # the matchers on either runtime
    matcher = engine_matcher(model_dir)  # SentenceEncoder.load(model_dir) or PairScorer.load(model_dir)
    if spec.kind == "feature":
        assert type(matcher) is SentenceEncoder
        engine = matcher.encode(TEXTS)
        onnx = SentenceEncoder.load(out, runtime="onnx").encode(TEXTS)
        np.testing.assert_allclose(onnx, engine, atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(engine, unit(expected), atol=TOLERANCE, rtol=0)
    else:
        assert type(matcher) is PairScorer
        engine = matcher.similarity(TEXTS, SECONDS)
        onnx = PairScorer.load(out, runtime="onnx").similarity(TEXTS, SECONDS)
        np.testing.assert_allclose(onnx, engine, atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("name", cases(["cls", "last-avg", "roberta-max"]))
def test_the_sentence_transformers_layout_gives_the_last_hidden_state(name, exports):
    """sentence-transformers pools ``last_hidden_state`` itself: its masked mean is the engine's last-avg
    vector, its masked max the max vector, its row 0 the [CLS] vector."""
    model_dir, out, exported = exports(name)
    spec, model, tokenizer = loaded(model_dir)
    rows, segments = inputs_of(spec, tokenizer)
    ids, mask = pad(rows, fill=0)
    outputs = run_session(session_of(out), ids, mask, np.zeros_like(ids))
    hidden, embedding = outputs["last_hidden_state"], outputs["sentence_embedding"]
    assert hidden.shape == (*ids.shape, 16)
    weights = mask[:, :, None].astype(np.float64)
    pooled = {
        "cls": hidden[:, 0],
        "last-avg": (hidden * weights).sum(1) / weights.sum(1),
        "max": np.where(weights > 0, hidden, -np.inf).max(1),
    }[spec.pooling]
    expected = keras_reference(model, rows, segments)
    np.testing.assert_allclose(pooled, expected, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(embedding, expected, atol=TOLERANCE, rtol=0)  # the pooled vector, not normalised
    assert not np.allclose(np.linalg.norm(embedding, axis=1), 1.0)
    # the folder is the Hugging Face one with the ONNX file in it
    for entry in ("modules.json", "1_Pooling/config.json", "model.safetensors", "config.json", "vocab.txt"):
        assert os.path.exists(os.path.join(out, entry)), entry
    pooling = json.loads(Path(out, "1_Pooling", "config.json").read_text())
    flag = {"cls": "pooling_mode_cls_token", "last-avg": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens"}
    assert pooling[flag[spec.pooling]] is True


@pytest.mark.parametrize("name", cases(["first-last-avg", "pooler", "score-cls", "score-pooler"]))
def test_the_onnx_layout_holds_the_file_the_tokenizer_and_why(name, exports):
    model_dir, out, exported = exports(name)
    assert exported.layout == "onnx"
    reason = {
        "first-last-avg": "pooling 'first-last-avg' cannot be expressed in sentence-transformers",
        "pooler": "pooling 'pooler' cannot be expressed in sentence-transformers",
        "score-cls": "reads the [CLS] hidden state directly",
        "score-pooler": "reads the [CLS] hidden state directly",
    }[name]
    assert reason in exported.reason
    decision = ["decision.json"] if name in DECIDED else []
    assert sorted(os.listdir(out)) == sorted(
        [
            *decision,
            "README.md",
            "cosent_tf_export.json",
            "onnx",
            "special_tokens_map.json",
            "tokenizer_config.json",
            "vocab.txt",
        ]
    )
    assert os.listdir(os.path.join(out, "onnx")) == ["model.onnx"]
    readme = Path(out, "README.md").read_text(encoding="utf-8")
    assert exported.reason in readme and "sentence-transformers cannot load this folder" in readme
    assert Path(out, "vocab.txt").read_bytes() == Path(made_vocab()).read_bytes()


@pytest.mark.parametrize("name", cases(["cls", "first-last-avg", "score-cls", "softmax-pooler-segments"]))
def test_the_record_holds_each_files_digest_and_the_models_description(name, exports):
    model_dir, out, exported = exports(name)
    record = json.loads(Path(out, "cosent_tf_export.json").read_text(encoding="utf-8"))
    with open(os.path.join(out, "onnx", "model.onnx"), "rb") as f:
        digest = "sha256:" + hashlib.sha256(f.read()).hexdigest()
    assert record["onnx"] == {"onnx/model.onnx": {"precision": "float32", "sha256": digest}}
    assert record["export"] == exported.layout and record["model_dir"] == os.path.abspath(model_dir)
    spec, _, _ = loaded(model_dir)
    assert record["model_spec"] == json.loads(json.dumps(dataclasses.asdict(spec)))


@pytest.mark.parametrize("name", cases(["cls", "first-last-avg", "score-cls", "softmax-pooler-segments"]))
def test_attention_mask_masks_the_ids_past_its_zeros(name, exports):
    """What an id under a zero of attention_mask is does not matter: the graph masks by id."""
    model_dir, out, _ = exports(name)
    spec, model, tokenizer = loaded(model_dir)
    rows, segments = inputs_of(spec, tokenizer)
    expected = keras_reference(model, rows, segments)
    session = session_of(out)
    segment_batch, _ = pad(segments)
    for fill in (555, 7777, 101):  # a character, another, [CLS]
        ids, mask = pad(rows, fill=fill)
        outputs = run_session(session, ids, mask, segment_batch)
        same_outputs(spec, engine_outputs(spec, outputs), expected, f"padded with {fill}")
    # and the mask is read: with it all ones, the filler ids count, as they do for the engine's model
    width = max(map(len, rows)) + 8
    filled = [row + [555] * (width - len(row)) for row in rows]
    filled_segments = [seg + [0] * (width - len(seg)) for seg in segments]
    unmasked = run_session(session, np.array(filled), np.ones((len(rows), width), np.int64), np.array(filled_segments))
    with_filler = keras_reference(model, filled, filled_segments)
    same_outputs(spec, engine_outputs(spec, unmasked), with_filler, "unmasked")
    moved = np.max(
        np.abs(comparable(spec, with_filler) - comparable(spec, expected)), axis=1
    )  # by far more than the outputs' tolerance
    assert np.median(moved) > 10 * TOLERANCE and np.min(moved) > 2 * TOLERANCE, moved


# ---- architectures


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_every_architecture_converts_and_computes_what_the_engine_computes(name, exports):
    """bert (above), roberta, albert, nezha and roformer all convert; roberta as a Hugging Face folder.
    Five of these cases are parity cases too (ARCHITECTURES): the same conversion, read again here."""
    model_dir, out, exported = exports(name)
    spec, model, tokenizer = loaded(model_dir)
    assert exported.layout == CASES[name][1] == ARCHITECTURES[name]
    assert spec.architecture == name.split("-")[0]
    if exported.layout == "onnx" and spec.architecture != "roberta":
        assert f"a {spec.architecture} model cannot be written as a Hugging Face BERT folder" in exported.reason
    rows, segments = inputs_of(spec, tokenizer)
    expected = keras_reference(model, rows, segments)
    ids, mask = pad(rows)
    segment_batch, _ = pad(segments)
    outputs = run_session(session_of(out), ids, mask, segment_batch)
    same_outputs(spec, engine_outputs(spec, outputs), expected, name)
    matcher, onnx_matcher = engine_matcher(model_dir), load_matcher(out, runtime="onnx")
    np.testing.assert_allclose(
        onnx_matcher.similarity(TEXTS, SECONDS), matcher.similarity(TEXTS, SECONDS), atol=TOLERANCE, rtol=0
    )


def test_a_word_level_model_is_refused_naming_its_tokenizer(tmp_path):
    config = write_config(tmp_path / "config.json", layers=1)
    make_folder(tmp_path / "wobert", config, architecture="wobert", word_level=True)
    with pytest.raises(ConfigError, match="cuts texts into words with jieba first \\(a word-level vocabulary\\)"):
        export_onnx(str(tmp_path / "wobert"), str(tmp_path / "out"))
    assert sorted(os.listdir(tmp_path)) == ["config.json", "wobert"]


# ---- the match decision


def gentle_decision(scores, score):
    """Thresholds in the widest gap of the middle scores and a gentle Platt map, so that float32
    rounding moves no match and a probability by far less than the tolerance."""
    s = np.sort(np.asarray(scores, np.float64))
    middle = s[len(s) // 4 : 3 * len(s) // 4 + 1]
    gap = int(np.argmax(np.diff(middle)))
    threshold = float((middle[gap] + middle[gap + 1]) / 2)
    fitted_on = {"file": "pairs made by the test", "pairs": len(s), "labels": "binary", "label_range": [0.0, 1.0]}
    calibration = ScoreMap("platt", slope=4.0, intercept=-4.0 * float(np.median(s)))
    return MatchDecision(fitted_on, {"accuracy": threshold, "f1": threshold}, "accuracy", calibration, score=score)


PAIRS_A = TEXTS * 3 + ["我们是中国人", "你说的是什么"]
PAIRS_B = SECONDS[::-1] * 3 + ["我们是人", "你说什么"]
DECIDED_QUICK = ("last-avg", "first-last-avg")


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in DECIDED_QUICK else SLOW) for n in DECIDED])
def test_the_export_carries_the_decision_and_decides_as_the_engine(name, exports):
    model_dir, out, exported = exports(name)
    assert exported.layout == CASES[name][1]
    engine, onnx = engine_matcher(model_dir), load_matcher(out, runtime="onnx")
    decision = gentle_decision(engine.similarity(PAIRS_A, PAIRS_B), DECIDED[name])  # the one zoo_export wrote
    shipped = read_decision(out)
    assert shipped is not None
    assert dataclasses.replace(shipped, weights=None) == dataclasses.replace(engine.decision, weights=None)
    assert onnx.decision.threshold() == engine.decision.threshold() == decision.thresholds["accuracy"]
    np.testing.assert_allclose(
        onnx.predict_proba(PAIRS_A, PAIRS_B), engine.predict_proba(PAIRS_A, PAIRS_B), atol=TOLERANCE, rtol=0
    )
    got, expected = onnx.decide(PAIRS_A, PAIRS_B), engine.decide(PAIRS_A, PAIRS_B)
    np.testing.assert_array_equal(got.matches, expected.matches)
    assert 0 < int(np.sum(expected.matches)) < len(PAIRS_A)
    np.testing.assert_allclose(got.scores, expected.scores, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(got.probabilities, expected.probabilities, atol=TOLERANCE, rtol=0)
