"""cosent-tf calibrate, similarity --decide and evaluate's decision metrics, against the library's own
fit (calibration.fit_decision on the matcher's scores) and the Python API (predict_proba, decide)."""

import json
import shutil

import numpy as np
import pytest

from cosent_tf.calibration import (
    DECISION_FILE,
    decision_metrics,
    fit_decision,
    format_threshold,
    read_decision,
    weights_fingerprint,
)
from cosent_tf.cli import main
from cosent_tf.inference.matchers import load_matcher
from cosent_tf.models.kinds import get_kind
from tests.helpers import distinct_texts

PAIRS = 60


# The session's random model folders (conftest's mining_models), by the kind of model each holds.
FOLDER_OF = {"feature": "encoder", "interaction": "scorer", "other": "other"}


@pytest.fixture
def folders(mining_models):
    """Untouched model folders, copied by each test that writes into one: ``encoder`` and ``other``,
    two feature models, and ``scorer``, an interaction model (random, tiny)."""
    return mining_models


def model_copy(folders, kind, tmp_path):
    return str(shutil.copytree(folders / FOLDER_OF[kind], tmp_path / kind))


def write_pairs(path, labels, seed=0):
    """A TSV pair file of distinct texts with ``labels`` (as written: 0/1 or graded); returns
    (path, texts_a, texts_b, labels as floats)."""
    texts_a, texts_b = distinct_texts(seed, len(labels)), distinct_texts(seed + 100, len(labels))
    lines = [f"{a}\t{b}\t{label}" for a, b, label in zip(texts_a, texts_b, labels)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path), texts_a, texts_b, np.asarray(labels, dtype=np.float64)


def binary_labels(seed, count=PAIRS, matches=25):
    return list(np.random.default_rng(seed).permutation([1] * matches + [0] * (count - matches)))


def error_of(argv, capsys=None):
    """The one ``error: ...`` line (or argparse's message) a command ends with."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    if stopped.value.code == 2 and capsys is not None:  # argparse's own errors go to stderr
        return capsys.readouterr().err
    return str(stopped.value.code)


@pytest.mark.parametrize("kind", ["feature", "interaction"])
def test_calibrate_writes_the_decision_fitted_on_the_models_own_scores(folders, kind, tmp_path, capsys):
    model_dir = model_copy(folders, kind, tmp_path)
    file, texts_a, texts_b, labels = write_pairs(tmp_path / "pairs.tsv", binary_labels(0))
    main(["calibrate", model_dir, file])
    printed = capsys.readouterr().out

    scores = load_matcher(model_dir).similarity(texts_a, texts_b)
    expected = fit_decision(scores, labels, file, score=get_kind(kind).scored_by)
    written = read_decision(model_dir)
    assert written is not None and written.thresholds == pytest.approx(expected.thresholds, abs=1e-7)
    assert written.calibration is not None and expected.calibration is not None
    assert written.calibration.method == expected.calibration.method
    np.testing.assert_allclose(written.probability(scores), expected.probability(scores), atol=1e-9)
    assert written.fitted_on["pairs"] == PAIRS and written.fitted_on["file"] == file
    assert written.fitted_on["positive_rate"] == pytest.approx(np.mean(labels))
    assert written.score == get_kind(kind).scored_by and written.weights == weights_fingerprint(model_dir)
    for line in written.summary():
        assert line in printed
    assert "before" not in printed  # there was no decision to compare with


def test_recalibrating_replaces_the_decision_and_prints_the_thresholds_before_and_after(folders, tmp_path, capsys):
    model_dir = model_copy(folders, "feature", tmp_path)
    first, *_ = write_pairs(tmp_path / "first.tsv", binary_labels(1))
    second, texts_a, texts_b, labels = write_pairs(tmp_path / "second.tsv", binary_labels(2, matches=30), seed=7)
    main(["calibrate", model_dir, first])
    before = read_decision(model_dir)
    capsys.readouterr()
    main(["calibrate", model_dir, second, "--rule", "f1"])
    printed = capsys.readouterr().out

    after = read_decision(model_dir)
    assert before is not None and after is not None and before.thresholds and after.thresholds
    scores = load_matcher(model_dir).similarity(texts_a, texts_b)
    assert after.thresholds == pytest.approx(fit_decision(scores, labels, second).thresholds, abs=1e-7)
    assert after.fitted_on["file"] == second and after.rule == "f1"
    changes = ", ".join(
        f"{r} {format_threshold(before.thresholds[r])} -> {format_threshold(after.thresholds[r])}"
        for r in ("accuracy", "f1")
    )
    assert f"thresholds before -> after: {changes}" in printed


def test_graded_labels_get_the_expected_label_map_and_a_match_decision_only_with_a_cut(folders, tmp_path, capsys):
    model_dir = model_copy(folders, "interaction", tmp_path)
    grades = list(np.random.default_rng(3).integers(0, 6, PAIRS))
    file, texts_a, texts_b, labels = write_pairs(tmp_path / "graded.tsv", grades)
    scores = load_matcher(model_dir).similarity(texts_a, texts_b)

    main(["calibrate", model_dir, file])
    printed = capsys.readouterr().out
    assert "no match decision: graded labels" in printed and "pass --cut LABEL" in printed
    written = read_decision(model_dir)
    expected = fit_decision(scores, labels, file, graded=True)
    assert written is not None and written.thresholds is None and written.expected_label is not None
    np.testing.assert_allclose(written.expected_labels(scores), expected.expected_labels(scores), atol=1e-9)
    message = error_of(["similarity", model_dir, "今天", "明天", "--decide"])
    assert "its labels were graded (0.0 to 5.0) and no cut made them match / no match" in message
    assert "--cut LABEL" in message and message.startswith("error: ")

    main(["calibrate", model_dir, file, "--cut", "2.5"])
    written = read_decision(model_dir)
    expected = fit_decision(scores, labels, file, graded=True, cut=2.5)
    assert written is not None and written.thresholds == pytest.approx(expected.thresholds, abs=1e-7)
    assert written.fitted_on["positive_rate"] == pytest.approx(np.mean(labels > 2.5))
    assert "a label above 2.5 is a match" in capsys.readouterr().out


@pytest.mark.heavy
@pytest.mark.parametrize("kind", ["feature", "interaction"])
def test_similarity_decide_agrees_with_the_python_api(folders, kind, tmp_path, capsys):
    model_dir = model_copy(folders, kind, tmp_path)
    file, texts_a, texts_b, labels = write_pairs(tmp_path / "pairs.tsv", binary_labels(4))
    main(["calibrate", model_dir, file])
    matcher = load_matcher(model_dir)
    probabilities = matcher.predict_proba(texts_a, texts_b)
    decision = matcher.decision
    assert decision is not None and decision.thresholds is not None
    capsys.readouterr()

    for option, rule in (["--decide"], "accuracy"), (["--decide=f1"], "f1"):
        main(["similarity", model_dir, file, str(tmp_path / f"{rule}.tsv"), *option])
        rows = [line.split("\t") for line in (tmp_path / f"{rule}.tsv").read_text(encoding="utf-8").splitlines()]
        assert [row[:3] for row in rows] == [[a, b, f"{y:g}"] for a, b, y in zip(texts_a, texts_b, labels)]
        scores = np.array([float(row[3]) for row in rows])
        np.testing.assert_allclose([float(row[5]) for row in rows], probabilities, atol=1e-6, rtol=0)
        decided = matcher.decide(texts_a, texts_b, rule)
        assert [row[4] for row in rows] == ["match" if match else "no match" for match in decided.matches]
        np.testing.assert_allclose(scores, matcher.similarity(texts_a, texts_b), atol=1e-6)
        assert (
            f"match or no match at the {rule} threshold {format_threshold(decision.thresholds[rule])}"
            in capsys.readouterr().out
        )

    main(["similarity", model_dir, texts_a[0], texts_b[0], "--decide"])
    score, said, probability = capsys.readouterr().out.strip().split("\t")
    # the same pair alone, as the command scores it (in a batch of others its padding differs)
    assert float(probability) == pytest.approx(matcher.predict_proba(texts_a[:1], texts_b[:1])[0], abs=1e-6)
    assert said == ("match" if matcher.decide(texts_a[:1], texts_b[:1]).matches[0] else "no match")

    # without --decide, the output of before: the score and 0/1 at the accuracy threshold
    main(["similarity", model_dir, texts_a[0], texts_b[0]])
    assert capsys.readouterr().out.split() == [score, str(matcher.predict(texts_a[:1], texts_b[:1])[0])]


def test_similarity_decide_without_a_decision_says_how_to_fit_one(folders, capsys):
    message = error_of(["similarity", str(folders / "encoder"), "今天", "明天", "--decide"])
    assert "no match decision (no decision.json" in message
    assert message.endswith(f"fit one on labelled pairs: cosent-tf calibrate {folders / 'encoder'} LABELLED_FILE")
    # a text taken for the rule: the option's value is refused, saying where --decide goes
    message = error_of(["similarity", str(folders / "encoder"), "--decide", "今天", "明天"], capsys)
    assert (
        "argument --decide: '今天' is not a rule (accuracy, f1); to decide by the decision's own rule, put " in message
    )


def test_evaluate_reports_the_decisions_metrics_and_draws_the_reliability_diagram(folders, tmp_path, capsys):
    model_dir = model_copy(folders, "feature", tmp_path)
    valid, *_ = write_pairs(tmp_path / "valid.tsv", binary_labels(5))
    test, texts_a, texts_b, labels = write_pairs(tmp_path / "test.tsv", binary_labels(6, matches=20), seed=11)
    main(["calibrate", model_dir, valid])
    capsys.readouterr()
    png = tmp_path / "reliability.png"
    main(["evaluate", model_dir, test, "--output", str(tmp_path / "eval.json"), "--reliability", str(png)])
    printed = capsys.readouterr()

    metrics = json.loads((tmp_path / "eval.json").read_text())
    matcher = load_matcher(model_dir)
    expected = decision_metrics(matcher.similarity(texts_a, texts_b), labels, matcher.decision)
    assert set(metrics["decision"]) == set(expected)
    for name, value in expected.items():
        assert metrics["decision"][name] == (value if isinstance(value, str) else pytest.approx(value, abs=1e-6))
    assert json.loads(printed.out)["decision"] == metrics["decision"]
    assert f"ECE {expected['ece']:.4f} (the score read as a probability: ECE {expected['ece_uncalibrated']:.4f})" in (
        printed.err
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_evaluate_refuses_a_reliability_diagram_it_cannot_draw(folders, tmp_path):
    model_dir = model_copy(folders, "feature", tmp_path)
    binary, *_ = write_pairs(tmp_path / "binary.tsv", binary_labels(8))
    graded, *_ = write_pairs(tmp_path / "graded.tsv", list(np.random.default_rng(9).integers(0, 6, PAIRS)))
    png = str(tmp_path / "r.png")
    message = error_of(["evaluate", model_dir, binary, "--reliability", png])
    assert f"{model_dir} has no calibration map to draw (it has no match decision)" in message
    main(["calibrate", model_dir, binary])
    message = error_of(["evaluate", model_dir, graded, "--reliability", png])
    assert "graded.tsv's labels are graded (0 to 5)" in message and "needs matches" in message
    message = error_of(["evaluate", model_dir, "--reliability", png, "--queries", "q", "--corpus", "c", "--qrels", "r"])
    assert "--reliability draws the pairs of a labelled pair FILE" in message
    assert not (tmp_path / "r.png").exists()


@pytest.mark.parametrize(
    "labels, options, message",
    [
        ([1] * PAIRS, [], "every one of its 60 pairs is a match; a threshold and a calibration map need pairs of both"),
        (
            binary_labels(10, count=30, matches=8),
            [],
            "has 30 pairs (8 matches, 22 not); a calibration map needs at least 50 pairs with at least 10 of each",
        ),
        (binary_labels(11), ["--cut", "0.5"], "--cut is for graded labels; these are 0/1 and already say match or not"),
        ([0, 1, 2] * 20, ["--cut", "2"], "every one of its 60 pairs is no match after the cut 2"),
    ],
)
def test_calibrate_refuses_labels_it_cannot_fit_before_the_model_loads(folders, labels, options, message, tmp_path):
    model_dir = model_copy(folders, "feature", tmp_path)
    (tmp_path / "feature" / "bert_model.ckpt.index").write_bytes(b"not a checkpoint")  # a load would fail
    file, *_ = write_pairs(tmp_path / "pairs.tsv", labels)
    said = error_of(["calibrate", model_dir, *options, file])
    assert said.startswith(f"error: {file}") and message in said
    assert not (tmp_path / "feature" / DECISION_FILE).exists()


def test_calibrate_refuses_nli_words_before_the_model_loads(folders, tmp_path):
    model_dir = model_copy(folders, "feature", tmp_path)
    (tmp_path / "feature" / "bert_model.ckpt.index").write_bytes(b"not a checkpoint")  # a load would fail
    words = ["entailment", "neutral", "contradiction"] * 20
    texts_a, texts_b = distinct_texts(0, len(words)), distinct_texts(100, len(words))
    file = tmp_path / "nli.tsv"
    file.write_text("".join(f"{a}\t{b}\t{w}\n" for a, b, w in zip(texts_a, texts_b, words)), encoding="utf-8")
    said = error_of(["calibrate", model_dir, str(file)])
    assert said.startswith(f"error: {file}: its labels are NLI words") and "give 0/1 or graded labels" in said
    assert not (tmp_path / "feature" / DECISION_FILE).exists()


def test_a_decision_of_another_model_or_edited_to_fall_is_refused_and_calibrate_replaces_it(folders, tmp_path, capsys):
    model_dir, other = model_copy(folders, "feature", tmp_path), model_copy(folders, "other", tmp_path)
    file, *_ = write_pairs(tmp_path / "pairs.tsv", binary_labels(12))
    main(["calibrate", other, file])
    shutil.copy(tmp_path / "other" / DECISION_FILE, tmp_path / "feature" / DECISION_FILE)
    message = error_of(["similarity", model_dir, "今天", "明天", "--decide"])
    assert "decision.json: was fitted on another model's scores (its weights fingerprint is not this folder's)" in (
        message
    )
    capsys.readouterr()
    main(["calibrate", model_dir, file])
    assert "replaced a decision.json that could not be used: " in capsys.readouterr().out
    decision = read_decision(model_dir)
    assert decision is not None and decision.weights == weights_fingerprint(model_dir)

    record = json.loads((tmp_path / "feature" / DECISION_FILE).read_text())
    record["calibration"] = {"method": "isotonic", "scores": [0.2, 0.6, 0.9], "values": [0.1, 0.8, 0.3]}
    (tmp_path / "feature" / DECISION_FILE).write_text(json.dumps(record))
    message = error_of(["similarity", model_dir, "今天", "明天", "--decide"])
    assert "knot 2's value 0.3 is below knot 1's 0.8: the map must not fall as the score rises" in message


def test_calibrate_writes_only_into_a_cosent_tf_model_folder(folders, tmp_path):
    from cosent_tf import export_hf

    file, *_ = write_pairs(tmp_path / "pairs.tsv", binary_labels(13))
    source = str(folders / "encoder")
    export_hf(source, str(tmp_path / "exported"))
    message = error_of(["calibrate", str(tmp_path / "exported"), file])
    assert f"is an export of the cosent-tf model folder {source}" in message
    assert f"cosent-tf calibrate {source} FILE" in message

    foreign = shutil.copytree(tmp_path / "exported", tmp_path / "foreign")
    (foreign / "cosent_tf_export.json").unlink()
    message = error_of(["calibrate", str(foreign), file])
    assert "is a Hugging Face folder, not a cosent-tf model folder, and cosent-tf writes nothing into another" in (
        message
    )
    assert not (foreign / DECISION_FILE).exists() and not (tmp_path / "exported" / DECISION_FILE).exists()


@pytest.mark.heavy
def test_evaluate_without_a_decision_points_to_a_calibration_that_works_on_its_folder(folders, tmp_path, capsys):
    """The hint of ``evaluate`` on a folder without a match decision, followed as written, fits one:
    ``cosent-tf calibrate`` on a model folder, on the model folder an export came from, and a
    decision in Python on another program's Hugging Face folder (which calibrate refuses)."""
    import cosent_tf
    from cosent_tf import export_hf

    file, texts_a, texts_b, labels = write_pairs(tmp_path / "pairs.tsv", binary_labels(14))
    model_dir = model_copy(folders, "feature", tmp_path)
    export_hf(model_dir, str(tmp_path / "exported"))
    foreign = shutil.copytree(tmp_path / "exported", tmp_path / "foreign")
    (foreign / "cosent_tf_export.json").unlink()

    def hint_of(folder):
        capsys.readouterr()
        main(["evaluate", str(folder), file])
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("no accuracy: ")]
        prefix = f"no accuracy: {folder} has no match decision; pass --threshold, or fit one: "
        assert len(lines) == 1 and lines[0].startswith(prefix), lines
        return lines[0][len(prefix) :]

    assert hint_of(model_dir) == f"cosent-tf calibrate {model_dir} LABELLED_FILE"
    assert hint_of(tmp_path / "exported") == (
        f"calibrate the cosent-tf model folder it was exported from (cosent-tf calibrate {model_dir} LABELLED_FILE), "
        "then export it again; the export carries its decision"
    )
    hint = hint_of(foreign)
    call = f"cosent_tf.load_matcher({str(foreign)!r}).calibrate(texts_a, texts_b, labels, source)"
    assert hint == (
        f"in Python, {call}, which keeps the decision in memory (cosent-tf calibrate writes only into a cosent-tf "
        "model folder, not into another program's)"
    )
    # followed as written: the Python call on the foreign folder, the command on the model folder
    source = file
    decision = eval(
        call, {"cosent_tf": cosent_tf, "texts_a": texts_a, "texts_b": texts_b, "labels": labels, "source": source}
    )
    assert decision.binary and decision.fitted_on["file"] == file
    main(["calibrate", model_dir, file])
    assert read_decision(model_dir) is not None
    capsys.readouterr()
    main(["evaluate", model_dir, file])
    assert "no accuracy" not in capsys.readouterr().err


@pytest.mark.heavy
def test_on_imbalanced_pairs_calibrate_evaluate_and_decide_say_what_the_decision_is_worth(folders, tmp_path, capsys):
    """The issue's case: 29 matches in 100 pairs, which the model ranks below every other pair, so no
    threshold beats answering "no match" to every pair, which the accuracy threshold does, and the
    f1 one says "match" to every pair at probabilities below 0.5. Each command says so."""
    model_dir = model_copy(folders, "feature", tmp_path)
    matcher = load_matcher(model_dir)
    scores = np.float64(matcher.similarity(distinct_texts(0, 100), distinct_texts(100, 100)))
    labels = np.zeros(100, dtype=int)
    labels[np.argsort(scores)[:29]] = 1  # the matches score lowest
    file, texts_a, texts_b, labels = write_pairs(tmp_path / "pairs.tsv", list(labels))
    main(["calibrate", model_dir, file])
    printed = capsys.readouterr()
    matcher = load_matcher(model_dir)
    threshold, f1_threshold = matcher.decision.thresholds["accuracy"], matcher.decision.thresholds["f1"]
    assert int(np.sum(scores > threshold)) == 0 and int(np.sum(scores > f1_threshold)) == 100
    said_alike = (
        f'{file}: the accuracy threshold {format_threshold(threshold)} decides 100 of the 100 pairs "no match": it '
        "(nearly) never "
        'says "match"'
    )
    no_better = (
        f"{file}: accuracy 0.7100 at the accuracy threshold {format_threshold(threshold)} is not above that of "
        "answering "
        '"no match" every time: 0.7100; on these 100 pairs the decision does no better than no model'
    )
    assert {no_better, said_alike} <= set(printed.err.splitlines())
    assert (
        '  accuracy on these pairs 0.7100 at the accuracy threshold (answering "no match" every time: 0.7100)'
        in printed.out.splitlines()
    )

    main(["evaluate", model_dir, file])
    printed = capsys.readouterr()
    assert json.loads(printed.out)["decision"]["majority_accuracy"] == pytest.approx(0.71)
    (accuracy_line,) = [line for line in printed.err.splitlines() if line.startswith("  accuracy ")]
    assert accuracy_line.startswith(f"  accuracy 0.7100 at the shipped threshold {format_threshold(threshold)}; ")
    assert accuracy_line.endswith('; answering "no match" every time: 0.7100')
    assert {no_better, said_alike} <= set(printed.err.splitlines())

    main(["similarity", model_dir, file, str(tmp_path / "decided.tsv"), "--decide", "f1"])
    printed = capsys.readouterr()
    probabilities = matcher.predict_proba(texts_a, texts_b)
    below = (scores > f1_threshold) & (probabilities < 0.5)
    assert below.sum() > 0
    notes = [line for line in printed.err.splitlines() if line.startswith("note: ")]
    assert notes == [
        f'note: {below.sum()} of the 100 pairs decided "match" have a probability of a match below 0.5 (down to '
        f"{probabilities[below].min():.4f}): the f1 threshold {format_threshold(f1_threshold)} is the score that "
        "maximises F1 of "
        "the match class on the pairs it was fitted on, not where the probability crosses 0.5; to decide by the "
        "probability, compare the last column with a cut of your own"
    ]
