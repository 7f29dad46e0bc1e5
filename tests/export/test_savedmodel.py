import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cosent_tf import ConfigError, PairScorer, SentenceEncoder, SentenceTokenizer
from cosent_tf.backend import tf
from cosent_tf.cli import main
from cosent_tf.data.pipeline import pair_segment_ids
from cosent_tf.export.huggingface import HF_FORMATS
from cosent_tf.export.savedmodel import SIGNATURES, export_saved_model, in_length_buckets
from cosent_tf.models.kinds import KINDS
from tests.export.test_graph_tokenization import EDGE_CASES, shared_test_sentences
from tests.helpers import ROOT, make_model_dir, requires_shared_data, write_config

# Runs in a fresh interpreter that imports TensorFlow and tensorflow-text only.
SERVE = """
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # registers the WordPiece op
saved_model, inputs, output, key, ids_signature = sys.argv[1:6]
signatures = tf.saved_model.load(saved_model).signatures
columns = json.load(open(inputs, encoding="utf-8"))
result = signatures["serving_default"](**{name: tf.constant(texts) for name, texts in columns["strings"].items()})
empty = signatures["serving_default"](**{name: tf.constant([], tf.string) for name in columns["strings"]})
assert empty[key].shape[0] == empty["truncated"].shape[0] == 0, "an empty request must give empty outputs"
ids = signatures[ids_signature](**{name: tf.constant(v, dtype=tf.int32) for name, v in columns["ids"].items()})
np.savez(output, strings=result[key].numpy(), truncated=result["truncated"].numpy(), ids=ids[key].numpy())
extra = {"cosent_tf", "bert4keras", "tf_keras"} & set(sys.modules)
assert not extra, f"serving imported {extra}"
"""


def padded_batch(token_ids):
    """Rows of token ids as one int32 matrix, padded with 0 (the padding the models mask)."""
    padded = np.zeros((len(token_ids), max(len(t) for t in token_ids)), np.int32)
    for row, ids in enumerate(token_ids):
        padded[row, : len(ids)] = ids
    return padded


def server_environment():
    """A server's environment: none of the Keras 2 switches cosent_tf sets for itself."""
    return {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "TF_KERAS")}


def serve(saved_model, strings, token_ids, tmp_path, key, ids_signature):
    """What a process that imports only TensorFlow gets from the SavedModel: the ``key`` output of
    ``serving_default`` on ``strings`` and its ``truncated`` flags, and of ``ids_signature`` on
    the padded ``token_ids`` (segment ids 0)."""
    padded = padded_batch(token_ids)
    columns = {"strings": strings, "ids": {"token_ids": padded.tolist(), "segment_ids": np.zeros_like(padded).tolist()}}
    (tmp_path / "inputs.json").write_text(json.dumps(columns, ensure_ascii=False), encoding="utf-8")
    env = server_environment()
    command = [
        sys.executable,
        "-c",
        SERVE,
        str(saved_model),
        str(tmp_path / "inputs.json"),
        str(tmp_path / "served.npz"),
        key,
        ids_signature,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    served = np.load(tmp_path / "served.npz")
    return served["strings"], served["truncated"], served["ids"]


def _call_widths_and_sums(token_ids, segment_ids):
    """A stand-in model: per row, the width of the batch it came in, its ids' sum, its segments' sum."""
    width = tf.fill([tf.shape(token_ids)[0]], tf.cast(tf.shape(token_ids)[1], tf.float32))
    sums = [tf.cast(tf.reduce_sum(ids, axis=1), tf.float32) for ids in (token_ids, segment_ids)]
    return tf.stack([width, *sums], axis=1)


def test_length_buckets_cut_each_call_to_its_longest_row_and_keep_input_order():
    lengths = [3, 20, 9, 1, 13, 0, 8, 30, 12]
    token_ids = np.zeros((len(lengths), 32), np.int32)
    for row, length in enumerate(lengths):
        token_ids[row, :length] = np.arange(1, length + 1) + 100 * row
    token_ids[2, 4] = 0  # a zero inside a row: the row's length is still its last token's position
    segment_ids = token_ids % 3
    bucketed = tf.function(lambda ids, segments: in_length_buckets(_call_widths_and_sums, ids, segments, (8, 12, 16)))
    widths, id_sums, segment_sums = bucketed(token_ids, segment_ids).numpy().T
    # buckets up to 8 tokens: rows of 3, 1, 0, 8; up to 12: 9, 12; up to 16: 13; longer: 20, 30
    np.testing.assert_array_equal(widths, [8, 30, 12, 8, 13, 8, 8, 30, 12])
    np.testing.assert_array_equal(id_sums, token_ids.sum(axis=1))  # no token cut, rows in input order
    np.testing.assert_array_equal(segment_sums, segment_ids.sum(axis=1))
    empty = bucketed(np.zeros((0, 0), np.int32), np.zeros((0, 0), np.int32))
    assert empty.shape == (0, 3)


@requires_shared_data
@pytest.mark.slow
@pytest.mark.parametrize(
    "pooling, precision", [("cls", "float32"), ("last-avg", "bf16")]
)  # cls: the first-token path of the last block; last-avg: the masked mean
def test_saved_model_embeds_raw_strings_like_sentence_encoder(pooling, precision, tmp_path):
    # with dropout in the config, as every real BERT has: bert4keras makes its attention dropout
    # while tracing, so saving must trace under the model's own (here bfloat16) policy
    config = write_config(tmp_path / "config.json", attention_probs_dropout_prob=0.1, hidden_dropout_prob=0.1)
    make_model_dir(tmp_path / "model", config, pooling=pooling, maxlen=64)
    exported = export_saved_model(tmp_path / "model", tmp_path / "exported", precision=precision)
    assert exported == ["encode_ids", "serving_default"]
    sentences = shared_test_sentences()[0][::50] + EDGE_CASES  # token parity on all of them: test_graph_tokenization
    encoder = SentenceEncoder.load(tmp_path / "model", precision)
    ids = encoder.tokenizer.encode_all(sentences)
    served, truncated, served_ids = serve(
        tmp_path / "exported", {"sentences": sentences}, ids, tmp_path, "embeddings", "encode_ids"
    )
    expected = encoder.encode(sentences)
    full_lengths = [len(encoder.tokenizer._tokenizer.encode(s)[0]) for s in sentences]
    np.testing.assert_array_equal(truncated, np.array(full_lengths) > 64)
    assert truncated.sum() == encoder.tokenizer.last_truncation.truncated
    assert len(set(map(len, ids))) > 10  # rows of many lengths: several buckets, each cut to its own width
    assert served.shape == expected.shape == (len(sentences), 16)
    # bf16: the served graph batches rows by length, the encoder by its own batches; on some CPUs a
    # batch's shape picks another bf16 kernel, whose rounding may differ by a bf16 unit (2**-8)
    tolerance = {"float32": 1e-5, "bf16": 2**-8}[precision]
    assert np.abs(served - expected).max() < tolerance
    assert np.abs(served_ids - expected).max() < tolerance  # padded to the batch's longest: padding is masked
    info = json.loads((tmp_path / "exported" / "assets.extra" / "cosent_model.json").read_text())
    assert info["kind"] == "feature" and info["maxlen"] == 64 and info["precision"] == precision


@requires_shared_data
@pytest.mark.slow
@pytest.mark.parametrize("head", ["score", "softmax"])
def test_saved_model_scores_pairs_like_pair_scorer(head, tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config, kind="interaction", head=head, maxlen=24)
    export_saved_model(tmp_path / "model", tmp_path / "exported")
    _, pairs = shared_test_sentences()
    firsts, seconds = pairs[0].texts_a[:500] + EDGE_CASES, pairs[0].texts_b[:500] + EDGE_CASES[::-1]
    scorer = PairScorer.load(tmp_path / "model")
    ids = scorer.tokenizer.encode_pairs(firsts, seconds)
    served, truncated, served_ids = serve(
        tmp_path / "exported", {"first": firsts, "second": seconds}, ids, tmp_path, "scores", "score_ids"
    )
    expected = scorer.score(firsts, seconds)
    full_lengths = [len(scorer.tokenizer._tokenizer.encode(a, b)[0]) for a, b in zip(firsts, seconds)]
    np.testing.assert_array_equal(truncated, np.array(full_lengths) > 24)
    assert 0 < truncated.sum() == scorer.tokenizer.last_truncation.truncated
    assert np.abs(served - expected).max() < 1e-5 and np.abs(served_ids - expected).max() < 1e-5
    if head == "softmax":  # the score is P(similar)
        assert np.all((served >= 0) & (served <= 1))


@pytest.mark.slow
def test_saved_model_cli_lists_the_string_signature(tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config)
    export_saved_model(tmp_path / "model", tmp_path / "exported")
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    result = subprocess.run(
        [cli, "show", "--all", "--dir", str(tmp_path / "exported")], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    serving = result.stdout.split("signature_def['serving_default']")[1]
    assert "inputs['sentences']" in serving and "DT_STRING" in serving and "outputs['embeddings']" in serving


def test_word_level_models_are_refused_and_nothing_is_written(tmp_path):
    config = write_config(tmp_path / "config.json")
    make_model_dir(tmp_path / "model", config)
    spec_path = tmp_path / "model" / "cosent_model.json"
    spec = json.loads(spec_path.read_text())
    spec.update(architecture="wobert", word_level=True)
    spec_path.write_text(json.dumps(spec))
    with pytest.raises(ConfigError, match="pre-tokenises with jieba, which cannot run inside a TensorFlow graph"):
        export_saved_model(tmp_path / "model", tmp_path / "exported")
    assert not (tmp_path / "exported").exists()


def test_every_model_kind_has_signatures_and_a_hugging_face_format():
    assert set(SIGNATURES) == set(HF_FORMATS) == set(KINDS)
    for by_inputs in SIGNATURES.values():
        assert set(by_inputs) == {"strings", "ids"}
        for served in by_inputs.values():
            assert "serving_default" in served  # what a server calls without naming a signature


def test_export_refuses_token_id_inputs_for_a_hugging_face_folder(tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config)
    with pytest.raises(SystemExit, match="--inputs is for --format savedmodel"):
        main(["export", "--format", "hf", "--inputs", "ids", str(tmp_path / "model"), str(tmp_path / "hf")])
    assert not (tmp_path / "hf").exists()


# Runs in a fresh interpreter that imports TensorFlow alone: a server without tensorflow-text's ops.
SERVE_IDS_WITHOUT_TEXT_OPS = """
import sys
import numpy as np
import tensorflow as tf
saved_model, inputs, output, key = sys.argv[1:5]
columns = np.load(inputs)
served = tf.saved_model.load(saved_model).signatures["serving_default"]
result = served(token_ids=tf.constant(columns["token_ids"]), segment_ids=tf.constant(columns["segment_ids"]))
np.save(output, result[key].numpy())
assert "tensorflow_text" not in sys.modules, "tensorflow_text was imported"
"""
LOAD_WITHOUT_TEXT_OPS = "import sys, tensorflow as tf; tf.saved_model.load(sys.argv[1])"

SENTENCES = ["花呗如何还钱", "花呗怎么还款", "今天天气怎么样", "我想开通借呗", "借呗的额度是多少"]


def without_text_ops(script, *args):
    command = [sys.executable, "-c", script, *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=server_environment())


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["feature", "interaction"])
def test_an_ids_export_serves_without_tensorflow_text_as_the_string_export_and_the_tools(kind, tiny_config, tmp_path):
    model_dir = tmp_path / "model"
    # interaction: read through the pooler, so the pairs carry segment ids that the client computes
    make_model_dir(model_dir, tiny_config, kind=kind, pooling="last-avg", head_input="pooler", maxlen=24)
    export_saved_model(model_dir, tmp_path / "strings")
    assert main(["export", "--inputs", "ids", str(model_dir), str(tmp_path / "ids")]) == 0  # as users ask for it
    # the client tokenises with the vocabulary and the settings that the export carries
    extra = tmp_path / "ids" / "assets.extra"
    info = json.loads((extra / "cosent_model.json").read_text(encoding="utf-8"))
    assert info["inputs"] == "ids"
    tokenizer = SentenceTokenizer(str(extra / "vocab.txt"), info["maxlen"], do_lower_case=info["do_lower_case"])
    if kind == "feature":
        texts, key, names = SENTENCES + EDGE_CASES, "embeddings", {"sentences": SENTENCES + EDGE_CASES}
        token_ids = padded_batch(tokenizer.encode_all(texts))
        segment_ids = np.zeros_like(token_ids)
    else:
        firsts, seconds = SENTENCES + EDGE_CASES, (SENTENCES + EDGE_CASES)[::-1]
        key, names = "scores", {"first": firsts, "second": seconds}
        token_ids = padded_batch(tokenizer.encode_pairs(firsts, seconds))
        assert info["pair_segments"]
        segment_ids = pair_segment_ids(token_ids, info["sep_id"]).numpy()
    np.savez(tmp_path / "ids.npz", token_ids=token_ids, segment_ids=segment_ids)
    result = without_text_ops(
        SERVE_IDS_WITHOUT_TEXT_OPS, tmp_path / "ids", tmp_path / "ids.npz", tmp_path / "out.npy", key
    )
    assert result.returncode == 0, result.stderr[-3000:]
    from_ids = np.load(tmp_path / "out.npy")
    ids_signature = "encode_ids" if kind == "feature" else "score_ids"
    unpadded = [row[row != 0] for row in token_ids]
    from_strings, _, _ = serve(tmp_path / "strings", names, unpadded, tmp_path, key, ids_signature)
    np.testing.assert_allclose(from_ids, from_strings, atol=1e-5)
    if kind == "feature":
        (tmp_path / "sentences.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
        assert main(["encode", str(model_dir), str(tmp_path / "sentences.txt"), str(tmp_path / "vectors.npy")]) == 0
        np.testing.assert_allclose(from_ids[: len(SENTENCES)], np.load(tmp_path / "vectors.npy"), atol=1e-5)
        # the string export needs the ops; without them, loading fails with what the guide says
        failed = without_text_ops(LOAD_WITHOUT_TEXT_OPS, tmp_path / "strings")
        assert failed.returncode != 0
        message = "Op type not registered 'WordpieceTokenizeWithOffsets'"
        assert message in failed.stderr
        with open(os.path.join(ROOT, "docs", "guide.md"), encoding="utf-8") as guide:
            assert message in guide.read()
    else:
        np.testing.assert_allclose(from_ids, PairScorer.load(model_dir).score(firsts, seconds), atol=1e-5)
