"""sentence-transformers' own ONNX backend loads ``cosent-tf export --format onnx`` folders and
computes what the engine computes: ``SentenceTransformer(folder, backend="onnx")`` for a feature
model (every pooling a sentence-transformers folder can hold), ``CrossEncoder(folder,
backend="onnx")`` for an interaction model (score and softmax heads, through the pooler with pair
segments).

The reference side (tests/reference/onnx_reference.py) runs in an environment of its own:
sentence-transformers 6 cannot use its ONNX backend beside transformers 5 (optimum-onnx needs
transformers < 4.58), so ``COSENT_ONNX_REFERENCE_PYTHON`` names a Python with
``sentence-transformers[onnx]>=5,<6`` (``make test`` builds it as .venv-onnx-reference and sets it;
.venv-onnx-reference/bin/python is the default). Without one these tests fail, saying so, rather
than skip.

float32 must agree with the engine within 1e-5; int8 (onnxruntime's dynamic quantisation) only
loosely, and must differ from float32, which shows that the int8 file is the one that ran.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cosent_tf import ModelSpec, PairScorer, SentenceEncoder, build_encoder, build_interaction_model, save_model_dir
from cosent_tf.backend import keras
from cosent_tf.export.onnx_export import export_onnx
from tests.helpers import ROOT, SHARED_DATA, SHARED_VOCAB, requires_shared_data, write_config
from tests.reference_cache import cache_folder, cached, contents, interpreter, key_of, package_sources

REFERENCE_SCRIPT = os.path.join(ROOT, "tests", "reference", "onnx_reference.py")
TOLERANCE = 1e-5
# int8 against float32: the least cosine of a sentence's two vectors; the least correlation of the
# two files' scores of the pairs, and the most a score or probability may move (a random model's
# scores span about 0.1, and int8 shifts some by as much, nearly all alike: over six seeds the
# correlation was 0.84 (the score head at this module's seed) to 0.997, the largest move 0.11); and
# the least it must move something by, so that it is not float32 again.
INT8_MIN_COSINE = 0.9
INT8_MIN_CORRELATION = 0.8
INT8_MAX_SCORE_DIFFERENCE = 0.25
INT8_MIN_DIFFERENCE = 1e-7
# What the random models' matrices are scaled by: at BERT's initial 0.02 a random model's attention
# is nearly uniform and its blocks nearly the identity, so that its [CLS] vectors (a component's
# spread over the texts: 4e-4) and an interaction model's scores (5e-6) hardly differ between
# texts, and 1e-5 would tell little. Scaled by 8: 3e-2 and 2e-2, with int8 still close (scaled by
# 20, int8's per-tensor scales lost up to 0.065 of a cosine).
LIVELY = 8.0

FEATURES = ("cls", "last-avg", "max")
HEADS = ("score", "softmax")
pytestmark = [pytest.mark.slow, requires_shared_data]


def reference_python():
    python = os.environ.get("COSENT_ONNX_REFERENCE_PYTHON", os.path.join(ROOT, ".venv-onnx-reference", "bin", "python"))
    if not os.path.exists(python):
        pytest.fail(
            f"{python} does not exist: these tests load the ONNX export with sentence-transformers' ONNX backend, "
            "which needs sentence-transformers[onnx]>=5,<6 in an environment of its own; run them with `make test`, "
            "which builds .venv-onnx-reference (or set COSENT_ONNX_REFERENCE_PYTHON)"
        )
    return python


def sts_texts():
    """Sentences and pairs of the shared STS-B test file (of different lengths, so that batches are
    padded; many longer than the models' maxlen), an empty text, Latin text with accents and case,
    and a text longer than any maxlen."""
    path = os.path.join(SHARED_DATA, "senteval_cn", "STS-B", "STS-B.test.data")
    with open(path, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][:40]
    long_text = "".join(row[0] for row in rows[:4])
    sentences = [row[0] for row in rows] + ["", "Café au LAIT, naïve résumé", long_text, "好"]
    pairs = [(row[0], row[1]) for row in rows] + [("", "好"), ("Café", "CAFÉ 咖啡"), (long_text, rows[0][1])]
    return {"sentences": sentences, "pairs": pairs}


# Runs onnx_reference.py's run() on several exports in one process of the ONNX reference
# environment: the process's start (torch, sentence-transformers, optimum) costs more than a model.
GROUPED_REFERENCE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import onnx_reference
for folder, texts_path, out in json.loads(sys.argv[2]):
    onnx_reference.run(folder, texts_path, out, 8)
"""


def is_stored(kind, key_parts):
    root = cache_folder()
    return root is not None and os.path.isdir(os.path.join(root, kind, key_of(kind, key_parts)))


def cached_together(kind, keys, produce_missing, read):
    """``cached(kind, key, ...)`` for each of ``keys``, where one call ``produce_missing(indices)``
    computes every entry not yet stored (one reference process for all of them) and ``read(index)``
    gives one's outputs."""
    missing = [index for index, key in enumerate(keys) if not is_stored(kind, key)]
    if missing:
        produce_missing(missing)
    return [cached(kind, key, lambda index=index: read(index)) for index, key in enumerate(keys)]


def reference_key(folder, texts_path, python):
    """The cache key (tests/reference_cache.py) of onnx_reference.py's outputs for the export ``folder``.

    tf2onnx names nodes after Python object ids, so the .onnx files' bytes (and the record's hashes of
    them) differ on every run: they are keyed by their source folder, the export's options, cosent_tf's
    sources and this environment (tf2onnx, TensorFlow) instead; every other file by its content. The
    record and README name the tmp source folder, which is hidden from the key."""
    with open(os.path.join(folder, "cosent_tf_export.json"), encoding="utf-8") as f:
        record = json.load(f)
    source = record.pop("model_dir")
    record["onnx"] = {name: entry["precision"] for name, entry in record["onnx"].items()}
    rest = sorted(set(os.listdir(folder)) - {"onnx", "cosent_tf_export.json"})
    export = [json.dumps(record, sort_keys=True), contents(source), package_sources(), interpreter(sys.executable)]
    export += [(name, contents(os.path.join(folder, name), hide=[source])) for name in rest]
    return [contents(REFERENCE_SCRIPT), interpreter(python), export, contents(texts_path)]


def run_references(jobs):
    """What onnx_reference.py writes (a dict of arrays) for each (export folder, texts file, .npz
    path) of ``jobs``, those not cached computed in one process."""
    python = reference_python()

    def produce_missing(indices):
        # a process of its own: the ONNX reference environment (sentence-transformers 5, optimum) is
        # not this one
        listed = json.dumps([[str(part) for part in jobs[index]] for index in indices])
        command = [python, "-c", GROUPED_REFERENCE, os.path.dirname(REFERENCE_SCRIPT), listed]
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            folders = ", ".join(str(jobs[index][0]) for index in indices)
            pytest.fail(f"onnx_reference.py failed on {folders}:\n{result.stderr[-4000:]}")

    def read(index):
        folder, _, out = jobs[index]
        with np.load(out) as loaded:
            outputs = {name: loaded[name] for name in loaded.files}
        # The files it loaded are kept relative to the folder, whose tmp path differs on every run.
        for name in [name for name in outputs if name.endswith("_file")]:
            outputs[name] = np.array(os.path.relpath(os.path.realpath(str(outputs[name])), os.path.realpath(folder)))
        return outputs

    keys = [reference_key(folder, texts_path, python) for folder, texts_path, _ in jobs]
    results = cached_together("onnx-reference", keys, produce_missing, read)
    for (folder, _, _), outputs in zip(jobs, results):
        for name in [name for name in outputs if name.endswith("_file")]:
            outputs[name] = np.array(os.path.join(os.fspath(folder), str(outputs[name])))
    return results


def run_reference(folder, texts_path, out):
    """What onnx_reference.py writes for the export ``folder`` (a dict of arrays)."""
    (outputs,) = run_references([(folder, texts_path, out)])
    return outputs


def make_lively_model_dir(directory, config, name, maxlen):
    """A model folder of a random model whose dense matrices (not the embeddings) are :data:`LIVELY`
    times BERT's initial ones: the feature model of pooling ``name``, or the interaction model of
    head ``name`` through the pooler with pair segments (what a Hugging Face folder can hold)."""
    if name in FEATURES:
        model, spec = build_encoder(config, pooling=name), ModelSpec("feature", pooling=name, maxlen=maxlen)
    else:
        model = build_interaction_model(config, head=name, head_input="pooler")
        spec = ModelSpec("interaction", head=name, head_input="pooler", pair_segments=True, maxlen=maxlen)
    for weight in model.weights:
        if len(weight.shape) == 2 and not weight.name.startswith("Embedding"):
            weight.assign(weight * LIVELY)
    save_model_dir(directory, model, spec, config, SHARED_VOCAB)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """name -> (model folder, its ONNX export with the int8 file, what sentence-transformers gave),
    and the texts: feature models of each pooling in FEATURES (maxlen 32) and interaction models of
    each head in HEADS (through the pooler with pair segments, maxlen 48), random
    (:func:`make_lively_model_dir`), on the shared vocab."""
    root = tmp_path_factory.mktemp("onnx-st")
    texts = sts_texts()
    texts_path = root / "texts.json"
    texts_path.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    config = write_config(root / "config.json")
    keras.utils.set_random_seed(40)  # module fixtures run before the suite's seeding one
    for name in FEATURES + HEADS:
        model_dir, out = root / name, root / f"{name}-onnx"
        make_lively_model_dir(model_dir, config, name, maxlen=32 if name in FEATURES else 48)
        result = export_onnx(str(model_dir), str(out), quantize="int8")
        assert result.files == {"onnx/model.onnx": "float32", "onnx/model_qint8.onnx": "int8"}
    names = FEATURES + HEADS
    references = run_references([(root / f"{name}-onnx", texts_path, root / f"{name}.npz") for name in names])
    made = {name: (root / name, root / f"{name}-onnx", reference) for name, reference in zip(names, references)}
    return made, texts


def engine_outputs(name, model_dir, texts):
    """The engine's own outputs: unit vectors, or scores (a probability for the softmax head)."""
    if name in FEATURES:
        vectors = SentenceEncoder.load(str(model_dir)).encode(texts["sentences"])
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return PairScorer.load(str(model_dir)).similarity(*zip(*texts["pairs"]))


def as_scores(name, logits):
    """CrossEncoder's raw logits as the engine's scores: the score head's one logit is the score,
    the softmax head's P(similar) is the softmax of its two."""
    if name == "score":
        assert logits.ndim == 1
        return logits
    assert logits.ndim == 2 and logits.shape[1] == 2
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted[:, 1] / shifted.sum(axis=1)


def assert_onnx_backend_ran(name, out, reference, precision):
    expected_class = "ORTModelForFeatureExtraction" if name in FEATURES else "ORTModelForSequenceClassification"
    assert str(reference["kind"]) == ("sentence-transformers" if name in FEATURES else "cross-encoder")
    assert str(reference[f"{precision}_class"]) == expected_class
    file_name = "model.onnx" if precision == "float32" else "model_qint8.onnx"
    assert os.path.realpath(str(reference[f"{precision}_file"])) == os.path.realpath(out / "onnx" / file_name)


@pytest.mark.parametrize("name", FEATURES + HEADS)
def test_sentence_transformers_onnx_backend_gives_the_engines_outputs(name, exported):
    made, texts = exported
    model_dir, out, reference = made[name]
    assert_onnx_backend_ran(name, out, reference, "float32")
    ours = engine_outputs(name, model_dir, texts)
    theirs = reference["float32"] if name in FEATURES else as_scores(name, reference["float32"])
    assert theirs.shape == ours.shape
    assert np.all(np.isfinite(theirs))
    print(
        f"{name}: sentence-transformers' ONNX backend against the engine: most |difference| "
        f"{np.abs(theirs - ours).max():.3g}"
    )
    np.testing.assert_allclose(theirs, ours, atol=TOLERANCE, rtol=0)
    # the model tells texts apart by far more than the tolerance, so that agreeing within it means something
    spread = np.std(ours, axis=0).max()
    assert spread > 100 * TOLERANCE, f"{name}: the engine's outputs hardly differ between texts ({spread:.3g})"


@pytest.mark.parametrize("name", FEATURES + HEADS)
def test_the_int8_file_loads_and_stays_close_to_float32(name, exported):
    made, _ = exported
    _, out, reference = made[name]
    assert_onnx_backend_ran(name, out, reference, "int8")
    float32, int8 = reference["float32"], reference["int8"]
    assert int8.shape == float32.shape and np.all(np.isfinite(int8))
    if name in FEATURES:
        cosines = np.sum(float32 * int8, axis=1) / np.linalg.norm(float32, axis=1) / np.linalg.norm(int8, axis=1)
        print(
            f"{name}: int8 against float32: least cosine {cosines.min():.6f}, most |difference| "
            f"{np.abs(int8 - float32).max():.3g}"
        )
        assert cosines.min() > INT8_MIN_COSINE, f"{name}: an int8 vector's cosine with float32's is {cosines.min()}"
    else:
        scores, int8_scores = as_scores(name, float32), as_scores(name, int8)
        moved, correlation = np.abs(int8_scores - scores), np.corrcoef(scores, int8_scores)[0, 1]
        print(
            f"{name}: int8 against float32: correlation {correlation:.4f}, most |score difference| {moved.max():.3g} "
            f"(float32 scores span {np.ptp(scores):.3g})"
        )
        assert correlation > INT8_MIN_CORRELATION, f"{name}: int8's scores correlate with float32's by {correlation}"
        assert moved.max() < INT8_MAX_SCORE_DIFFERENCE, f"{name}: int8 moves a score by {moved.max()}"
    assert np.abs(int8 - float32).max() > INT8_MIN_DIFFERENCE, f"{name}: the int8 outputs are float32's"


@pytest.mark.parametrize("name", FEATURES + HEADS)
def test_optimums_io_binding_sizes_the_outputs_from_the_graphs_dimension_names(name, exported):
    """With IO binding (optimum's default on CUDAExecutionProvider) optimum sizes each output from
    the names of the graph's dynamic dimensions, so the outputs' must be the inputs' names."""
    made, _ = exported
    _, _, reference = made[name]
    error = reference.get("float32_io_binding_error")
    assert error is None, f"{name}: with IO binding, sentence-transformers fails: {error}"
    np.testing.assert_allclose(reference["float32_io_binding"], reference["float32"], atol=1e-6, rtol=0)
