"""Contestant (a): this project's training engine and ``SentenceEncoder.encode``.

* train: what ``cosent_tf.training.engine.train`` runs per step for ``scripts/cosent.py``: token
  ids made once by ``SentenceTokenizer``, ``pair_dataset`` (length-grouped batches of 32
  pairs, each padded to its longest), ``build_encoder`` ([CLS]), ``CoSENTLoss(20)``,
  ``FusedAdam`` 2e-5, ``model.fit``. ``bf16`` trains under mixed_bfloat16 as ``--precision bf16``.
* encode: ``SentenceEncoder.load(folder, precision).encode(sentences, batch_size=64)``
  on a model folder written by ``save_model_dir``, tokenisation included.
* encode_frozen_weights: encode, in a process started with TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1
  (``run.py`` sets it), as README advises for processes that only encode or serve.
* encode_saved_model: the folder exported by ``export_saved_model(..., precision)`` and
  loaded with ``tf.saved_model.load``; its ``serving_default`` signature called on raw
  strings, 64 at a time in input order (as requests reach a server: nothing sorts them).
"""

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import cosent_tf as ct  # noqa: E402
from cosent_tf.backend import keras, tf  # noqa: E402
from cosent_tf.environment import weights_assumed_frozen  # noqa: E402
from cosent_tf.export.graph_tokenization import import_tensorflow_text  # noqa: E402

import common  # noqa: E402


def train(precision):
    texts_a, texts_b, labels = common.train_pairs()
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy("mixed_bfloat16" if precision == "bf16" else "float32")
    tokenizer = ct.SentenceTokenizer(common.vocab_path(), common.MAXLEN)
    dataset = ct.pair_dataset(
        tokenizer.encode_all(texts_a), tokenizer.encode_all(texts_b), labels, batch_size=common.BATCH_PAIRS, seed=0
    )
    model = ct.build_encoder(common.MODEL_CONFIG)
    model.compile(optimizer=ct.FusedAdam(common.LEARNING_RATE), loss=ct.CoSENTLoss(common.SCALE))
    clock, losses = common.StepClock(), []
    model.fit(dataset, epochs=1, callbacks=[common.keras_step_callback(keras, clock, losses)], verbose=0)
    return common.train_figures(clock, losses)


def save_random_model(folder):
    keras.utils.set_random_seed(0)
    ct.save_model_dir(
        folder,
        ct.build_encoder(common.MODEL_CONFIG),
        ct.ModelSpec("feature", maxlen=common.MAXLEN),
        common.MODEL_CONFIG,
        common.vocab_path(),
    )


def encode(precision):
    sentences = common.test_sentences()
    with tempfile.TemporaryDirectory() as folder:
        save_random_model(folder)
        encoder = ct.SentenceEncoder.load(folder, precision)

    def run(texts):
        return encoder.encode(texts, batch_size=common.ENCODE_BATCH, show_progress=False)

    return common.encode_figures(run, sentences)


def encode_frozen_weights(precision):
    if not weights_assumed_frozen():  # a process starts with it, as README's users' processes do
        raise SystemExit("start this job with TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 (benchmarks/run.py does)")
    return encode(precision)


def encode_saved_model(precision):
    import_tensorflow_text()  # registers the WordPiece op the exported graph holds
    sentences = common.test_sentences()
    with tempfile.TemporaryDirectory() as folder:
        model_dir, exported = os.path.join(folder, "model"), os.path.join(folder, "exported")
        save_random_model(model_dir)
        ct.export_saved_model(model_dir, exported, precision=precision)
        serve = tf.saved_model.load(exported).signatures["serving_default"]

        def run(texts):
            batches = (
                tf.constant(texts[i : i + common.ENCODE_BATCH]) for i in range(0, len(texts), common.ENCODE_BATCH)
            )
            return np.concatenate([serve(batch)["embeddings"].numpy() for batch in batches])

        return common.encode_figures(run, sentences)


if __name__ == "__main__":
    common.contestant_main(
        {
            "train": train,
            "encode": encode,
            "encode_frozen_weights": encode_frozen_weights,
            "encode_saved_model": encode_saved_model,
        }
    )
