"""Exports at a width (``dim``, ``cosent-tf export --dim D``): the SavedModel and the ONNX graph serve
a feature model's vectors cut to their first D dimensions and renormalised, as
``SentenceEncoder.encode(texts, dim=D)`` gives them; the Hugging Face folder cuts them with a Dense
slice; none carries a match decision; a width above the model's is refused with nothing written; a
Matryoshka-trained model is cut at its trained widths without a warning.

What sentence-transformers itself makes of these folders is tests/export/test_export_dim_sentence_transformers.py.
"""

import dataclasses
import json
import logging
import os
import shutil

import numpy as np
import pytest

from cosent_tf import ConfigError, ModelSpec, SentenceEncoder, build_encoder, save_model_dir
from cosent_tf.backend import keras, tf
from cosent_tf.calibration import DECISION_FILE, MatchDecision, write_decision
from cosent_tf.export.graph_tokenization import import_tensorflow_text
from cosent_tf.export.huggingface import export_hf
from cosent_tf.export.onnx_export import OnnxExport, export_onnx
from cosent_tf.export.savedmodel import export_saved_model
from cosent_tf.exports import EXPORT_RECORD, HF_FOLDER
from cosent_tf.huggingface.folders import SAFETENSORS_FILE
from tests.export.conftest import EXPORTED, MADE
from tests.export.test_savedmodel import padded_batch
from tests.helpers import distinct_texts, made_vocab, make_model_dir, warnings_logged, write_config
from tests.zoo import built_once

WIDTH = 16  # write_config's hidden size: the tiny models' full width
DIM = 6
TOLERANCE = 1e-5
# Texts of many lengths (batches are padded), an empty one and one past the models' maxlen (32).
TEXTS = distinct_texts(5, 12, shortest=1, longest=20) + ["", "我们是中国人" * 8, "Café au LAIT 123"]
# What the tiny models' dense matrices are scaled by, so that their vectors differ between texts by
# far more than the tolerance (at BERT's initial 0.02 a random model's [CLS] vectors hardly differ).
LIVELY = 8.0


def cut(vectors, dim):
    """The first ``dim`` dimensions of each row at unit length, computed here in float64."""
    kept = np.asarray(vectors, dtype=np.float64)[:, :dim]
    return kept / np.linalg.norm(kept, axis=1, keepdims=True)


def lively_model_dir(directory, config, pooling="cls", matryoshka_dims=None):
    """A feature model folder of a random tiny model whose dense matrices are :data:`LIVELY` times
    the initial ones, recording ``matryoshka_dims`` as training with ``--matryoshka-dims`` does."""
    model = build_encoder(config, pooling=pooling)
    for weight in model.weights:
        if len(weight.shape) == 2 and not weight.name.startswith("Embedding"):
            weight.assign(weight * LIVELY)
    spec = ModelSpec("feature", pooling=pooling, maxlen=32, matryoshka_dims=matryoshka_dims)
    save_model_dir(directory, model, spec, config, made_vocab())
    return str(directory)


A_DECISION = MatchDecision({"file": "pairs.tsv"}, thresholds={"accuracy": 0.5, "f1": 0.4})


def width_models(tmp_path_factory):
    """pooling -> a lively model folder (cls and mean pooling); ``matryoshka``: a cls model folder
    that records the widths 16, 8 and 6; ``decided``: a copy of the cls folder with a match decision
    (the same weights). Made once per test run in the zoo (tests/zoo.py), as
    tests/export/test_export_dim_sentence_transformers.py reads them too."""

    def build(root):
        config = write_config(root / "config.json")
        keras.utils.set_random_seed(39)  # the same weights whichever module and worker builds it
        for pooling in ("cls", "last-avg"):
            lively_model_dir(root / pooling, config, pooling)
        lively_model_dir(root / "matryoshka", config, matryoshka_dims=[WIDTH, 8, DIM])
        shutil.copytree(root / "cls", root / "decided")
        write_decision(root / "decided", A_DECISION)

    root = built_once(tmp_path_factory, "width-models", build)
    return {name: str(root / name) for name in ("cls", "last-avg", "matryoshka", "decided")}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return width_models(tmp_path_factory)


@pytest.mark.parametrize("pooling", ["cls", "last-avg"])
def test_the_models_cut_vectors_differ_between_texts_by_far_more_than_the_tolerance(pooling, models):
    vectors = SentenceEncoder.load(models[pooling]).encode(TEXTS, dim=DIM)
    assert np.std(vectors, axis=0).max() > 100 * TOLERANCE


def export_keeping_warnings(model_dir, out, **options):
    """(what ``export_saved_model`` returned, the cosent_tf warnings it logged)."""
    with warnings_logged("cosent_tf") as messages:
        return export_saved_model(model_dir, str(out), **options), messages


def width_saved_model(tmp_path_factory, name):
    """(the model folder ``name`` of :func:`width_models`, its string SavedModel at :data:`DIM`, what
    ``export_saved_model`` returned, the warnings it logged), exported once per test run in the zoo:
    tests/export/test_export_dim_sentence_transformers.py serves it too."""
    model_dir = width_models(tmp_path_factory)[name]

    def build(folder):
        signatures, warnings = export_keeping_warnings(model_dir, folder / EXPORTED, dim=DIM)
        (folder / MADE).write_text(json.dumps({"signatures": signatures, "warnings": warnings}), encoding="utf-8")

    folder = built_once(tmp_path_factory, f"width-savedmodel-{name}", build)
    made = json.loads((folder / MADE).read_text(encoding="utf-8"))
    return model_dir, folder / EXPORTED, made["signatures"], made["warnings"]


@pytest.fixture(scope="module")
def width_exports(tmp_path_factory):
    """pooling -> :func:`width_saved_model`: the cls model's, the export of its copy with a match
    decision, which the export at a width drops: the weights are the cls model's, so one export
    serves both the serving and the dropped-decision tests. The cls model's only (an export is
    seconds): the served graph cuts the model's output vectors after the pooling, the same ops
    whatever the pooling; mean pooling's string SavedModel is tests/export/test_savedmodel.py's
    (``embed-last-avg``, and the zoo's feature export in its ids test)."""
    return {"cls": width_saved_model(tmp_path_factory, "decided")}


def width_onnx(tmp_path_factory, pooling):
    """(the model folder ``pooling`` of :func:`width_models`, its ONNX export at :data:`DIM`, what
    ``export_onnx`` returned), converted once per test run in the zoo:
    tests/export/test_export_dim_sentence_transformers.py gives the last-avg one to sentence-transformers."""
    model_dir = width_models(tmp_path_factory)[pooling]

    def build(folder):
        exported = export_onnx(model_dir, str(folder / EXPORTED), dim=DIM)
        (folder / MADE).write_text(json.dumps(dataclasses.asdict(exported)), encoding="utf-8")

    folder = built_once(tmp_path_factory, f"width-onnx-{pooling}", build)
    return model_dir, folder / EXPORTED, OnnxExport(**json.loads((folder / MADE).read_text(encoding="utf-8")))


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["cls"])  # the width_exports fixture says why cls only
def test_a_saved_model_at_a_width_serves_the_cut_vectors(pooling, width_exports):
    model_dir, out, signatures, _ = width_exports[pooling]
    assert signatures == ["encode_ids", "serving_default"]
    encoder = SentenceEncoder.load(model_dir)
    expected = encoder.encode(TEXTS, dim=DIM)
    np.testing.assert_allclose(expected, cut(encoder.encode(TEXTS), DIM), atol=TOLERANCE, rtol=0)
    import_tensorflow_text()  # registers the graph's WordPiece op, which loading needs
    signatures = tf.saved_model.load(str(out)).signatures
    served = signatures["serving_default"](sentences=tf.constant(TEXTS))["embeddings"].numpy()
    padded = padded_batch(encoder.tokenizer.encode_all(TEXTS))  # one batch, padded to its longest row
    by_ids = signatures["encode_ids"](token_ids=tf.constant(padded), segment_ids=tf.zeros_like(padded))
    assert served.shape == by_ids["embeddings"].shape == (len(TEXTS), DIM)
    print(f"{pooling}: SavedModel at {DIM} against SentenceEncoder.encode(dim): {np.abs(served - expected).max():.3g}")
    np.testing.assert_allclose(served, expected, atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(by_ids["embeddings"].numpy(), expected, atol=TOLERANCE, rtol=0)
    info = json.loads((out / "assets.extra" / "cosent_model.json").read_text(encoding="utf-8"))
    assert info["dim"] == DIM and info["threshold"] is None
    assert json.loads((out / EXPORT_RECORD).read_text(encoding="utf-8"))["dim"] == DIM


@pytest.mark.slow
def test_an_ids_saved_model_at_a_width_serves_the_cut_vectors(models, tmp_path):
    out = tmp_path / "ids"
    assert export_saved_model(models["cls"], str(out), inputs="ids", dim=DIM) == ["encode_ids", "serving_default"]
    encoder = SentenceEncoder.load(models["cls"])
    padded = padded_batch(encoder.tokenizer.encode_all(TEXTS))
    served = tf.saved_model.load(str(out)).signatures["serving_default"](
        token_ids=tf.constant(padded), segment_ids=tf.zeros_like(padded)
    )["embeddings"]
    np.testing.assert_allclose(served.numpy(), encoder.encode(TEXTS, dim=DIM), atol=TOLERANCE, rtol=0)


def test_a_hugging_face_export_at_a_width_cuts_with_an_identity_slice(models, tmp_path):
    out = tmp_path / "hf"
    assert export_hf(models["last-avg"], str(out), dim=DIM) == "sentence-transformers"
    modules = json.loads((out / "modules.json").read_text(encoding="utf-8"))
    assert [(m["path"], m["type"].rsplit(".", 1)[-1]) for m in modules] == [
        ("", "Transformer"),
        ("1_Pooling", "Pooling"),
        ("2_Dense", "Dense"),
        ("3_Normalize", "Normalize"),
    ]
    config = json.loads((out / "2_Dense" / "config.json").read_text(encoding="utf-8"))
    assert config == {
        "in_features": WIDTH,
        "out_features": DIM,
        "bias": True,
        "activation_function": "torch.nn.modules.linear.Identity",
    }
    from safetensors.numpy import load_file

    weights = load_file(str(out / "2_Dense" / SAFETENSORS_FILE))
    assert sorted(weights) == ["linear.bias", "linear.weight"]
    np.testing.assert_array_equal(weights["linear.weight"], np.eye(WIDTH, dtype=np.float32)[:DIM])
    np.testing.assert_array_equal(weights["linear.bias"], np.zeros(DIM, np.float32))
    assert json.loads((out / EXPORT_RECORD).read_text(encoding="utf-8"))["dim"] == DIM
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f"The vectors are the first {DIM} of the model's {WIDTH} dimensions" in card
    assert f"truncate_dim={DIM}" in card and "No match decision comes with this export" in card
    # cosent-tf reads the model folder and cuts the vectors itself; the cut folder is refused, saying so
    with pytest.raises(ConfigError, match=r"module '2' \(sentence_transformers.models.Dense\) is not supported.*--dim"):
        SentenceEncoder.load(str(out))


@pytest.mark.parametrize("export", ["savedmodel", "hf", "onnx"])
@pytest.mark.parametrize("dim, message", [(WIDTH + 1, "ask for at most 16"), (0, "a width is a positive integer")])
def test_a_width_the_model_has_not_is_refused_and_nothing_is_written(export, dim, message, models, tmp_path):
    out = tmp_path / "out"
    write = {"savedmodel": export_saved_model, "hf": export_hf, "onnx": export_onnx}[export]
    with pytest.raises(ConfigError, match=f"--dim {dim}: .*{message}"):
        write(models["cls"], str(out), dim=dim)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("export", [export_saved_model, export_hf])
def test_an_interaction_model_has_no_width(export, interaction_model_folder, tmp_path):
    # the zoo's interaction model (tests/export/conftest.py): the export refuses it before writing anything
    with pytest.raises(ConfigError, match="--dim 8 cuts a feature model's vectors, and this interaction model"):
        export(str(interaction_model_folder), str(tmp_path / "out"), dim=8)
    assert not (tmp_path / "out").exists()


def dim_warnings(caplog):
    return [record.getMessage() for record in caplog.records if record.getMessage().startswith("--dim")]


def test_a_matryoshka_model_is_cut_at_its_trained_widths_without_a_warning(models, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="cosent_tf"):
        export_hf(models["matryoshka"], str(tmp_path / "trained"), dim=8)
    assert dim_warnings(caplog) == []
    card = (tmp_path / "trained" / "README.md").read_text(encoding="utf-8")
    assert "at the widths 16, 8, 6 (`--matryoshka-dims`): 8 is one of them." in card
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cosent_tf"):
        export_hf(models["matryoshka"], str(tmp_path / "other"), dim=7)
    (warning,) = dim_warnings(caplog)
    assert "was trained for the widths 16, 8, 6" in warning
    card = (tmp_path / "other" / "README.md").read_text(encoding="utf-8")
    assert "7 is not one of them" in card
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cosent_tf"):
        export_hf(models["cls"], str(tmp_path / "plain"), dim=8)
    (warning,) = dim_warnings(caplog)
    assert "was trained for its full width 16 only" in warning


def test_a_matryoshka_models_full_width_card_names_its_widths(models, tmp_path):
    export_hf(models["matryoshka"], str(tmp_path / "full"))
    card = (tmp_path / "full" / "README.md").read_text(encoding="utf-8")
    assert "trained with Matryoshka losses at the widths 16, 8, 6" in card and "truncate_dim=6" in card
    export_hf(models["cls"], str(tmp_path / "plain"))
    assert "## Width" not in (tmp_path / "plain" / "README.md").read_text(encoding="utf-8")


@pytest.fixture
def decided_model(models):
    """The zoo's copy of the cls model folder with a match decision (read-only: exports only read it)."""
    return models["decided"]


def test_a_match_decision_is_not_carried_in_a_hugging_face_export_at_a_width(decided_model, tmp_path, caplog):
    export_hf(decided_model, str(tmp_path / "hf-full"))
    assert (tmp_path / "hf-full" / DECISION_FILE).is_file()  # the decision is one an export carries
    with caplog.at_level(logging.WARNING, logger="cosent_tf"):
        export_hf(decided_model, str(tmp_path / "hf"), dim=DIM)
    said = " ".join(record.getMessage() for record in caplog.records)
    assert f"does not hold for vectors cut to {DIM} dimensions, so the export carries none" in said
    assert not (tmp_path / "hf" / DECISION_FILE).exists()
    card = (tmp_path / "hf" / "README.md").read_text(encoding="utf-8")
    assert "## Match decision" not in card and "do not hold for vectors cut to" in card


@pytest.mark.slow
def test_a_saved_model_at_a_width_has_no_decide_signatures(width_exports):
    model_dir, out, signatures, warnings = width_exports["cls"]
    assert os.path.isfile(os.path.join(model_dir, DECISION_FILE))
    assert signatures == ["encode_ids", "serving_default"]  # at full width: decide and decide_ids besides
    assert not (out / "assets.extra" / DECISION_FILE).exists()
    said = " ".join(warnings)
    assert f"does not hold for vectors cut to {DIM} dimensions, so the export carries none" in said


@pytest.mark.heavy
def test_the_full_width_is_the_plain_export(models, tmp_path):
    """``dim`` None and ``dim`` the model's width write the same folder: no Dense, the record's dim null."""
    for name, dim in (("none", None), ("width", WIDTH)):
        export_hf(models["cls"], str(tmp_path / name), dim=dim)
    listing = {name: sorted(os.listdir(tmp_path / name)) for name in ("none", "width")}
    assert listing["none"] == listing["width"] and "2_Normalize" in listing["none"] and "2_Dense" not in listing["none"]
    for name in ("none", "width"):
        assert json.loads((tmp_path / name / EXPORT_RECORD).read_text(encoding="utf-8"))["dim"] is None
        assert (tmp_path / name / "modules.json").read_bytes() == (tmp_path / "none" / "modules.json").read_bytes()
    texts = TEXTS[:4]
    np.testing.assert_allclose(
        SentenceEncoder.load(str(tmp_path / "width")).encode(texts),
        SentenceEncoder.load(models["cls"]).encode(texts),
        atol=TOLERANCE,
    )


def test_an_export_at_a_width_and_one_at_full_width_replace_each_other(models, tmp_path):
    """The Hugging Face folder kind knows both layouts' module folders, so overwrite replaces either
    with the other, and refuses without it."""
    out = tmp_path / "out"
    export_hf(models["cls"], str(out), dim=DIM)
    assert HF_FOLDER.holds_only_its_own(os.listdir(out))
    with pytest.raises(ConfigError, match="already holds a Hugging Face export; nothing was written"):
        export_hf(models["cls"], str(out))
    export_hf(models["cls"], str(out), overwrite=True)
    assert "2_Dense" not in os.listdir(out) and "2_Normalize" in os.listdir(out)
    export_hf(models["cls"], str(out), overwrite=True, dim=DIM)
    assert {"2_Dense", "3_Normalize"} <= set(os.listdir(out)) and "2_Normalize" not in os.listdir(out)


# The ONNX export at a width is converted for the mean-pooled model only (a conversion is seconds):
# the graph cuts and renormalises ``sentence_embedding`` after the pooling, the same Lambda whatever
# the pooling (onnx_export._output_function); each pooling's graph at full width is
# tests/inference/test_onnx_model.py's parity tests (cls and last-avg in this layout), and the
# Hugging Face folder of a [CLS] model at a width is the SavedModel's and sentence-transformers' tests
# here and in tests/export/test_export_dim_sentence_transformers.py.
@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["last-avg"])
def test_an_onnx_export_at_a_width_gives_the_cut_vectors(pooling, tmp_path_factory):
    import onnxruntime

    model_dir, out, exported = width_onnx(tmp_path_factory, pooling)
    assert exported.layout == "sentence-transformers" and exported.dim == DIM
    assert {"2_Dense", "3_Normalize", "onnx"} <= set(os.listdir(out))
    record = json.loads((out / EXPORT_RECORD).read_text(encoding="utf-8"))
    assert record["dim"] == DIM
    encoder = SentenceEncoder.load(model_dir)
    expected = encoder.encode(TEXTS, dim=DIM)
    padded = padded_batch(encoder.tokenizer.encode_all(TEXTS)).astype(np.int64)
    session = onnxruntime.InferenceSession(str(out / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    feed = {"input_ids": padded, "attention_mask": (padded != 0).astype(np.int64), "token_type_ids": 0 * padded}
    hidden, vectors = session.run(["last_hidden_state", "sentence_embedding"], feed)
    assert vectors.shape == (len(TEXTS), DIM) and hidden.shape[-1] == WIDTH
    print(f"{pooling}: ONNX at {DIM} against SentenceEncoder.encode(dim): {np.abs(vectors - expected).max():.3g}")
    np.testing.assert_allclose(vectors, expected, atol=TOLERANCE, rtol=0)  # unit length: cut and renormalised
    np.testing.assert_allclose(
        SentenceEncoder.load(str(out), runtime="onnx").encode(TEXTS), expected, atol=TOLERANCE, rtol=0
    )
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f"`sentence_embedding` [batch, {DIM}], the sentence vector's first {DIM} dimensions" in card


@pytest.mark.slow
def test_an_onnx_export_without_a_hugging_face_folder_cuts_its_graph_alone(tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config, pooling="first-last-avg")
    exported = export_onnx(str(tmp_path / "model"), str(tmp_path / "onnx"), dim=DIM)
    assert exported.layout == "onnx" and "2_Dense" not in os.listdir(tmp_path / "onnx")
    np.testing.assert_allclose(
        SentenceEncoder.load(str(tmp_path / "onnx"), runtime="onnx").encode(TEXTS),
        SentenceEncoder.load(str(tmp_path / "model")).encode(TEXTS, dim=DIM),
        atol=TOLERANCE,
        rtol=0,
    )
