import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cosent_tf import ConfigError, PairScorer, SentenceEncoder, SentenceTokenizer
from cosent_tf.backend import keras, tf
from cosent_tf.cli import main
from cosent_tf.data.pipeline import pair_segment_ids
from cosent_tf.export.huggingface import HF_FORMATS
from cosent_tf.export.savedmodel import SIGNATURES, export_saved_model, in_length_buckets
from cosent_tf.models.kinds import KINDS
from cosent_tf.models.sources import open_model_folder
from cosent_tf.models.spec import read_spec
from tests.export.conftest import EXPORTED, made
from tests.export.test_graph_tokenization import EDGE_CASES, shared_test_sentences
from tests.helpers import ROOT, SHARED_DATA, make_model_dir, requires_shared_data, write_config

# One process serves every string export of this module: what a server that imports TensorFlow and
# tensorflow-text only gets needs an interpreter without cosent_tf, Keras or bert4keras loaded.
# Each request's failure is written beside its outputs, so that only its own test fails.
SERVE_WITH_TEXT_OPS = """
import json, sys, traceback
import numpy as np
import tensorflow as tf
import tensorflow_text  # registers the WordPiece op
for request in json.load(open(sys.argv[1], encoding="utf-8")):
    try:
        signatures = tf.saved_model.load(request["saved_model"]).signatures
        key, strings, ids = request["key"], request["strings"], request["ids"]
        result = signatures["serving_default"](**{name: tf.constant(texts) for name, texts in strings.items()})
        empty = signatures["serving_default"](**{name: tf.constant([], tf.string) for name in strings})
        assert empty[key].shape[0] == empty["truncated"].shape[0] == 0, "an empty request must give empty outputs"
        by_ids = signatures[request["ids_signature"]](**{n: tf.constant(v, dtype=tf.int32) for n, v in ids.items()})
        np.savez(request["output"], strings=result[key].numpy(), truncated=result["truncated"].numpy(),
                 ids=by_ids[key].numpy())
    except Exception:
        open(request["output"] + ".error", "w", encoding="utf-8").write(traceback.format_exc())
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


def serving_request(saved_model, strings, token_ids, key, ids_signature, sep_id=None):
    """What to ask a string SavedModel: the ``key`` output of ``serving_default`` on ``strings``
    (input name -> texts) and its ``truncated`` flags, and of ``ids_signature`` on the padded
    ``token_ids`` (segment ids 0; with ``sep_id``, a pair's: 1 on its second text)."""
    padded = padded_batch(token_ids)
    segments = np.zeros_like(padded) if sep_id is None else pair_segment_ids(padded, sep_id).numpy()
    ids = {"token_ids": padded.tolist(), "segment_ids": segments.tolist()}
    return {"saved_model": str(saved_model), "strings": strings, "ids": ids, "key": key, "ids_signature": ids_signature}


def serve_all(requests, folder):
    """Each request's answers from one process that imports only TensorFlow and tensorflow-text:
    name -> (strings' outputs, truncated, ids' outputs), or the text of the error it raised."""
    for name, request in requests.items():
        request["output"] = str(folder / f"{name}.npz")
    (folder / "requests.json").write_text(json.dumps(list(requests.values()), ensure_ascii=False), encoding="utf-8")
    command = [sys.executable, "-c", SERVE_WITH_TEXT_OPS, str(folder / "requests.json")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=server_environment())
    assert result.returncode == 0, result.stderr[-3000:]
    answers = {}
    for name, request in requests.items():
        error = folder / f"{name}.npz.error"
        if error.exists():
            answers[name] = error.read_text(encoding="utf-8")
        else:
            served = np.load(request["output"])
            answers[name] = (served["strings"], served["truncated"], served["ids"])
    return answers


def answer(served, name):
    got = served[name]
    assert not isinstance(got, str), f"serving {name} failed:\n{got[-3000:]}"
    return got


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


EMBEDDINGS = [
    ("cls", "float32"),
    ("last-avg", "bf16"),
]  # cls: the first-token path of the last block; last-avg: the masked mean
HEADS = ["score", "softmax"]
SENTENCES = ["花呗如何还钱", "花呗怎么还款", "今天天气怎么样", "我想开通借呗", "借呗的额度是多少"]


def embedded_sentences():
    return shared_test_sentences()[0][::50] + EDGE_CASES  # token parity on all of them: test_graph_tokenization


def scored_pairs():
    _, pairs = shared_test_sentences()
    return pairs[0].texts_a[:500] + EDGE_CASES, pairs[0].texts_b[:500] + EDGE_CASES[::-1]


def folder_tokenizer(model_dir):
    """The model folder's tokenizer, without building its model."""
    spec = read_spec(str(model_dir))
    return SentenceTokenizer(open_model_folder(str(model_dir)), spec.maxlen, spec.word_level, spec.do_lower_case)


@pytest.fixture(scope="module")
def own_exports(tmp_path_factory):
    """The string exports only this module reads, by name (``embed-<pooling>``: feature models of
    maxlen 64, exported at the precisions of :data:`EMBEDDINGS`; ``pairs-softmax``: an interaction
    model read at [CLS], maxlen 24): (model folder, export, what ``export_saved_model`` returned)."""
    root = tmp_path_factory.mktemp("savedmodel-exports")
    keras.utils.set_random_seed(1234)  # module fixtures run before the suite's seeding one
    # with dropout in the config, as every real BERT has: bert4keras makes its attention dropout
    # while tracing, so saving must trace under the model's own (here bfloat16) policy
    with_dropout = write_config(root / "dropout.json", attention_probs_dropout_prob=0.1, hidden_dropout_prob=0.1)
    tiny = write_config(root / "tiny.json")
    made_here = {}
    for pooling, precision in EMBEDDINGS:
        model_dir, out = root / f"embed-{pooling}", root / f"embed-{pooling}-exported"
        make_model_dir(model_dir, with_dropout, pooling=pooling, maxlen=64)
        made_here[f"embed-{pooling}"] = (model_dir, out, export_saved_model(model_dir, out, precision=precision))
    model_dir, out = root / "pairs-softmax", root / "pairs-softmax-exported"
    make_model_dir(model_dir, tiny, kind="interaction", head="softmax", maxlen=24)
    made_here["pairs-softmax"] = (model_dir, out, export_saved_model(model_dir, out))
    return made_here


@pytest.fixture(scope="module")
def pair_exports(own_exports, interaction_model_folder, interaction_strings):
    """head -> (interaction model folder, its string export, maxlen 24): ``softmax`` this module's, read
    at [CLS] without pair segments; ``score`` the zoo's (tests/export/conftest.py, exported as
    ``export_saved_model`` exports by default), read through the pooler with pair segments. Between
    them, both ways the string graph gives a pair its segment ids (the export's only difference
    between interaction models but the head), and each head: one export fewer than one per head."""
    return {
        "softmax": own_exports["pairs-softmax"][:2],
        "score": (interaction_model_folder, interaction_strings / EXPORTED),
    }


def ids_client(kind, ids_export):
    """A client of the zoo's ids export of ``kind``: it tokenises the test texts with the vocabulary
    and the settings that the export carries; its inputs for the ids and the string exports."""
    extra = ids_export / EXPORTED / "assets.extra"
    info = json.loads((extra / "cosent_model.json").read_text(encoding="utf-8"))
    tokenizer = SentenceTokenizer(str(extra / "vocab.txt"), info["maxlen"], do_lower_case=info["do_lower_case"])
    texts = SENTENCES + EDGE_CASES
    if kind == "feature":
        names, key = {"sentences": texts}, "embeddings"
        token_ids = padded_batch(tokenizer.encode_all(texts))
        segment_ids = np.zeros_like(token_ids)
    else:
        names, key = {"first": texts, "second": texts[::-1]}, "scores"
        token_ids = padded_batch(tokenizer.encode_pairs(texts, texts[::-1]))
        segment_ids = pair_segment_ids(token_ids, info["sep_id"]).numpy()
    return {"info": info, "names": names, "key": key, "token_ids": token_ids, "segment_ids": segment_ids}


@pytest.fixture(scope="module")
def id_clients(feature_ids, interaction_ids):
    return {"feature": ids_client("feature", feature_ids), "interaction": ids_client("interaction", interaction_ids)}


@pytest.fixture(scope="module")
def served_with_text_ops(own_exports, pair_exports, feature_strings, interaction_strings, id_clients, tmp_path_factory):
    """Every string export's answers to its tests' requests, from one process (:func:`serve_all`)."""
    requests = {}
    if os.path.isdir(SHARED_DATA):  # the texts of the embed and pairs tests; without it they skip
        for pooling, _ in EMBEDDINGS:
            model_dir, out, _ = own_exports[f"embed-{pooling}"]
            sentences = embedded_sentences()
            ids = folder_tokenizer(model_dir).encode_all(sentences)
            requests[f"embed-{pooling}"] = serving_request(
                out, {"sentences": sentences}, ids, "embeddings", "encode_ids"
            )
        for head in HEADS:
            model_dir, out = pair_exports[head]
            firsts, seconds = scored_pairs()
            tokenizer = folder_tokenizer(model_dir)
            ids = tokenizer.encode_pairs(firsts, seconds)
            sep_id = tokenizer.sep_id if read_spec(str(model_dir)).pair_segments else None
            requests[f"pairs-{head}"] = serving_request(
                out, {"first": firsts, "second": seconds}, ids, "scores", "score_ids", sep_id
            )
    for kind, strings, ids_signature in (
        ("feature", feature_strings, "encode_ids"),
        ("interaction", interaction_strings, "score_ids"),
    ):
        client = id_clients[kind]
        unpadded = [row[row != 0].tolist() for row in client["token_ids"]]
        requests[f"ids-{kind}"] = serving_request(
            strings / EXPORTED, client["names"], unpadded, client["key"], ids_signature
        )
    return serve_all(requests, tmp_path_factory.mktemp("served-with-text-ops"))


@requires_shared_data
@pytest.mark.slow
@pytest.mark.parametrize("pooling, precision", EMBEDDINGS)
def test_saved_model_embeds_raw_strings_like_sentence_encoder(pooling, precision, own_exports, served_with_text_ops):
    model_dir, exported, signatures = own_exports[f"embed-{pooling}"]
    assert signatures == ["encode_ids", "serving_default"]
    sentences = embedded_sentences()
    encoder = SentenceEncoder.load(model_dir, precision)
    ids = encoder.tokenizer.encode_all(sentences)
    served, truncated, served_ids = answer(served_with_text_ops, f"embed-{pooling}")
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
    info = json.loads((exported / "assets.extra" / "cosent_model.json").read_text())
    assert info["kind"] == "feature" and info["maxlen"] == 64 and info["precision"] == precision


@requires_shared_data
@pytest.mark.slow
@pytest.mark.parametrize("head", HEADS)
def test_saved_model_scores_pairs_like_pair_scorer(head, pair_exports, served_with_text_ops):
    model_dir, _ = pair_exports[head]
    firsts, seconds = scored_pairs()
    scorer = PairScorer.load(model_dir)
    served, truncated, served_ids = answer(served_with_text_ops, f"pairs-{head}")
    expected = scorer.score(firsts, seconds)
    full_lengths = [len(scorer.tokenizer._tokenizer.encode(a, b)[0]) for a, b in zip(firsts, seconds)]
    np.testing.assert_array_equal(truncated, np.array(full_lengths) > 24)
    assert 0 < truncated.sum() == scorer.tokenizer.last_truncation.truncated
    assert np.abs(served - expected).max() < 1e-5 and np.abs(served_ids - expected).max() < 1e-5
    if head == "softmax":  # the score is P(similar)
        assert np.all((served >= 0) & (served <= 1))


@pytest.mark.slow
def test_saved_model_cli_lists_the_string_signature(feature_strings):
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    # saved_model_cli is its own program: what it shows is what it prints
    result = subprocess.run(
        [cli, "show", "--all", "--dir", str(feature_strings / EXPORTED)], capture_output=True, text=True, timeout=600
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


# One process for what a server with TensorFlow alone does with the exports: tensorflow-text's ops
# must never have been registered in it. The string export's failing load comes last, so that
# nothing it leaves behind touches the answers before it.
SERVE_WITHOUT_TEXT_OPS = """
import json, sys, traceback
import numpy as np
import tensorflow as tf
requests, must_not_load, failure = json.load(open(sys.argv[1], encoding="utf-8")), sys.argv[2], sys.argv[3]
for request in requests:
    try:
        columns = np.load(request["inputs"])
        served = tf.saved_model.load(request["saved_model"]).signatures["serving_default"]
        result = served(token_ids=tf.constant(columns["token_ids"]), segment_ids=tf.constant(columns["segment_ids"]))
        np.save(request["output"], result[request["key"]].numpy())
    except Exception:
        open(request["output"] + ".error", "w", encoding="utf-8").write(traceback.format_exc())
assert "tensorflow_text" not in sys.modules, "tensorflow_text was imported"
try:
    tf.saved_model.load(must_not_load)
except Exception:
    open(failure, "w", encoding="utf-8").write(traceback.format_exc())
"""
MUST_NOT_LOAD = "must-not-load"


@pytest.fixture(scope="module")
def served_without_text_ops(feature_ids, interaction_ids, feature_strings, id_clients, tmp_path_factory):
    """Each ids export's ``serving_default`` answers to its client's inputs, and under
    :data:`MUST_NOT_LOAD` the error of loading the feature string export (None if it loaded)."""
    folder = tmp_path_factory.mktemp("served-without-text-ops")
    requests = []
    for kind, ids_export in (("feature", feature_ids), ("interaction", interaction_ids)):
        client = id_clients[kind]
        np.savez(folder / f"{kind}.npz", token_ids=client["token_ids"], segment_ids=client["segment_ids"])
        inputs, output = str(folder / f"{kind}.npz"), str(folder / f"{kind}-served.npy")
        requests.append({"saved_model": str(ids_export / EXPORTED), "inputs": inputs, "output": output})
        requests[-1]["key"] = client["key"]
    (folder / "requests.json").write_text(json.dumps(requests), encoding="utf-8")
    failure = folder / "load-failure.txt"
    command = [sys.executable, "-c", SERVE_WITHOUT_TEXT_OPS, str(folder / "requests.json")]
    command += [str(feature_strings / EXPORTED), str(failure)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, env=server_environment())
    assert result.returncode == 0, result.stderr[-3000:]
    answers = {MUST_NOT_LOAD: failure.read_text(encoding="utf-8") if failure.exists() else None}
    for kind in ("feature", "interaction"):
        error = folder / f"{kind}-served.npy.error"
        answers[kind] = error.read_text(encoding="utf-8") if error.exists() else np.load(folder / f"{kind}-served.npy")
    return answers


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["feature", "interaction"])
def test_an_ids_export_serves_without_tensorflow_text_as_the_string_export_and_the_tools(
    kind, request, id_clients, served_with_text_ops, served_without_text_ops, tmp_path
):
    # the zoo's models: interaction read through the pooler, so the pairs carry segment ids that the
    # client computes; their ids exports written by `cosent-tf export --inputs ids`, as users ask for it
    model_dir = request.getfixturevalue(f"{kind}_model_folder")
    assert made(request.getfixturevalue(f"{kind}_ids"))["status"] == 0
    client = id_clients[kind]
    assert client["info"]["inputs"] == "ids"
    if kind == "interaction":
        assert client["info"]["pair_segments"]
    from_ids = served_without_text_ops[kind]
    assert not isinstance(from_ids, str), f"serving without tensorflow-text failed:\n{from_ids[-3000:]}"
    from_strings, _, _ = answer(served_with_text_ops, f"ids-{kind}")
    np.testing.assert_allclose(from_ids, from_strings, atol=1e-5)
    if kind == "feature":
        (tmp_path / "sentences.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
        assert main(["encode", str(model_dir), str(tmp_path / "sentences.txt"), str(tmp_path / "vectors.npy")]) == 0
        np.testing.assert_allclose(from_ids[: len(SENTENCES)], np.load(tmp_path / "vectors.npy"), atol=1e-5)
        # the string export needs the ops; without them, loading fails with what the guide says
        failed = served_without_text_ops[MUST_NOT_LOAD]
        assert failed is not None, "the string export loaded without tensorflow-text"
        message = "Op type not registered 'WordpieceTokenizeWithOffsets'"
        assert message in failed
        with open(os.path.join(ROOT, "docs", "guide.md"), encoding="utf-8") as guide:
            assert message in guide.read()
    else:
        firsts, seconds = client["names"]["first"], client["names"]["second"]
        np.testing.assert_allclose(from_ids, PairScorer.load(model_dir).score(firsts, seconds), atol=1e-5)
