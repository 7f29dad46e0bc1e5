"""The command line's ONNX paths: `export --format onnx` (its lines, --quantize, --check) and
--runtime onnx on encode, search, evaluate and similarity --decide, each against the library or the
engine's own answers; options that do not go together refused with their message, nothing written."""

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from cosent_tf import SentenceEncoder
from cosent_tf.backend import keras
from cosent_tf.calibration import format_threshold, write_decision
from cosent_tf.cli import main
from cosent_tf.inference.matchers import load_matcher
from tests.export.test_onnx_export import write_check_file
from tests.helpers import distinct_texts, write_config
from tests.inference.test_onnx_model import gentle_decision, make_folder

TEXTS = ["花呗如何还钱", "", "我想换手机了", "为什么我的花呗不能用了" * 4, "ＱＱ号码是多少？", "明天会下雨吗"]
PAIRS_A = distinct_texts(3, 24)
PAIRS_B = distinct_texts(4, 24)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("tensorflow", "keras", "tf_keras", "bert4keras")


def printed(argv):
    """What ``cosent-tf argv`` printed on stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def error_of(argv):
    """The ``error: ...`` line a command ends with."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    return str(stopped.value.code)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """``feature``: a mean-pooled model with a decision, exported by the command line with --quantize int8
    and --check (``export``; ``export_said``: its lines); ``fla``: a first-last-avg model, exported
    without options (``fla-export``, the "onnx" layout; ``fla_said``)."""
    root = tmp_path_factory.mktemp("cli-onnx")
    keras.utils.set_random_seed(41)
    config = write_config(root / "config.json", layers=1)
    make_folder(root / "feature", config, pooling="last-avg")
    decision = gentle_decision(load_matcher(str(root / "feature")).similarity(PAIRS_A, PAIRS_B), "cosine")
    write_decision(str(root / "feature"), decision)
    make_folder(root / "fla", config, pooling="first-last-avg")
    check = write_check_file(root / "check.tsv")
    (root / "texts.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    export = ["export", str(root / "feature"), str(root / "export"), "--format", "onnx"]
    export_said = printed([*export, "--quantize", "int8", "--check", check[0]])
    fla_said = printed(["export", str(root / "fla"), str(root / "fla-export"), "--format", "onnx"])
    return {"root": root, "check": check, "export_said": export_said, "fla_said": fla_said}


@pytest.mark.heavy
def test_export_says_the_layout_the_files_and_the_check(folders):
    root = folders["root"]
    record = json.loads((root / "export" / "cosent_tf_export.json").read_text(encoding="utf-8"))
    check, path = record["check"], folders["check"][0]
    expected = [f"{root / 'export'}: ONNX export (sentence-transformers): onnx/model.onnx, onnx/model_qint8.onnx"]
    for precision in ("float32", "int8"):
        figures = check[precision]
        expected.append(
            f"  {precision} on {path} (32 pairs): "
            f"spearman {figures['spearman']:.2f}, accuracy {figures['accuracy']:.2f}, "
            f"accuracy_shipped {figures['accuracy_shipped']:.2f}"  # at the decision's threshold: it has one
        )
    assert folders["export_said"].splitlines() == expected
    assert set(record["onnx"]) == {"onnx/model.onnx", "onnx/model_qint8.onnx"}

    record = json.loads((root / "fla-export" / "cosent_tf_export.json").read_text(encoding="utf-8"))
    assert folders["fla_said"].splitlines() == [
        f"{root / 'fla-export'}: ONNX export (onnx): onnx/model.onnx",
        f"  sentence-transformers cannot load it: {record['reason']}",
    ]
    assert "pooling 'first-last-avg' cannot be expressed in sentence-transformers" in record["reason"]


def test_encode_runs_the_export_as_the_library_does(folders, tmp_path):
    root = folders["root"]
    export = str(root / "export")
    for precision in ("float32", "int8"):
        output = tmp_path / f"{precision}.npy"
        said = printed(
            ["encode", export, str(root / "texts.txt"), str(output), "--runtime", "onnx", "--precision", precision]
        )
        assert "6 vectors of dimension 16" in said
        expected = SentenceEncoder.load(export, runtime="onnx", precision=precision).encode(TEXTS)
        np.testing.assert_allclose(np.load(output), expected, atol=1e-6, rtol=0)
    engine = SentenceEncoder.load(str(root / "feature")).encode(TEXTS)
    np.testing.assert_allclose(np.load(tmp_path / "float32.npy"), engine, atol=1e-5, rtol=0)
    assert np.all(np.sum(np.load(tmp_path / "int8.npy") * engine, axis=1) > 0.99)


@pytest.mark.heavy
def test_an_export_is_served_without_tensorflow_keras_or_bert4keras(folders, tmp_path):
    # A fresh interpreter: this process holds TensorFlow already, so what serving an export imports
    # shows only in one of its own (the command line and the library in one process).
    root = folders["root"]
    export, texts = str(root / "export"), str(root / "texts.txt")
    code = (
        "import sys\n"
        "import numpy as np\n"
        "from cosent_tf.cli import main\n"
        "from cosent_tf import SentenceEncoder\n"
        "from cosent_tf.inference.matchers import load_matcher\n"
        f"assert main(['encode', {export!r}, {texts!r}, {str(tmp_path / 'cli.npy')!r}, '--runtime', 'onnx']) == 0\n"
        f"encoder = SentenceEncoder.load({export!r}, runtime='onnx')\n"
        f"np.save({str(tmp_path / 'api.npy')!r}, encoder.encode({TEXTS!r}))\n"
        f"decided = load_matcher({export!r}, runtime='onnx').decide({PAIRS_A[:2]!r}, {PAIRS_B[:2]!r})\n"
        f"np.save({str(tmp_path / 'scores.npy')!r}, decided.scores)\n"
        f"print('imported:', sorted({{name.split('.')[0] for name in sys.modules}} & set({HEAVY!r})))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == "imported: []"
    engine = SentenceEncoder.load(str(root / "feature"))
    np.testing.assert_allclose(np.load(tmp_path / "cli.npy"), engine.encode(TEXTS), atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.load(tmp_path / "api.npy"), engine.encode(TEXTS), atol=1e-5, rtol=0)
    expected = load_matcher(str(root / "feature")).decide(PAIRS_A[:2], PAIRS_B[:2]).scores
    np.testing.assert_allclose(np.load(tmp_path / "scores.npy"), expected, atol=1e-5, rtol=0)


def test_search_builds_and_queries_an_index_with_the_onnx_runtime(folders, tmp_path):
    root = folders["root"]
    export = str(root / "export")
    said = printed(["search", "build", export, str(root / "texts.txt"), str(tmp_path / "index"), "--runtime", "onnx"])
    assert said.startswith(f"{tmp_path / 'index'}: 6 vectors")
    (tmp_path / "queries.txt").write_text("我想换手机\n花呗怎么还钱\n", encoding="utf-8")
    argv = ["search", "query", str(tmp_path / "index"), str(tmp_path / "queries.txt"), str(tmp_path / "hits.jsonl")]
    printed([*argv, "--top-k", "3", "--runtime", "onnx"])
    results = [json.loads(line) for line in (tmp_path / "hits.jsonl").read_text(encoding="utf-8").splitlines()]
    # the ranking by hand, from the engine's own vectors
    engine = SentenceEncoder.load(str(root / "feature"))
    cosines = engine.encode(["我想换手机", "花呗怎么还钱"]) @ engine.encode(TEXTS).T
    for result, row in zip(results, cosines):
        assert [hit["index"] for hit in result["hits"]] == list(np.argsort(-row)[:3])
        np.testing.assert_allclose([hit["score"] for hit in result["hits"]], np.sort(row)[::-1][:3], atol=1e-5)


def test_evaluate_runs_an_export_without_a_hugging_face_folder(folders, tmp_path):
    root = folders["root"]
    path, texts_a, texts_b, labels = folders["check"]
    export = root / "fla-export"
    assert not (export / "config.json").exists() and not (export / "model.safetensors").exists()
    said = printed(["evaluate", str(export), path, "--output", str(tmp_path / "eval.json"), "--runtime", "onnx"])
    metrics = json.loads((tmp_path / "eval.json").read_text())
    assert json.loads(said)["spearman"] == pytest.approx(metrics["spearman"])
    engine = SentenceEncoder.load(str(root / "fla")).similarity(texts_a, texts_b)
    assert metrics["spearman"] == pytest.approx(spearmanr(engine, labels)[0], abs=1e-6)


def test_similarity_decides_with_the_exports_decision(folders, tmp_path):
    root = folders["root"]
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{a}\t{b}\n" for a, b in zip(PAIRS_A, PAIRS_B)), encoding="utf-8")
    argv = ["similarity", str(root / "export"), str(pairs), str(tmp_path / "decided.tsv"), "--decide"]
    said = printed([*argv, "--runtime", "onnx"])
    engine = load_matcher(str(root / "feature"))
    assert (
        f"match or no match at the accuracy threshold {format_threshold(engine.decision.thresholds['accuracy'])}"
        in said
    )
    rows = [line.split("\t") for line in (tmp_path / "decided.tsv").read_text(encoding="utf-8").splitlines()]
    decided = engine.decide(PAIRS_A, PAIRS_B)
    assert [row[:2] for row in rows] == [[a, b] for a, b in zip(PAIRS_A, PAIRS_B)]
    np.testing.assert_allclose([float(row[2]) for row in rows], decided.scores, atol=1e-5)
    assert [row[3] for row in rows] == ["match" if match else "no match" for match in decided.matches]
    assert 0 < sum(decided.matches) < len(PAIRS_A)
    np.testing.assert_allclose([float(row[4]) for row in rows], decided.probabilities, atol=1e-5)
    # two texts on the command line
    score, match, probability = (
        printed(["similarity", str(root / "export"), PAIRS_A[0], PAIRS_B[0], "--decide", "--runtime", "onnx"])
        .strip()
        .split("\t")
    )
    alone = engine.decide(PAIRS_A[:1], PAIRS_B[:1])
    assert float(score) == pytest.approx(float(alone.scores[0]), abs=1e-5)
    assert match == ("match" if alone.matches[0] else "no match")
    assert float(probability) == pytest.approx(float(alone.probabilities[0]), abs=1e-5)


def test_options_that_do_not_go_together_are_refused_and_nothing_written(folders, tmp_path, monkeypatch):
    root = folders["root"]
    feature, export, texts, check = (
        str(root / "feature"),
        str(root / "export"),
        str(root / "texts.txt"),
        folders["check"][0],
    )
    out = str(tmp_path / "out")
    for argv, message in (
        (["export", feature, out, "--quantize", "int8"], "error: --quantize and --check are for --format onnx"),
        (
            ["export", feature, out, "--format", "hf", "--check", check],
            "error: --quantize and --check are for --format onnx",
        ),
        (
            ["export", feature, out, "--format", "onnx", "--precision", "bf16"],
            "error: --precision is for --format savedmodel; for a smaller ONNX file use --quantize int8",
        ),
        (
            ["export", feature, out, "--format", "onnx", "--inputs", "ids"],
            "error: --inputs is for --format savedmodel; an ONNX export takes token ids and carries its tokenizer",
        ),
        (
            ["encode", export, texts, out, "--runtime", "onnx", "--precision", "bf16"],
            "error: --runtime onnx runs precision float32 or int8, not 'bf16'",
        ),
        (
            ["encode", feature, texts, out, "--precision", "int8"],
            "error: the tensorflow runtime computes in float32, bf16, fp16, not 'int8' (int8 is for --runtime onnx, "
            "on an export written with --quantize int8)",
        ),
        (
            ["encode", feature, texts, out, "--runtime", "onnx"],
            f"error: {feature}: --runtime onnx needs an ONNX export of a model, and this folder has no "
            "cosent_tf_export.json; write one with: cosent-tf export MODEL_DIR OUTPUT_DIR --format onnx",
        ),
        (
            ["encode", str(root / "fla-export"), texts, out, "--runtime", "onnx", "--precision", "int8"],
            f"error: {root / 'fla-export'}: this export has no int8 file (onnx/model_qint8.onnx); export it again "
            "with --quantize int8",
        ),
    ):
        assert error_of(argv) == message, argv
        assert list(tmp_path.iterdir()) == []

    # a --check file without labels: its error names it, and comes before the conversion
    message = error_of(["export", feature, out, "--format", "onnx", "--quantize", "int8", "--check", texts])
    assert message.startswith(f"error: {texts}") and "label" in message
    assert list(tmp_path.iterdir()) == []

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    message = error_of(["encode", export, texts, out, "--runtime", "onnx"])
    assert message.startswith("error: ONNX export and --runtime onnx need onnxruntime, which is not installed")
    assert message.endswith('install it with: pip install "cosent-tf[onnx]"')
    message = error_of(["export", feature, out, "--format", "onnx"])
    assert message.endswith('install it with: pip install "cosent-tf[onnx]"')
    assert list(tmp_path.iterdir()) == []
    assert Path(export, "onnx", "model.onnx").is_file()
