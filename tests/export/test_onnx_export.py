"""export_onnx: the int8 file and its quality check against figures computed here from onnxruntime's
own outputs (scipy's Spearman, accuracy at the best threshold found by trying every one), and bad
input: each refused with its message and nothing written. Parity with the engine is in
tests/inference/test_onnx_model.py, the command line in tests/test_cli_onnx.py."""

import copy
import json
import logging
import math
import os
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnxruntime
import pytest
from scipy.stats import spearmanr

from cosent_tf import ConfigError, DataError, PairScorer, SentenceEncoder
from cosent_tf.backend import keras
from cosent_tf.export import onnx_export
from cosent_tf.export.huggingface import export_hf
from cosent_tf.export.onnx_export import export_onnx, quality_check
from cosent_tf.export.savedmodel import export_saved_model
from cosent_tf.inference.onnx_model import load_onnx_dir
from tests.helpers import distinct_texts, make_model_dir, warnings_logged, write_config
from tests.inference.test_onnx_model import zoo_export

# 64 texts: the check encodes both sides in one batch of 64, as the figures here are computed (int8's
# activations are quantised per batch, so a text's int8 vector depends on the batch it is in).
CHECK_PAIRS = 32


def write_check_file(path, seed=0):
    """A labelled pair file (0/1 labels, half of each); (its path, texts a, texts b, labels)."""
    texts_a, texts_b = distinct_texts(seed, CHECK_PAIRS, longest=12), distinct_texts(seed + 1, CHECK_PAIRS, longest=12)
    labels = np.random.default_rng(seed).permutation([0, 1] * (CHECK_PAIRS // 2))
    Path(path).write_text("".join(f"{a}\t{b}\t{y}\n" for a, b, y in zip(texts_a, texts_b, labels)), encoding="utf-8")
    return str(path), texts_a, texts_b, labels


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """``feature`` (a mean-pooled model: a random model's [CLS] cosines lie too close to rank) and its
    export ``int8`` with --quantize int8 and --check (the warning's threshold lowered so that it fires;
    ``warnings``: what was logged, ``said``: every line the package logged), written with overwrite over
    a Hugging Face export of the model, so that this one conversion also shows that an ONNX export
    replaces one; ``plain``, another model's float32 export, read from the zoo
    (tests/inference/test_onnx_model.py converts it too)."""
    root = tmp_path_factory.mktemp("onnx-export")
    keras.utils.set_random_seed(40)
    config = write_config(root / "config.json", layers=1)
    make_model_dir(root / "feature", config, pooling="last-avg", maxlen=16)
    check = write_check_file(root / "check.tsv")
    export_hf(str(root / "feature"), str(root / "int8"))
    with (
        warnings_logged(onnx_export.__name__) as collected,
        warnings_logged("cosent_tf", logging.INFO) as said,
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setattr(onnx_export, "INT8_LOSS_WARNING", -math.inf)
        exported = export_onnx(
            str(root / "feature"), str(root / "int8"), quantize="int8", check_file=check[0], overwrite=True
        )
    _, plain, plain_exported = zoo_export(tmp_path_factory, "last-avg")
    return {
        "root": root,
        "check": check,
        "int8": exported,
        "plain": Path(plain),
        "plain_exported": plain_exported,
        "warnings": collected,
        "said": said,
    }


def pad(rows):
    length = max(len(row) for row in rows)
    ids = np.zeros((len(rows), length), np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    return ids, (ids != 0).astype(np.int64)


def session_vectors(folder, file_name, rows):
    """Unit vectors of the id ``rows`` from a bare onnxruntime session of ``onnx/file_name``."""
    session = onnxruntime.InferenceSession(os.path.join(folder, "onnx", file_name), providers=["CPUExecutionProvider"])
    ids, mask = pad(rows)
    (vectors,) = session.run(
        ["sentence_embedding"], {"input_ids": ids, "attention_mask": mask, "token_type_ids": 0 * ids}
    )
    vectors = vectors.astype(np.float64)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def best_accuracy(scores, labels):
    """The best accuracy of ``score > t`` over every threshold t that separates the scores differently."""
    candidates = np.concatenate([[-np.inf], scores])
    return max(float(np.mean((scores > t) == (labels == 1))) for t in candidates)


def untouched(parent, *expected):
    """The folder ``parent`` holds exactly ``expected``: no output, no .tmp- or .old- leftover."""
    assert sorted(os.listdir(parent)) == sorted(expected)


# ---- int8


def test_the_int8_file_is_written_beside_the_float32_one_and_recorded(folders):
    out = folders["root"] / "int8"
    assert folders["int8"].layout == "sentence-transformers"
    assert folders["int8"].files == {"onnx/model.onnx": "float32", "onnx/model_qint8.onnx": "int8"}
    assert sorted(os.listdir(out / "onnx")) == ["model.onnx", "model_qint8.onnx"]
    float_bytes, int8_bytes = (
        (out / "onnx" / "model.onnx").read_bytes(),
        (out / "onnx" / "model_qint8.onnx").read_bytes(),
    )
    assert float_bytes != int8_bytes
    record = json.loads((out / "cosent_tf_export.json").read_text(encoding="utf-8"))
    assert {path: entry["precision"] for path, entry in record["onnx"].items()} == folders["int8"].files
    # int8 weights: the matmuls are integer ones
    session = onnxruntime.InferenceSession(str(out / "onnx" / "model_qint8.onnx"), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["last_hidden_state", "sentence_embedding"]
    import onnx

    operations = {node.op_type for node in onnx.load(str(out / "onnx" / "model_qint8.onnx")).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= operations
    assert "MatMulInteger" not in {node.op_type for node in onnx.load(str(out / "onnx" / "model.onnx")).graph.node}


def test_the_export_says_nothing_of_its_own_probe_texts_and_no_line_twice(folders):
    # the probe texts (one of them past any maxlen) are checked twice, against the engine and int8 against
    # float32: neither is the user's data
    said = folders["said"]
    assert not [line for line in said if "probe" in line]
    assert len(said) == len(set(said)), said


def test_int8_vectors_are_close_to_float32_and_the_int8_encoder_runs_them(folders):
    out = str(folders["root"] / "int8")
    _, texts_a, texts_b, _ = folders["check"]
    texts = texts_a + texts_b + ["", "为什么我的花呗不能用了" * 5]
    spec, model, tokenizer = load_onnx_dir(out, "int8")
    assert model.path.endswith("model_qint8.onnx")
    rows = [tokenizer.encode(text) for text in texts]
    float32, int8 = session_vectors(out, "model.onnx", rows), session_vectors(out, "model_qint8.onnx", rows)
    cosines = np.sum(float32 * int8, axis=1)
    assert np.all(cosines > 0.99), cosines.min()
    assert not np.allclose(float32, int8, atol=1e-4)  # it is another computation
    # one text a batch: the batches the encoder runs are the ones run here
    alone = np.concatenate([session_vectors(out, "model_qint8.onnx", [row]) for row in rows])
    encoded = SentenceEncoder.load(out, runtime="onnx", precision="int8").encode(texts, batch_size=1)
    np.testing.assert_allclose(encoded, alone, atol=1e-6, rtol=0)
    assert np.all(np.sum(alone * int8, axis=1) > 0.99)


def test_the_check_reports_figures_computed_from_onnxruntimes_outputs(folders):
    out = str(folders["root"] / "int8")
    path, texts_a, texts_b, labels = folders["check"]
    _, _, tokenizer = load_onnx_dir(out)
    check = folders["int8"].check
    assert check["file"] == os.path.abspath(path) and check["pairs"] == CHECK_PAIRS
    for precision, file_name in (("float32", "model.onnx"), ("int8", "model_qint8.onnx")):
        rows = [tokenizer.encode(text) for text in texts_a + texts_b]
        vectors = session_vectors(out, file_name, rows)
        scores = np.sum(vectors[:CHECK_PAIRS] * vectors[CHECK_PAIRS:], axis=1)
        assert len(np.unique(np.round(scores, 5))) == CHECK_PAIRS  # no near ties that rounding could reorder
        assert check[precision]["spearman"] == pytest.approx(100 * spearmanr(scores, labels)[0], abs=1e-6)
        assert check[precision]["accuracy"] == pytest.approx(100 * best_accuracy(scores, labels), abs=1e-9)
    loss = check["int8_loss"]
    assert loss["spearman"] == pytest.approx(check["float32"]["spearman"] - check["int8"]["spearman"], abs=1e-12)
    assert loss["accuracy"] == pytest.approx(check["float32"]["accuracy"] - check["int8"]["accuracy"], abs=1e-12)
    # the record holds the same figures, and the model card says them
    record = json.loads((folders["root"] / "int8" / "cosent_tf_export.json").read_text(encoding="utf-8"))
    assert record["check"] == json.loads(json.dumps(check))
    card = (folders["root"] / "int8" / "README.md").read_text(encoding="utf-8")
    assert f"- int8: spearman {check['int8']['spearman']:.2f}, accuracy {check['int8']['accuracy']:.2f}" in card


def test_the_check_warns_when_int8_loses_more_than_its_threshold(folders):
    check = folders["int8"].check
    assert check["warning"] is True  # the threshold was lowered below any loss
    (warning,) = folders["warnings"]
    assert "the int8 file loses" in warning and "serve the float32 file" in warning
    assert f"{check['int8_loss']['spearman']:.2f} points of spearman" in warning
    # at the real threshold (0.5 points) the same figures warn only if they lose that much
    path = folders["check"][0]
    out = str(folders["root"] / "int8")
    spec, _, tokenizer = load_onnx_dir(out)
    from cosent_tf.data.files import PairFileFormat, read_pair_file

    again = quality_check(out, folders["int8"].files, spec, tokenizer, read_pair_file(path, PairFileFormat()), path)
    assert again["int8_loss"] == pytest.approx(check["int8_loss"], abs=1e-9)
    assert again["warning"] is (max(check["int8_loss"].values()) > 0.5)


def test_a_check_file_without_labels_is_refused_before_the_conversion(folders, tmp_path):
    """read_pair_file wants a label on every line: the check file's error is its."""
    (tmp_path / "texts.tsv").write_text("今天\t明天\n天气\t下雨\n", encoding="utf-8")
    with pytest.raises(DataError, match="texts.tsv: no usable pairs in this file: .* is the label column missing\\?"):
        export_onnx(
            str(folders["root"] / "feature"),
            str(tmp_path / "out"),
            quantize="int8",
            check_file=str(tmp_path / "texts.tsv"),
        )
    untouched(tmp_path, "texts.tsv")
    with pytest.raises(ConfigError, match="unknown quantisation 'int4'; choose int8"):
        export_onnx(str(folders["root"] / "feature"), str(tmp_path / "out"), quantize="int4")
    untouched(tmp_path, "texts.tsv")


# ---- loading an export


def test_a_file_from_another_model_is_refused_by_its_digest(folders, tmp_path):
    copy = tmp_path / "export"
    shutil.copytree(folders["root"] / "int8", copy)
    shutil.copy(folders["plain"] / "onnx" / "model.onnx", copy / "onnx" / "model.onnx")
    message = (
        "model.onnx: is not the file this export wrote \\(its sha256 is not the one cosent_tf_export.json records\\)"
    )
    with pytest.raises(ConfigError, match=message):
        SentenceEncoder.load(str(copy), runtime="onnx")
    SentenceEncoder.load(str(copy), runtime="onnx", precision="int8")  # its own int8 file still loads
    (copy / "onnx" / "model_qint8.onnx").write_bytes(b"")
    with pytest.raises(ConfigError, match="model_qint8.onnx: is not the file this export wrote"):
        load_onnx_dir(str(copy), "int8")
    (copy / "onnx" / "model_qint8.onnx").unlink()
    with pytest.raises(ConfigError, match="model_qint8.onnx: is missing; export the model again"):
        load_onnx_dir(str(copy), "int8")


def test_precisions_an_export_or_a_runtime_lacks_are_refused(folders, tmp_path):
    plain = str(folders["plain"])
    assert folders["plain_exported"].files == {"onnx/model.onnx": "float32"}
    with pytest.raises(
        ConfigError,
        match=f"{folders['plain'].name}: this export has no int8 file \\(onnx/model_qint8.onnx\\); export it again "
        "with --quantize int8",
    ):
        SentenceEncoder.load(plain, runtime="onnx", precision="int8")
    with pytest.raises(ConfigError, match="--runtime onnx runs precision float32 or int8, not 'bf16'"):
        SentenceEncoder.load(plain, runtime="onnx", precision="bf16")
    with pytest.raises(
        ConfigError,
        match="the tensorflow runtime computes in float32, bf16, fp16, not 'int8' \\(int8 is for --runtime onnx",
    ):
        SentenceEncoder.load(str(folders["root"] / "feature"), precision="int8")
    with pytest.raises(ConfigError, match="unknown runtime 'torch'; choose tensorflow or onnx"):
        SentenceEncoder.load(plain, runtime="torch")
    with pytest.raises(
        ConfigError, match=f"{folders['plain'].name}: holds a model of kind 'feature'; load it with SentenceEncoder"
    ):
        PairScorer.load(plain, runtime="onnx")


def test_the_onnx_runtime_refuses_folders_without_an_onnx_export(folders, tmp_path):
    with pytest.raises(
        ConfigError,
        match="feature: --runtime onnx needs an ONNX export of a model, and this folder has no cosent_tf_export.json",
    ):
        SentenceEncoder.load(str(folders["root"] / "feature"), runtime="onnx")
    export_hf(str(folders["root"] / "feature"), str(tmp_path / "hf"))
    with pytest.raises(
        ConfigError, match="cosent_tf_export.json: this export \\(sentence-transformers\\) holds no ONNX files"
    ):
        SentenceEncoder.load(str(tmp_path / "hf"), runtime="onnx")


def test_a_missing_onnxruntime_is_said_with_the_install_command(folders, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(
        ConfigError,
        match='need onnxruntime, which is not installed .*install it with: pip install "cosent-tf\\[onnx\\]"',
    ):
        SentenceEncoder.load(str(folders["plain"]), runtime="onnx")
    with pytest.raises(ConfigError, match='pip install "cosent-tf\\[onnx\\]"'):
        export_onnx(str(folders["root"] / "feature"), str(tmp_path / "out"))
    monkeypatch.setitem(sys.modules, "onnxruntime", onnxruntime)
    monkeypatch.setitem(sys.modules, "tf2onnx", None)
    with pytest.raises(ConfigError, match='need tf2onnx, which is not installed .*pip install "cosent-tf\\[onnx\\]"'):
        export_onnx(str(folders["root"] / "feature"), str(tmp_path / "out"))
    untouched(tmp_path)


# ---- the output folder


def test_an_output_folder_with_other_files_is_refused(folders, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine", encoding="utf-8")
    for overwrite in (False, True):
        with pytest.raises(
            ConfigError,
            match="out: already exists and is not an ONNX export \\(it holds notes.txt\\); nothing was written",
        ):
            export_onnx(str(folders["root"] / "feature"), str(tmp_path / "out"), overwrite=overwrite)
        untouched(tmp_path, "out")
        assert os.listdir(tmp_path / "out") == ["notes.txt"]


def test_an_earlier_export_is_replaced_only_with_overwrite(folders, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(folders["plain"], out)  # an ONNX export of another model
    with pytest.raises(
        ConfigError, match="out: already holds an ONNX export; nothing was written: replace it with --overwrite"
    ):
        export_onnx(str(folders["root"] / "feature"), str(out))
    untouched(tmp_path, "out")
    export_onnx(str(folders["root"] / "feature"), str(out), overwrite=True, quantize="int8")
    untouched(tmp_path, "out")
    record = json.loads((out / "cosent_tf_export.json").read_text(encoding="utf-8"))
    assert record["model_dir"] == str(folders["root"] / "feature") and len(record["onnx"]) == 2
    # the zoo's export carries its model's match decision; the replacement's model has none, and
    # nothing of the replaced export lingers
    assert (folders["plain"] / "decision.json").is_file() and not (out / "decision.json").exists()
    np.testing.assert_allclose(
        SentenceEncoder.load(str(out), runtime="onnx").encode(["花呗如何还钱"]),
        SentenceEncoder.load(str(folders["root"] / "feature")).encode(["花呗如何还钱"]),
        atol=1e-5,
    )


def test_a_hugging_face_export_may_be_replaced_and_a_savedmodel_never(folders, tmp_path):
    """An ONNX export is a Hugging Face export with onnx/ in it, so it replaces one (with overwrite);
    a SavedModel export holds files an ONNX export never writes, so it stays."""
    feature = str(folders["root"] / "feature")
    export_hf(feature, str(tmp_path / "hf"))
    with pytest.raises(ConfigError, match="hf: already holds an ONNX export; nothing was written"):
        export_onnx(feature, str(tmp_path / "hf"))
    # with overwrite: the module's int8 export was written over a Hugging Face export (folders)
    assert folders["int8"].layout == "sentence-transformers"
    assert os.path.isfile(folders["root"] / "int8" / "onnx" / "model.onnx")
    untouched(folders["root"], "config.json", "feature", "check.tsv", "int8")

    export_saved_model(feature, str(tmp_path / "savedmodel"), inputs="ids")
    before = sorted(os.listdir(tmp_path / "savedmodel"))
    with pytest.raises(ConfigError, match="savedmodel: already exists and is not an ONNX export \\(it holds assets"):
        export_onnx(feature, str(tmp_path / "savedmodel"), overwrite=True)
    assert sorted(os.listdir(tmp_path / "savedmodel")) == before
    untouched(tmp_path, "hf", "savedmodel")


@pytest.mark.heavy
def test_the_optimizers_rewrite_the_graph_itself_and_one_that_raises_is_skipped(folders, tmp_path, monkeypatch):
    """tf2onnx's graph optimizers work on the graph, not each on a copy of it (the copies took most
    of their time); where one raises, the conversion is done again tf2onnx's default way, which
    skips that optimizer, and the export still computes what the engine computes (its check)."""
    import tf2onnx
    from tf2onnx import optimizer

    copies, conversions = [], []

    def counted_copy(thing):
        if isinstance(thing, tf2onnx.graph.Graph):
            copies.append(1)
        return copy.deepcopy(thing)

    monkeypatch.setattr(optimizer, "copy", SimpleNamespace(deepcopy=counted_copy))
    from_keras = tf2onnx.convert.from_keras
    monkeypatch.setattr(tf2onnx.convert, "from_keras", lambda *a, **k: conversions.append(1) or from_keras(*a, **k))
    feature = str(folders["root"] / "feature")
    export_onnx(feature, str(tmp_path / "plain"))
    assert (len(conversions), len(copies)) == (1, 0)

    def raises(self, graph, iteration):
        raise RuntimeError("a planted optimizer failure")

    monkeypatch.setattr(optimizer.IdentityOptimizer, "optimize", raises)
    export_onnx(feature, str(tmp_path / "skipped"))
    assert len(conversions) == 3 and len(copies) > 0
    assert "TF2ONNX_CATCH_ERRORS" not in os.environ
    untouched(tmp_path, "plain", "skipped")


# ---- conversions that fail


def test_an_operation_the_converter_lacks_is_named_and_nothing_written(folders, tmp_path, monkeypatch):
    handlers = onnx_export._converter_handlers()
    monkeypatch.setattr(
        onnx_export, "_converter_handlers", lambda: {k: v for k, v in handlers.items() if k != "BroadcastArgs"}
    )
    with pytest.raises(
        ConfigError,
        match="feature: tf2onnx cannot express this model in ONNX: it has no conversion for BroadcastArgs; "
        "export it as a SavedModel",
    ):
        export_onnx(str(folders["root"] / "feature"), str(tmp_path / "out"))
    untouched(tmp_path)


def test_a_conversion_that_differs_from_the_engine_is_refused_and_nothing_written(folders, tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_export, "PARITY_TOLERANCE", -1.0)
    message = (
        "feature: the converted ONNX graph's outputs differ from the model's by .* on probe texts "
        "\\(at most -1 is allowed\\); nothing was written"
    )
    with pytest.raises(ConfigError, match=message):
        export_onnx(str(folders["root"] / "feature"), str(tmp_path / "out"))
    untouched(tmp_path)


@pytest.mark.slow
def test_without_the_select_fix_the_vectors_are_nan_and_the_export_is_refused(folders, tmp_path, monkeypatch):
    """tf2onnx's own SelectV2 multiplies bert4keras's -inf mask by 0: the probe check sees NaN."""
    handlers = onnx_export._converter_handlers()
    monkeypatch.setattr(
        onnx_export, "_converter_handlers", lambda: {k: v for k, v in handlers.items() if k != "SelectV2"}
    )
    with pytest.raises(ConfigError, match="outputs differ from the model's by inf on probe texts"):
        export_onnx(str(folders["root"] / "feature"), str(tmp_path / "out"))
    untouched(tmp_path)
