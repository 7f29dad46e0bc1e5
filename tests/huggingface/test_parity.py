"""Parity with transformers and sentence-transformers themselves, both directions.

The reference side (tests/reference/hf_reference.py) runs in its own environment with torch,
transformers and sentence-transformers, which are never dependencies of cosent-tf:
``COSENT_REFERENCE_PYTHON`` names its Python (``make test`` builds it as .venv-reference and
sets it; .venv-reference/bin/python is the default). Without one these tests fail, saying so,
rather than skip.
"""

import json
import os
import subprocess

import numpy as np
import pytest

from cosent_tf import PairScorer, SentenceEncoder, build_encoder
from cosent_tf.cli import main as cosent_tf_main
from cosent_tf.cli import train_main
from cosent_tf.huggingface.weights import read_hf_weights
from cosent_tf.inference.runtime import batched_outputs
from cosent_tf.models.tokenization import SentenceTokenizer
from tests.helpers import ROOT, SHARED_VOCAB, requires_shared_data
from tests.reference_cache import cached, contents, interpreter

REFERENCE_SCRIPT = os.path.join(ROOT, "tests", "reference", "hf_reference.py")
TOLERANCE = 1e-5
pytestmark = requires_shared_data


def reference_python():
    python = os.environ.get("COSENT_REFERENCE_PYTHON", os.path.join(ROOT, ".venv-reference", "bin", "python"))
    if not os.path.exists(python):
        pytest.fail(
            f"{python} does not exist: these tests compare with torch/transformers/sentence-transformers in their "
            "own environment; run them with `make test`, which builds .venv-reference (or set COSENT_REFERENCE_PYTHON)"
        )
    return python


def reference(*arguments):
    subprocess.run([reference_python(), REFERENCE_SCRIPT, *map(str, arguments)], check=True, capture_output=True)


def cached_reference(key_parts, produce, folder=None):
    """``produce()``'s outputs, cached (tests/reference_cache.py) by ``key_parts``, the reference
    script and the reference environment."""
    with open(REFERENCE_SCRIPT, encoding="utf-8") as f:
        script = f.read()
    return cached("hf-reference", [script, interpreter(reference_python()), *key_parts], produce, folder=folder)


def sts_texts():
    """Sentences and pairs of the shared STS-B test file, plus edge cases: Latin text with
    accents, an empty text, and texts longer than the sentence-transformers folder's 48 tokens."""
    with open(
        os.path.join(os.path.dirname(SHARED_VOCAB), "..", "senteval_cn", "STS-B", "STS-B.test.data"), encoding="utf-8"
    ) as f:
        rows = [line.rstrip("\n").split("\t") for line in f][:40]
    long_text = "".join(row[0] for row in rows[:4])
    sentences = [row[0] for row in rows] + ["Café au LAIT, naïve résumé", "", long_text]
    pairs = [(row[0], row[1]) for row in rows] + [("Café", "CAFÉ 咖啡"), (long_text, rows[0][1])]
    return {"sentences": sentences, "pairs": pairs}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(root of the reference folders, their reference outputs, the texts)."""
    root = tmp_path_factory.mktemp("hf")
    texts = sts_texts()
    (root / "texts.json").write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    # the folders made, with reference.npz, come back from the cache too: the tests load them
    cached_reference(
        ["make", contents(SHARED_VOCAB), contents(root / "texts.json")],
        lambda: reference("make", root, SHARED_VOCAB, root / "texts.json"),
        folder=root,
    )
    return root, dict(np.load(root / "reference.npz")), texts


@pytest.mark.heavy
@pytest.mark.parametrize("folder", ["bert-safetensors", "bert-bin"])
@pytest.mark.parametrize("pooling, output", [("last-avg", "mean"), ("cls", "cls"), ("pooler", "pooler")])
def test_a_bert_folder_loads_into_every_pooling_with_transformers_outputs(folder, pooling, output, made):
    root, expected, texts = made
    encoder = build_encoder(None, str(root / folder), pooling=pooling)
    vocab = "tokenizer.json" if folder == "bert-safetensors" else "vocab.txt"
    tokenizer = SentenceTokenizer(root / folder / vocab, maxlen=128)
    ids = tokenizer.encode_all(texts["sentences"])
    # batches of 7 mix lengths, so most rows are padded
    vectors = batched_outputs(encoder, ids, batch_size=7)
    np.testing.assert_allclose(vectors, expected[output], atol=TOLERANCE, rtol=0)


def test_a_sentence_transformers_folder_encodes_as_sentence_transformers(made):
    root, expected, texts = made
    encoder = SentenceEncoder.load(str(root / "st-mean"))
    assert (encoder.spec.pooling, encoder.spec.maxlen) == ("last-avg", 48)
    np.testing.assert_allclose(encoder.encode(texts["sentences"]), expected["st"], atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("labels", [1, 2])
def test_a_sequence_classification_folder_scores_as_transformers(labels, made):
    root, expected, texts = made
    scorer = PairScorer.load(str(root / f"cross-{labels}"))
    scores = scorer.similarity(*zip(*texts["pairs"]))
    logits = expected[f"cross-{labels}"]
    if labels == 1:
        wanted = logits[:, 0]
    else:
        wanted = np.exp(logits[:, 1]) / np.exp(logits).sum(axis=1)
    np.testing.assert_allclose(scores, wanted, atol=TOLERANCE, rtol=0)


def test_import_export_import_keeps_every_weight_bit_for_bit(made, tmp_path):
    root, _, _ = made
    for source in ("st-mean", "cross-2"):
        out = tmp_path / source
        assert cosent_tf_main(["export", "--format", "hf", str(root / source), str(out)]) == 0
        before, after = read_hf_weights(root / source), read_hf_weights(out)
        kept = {name for name in before if not name.startswith("pooler") or source.startswith("cross")}
        assert kept <= set(after)
        for name in kept:
            np.testing.assert_array_equal(after[name], before[name], err_msg=name)


def trained(tiny_setup, kind, *options):
    """The model folder of a tiny CoSENT run, as scripts/cosent.py (or interact_cosent.py) trains it."""
    tmp_path, common = tiny_setup
    out = tmp_path / kind
    train_main(["STS-B", "--epochs", "1", "--output-dir", str(out), *options, *common], kind=kind, loss="cosent")
    return out / "model"


@pytest.mark.heavy
def test_models_trained_here_export_to_what_sentence_transformers_and_cross_encoder_load(tiny_setup, tmp_path):
    feature = trained(tiny_setup, "feature", "--pooling", "last-avg")
    interaction = trained(tiny_setup, "interaction", "--head", "pooler")
    for model_dir, name in ((feature, "st"), (interaction, "cross")):
        assert cosent_tf_main(["export", "--format", "hf", str(model_dir), str(tmp_path / name)]) == 0
    texts = sts_texts()
    (tmp_path / "texts.json").write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")

    def predict():
        reference(
            "predict",
            tmp_path / "out.npz",
            tmp_path / "texts.json",
            "--st",
            tmp_path / "st",
            "--cross",
            tmp_path / "cross",
        )
        return dict(np.load(tmp_path / "out.npz"))

    # the exports name their tmp source folders, which are hidden from the key
    exports = [contents(tmp_path / name, hide=[feature, interaction]) for name in ("st", "cross")]
    inputs = [contents(tmp_path / "texts.json"), *exports]
    theirs = cached_reference(["predict", *inputs], predict)
    ours = SentenceEncoder.load(str(feature)).encode(texts["sentences"])
    np.testing.assert_allclose(theirs["st"], ours, atol=TOLERANCE, rtol=0)
    scores = PairScorer.load(str(interaction)).similarity(*zip(*texts["pairs"]))
    np.testing.assert_allclose(theirs["cross"], scores, atol=TOLERANCE, rtol=0)
