"""What a test body written once over both Kerases uses to read what a run wrote: the sentence
encoder of this process's Keras (the Keras 2 engine's :class:`cosent_tf.SentenceEncoder` or
:class:`cosent_tf.keras3.encoder.SentenceEncoder`), and the figures both give the same way.

Nothing here imports a Keras at import time: the Keras 3 suite star-imports the bodies that use it.
"""

import os

import numpy as np

from cosent_tf.environment import keras3_process


def sentence_encoder(folder):
    """The model folder ``folder`` loaded as this process's Keras loads a sentence encoder."""
    if keras3_process():
        from cosent_tf.keras3.encoder import SentenceEncoder
    else:
        from cosent_tf import SentenceEncoder
    return SentenceEncoder.load(os.fspath(folder))


def cosines(encoder, texts_a, texts_b, dim=None):
    """The cosine of each pair of ``texts_a`` and ``texts_b``, of their vectors cut to their first
    ``dim`` dimensions (all of them where None), from either Keras's encoder."""
    vectors_a, vectors_b = (encoder.encode(list(texts), normalize=False)[:, :dim] for texts in (texts_a, texts_b))
    vectors_a, vectors_b = (v / np.linalg.norm(v, axis=1, keepdims=True) for v in (vectors_a, vectors_b))
    return np.sum(vectors_a * vectors_b, axis=1)


def shipped_threshold(folder):
    """The threshold of the match decision the model folder ``folder`` ships (its decision.json)."""
    from cosent_tf.calibration import read_decision

    decision = read_decision(folder)
    assert decision is not None, f"{folder} ships no match decision"
    return decision.threshold()


def write_random_checkpoint(folder, config_path, vocab_path):
    """A Google-format checkpoint folder ``folder`` (``bert_model.ckpt``, its config and
    vocabulary) of a transformer built from ``config_path`` with random weights, by this process's
    Keras: bert4keras's on Keras 2, keras-hub's backbone on Keras 3."""
    config_path, vocab_path = os.fspath(config_path), os.fspath(vocab_path)
    if keras3_process():
        from cosent_tf.keras3.backbones import backbone_from_config, google_arrays
        from cosent_tf.models.checkpoint_files import read_config, write_checkpoint_folder_arrays

        config = read_config(config_path)
        os.makedirs(folder)
        write_checkpoint_folder_arrays(
            os.fspath(folder), google_arrays(backbone_from_config(config)), config, vocab_path
        )
    else:
        from cosent_tf import build_encoder, save_checkpoint

        save_checkpoint(build_encoder(config_path), folder, config_path, vocab_path=vocab_path)
