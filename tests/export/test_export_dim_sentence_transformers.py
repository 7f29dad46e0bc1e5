"""The issue's parity at a width: vectors cut to D dimensions and renormalised agree within 1e-5
whether they come from the SavedModel export (``dim=D``), the Python API
(``SentenceEncoder.encode(texts, dim=D)``) or the sentence-transformers export, loaded by
sentence-transformers itself: ``SentenceTransformer(folder).encode`` with no argument (6.x, in the
reference environment of tests/huggingface/test_parity.py, ``COSENT_REFERENCE_PYTHON``), and an ONNX
export with ``SentenceTransformer(folder, backend="onnx")`` (5.x, the environment of
tests/export/test_onnx_sentence_transformers.py, ``COSENT_ONNX_REFERENCE_PYTHON``). Without those
environments these tests fail, saying so, rather than skip.

The texts are the shared STS-B sentences (many past the models' maxlen) and edge cases; the
reference encodes them in batches of 7 and the SavedModel in one, so rows are padded differently.
"""

import json
import subprocess

import numpy as np
import pytest

from cosent_tf import SentenceEncoder
from cosent_tf.backend import tf
from cosent_tf.export.graph_tokenization import import_tensorflow_text
from cosent_tf.export.huggingface import export_hf
from tests.export.test_export_dim import DIM, WIDTH, cut, width_models, width_onnx, width_saved_model
from tests.export.test_onnx_sentence_transformers import (
    assert_onnx_backend_ran,
    cached_together,
    run_reference,
    sts_texts,
)
from tests.helpers import reference_python, requires_shared_data
from tests.reference_cache import contents, interpreter
from tests.zoo import copy_of

TOLERANCE = 1e-5
POOLINGS = ("cls", "last-avg")
pytestmark = [pytest.mark.slow, requires_shared_data]

# Runs in the reference environment: sentence-transformers 6, torch; never cosent_tf or TensorFlow.
REFERENCE = """
import json, sys
import numpy as np
from sentence_transformers import SentenceTransformer
dim, texts_path, jobs = sys.argv[1:4]
with open(texts_path, encoding="utf-8") as f:
    sentences = json.load(f)["sentences"]
for cut_folder, full_folder, out in json.loads(jobs):
    cut = SentenceTransformer(cut_folder, device="cpu")
    full = SentenceTransformer(full_folder, device="cpu", truncate_dim=int(dim))
    np.savez(
        out,
        cut=cut.encode(sentences, batch_size=7, convert_to_numpy=True),
        truncated=full.encode(sentences, batch_size=7, convert_to_numpy=True, normalize_embeddings=True),
        modules=np.array([type(module).__name__ for module in cut]),
        dimension=cut.get_embedding_dimension(),
    )
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """pooling -> (model folder, SavedModel at DIM, what sentence-transformers gave from the Hugging
    Face exports at DIM and at full width), and the texts. The models and SavedModels are the width
    tests' (tests/export/test_export_dim.py), made once per test run in the zoo; the cls SavedModel is
    the one of its copy with a match decision, which the width drops: the same weights. The last-avg
    model has no SavedModel (None): the served graph cuts after the pooling, the same ops whatever the
    pooling (test_export_dim.py's width_exports fixture says so), so the cls one stands for both."""
    root = tmp_path_factory.mktemp("dim-st")
    texts = sts_texts()
    texts_path = root / "texts.json"
    texts_path.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    models = width_models(tmp_path_factory)
    made = {}
    python = reference_python("these tests load the exports")
    jobs, keys = [], []
    for pooling in POOLINGS:
        model_dir = models[pooling]
        saved = width_saved_model(tmp_path_factory, "decided")[1] if pooling == "cls" else None
        hf, full = (root / f"{pooling}-{name}" for name in ("hf", "hf-full"))
        export_hf(model_dir, str(hf), dim=DIM)
        export_hf(model_dir, str(full))
        jobs.append((model_dir, saved, hf, full, root / f"{pooling}.npz"))
        # cached (tests/reference_cache.py) by the exports' and the texts' content; the exports name
        # their tmp source folder, which is hidden from the key
        exports = [contents(folder, hide=[model_dir]) for folder in (hf, full)]
        keys.append([REFERENCE, interpreter(python), *exports, DIM, contents(texts_path)])

    def produce_missing(indices):
        # a process of its own: sentence-transformers 6 and torch live in the reference environment;
        # one for both poolings, as its start costs more than the encoding
        listed = json.dumps([[str(jobs[index][part]) for part in (2, 3, 4)] for index in indices])
        command = [python, "-c", REFERENCE, str(DIM), str(texts_path), listed]
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            pytest.fail(f"sentence-transformers failed on the exports at {DIM}:\n{result.stderr[-4000:]}")

    def read(index):
        with np.load(jobs[index][4]) as loaded:
            return {name: loaded[name] for name in loaded.files}

    references = cached_together("st-dim-reference", keys, produce_missing, read)
    for pooling, (model_dir, saved, *_), reference in zip(POOLINGS, jobs, references):
        made[pooling] = (model_dir, saved, reference)
    return made, texts, texts_path


@pytest.mark.parametrize("pooling", POOLINGS)
def test_the_savedmodel_the_python_api_and_sentence_transformers_agree_at_a_width(pooling, made):
    models, texts, _ = made
    model_dir, saved, reference = models[pooling]
    sentences = texts["sentences"]
    encoder = SentenceEncoder.load(model_dir)
    python_api = encoder.encode(sentences, dim=DIM)
    theirs = reference["cut"]
    assert [str(name) for name in reference["modules"]] == ["Transformer", "Pooling", "Dense", "Normalize"]
    assert int(reference["dimension"]) == DIM
    assert python_api.shape == theirs.shape == (len(sentences), DIM)
    differences = {"sentence-transformers - Python API": np.abs(theirs - python_api).max()}
    np.testing.assert_allclose(theirs, python_api, atol=TOLERANCE, rtol=0)
    if saved is not None:  # the cls model's (the made fixture says why not last-avg's)
        import_tensorflow_text()  # registers the graph's WordPiece op, which loading needs
        served = tf.saved_model.load(str(saved)).signatures["serving_default"](sentences=tf.constant(sentences))
        savedmodel = served["embeddings"].numpy()
        assert savedmodel.shape == (len(sentences), DIM)
        differences["SavedModel - Python API"] = np.abs(savedmodel - python_api).max()
        differences["sentence-transformers - SavedModel"] = np.abs(theirs - savedmodel).max()
        np.testing.assert_allclose(savedmodel, python_api, atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(theirs, savedmodel, atol=TOLERANCE, rtol=0)
    print(f"{pooling} at {DIM} of {WIDTH}: " + ", ".join(f"{k} {v:.3g}" for k, v in differences.items()))
    # an independent cut of the full vectors; and the texts differ by far more than the tolerance
    np.testing.assert_allclose(python_api, cut(encoder.encode(sentences), DIM), atol=TOLERANCE, rtol=0)
    assert np.std(python_api, axis=0).max() > 100 * TOLERANCE


@pytest.mark.parametrize("pooling", POOLINGS)
def test_the_full_width_export_with_truncate_dim_gives_the_same_vectors(pooling, made):
    """What the card says: truncate_dim on the full-width export, renormalised, is the cut export."""
    models, _, _ = made
    _, _, reference = models[pooling]
    np.testing.assert_allclose(reference["truncated"], reference["cut"], atol=1e-6, rtol=0)


def test_sentence_transformers_onnx_backend_gives_the_cut_vectors(made, tmp_path_factory, tmp_path):
    _, texts, texts_path = made
    # the width tests' ONNX export of the last-avg model (tests/export/test_export_dim.py, in the zoo),
    # copied: the reference environment opens the folder, and the zoo's must stay as it was built
    model_dir, converted, exported = width_onnx(tmp_path_factory, "last-avg")
    assert exported.dim == DIM
    out = copy_of(converted, tmp_path / "onnx")
    reference = run_reference(out, texts_path, tmp_path / "onnx.npz")
    assert_onnx_backend_ran("last-avg", out, reference, "float32")
    expected = SentenceEncoder.load(model_dir).encode(texts["sentences"], dim=DIM)
    theirs = reference["float32"]
    assert theirs.shape == expected.shape == (len(texts["sentences"]), DIM)
    print(f"ONNX backend at {DIM} against SentenceEncoder.encode(dim): {np.abs(theirs - expected).max():.3g}")
    np.testing.assert_allclose(theirs, expected, atol=TOLERANCE, rtol=0)
    onnx_runtime = SentenceEncoder.load(str(out), runtime="onnx").encode(texts["sentences"])
    np.testing.assert_allclose(onnx_runtime, expected, atol=TOLERANCE, rtol=0)
