"""Every export of a model folder from a Keras 3 process, by the one export module per format
(:mod:`cosent_tf.export`) on keras-hub models: the SavedModel on raw strings and the ONNX file
(TensorFlow backend) of a feature model and of an interaction model, each against the Keras 3
model's own outputs (one text or pair at a time, unpadded) to 1e-5, with the match decision the
folder ships; the same files as the Keras 2 export of the same folder (a Keras 2 subprocess); the
sentence-transformers folder on either backend; JAX's refusal of the TensorFlow graphs."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cosent_tf.calibration import MatchDecision
from cosent_tf.errors import ConfigError
from cosent_tf.keras3.export import export_saved_model, export_sentence_transformers
from cosent_tf.models.kinds import head_layer_name
from cosent_tf.models.spec import ModelSpec
from tests.helpers import reference_python  # Keras-free at import, as support.py is
from tests.keras3.support import ROOT, SHARED_VOCAB, run_keras2, tiny_bert_config
from tests.reference_cache import cached, contents, interpreter

TINY = tiny_bert_config(max_position_embeddings=32, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
TOLERANCE = 1e-5
# Chinese with full-width punctuation, Latin letters to lower-case, an empty text and one longer than maxlen.
TEXTS = ["花呗如何还钱？", "我想，还款。", "Hello World 你好", "", "这是一个很长的句子" * 4, "ÀÉ accents"]
SECONDS = ["借呗", "花呗怎么还款呢", "", "好", "为什么" * 9, "手机号码是多少"]
# The model folders: a sentence encoder (mean pooling: the sentence-transformers layout) and a
# cross-encoder whose softmax head reads BERT's pooler over segmented pairs (the sequence-classification
# layout), each shipping a match decision.
SPECS = {
    "feature": ModelSpec("feature", pooling="last-avg", maxlen=16),
    "interaction": ModelSpec(
        "interaction", pooling=None, head="softmax", head_input="pooler", pair_segments=True, maxlen=24
    ),
}


def decision_for(name, scores):
    """A decision whose accuracy threshold lies amid the model's scores, so that it matches some pairs."""
    middle = float(np.median(scores))
    return MatchDecision(
        {"file": "valid.tsv", "pairs": len(scores), "labels": "binary"},
        thresholds={"accuracy": middle, "f1": middle},
        score="cosine" if name == "feature" else "head",
    )


def engine_scores(model, tokenizer, spec, firsts, seconds):
    """The Keras 3 model's score of each pair, one pair at a time (unpadded): the cosine of the two
    L2-normalised vectors, or the head's last output (the softmax's label 1)."""
    import keras

    def run(ids, segments):
        return np.asarray(keras.ops.convert_to_numpy(model([ids[None], segments[None]], training=False)))[0]

    scores = []
    for first, second in zip(firsts, seconds):
        if spec.kind == "feature":
            a, b = (np.asarray(tokenizer.encode_all([text])[0], np.int32) for text in (first, second))
            u, v = run(a, np.zeros_like(a)), run(b, np.zeros_like(b))
            scores.append(float(np.dot(u / np.linalg.norm(u), v / np.linalg.norm(v))))
        else:
            ids = np.asarray(tokenizer.encode_pairs([first], [second])[0], np.int32)
            after_sep = np.cumsum(ids == tokenizer.sep_id) - (ids == tokenizer.sep_id)
            scores.append(float(run(ids, (after_sep >= 1).astype(np.int32))[-1]))
    return np.array(scores)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """{name: model folder} of :data:`SPECS`, written by Keras 3 with random weights (seeded: the same
    folders each run, so that the Keras 2 reference's cache hits) and a decision."""
    import keras

    from cosent_tf.export.engine_model import load_engine_model
    from cosent_tf.keras3.models import build_from_spec
    from cosent_tf.models.adapter import model_arrays
    from cosent_tf.models.sources import open_source
    from cosent_tf.models.spec import write_model_folder

    root = tmp_path_factory.mktemp("keras3-export")
    (root / "config.json").write_text(json.dumps(TINY), encoding="utf-8")
    source = open_source(None, config=str(root / "config.json"), vocab=SHARED_VOCAB)
    made = {}
    for name, spec in SPECS.items():
        keras.utils.set_random_seed(1234)
        model = build_from_spec(spec, source)
        if spec.kind == "interaction":  # a random head scores every pair alike: spread its scores
            head = model.get_layer(head_layer_name(spec.head))
            head.kernel.assign(keras.ops.convert_to_numpy(head.kernel) * 100.0)
        folder = str(root / name)
        write_model_folder(folder, model_arrays(model, spec, TINY), spec, TINY, SHARED_VOCAB)
        if keras.backend.backend() == "tensorflow":
            _, loaded, tokenizer = load_engine_model(folder)
            scores = engine_scores(loaded, tokenizer, spec, TEXTS, SECONDS)
        else:  # only the TensorFlow graphs' tests decide; JAX would compile each pair's length anew
            scores = np.linspace(0.0, 1.0, len(TEXTS))
        arrays = model_arrays(model, spec, TINY)
        write_model_folder(
            folder, arrays, spec, TINY, SHARED_VOCAB, overwrite=True, decision=decision_for(name, scores)
        )
        made[name] = folder
    return made


@pytest.fixture(scope="module")
def saved_models(folders, tmp_path_factory):
    """{name: the SavedModel of :func:`folders`' folder}, written once for the tests that read them (each
    export traces the model's graph anew: the module's costliest step). The feature model's through the
    Keras 3 wrapper (:mod:`cosent_tf.keras3.export`), the interaction model's through the export module."""
    from cosent_tf.export.savedmodel import export_saved_model as export_any

    root = tmp_path_factory.mktemp("keras3-saved")
    feature = export_saved_model(folders["feature"], str(root / "feature"))
    assert export_any(folders["interaction"], str(root / "interaction")) == [
        "decide",
        "decide_ids",
        "score_ids",
        "serving_default",
    ]
    return {"feature": feature, "interaction": str(root / "interaction")}


def loaded(folder):
    from cosent_tf.export.engine_model import load_engine_model

    return load_engine_model(folder)


def served(export, signature):
    import tensorflow as tf

    from cosent_tf.export.graph_tokenization import import_tensorflow_text

    import_tensorflow_text()  # registers the WordPiece op the graph holds
    function = tf.saved_model.load(export).signatures[signature]
    return lambda **texts: {
        name: value.numpy() for name, value in function(**{k: tf.constant(v) for k, v in texts.items()}).items()
    }


@pytest.mark.heavy
@pytest.mark.backends("tensorflow")
def test_saved_model_of_a_feature_model_encodes_and_decides_as_the_keras3_model(folders, saved_models, tmp_path):
    from cosent_tf.calibration import read_decision
    from cosent_tf.keras3.encoder import SentenceEncoder
    from tests.zoo import copy_of

    model_dir, out = folders["feature"], saved_models["feature"]
    vectors = served(out, "serving_default")(sentences=TEXTS)["embeddings"]
    np.testing.assert_allclose(vectors, SentenceEncoder.load(model_dir).encode(TEXTS), atol=TOLERANCE)
    spec, model, tokenizer = loaded(model_dir)
    decided = served(out, "decide")(first=TEXTS, second=SECONDS)
    scores = engine_scores(model, tokenizer, spec, TEXTS, SECONDS)
    decision = read_decision(model_dir)
    np.testing.assert_allclose(decided["scores"], scores, atol=TOLERANCE)
    np.testing.assert_array_equal(decided["matches"], scores > decision.threshold())
    assert 0 < decided["matches"].sum() < len(TEXTS)
    with open(os.path.join(out, "assets.extra", "decision.json"), encoding="utf-8") as f:
        assert json.load(f) == decision.to_json()
    with pytest.raises(ConfigError, match="already|export"):
        export_saved_model(model_dir, out)  # an earlier export is replaced only when asked
    export_saved_model(model_dir, str(copy_of(out, tmp_path / "saved")), overwrite=True)  # the shared one stays


@pytest.mark.heavy
@pytest.mark.backends("tensorflow")
def test_saved_model_of_an_interaction_model_scores_and_decides_as_the_keras3_model(folders, saved_models):
    model_dir, out = folders["interaction"], saved_models["interaction"]
    spec, model, tokenizer = loaded(model_dir)
    scores = engine_scores(model, tokenizer, spec, TEXTS, SECONDS)
    np.testing.assert_allclose(
        served(out, "serving_default")(first=TEXTS, second=SECONDS)["scores"], scores, atol=TOLERANCE
    )
    decided = served(out, "decide")(first=TEXTS, second=SECONDS)
    with open(os.path.join(out, "assets.extra", "decision.json"), encoding="utf-8") as f:
        threshold = json.load(f)["thresholds"]
    np.testing.assert_array_equal(decided["matches"], scores > threshold["accuracy"])
    assert 0 < decided["matches"].sum() < len(TEXTS)


@pytest.mark.heavy
@pytest.mark.backends("tensorflow")
@pytest.mark.parametrize("name", list(SPECS))
def test_onnx_export_gives_the_keras3_models_outputs(folders, tmp_path, name):
    import onnxruntime

    from cosent_tf.export.onnx_export import export_onnx
    from cosent_tf.inference.onnx_model import load_onnx_dir

    model_dir = folders[name]
    exported = export_onnx(model_dir, str(tmp_path / "onnx"))
    assert exported.layout == ("sentence-transformers" if name == "feature" else "sequence-classification")
    assert os.path.isfile(tmp_path / "onnx" / "decision.json")  # the folder's decision goes with it
    spec, model, tokenizer = loaded(model_dir)
    _, onnx_model, onnx_tokenizer = load_onnx_dir(tmp_path / "onnx")
    if name == "feature":
        ids = tokenizer.encode_all(TEXTS)
        assert [list(row) for row in onnx_tokenizer.encode_all(TEXTS)] == [list(row) for row in ids]
        expected = np.stack([engine_vector(model, row) for row in ids])
        width = max(len(row) for row in ids)
        padded = np.array([list(row) + [0] * (width - len(row)) for row in ids], np.int64)
        session = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "onnx" / "model.onnx"))
        feed = {"input_ids": padded, "attention_mask": (padded != 0).astype(np.int64)}
        embedding, hidden = session.run(
            ["sentence_embedding", "last_hidden_state"], {**feed, "token_type_ids": np.zeros_like(padded)}
        )
        np.testing.assert_allclose(unit(embedding), unit(expected), atol=TOLERANCE)
        # what sentence-transformers pools: the mean of the hidden states over the tokens the mask keeps
        kept = feed["attention_mask"][:, :, None]
        np.testing.assert_allclose(unit((hidden * kept).sum(1) / kept.sum(1)), unit(expected), atol=TOLERANCE)
    else:
        ids = tokenizer.encode_pairs(TEXTS, SECONDS)
        scores = engine_scores(model, tokenizer, spec, TEXTS, SECONDS)
        onnx_scores = []
        for row in ids:
            after_sep = np.cumsum(row == tokenizer.sep_id) - (row == tokenizer.sep_id)
            onnx_scores.append(onnx_model(np.asarray(row)[None], (after_sep >= 1).astype(np.int64)[None])[0, -1])
        np.testing.assert_allclose(onnx_scores, scores, atol=TOLERANCE)


def engine_vector(model, ids):
    import keras

    ids = np.asarray(ids, np.int32)[None]
    return np.asarray(keras.ops.convert_to_numpy(model([ids, np.zeros_like(ids)], training=False)))[0]


def unit(vectors):
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


KERAS2_EXPORTS = """
import json, os
import tensorflow as tf
from cosent_tf.export.graph_tokenization import import_tensorflow_text
from cosent_tf.export.huggingface import export_hf
from cosent_tf.export.savedmodel import export_saved_model
import_tensorflow_text()
texts, seconds = [str(t) for t in inputs["texts"]], [str(t) for t in inputs["seconds"]]
for name, folder in json.loads(str(inputs["folders"])).items():
    export_saved_model(folder, os.path.join(tmp, name + "-saved"))
    export_hf(folder, os.path.join(tmp, name + "-hf"))
    decide = tf.saved_model.load(os.path.join(tmp, name + "-saved")).signatures["decide"]
    for key, value in decide(first=tf.constant(texts), second=tf.constant(seconds)).items():
        outputs[name + "/" + key] = value.numpy()
"""


def files_of(folder, model_dir=None):
    """{relative path: bytes} of every file under the export ``folder``; ``model_dir``: the path its
    record names as the model folder is replaced by this one (a cached Keras 2 export was written
    from a folder of an earlier run, with the same contents)."""
    found = {}
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, folder)] = f.read()
    if model_dir is not None:
        written_from = json.loads(found["cosent_tf_export.json"])["model_dir"].encode()
        found = {path: data.replace(written_from, os.path.abspath(model_dir).encode()) for path, data in found.items()}
    return found


@pytest.mark.heavy
@pytest.mark.backends("tensorflow")
def test_keras3_exports_are_the_keras2_exports_of_the_same_folder(folders, saved_models, tmp_path):
    """The Hugging Face folders are the same files, byte for byte; the SavedModels' files beside the
    graph (assets.extra, the export record) are too, and their ``decide`` gives the same outputs."""
    import tensorflow as tf

    from cosent_tf.export.graph_tokenization import import_tensorflow_text
    from cosent_tf.export.huggingface import export_hf

    keras2 = tmp_path / "keras2"
    keras2.mkdir()
    theirs = run_keras2(
        KERAS2_EXPORTS,
        keras2,
        reads=list(folders.values()),
        writes=True,
        folders=np.array(json.dumps(folders)),
        texts=np.array(TEXTS),
        seconds=np.array(SECONDS),
    )
    import_tensorflow_text()
    for name, folder in folders.items():
        export_hf(folder, str(tmp_path / f"{name}-hf"))
        mine, keras2_files = files_of(tmp_path / f"{name}-hf"), files_of(keras2 / f"{name}-hf", folder)
        assert sorted(mine) == sorted(keras2_files)
        for path in mine:
            assert mine[path] == keras2_files[path], f"{name}-hf/{path} differs"
        for path in ("assets.extra/cosent_model.json", "assets.extra/decision.json", "assets.extra/vocab.txt"):
            with open(os.path.join(saved_models[name], path), "rb") as f:
                assert f.read() == (keras2 / f"{name}-saved" / path).read_bytes(), path
        decide = tf.saved_model.load(saved_models[name]).signatures["decide"]
        outputs = decide(first=tf.constant(TEXTS), second=tf.constant(SECONDS))
        assert sorted(outputs) == sorted(key.split("/")[1] for key in theirs if key.startswith(name + "/"))
        for key, value in outputs.items():
            np.testing.assert_allclose(value.numpy(), theirs[f"{name}/{key}"], atol=TOLERANCE, err_msg=key)


@pytest.mark.backends("jax")
def test_the_tensorflow_graphs_are_refused_on_jax(folders, tmp_path):
    from cosent_tf.export.onnx_export import export_onnx

    with pytest.raises(ConfigError, match="a SavedModel is a TensorFlow graph of the model.*KERAS_BACKEND=tensorflow"):
        export_saved_model(folders["feature"], str(tmp_path / "saved"))
    with pytest.raises(ConfigError, match=r"an ONNX export \(converted by tf2onnx\) is a TensorFlow graph"):
        export_onnx(folders["interaction"], str(tmp_path / "onnx"))
    assert os.listdir(tmp_path) == []


@pytest.mark.heavy
@pytest.mark.backends("tensorflow")
def test_export_command_on_keras3_says_what_it_wrote(folders, tmp_path):
    """``cosent-tf export --keras 3`` in a process of its own (the option chooses Keras 3 for the
    process, which this test's process has already chosen)."""
    out = tmp_path / "saved"
    done = subprocess.run(
        [sys.executable, "-m", "cosent_tf.cli", "export", "--keras", "3", folders["interaction"], str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        f"{out}: SavedModel with signatures decide, decide_ids, score_ids, serving_default"
    ]
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "cosent_tf.cli",
            "export",
            "--keras",
            "3",
            "--precision",
            "bf16",
            folders["feature"],
            str(tmp_path / "bf16"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert refused.returncode != 0
    assert (
        "--precision bf16: a bfloat16 export is written by the Keras 2 engine (leave out --keras 3)" in refused.stderr
    )
    assert not os.path.exists(tmp_path / "bf16")


def test_sentence_transformers_folder_loads_back_with_the_same_weights_and_vectors(folders, tmp_path):
    from cosent_tf.keras3.backbones import google_arrays, load_backbone
    from cosent_tf.keras3.encoder import SentenceEncoder

    model_dir = folders["feature"]
    out = export_sentence_transformers(model_dir, str(tmp_path / "st"))
    assert {"modules.json", "model.safetensors", "vocab.txt", "1_Pooling", "decision.json"} <= set(os.listdir(out))
    exported, original = load_backbone(out), load_backbone(model_dir)
    assert exported.pooling == "last-avg" and exported.maxlen == 16
    mine, theirs = google_arrays(exported.backbone), google_arrays(original.backbone)
    assert sorted(mine) == sorted(theirs)
    for name in mine:
        if not name.startswith("bert/pooler/"):  # the folder's model reads no pooler: zeros stand for it
            np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)
    np.testing.assert_allclose(
        SentenceEncoder.load(out).encode(TEXTS), SentenceEncoder.load(model_dir).encode(TEXTS), atol=TOLERANCE
    )


def test_sentence_transformers_encode_the_same(folders, tmp_path):
    """sentence-transformers itself, in the reference environment (COSENT_REFERENCE_PYTHON), encodes
    the export as the Keras 3 SentenceEncoder encodes the folder."""
    reference = reference_python("the sentence-transformers export is checked")
    from cosent_tf.keras3.encoder import SentenceEncoder

    model_dir = folders["feature"]
    out = export_sentence_transformers(model_dir, str(tmp_path / "st"))
    np.save(tmp_path / "texts.npy", np.array(TEXTS))
    script = (
        "import sys, numpy as np\n"
        "from sentence_transformers import SentenceTransformer\n"
        "texts = list(np.load(sys.argv[2]))\n"
        "np.save(sys.argv[3], SentenceTransformer(sys.argv[1], device='cpu').encode(texts))\n"
    )

    def produce():
        done = subprocess.run(
            [reference, "-c", script, out, str(tmp_path / "texts.npy"), str(tmp_path / "st.npy")],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return {"st": np.load(tmp_path / "st.npy")}

    # cached (tests/reference_cache.py), so that the second backend's run reuses the first's
    key = [script, interpreter(reference), contents(out, hide=[model_dir]), contents(tmp_path / "texts.npy")]
    theirs = cached("st-export-reference", key, produce)["st"]
    np.testing.assert_allclose(theirs, SentenceEncoder.load(model_dir).encode(TEXTS), atol=TOLERANCE)


def test_an_unexpressible_model_is_refused(folders, tmp_path):
    from tests.zoo import copy_of

    model_dir = copy_of(folders["feature"], tmp_path / "model")
    spec_path = os.path.join(model_dir, "cosent_model.json")
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    spec["pooling"] = "first-last-avg"
    with open(spec_path, "w", encoding="utf-8") as f:
        json.dump(spec, f)
    with pytest.raises(ConfigError, match="pooling 'first-last-avg' cannot be expressed in sentence-transformers"):
        export_sentence_transformers(str(model_dir), str(tmp_path / "st"))
    assert not os.path.exists(tmp_path / "st")
