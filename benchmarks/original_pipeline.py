"""Contestant (b): the original bert4keras experiment (bojone/CoSENT ``cosent.py``) re-created.

Written from the published script's description (see ../shared/docs/cosent-reference.md),
with nothing of this package on its path:

* train: a ``DataGenerator`` that tokenises each pair on the fly with bert4keras's
  ``Tokenizer`` and pads each batch with ``sequence_padding``, ``forfit()`` into
  ``fit``; the encoder is ``build_transformer_model`` with a ``Lambda`` taking [CLS];
  the loss is the script's interleaved CoSENT written with ``K`` ops; Adam at lr 2e-5
  (Keras's: bert4keras's own Adam uses optimizer internals that tf-keras 2.21 no
  longer has). Batches of 32 pairs in the generator's random order.
* encode: ``encoder.predict`` called once per batch of 64 (each padded to its own
  longest), in input order; ``sorted`` sorts the sentences by length first.
* bf16: ``mixed_bfloat16`` set before building; the [CLS] vector is cast to float32
  (the original has no bf16 mode; without the cast the loss mixes dtypes and fails).

It runs with TensorFlow's defaults (no allocator or thread settings), as the original.
"""

import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from bert4keras.backend import K, keras  # noqa: E402
from bert4keras.models import build_transformer_model  # noqa: E402
from bert4keras.snippets import DataGenerator, sequence_padding  # noqa: E402
from bert4keras.tokenizers import Tokenizer  # noqa: E402

import common  # noqa: E402

tokenizer = Tokenizer(common.vocab_path(), do_lower_case=True)


class data_generator(DataGenerator):  # noqa: N801 (the original's name)
    def __iter__(self, random=False):
        batch_token_ids, batch_segment_ids, batch_labels = [], [], []
        for is_end, (text1, text2, label) in self.sample(random):
            for text in [text1, text2]:
                token_ids, segment_ids = tokenizer.encode(text, maxlen=common.MAXLEN)
                batch_token_ids.append(token_ids)
                batch_segment_ids.append(segment_ids)
                batch_labels.append([label])
            if len(batch_token_ids) == self.batch_size * 2 or is_end:
                batch_token_ids = sequence_padding(batch_token_ids)
                batch_segment_ids = sequence_padding(batch_segment_ids)
                batch_labels = sequence_padding(batch_labels)
                yield [batch_token_ids, batch_segment_ids], batch_labels
                batch_token_ids, batch_segment_ids, batch_labels = [], [], []


def cosent_loss(y_true, y_pred):
    y_true = y_true[::2, 0]
    y_true = K.cast(y_true[:, None] < y_true[None, :], K.floatx())
    y_pred = K.l2_normalize(y_pred, axis=1)
    y_pred = K.sum(y_pred[::2] * y_pred[1::2], axis=1) * common.SCALE
    y_pred = y_pred[:, None] - y_pred[None, :]
    y_pred = K.reshape(y_pred - (1 - y_true) * 1e12, [-1])
    y_pred = K.concatenate([[0], y_pred], axis=0)
    return K.logsumexp(y_pred)


def build_encoder(precision):
    if precision == "bf16":
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    bert = build_transformer_model(common.MODEL_CONFIG, None, model="bert", return_keras_model=False)
    output = keras.layers.Lambda(lambda x: K.cast(x[:, 0], "float32"))(bert.model.output)
    return keras.models.Model(bert.model.inputs, output)


def train(precision):
    texts_a, texts_b, labels = common.train_pairs()
    np.random.seed(0)  # DataGenerator shuffles with numpy's global generator
    keras.utils.set_random_seed(0)
    encoder = build_encoder(precision)
    encoder.compile(loss=cosent_loss, optimizer=keras.optimizers.Adam(common.LEARNING_RATE))
    train_generator = data_generator(list(zip(texts_a, texts_b, labels)), common.BATCH_PAIRS)
    clock, losses = common.StepClock(), []
    encoder.fit(
        train_generator.forfit(),
        steps_per_epoch=len(train_generator),
        epochs=1,
        callbacks=[common.keras_step_callback(keras, clock, losses)],
        verbose=0,
    )
    return common.train_figures(clock, losses)


def encoder_function(precision, sort_by_length):
    encoder = build_encoder(precision)

    def run(sentences):
        token_ids = [tokenizer.encode(s, maxlen=common.MAXLEN)[0] for s in sentences]
        order = np.argsort([len(t) for t in token_ids], kind="stable") if sort_by_length else np.arange(len(token_ids))
        vectors = []
        for start in range(0, len(order), common.ENCODE_BATCH):
            batch = sequence_padding([token_ids[i] for i in order[start : start + common.ENCODE_BATCH]])
            vectors.append(encoder.predict([batch, np.zeros_like(batch)], verbose=0))
        restored = np.empty((len(order), vectors[0].shape[1]), np.float32)
        restored[order] = np.concatenate(vectors)
        return restored

    return run


def encode(precision):
    return common.encode_figures(encoder_function(precision, False), common.test_sentences())


def encode_sorted(precision):
    return common.encode_figures(encoder_function(precision, True), common.test_sentences())


if __name__ == "__main__":
    common.contestant_main({"train": train, "encode": encode, "encode_sorted": encode_sorted})
