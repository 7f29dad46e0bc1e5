"""The match decision in the exports: a SavedModel's ``decide`` signatures decide as the matchers
do, and a Hugging Face folder carries ``decision.json`` and a model card whose few lines of Python
apply it without cosent-tf (run in the reference environment, as tests/huggingface/test_parity.py
runs sentence-transformers: ``COSENT_REFERENCE_PYTHON``, else .venv-reference; without one these
tests fail, saying so).

The decisions are made by hand from each model's own scores of the test pairs: a random model's
scores lie close together (an interaction model's within about 1e-4), so a map fitted on them would
be steep, and a score computed in another batch differs in its last float32 bits (up to about 2e-7
for a cosine here). The maps here rise by at most :data:`GENTLE_SLOPE` per unit of score, so that
those bits move a probability by less than the 1e-6 the exports must agree within; that the graph
computes the very map NumPy computes is checked on the SavedModel's own scores, to 1e-12.
"""

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from cosent_tf import ConfigError, SentenceEncoder
from cosent_tf.backend import tf
from cosent_tf.calibration import (
    DECISION_FILE,
    MatchDecision,
    ScoreMap,
    format_threshold,
    read_decision,
    write_decision,
)
from cosent_tf.data.pipeline import pair_segment_ids
from cosent_tf.export.graph_tokenization import import_tensorflow_text
from cosent_tf.export.huggingface import export_hf
from cosent_tf.export.savedmodel import decision_outputs, export_saved_model, score_map_in_graph
from cosent_tf.inference.matchers import load_matcher
from tests.export.conftest import EXPORTED
from tests.export.test_onnx_sentence_transformers import is_stored
from tests.export.test_savedmodel import padded_batch
from tests.helpers import distinct_texts, make_model_dir, reference_python, write_config
from tests.reference_cache import cached, contents, interpreter

# The steepest a test decision's maps rise per unit of score: float32 rounding of a score (about 2e-7
# for a cosine) then moves a probability by at most 4e-7.
GENTLE_SLOPE = 2.0
TOLERANCE = 1e-6
OUTPUTS = ("scores", "matches", "probabilities", "expected_labels")

# Pairs of random texts, and one of each side longer than the models' maxlen (16 tokens; a pair 24).
LONG = "我们是中国人" * 4
FIRST = distinct_texts(11, 70) + [LONG, "好"]
SECOND = distinct_texts(12, 70) + ["好", LONG]


# ---- the decisions, made by hand from a model's own scores


def middle_gap(scores, low, high):
    """The midpoint of the widest gap between the sorted ``scores`` within their ``low`` to ``high``
    quantiles: a threshold no score lies near, so that float32 rounding flips no match."""
    inner = np.sort(scores[(scores >= np.quantile(scores, low)) & (scores <= np.quantile(scores, high))])
    widest = int(np.argmax(np.diff(inner)))
    return float((inner[widest] + inner[widest + 1]) / 2)


def gentle_isotonic(scores, lowest, rise):
    """An isotonic map with knots evenly over the 10th to the 90th percentile of ``scores`` (so
    some lie beyond either end, where the map is flat), values from ``lowest`` rising by ``rise``
    unevenly and with a flat stretch, no steeper than :data:`GENTLE_SLOPE`."""
    low, high = np.quantile(scores, [0.1, 0.9])
    knots = np.linspace(low, high, 5)
    shares = np.array([0.1, 0.4, 0.0, 0.5])  # the steepest: half the rise over a quarter of the span
    rise = min(rise, GENTLE_SLOPE * (high - low) / 4 / shares.max())
    values = lowest + rise * np.concatenate([[0.0], np.cumsum(shares)])
    return ScoreMap("isotonic", tuple(map(float, knots)), tuple(map(float, values)))


def made_decision(scores, parts, score):
    """A decision on the float32 ``scores`` of a model (``score``: its kind's ``cosine`` or
    ``head``) with ``parts``: ``thresholds`` (decided by accuracy, or ``f1-rule``), ``isotonic``
    or ``platt`` calibration, ``graded`` (the expected label on a 0-to-5 scale)."""
    s = np.asarray(scores, dtype=np.float64)
    fitted_on = {"file": "pairs made by the test", "pairs": len(s), "labels": "binary", "label_range": [0.0, 1.0]}
    thresholds, calibration, expected = None, None, None
    if "thresholds" in parts:
        thresholds = {"accuracy": middle_gap(s, 0.4, 0.6), "f1": middle_gap(s, 0.25, 0.4)}
        fitted_on.update(positives=int(np.sum(s > thresholds["accuracy"])), positive_rate=0.5)
    if "isotonic" in parts:
        calibration = gentle_isotonic(s, 0.2, 0.6)
    if "platt" in parts:
        slope = 4 * GENTLE_SLOPE  # the sigmoid's steepest: a quarter of its slope
        calibration = ScoreMap("platt", slope=slope, intercept=-slope * float(np.median(s)))
    if "graded" in parts:
        fitted_on.update(labels="graded", label_range=[0.0, 5.0], cut=2.5 if thresholds else None)
        expected = gentle_isotonic(s, 1.0, 3.0)
    rule = "f1" if "f1-rule" in parts else "accuracy"
    decision = MatchDecision(fitted_on, thresholds, rule, calibration, expected_label=expected, score=score)
    if calibration is not None:
        calibration.check("the test's calibration map")
    if expected is not None:
        expected.check("the test's graded map", *fitted_on["label_range"])
    return decision


@pytest.fixture(scope="module")
def models(feature_model_folder, interaction_model_folder, softmax_model_folder):
    """The zoo's model folders (tests/export/conftest.py), without a decision: ``feature`` (maxlen
    16) and ``interaction`` (through BERT's pooler, as a Hugging Face export needs; maxlen 24),
    and ``softmax``, the same with the two-label head; each with its scores of the test pairs."""
    folders = {
        "feature": feature_model_folder,
        "interaction": interaction_model_folder,
        "softmax": softmax_model_folder,
    }
    return {name: (folder, load_matcher(str(folder)).similarity(FIRST, SECOND)) for name, folder in folders.items()}


def model_with_decision(models, name, parts, folder):
    """A copy of the model folder ``name`` in ``folder`` with a decision of ``parts``; (the folder,
    the decision as read back)."""
    source, scores = models[name]
    shutil.copytree(source, folder)
    decision = made_decision(scores, parts, "cosine" if name == "feature" else "head")
    write_decision(folder, decision)
    read = read_decision(folder)
    assert read is not None and read.weights  # stamped with the folder's weights
    return folder, read


# ---- the decision in a graph, against NumPy's


def test_a_map_in_the_graph_is_numpys_map_to_the_last_bit():
    rng = np.random.default_rng(3)
    knots = np.sort(rng.uniform(0.2, 0.9, 12))
    values = np.sort(rng.uniform(0.0, 1.0, 12))
    values[4:7] = values[4]  # a flat stretch
    isotonic = ScoreMap("isotonic", tuple(knots), tuple(values))
    isotonic.check("test")
    scores = np.concatenate([rng.uniform(0.0, 1.1, 500), knots, [knots[0] - 1e-12, knots[-1] + 1e-12, -3.0, 7.0]])
    for score_map in (
        isotonic,
        ScoreMap("isotonic", (0.5,), (0.25,)),  # one knot: its value everywhere
        ScoreMap("platt", slope=7.5, intercept=-4.0),
        ScoreMap("platt", slope=0.0, intercept=0.3),  # the base rate, as a Platt fit that would fall gives
    ):
        in_graph = score_map_in_graph(score_map, tf.constant(scores, tf.float64)).numpy()
        assert in_graph.dtype == np.float64
        np.testing.assert_allclose(in_graph, score_map(scores), atol=1e-15, rtol=0)
    by_hand = score_map_in_graph(
        ScoreMap("isotonic", (0.2, 0.6), (0.1, 0.9)), tf.constant([0.0, 0.2, 0.4, 0.6, 1.0, np.nan], tf.float64)
    )
    np.testing.assert_allclose(by_hand.numpy(), [0.1, 0.1, 0.5, 0.9, 0.9, np.nan], atol=1e-15)
    sigmoid = score_map_in_graph(ScoreMap("platt", slope=2.0, intercept=-1.0), tf.constant([0.5, 1.0], tf.float64))
    np.testing.assert_allclose(sigmoid.numpy(), [0.5, 1 / (1 + np.exp(-1.0))], atol=1e-15)


@pytest.mark.parametrize(
    "parts, outputs",
    [
        (("thresholds",), {"scores", "matches"}),  # too few pairs for a map, or a folder from before maps
        (("thresholds", "isotonic"), {"scores", "matches", "probabilities"}),
        (("thresholds", "platt"), {"scores", "matches", "probabilities"}),
        (("graded",), {"scores", "expected_labels"}),  # graded labels without a cut: no match / no match
        (("graded", "thresholds", "isotonic"), set(OUTPUTS)),
    ],
)
def test_decide_returns_exactly_what_the_decision_has(parts, outputs):
    scores = np.random.default_rng(5).uniform(0.6, 1.0, 200).astype(np.float32)
    decision = made_decision(scores, parts, "cosine")
    decided = {name: tensor.numpy() for name, tensor in decision_outputs(decision, tf.constant(scores)).items()}
    assert set(decided) == outputs
    np.testing.assert_array_equal(decided["scores"], scores)
    if "matches" in outputs:
        np.testing.assert_array_equal(decided["matches"], decision.matches(scores))
    if "probabilities" in outputs:
        np.testing.assert_allclose(decided["probabilities"], decision.probability(scores), atol=1e-15, rtol=0)
    if "expected_labels" in outputs:
        np.testing.assert_allclose(decided["expected_labels"], decision.expected_labels(scores), atol=1e-15, rtol=0)


def test_a_match_is_decided_on_the_score_in_float64_as_numpy_decides_it():
    # the midpoint of two neighbouring float32 scores is no float32: compared in float32 it would round
    # onto one of them, and that score would fall on the wrong side
    for below in (np.float32(0.5), np.nextafter(np.float32(0.5), np.float32(1))):
        above = np.nextafter(below, np.float32(1))
        threshold = (float(below) + float(above)) / 2
        decision = MatchDecision({"file": "test"}, {"accuracy": threshold, "f1": threshold})
        scores = np.array([below, above], np.float32)
        matches = decision_outputs(decision, tf.constant(scores))["matches"].numpy()
        np.testing.assert_array_equal(matches, [False, True])
        np.testing.assert_array_equal(matches, decision.matches(scores))


# ---- the SavedModel's decide signatures, against the matchers


def truncated_pairs(matcher):
    """Whether the matcher's tokenizer cuts each test pair (either text of a feature model's pair)."""
    tokenizer = matcher.tokenizer
    if matcher.KIND == "feature":
        cut = [len(tokenizer._tokenizer.encode(text)[0]) > tokenizer.maxlen for text in FIRST + SECOND]
        return np.array(cut[: len(FIRST)]) | np.array(cut[len(FIRST) :])
    return np.array([len(tokenizer._tokenizer.encode(a, b)[0]) > tokenizer.maxlen for a, b in zip(FIRST, SECOND)])


def id_inputs(matcher):
    """The ``decide_ids`` inputs of the test pairs, tokenised as a client would."""
    tokenizer = matcher.tokenizer
    if matcher.KIND == "feature":
        columns = {}
        for side, texts in (("a", FIRST), ("b", SECOND)):
            token_ids = padded_batch(tokenizer.encode_all(texts))
            columns.update({f"token_ids_{side}": token_ids, f"segment_ids_{side}": np.zeros_like(token_ids)})
        return columns
    token_ids = padded_batch(tokenizer.encode_pairs(FIRST, SECOND))
    assert matcher.spec.pair_segments
    return {"token_ids": token_ids, "segment_ids": pair_segment_ids(token_ids, tokenizer.sep_id).numpy()}


def assert_decides_as_the_matcher(decided, matcher, decision, strings):
    parts = {
        "truncated": strings,
        "matches": decision.binary,
        "probabilities": decision.calibration is not None,
        "expected_labels": decision.expected_label is not None,
    }
    expected = {"scores"} | {name for name, present in parts.items() if present}
    assert set(decided) == expected  # an output is missing exactly when the decision lacks its part
    scores = decided["scores"]
    assert scores.dtype == np.float32
    np.testing.assert_allclose(scores, matcher.similarity(FIRST, SECOND), atol=TOLERANCE, rtol=0)
    if strings:
        np.testing.assert_array_equal(decided["truncated"], truncated_pairs(matcher))
    if decision.binary:
        api = matcher.decide(FIRST, SECOND)
        assert 0 < api.matches.sum() < len(FIRST)
        np.testing.assert_array_equal(decided["matches"], api.matches)
        np.testing.assert_array_equal(decided["matches"], np.float64(scores) > decision.threshold())
    if decision.calibration is not None:
        probabilities = decided["probabilities"]
        assert probabilities.dtype == np.float64 and np.ptp(probabilities) > 0
        np.testing.assert_allclose(probabilities, matcher.predict_proba(FIRST, SECOND), atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(probabilities, decision.probability(scores), atol=1e-12, rtol=0)
    if decision.expected_label is not None:
        labels = decided["expected_labels"]
        assert labels.dtype == np.float64 and np.ptp(labels) > 0
        np.testing.assert_allclose(labels, matcher.predict_label(FIRST, SECOND), atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(labels, decision.expected_labels(scores), atol=1e-12, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, inputs, parts",
    [
        ("feature", "strings", ("thresholds", "isotonic")),
        ("feature", "ids", ("thresholds", "platt", "f1-rule")),
        ("interaction", "strings", ("graded", "thresholds", "isotonic")),
        ("softmax", "ids", ("thresholds", "platt")),
    ],
)
def test_the_decide_signature_decides_as_the_matcher(name, inputs, parts, models, tmp_path):
    model_dir, decision = model_with_decision(models, name, parts, tmp_path / "model")
    signatures = export_saved_model(str(model_dir), str(tmp_path / "exported"), inputs=inputs)
    deciding = ["decide", "decide_ids"] if inputs == "strings" else ["decide_ids"]
    assert set(deciding) <= set(signatures)
    extra = tmp_path / "exported" / "assets.extra"
    assert json.loads((extra / DECISION_FILE).read_text(encoding="utf-8")) == decision.to_json()
    described = json.loads((extra / "cosent_model.json").read_text(encoding="utf-8"))
    assert described["threshold"] == decision.threshold() and described["signatures"] == signatures
    matcher = load_matcher(str(model_dir))
    assert matcher.decision == decision
    import_tensorflow_text()  # a string export's graph tokenises with its ops
    served = tf.saved_model.load(str(tmp_path / "exported")).signatures
    from_ids = served["decide_ids"](**{key: tf.constant(value) for key, value in id_inputs(matcher).items()})
    assert_decides_as_the_matcher({k: v.numpy() for k, v in from_ids.items()}, matcher, decision, strings=False)
    if inputs == "strings":
        decided = served["decide"](first=tf.constant(FIRST), second=tf.constant(SECOND))
        assert_decides_as_the_matcher({k: v.numpy() for k, v in decided.items()}, matcher, decision, strings=True)
        empty = served["decide"](first=tf.constant([], tf.string), second=tf.constant([], tf.string))
        assert all(value.shape[0] == 0 for value in empty.values())
        with pytest.raises(tf.errors.InvalidArgumentError, match="first and second must hold as many strings"):
            served["decide"](first=tf.constant(FIRST), second=tf.constant(SECOND[:-1]))


@pytest.mark.slow
def test_a_folder_from_before_decisions_decides_by_the_threshold_its_description_kept(models, tmp_path):
    source, scores = models["interaction"]
    shutil.copytree(source, tmp_path / "model")
    threshold = middle_gap(scores.astype(np.float64), 0.4, 0.6)
    described_path = tmp_path / "model" / "cosent_model.json"
    described = json.loads(described_path.read_text(encoding="utf-8"))
    described_path.write_text(json.dumps({**described, "threshold": threshold}), encoding="utf-8")
    signatures = export_saved_model(str(tmp_path / "model"), str(tmp_path / "exported"), inputs="ids")
    assert signatures == ["decide_ids", "score_ids", "serving_default"]
    extra = tmp_path / "exported" / "assets.extra"
    shipped = json.loads((extra / DECISION_FILE).read_text(encoding="utf-8"))
    assert shipped["thresholds"] == {"accuracy": threshold} and shipped["score"] == "head"
    assert json.loads((extra / "cosent_model.json").read_text(encoding="utf-8"))["threshold"] == threshold
    matcher = load_matcher(str(tmp_path / "model"))
    served = tf.saved_model.load(str(tmp_path / "exported")).signatures["decide_ids"]
    decided = served(**{key: tf.constant(value) for key, value in id_inputs(matcher).items()})
    assert_decides_as_the_matcher({k: v.numpy() for k, v in decided.items()}, matcher, matcher.decision, strings=False)


@pytest.mark.slow
def test_a_folder_without_a_decision_exports_as_before(feature_ids):
    exported = feature_ids / EXPORTED  # the zoo's ids export of the feature model, which has no decision
    extra = exported / "assets.extra"
    assert not (extra / DECISION_FILE).exists()
    described = json.loads((extra / "cosent_model.json").read_text(encoding="utf-8"))
    assert described["signatures"] == ["encode_ids", "serving_default"] and described["threshold"] is None
    assert set(tf.saved_model.load(str(exported)).signatures) == {"encode_ids", "serving_default"}  # no decide_ids


# ---- a decision that is not this model's is refused, and nothing is written


def edited_to_fall(folder):
    path = folder / DECISION_FILE
    record = json.loads(path.read_text(encoding="utf-8"))
    values = record["calibration"]["values"]
    values[1], values[2] = values[2], values[1] - 0.05
    path.write_text(json.dumps(record), encoding="utf-8")


def copied_from_another_model(folder, models, tmp_path):
    other = tmp_path / "other"
    # another size, so that its weights are another model's whatever the random seed
    make_model_dir(other, write_config(tmp_path / "other_config.json", layers=1), pooling="last-avg", maxlen=16)
    write_decision(other, made_decision(models["feature"][1], ("thresholds", "isotonic"), "cosine"))
    shutil.copyfile(other / DECISION_FILE, folder / DECISION_FILE)


@pytest.mark.parametrize("export", [export_saved_model, export_hf])
@pytest.mark.parametrize(
    "name, spoil, message",
    [
        ("feature", copied_from_another_model, "was fitted on another model's scores"),
        ("feature", edited_to_fall, "the map must not fall as the score rises"),
        ("interaction", None, "was fitted on cosine scores, but this interaction model scores pairs by head"),
    ],
)
def test_a_decision_that_is_not_this_models_is_refused(export, name, spoil, message, models, tmp_path):
    folder, _ = model_with_decision(models, name, ("thresholds", "isotonic"), tmp_path / "model")
    if spoil is not None:
        spoil(folder, models, tmp_path) if spoil is copied_from_another_model else spoil(folder)
    else:  # a decision of a feature model's cosines, in an interaction model's folder
        record = json.loads((folder / DECISION_FILE).read_text(encoding="utf-8"))
        (folder / DECISION_FILE).write_text(json.dumps({**record, "score": "cosine"}), encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(str(folder / DECISION_FILE)) + ": .*" + message):
        export(str(folder), str(tmp_path / "exported"))
    assert not (tmp_path / "exported").exists()
    assert not [entry for entry in os.listdir(tmp_path) if entry.startswith(".tmp-")]


# ---- the Hugging Face folder carries the decision, and its model card applies it


def card_snippet(folder):
    """The Python of the model card's "Match decision" section."""
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert card.count("## Match decision\n") == 1
    return re.search(r"```python\n(.*?)```", card.split("## Match decision\n")[1], re.S).group(1)


def card_code(folder):
    """The model card's Python as written, but for the folder's name and the pairs (read from the
    first argument), and what it computed saved to the second."""
    code = card_snippet(folder).replace("'THIS_FOLDER'", repr(str(folder)))
    code, replaced = re.subn(
        r"^pairs = .*$", "pairs = [tuple(p) for p in json.load(open(sys.argv[1], encoding='utf-8'))]", code, flags=re.M
    )
    assert replaced == 1 and "cosent_tf" not in code
    saved = (
        "\nassert not {'cosent_tf', 'tensorflow'} & set(sys.modules), 'the card needs only sentence-transformers'\n"
        f"np.savez(sys.argv[2], **{{name: globals()[name] for name in {OUTPUTS!r} if name in globals()}})\n"
    )
    return "import sys\n" + code + saved


# Runs the model cards' Python in one process of the reference environment, as its start (torch,
# sentence-transformers) costs more than a card: each card in a namespace of its own, with the
# arguments it was written for; a card that fails leaves its error beside its output, so that only
# its own test fails.
CARDS = """
import json, sys, traceback
for code, pairs, out in json.load(open(sys.argv[1], encoding="utf-8")):
    sys.argv = ["-c", pairs, out]
    try:
        exec(compile(code, "<model card>", "exec"), {"__name__": "__main__"})
    except BaseException:
        open(out + ".error", "w", encoding="utf-8").write(traceback.format_exc())
"""
CARD_CASES = {
    "feature": ("thresholds", "isotonic"),
    "interaction": ("graded", "thresholds", "isotonic"),  # one logit: the card undoes predict's sigmoid
    "softmax": ("thresholds", "platt", "f1-rule"),
}


@pytest.fixture(scope="module")
def cards(models, tmp_path_factory):
    """name -> (its model folder with a decision of :data:`CARD_CASES`, the decision, the folder's
    Hugging Face export, the cache key of what its card's Python computes, a function giving that);
    the cards not cached are run at once, in one process."""
    root = tmp_path_factory.mktemp("cards")
    python = reference_python("these tests run the model card's Python")
    (root / "pairs.json").write_text(json.dumps(list(zip(FIRST, SECOND)), ensure_ascii=False), encoding="utf-8")
    made, jobs = {}, []
    for name, parts in CARD_CASES.items():
        (root / name).mkdir()
        model_dir, decision = model_with_decision(models, name, parts, root / name / "model")
        hf, out = root / name / "hf", root / name / "card.npz"
        export_hf(str(model_dir), str(hf))
        code = card_code(hf)
        # cached (tests/reference_cache.py) by the folder's content, not its tmp path, which the code names
        key = [code.replace(repr(str(hf)), "THIS_FOLDER"), interpreter(python)]
        key += [contents(hf, hide=[root / name]), contents(root / "pairs.json")]

        def read(name=name, out=out):
            error = out.with_name(out.name + ".error")
            if error.exists():
                pytest.fail(f"the {name} model card's Python failed:\n{error.read_text(encoding='utf-8')[-3000:]}")
            return dict(np.load(out))

        made[name] = (model_dir, decision, hf, key, read)
        jobs.append((code, str(root / "pairs.json"), str(out)))
    missing = [index for index, name in enumerate(CARD_CASES) if not is_stored("model-card", made[name][3])]
    if missing:
        (root / "jobs.json").write_text(json.dumps([jobs[index] for index in missing]), encoding="utf-8")
        # a process of its own: the cards run in the reference environment, without cosent_tf and TensorFlow
        result = subprocess.run(
            [python, "-c", CARDS, str(root / "jobs.json")], capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, result.stderr[-3000:]
    return made


@pytest.mark.slow
@pytest.mark.parametrize("name, parts", list(CARD_CASES.items()))
def test_the_model_cards_python_decides_as_the_matcher(name, parts, cards):
    model_dir, decision, hf, key, read = cards[name]
    shipped = read_decision(hf)  # stamped with the exported weights, so it loads
    assert shipped is not None and shipped.weights != decision.weights
    assert shipped.to_json() == {**decision.to_json(), "weights": shipped.weights}
    assert load_matcher(str(hf)).decision == shipped  # cosent-tf reads the export with it
    card = cached("model-card", key, read)
    matcher = load_matcher(str(model_dir))
    graded = decision.expected_label is not None
    assert set(card) == {"scores", "matches", "probabilities"} | ({"expected_labels"} if graded else set())
    np.testing.assert_allclose(card["scores"], matcher.similarity(FIRST, SECOND), atol=TOLERANCE, rtol=0)
    np.testing.assert_array_equal(card["matches"], matcher.decide(FIRST, SECOND).matches)
    assert np.ptp(card["probabilities"]) > 0
    np.testing.assert_allclose(card["probabilities"], matcher.predict_proba(FIRST, SECOND), atol=TOLERANCE, rtol=0)
    if graded:
        np.testing.assert_allclose(card["expected_labels"], matcher.predict_label(FIRST, SECOND), atol=TOLERANCE)
    written = (hf / "README.md").read_text(encoding="utf-8")
    for threshold in decision.thresholds.values():
        assert format_threshold(threshold) in written
    assert f"calibration: {decision.calibration.method}" in written.lower()


def test_a_hugging_face_export_without_a_decision_has_no_decision_section(models, tmp_path):
    source, _ = models["feature"]
    export_hf(str(source), str(tmp_path / "hf"))
    assert not (tmp_path / "hf" / DECISION_FILE).exists()
    assert "Match decision" not in (tmp_path / "hf" / "README.md").read_text(encoding="utf-8")
    assert SentenceEncoder.load(str(tmp_path / "hf")).decision is None
