"""Which weights decoupled weight decay skips, said once for both Kerases.

As is usual for BERT (and as the CoSENT journal paper's AdamW recipe does), decay skips the
embeddings (ALBERT's embedding-to-hidden mapping among them), the layer norms and the biases, and
decays every other weight (the blocks' and the pooler's kernels). The Keras 2 engine
(:func:`cosent_tf.optimizers.build_optimizer`) matches :data:`NOT_DECAYED` on bert4keras's variable
names; the Keras 3 trainer asks :func:`decayed` of each weight's Google checkpoint name (the names
both engines write, :func:`cosent_tf.keras3.backbones.weight_table`). The two spellings are one
rule: tests/keras3/test_training.py checks them against each other on every variable of a BERT
and an ALBERT that bert4keras builds. This module imports no Keras.
"""

from __future__ import annotations

import re

# bert4keras's variable names: its embedding layers (Embedding-Token, -Position, -Segment, -Norm
# and ALBERT's Embedding-Mapping), its norms (...-Norm/gamma, beta) and every bias.
NOT_DECAYED = (r"^Embedding-", r"-Norm/", r"/bias:")
# The same weights by Google checkpoint name: bert/embeddings/* (the embeddings and their norm),
# ALBERT's bert/encoder/embedding_hidden_mapping_in/*, every LayerNorm, and every bias.
NOT_DECAYED_GOOGLE = (r"^bert/embeddings/", r"/embedding_hidden_mapping_in/", r"LayerNorm", r"/bias$")


def decayed(google_name: str) -> bool:
    """Whether decoupled weight decay applies to the weight of this Google checkpoint name.

    Example:
        >>> decayed("bert/encoder/layer_0/attention/self/query/kernel"), decayed("bert/pooler/dense/bias")
        (True, False)
    """
    return not any(re.search(pattern, google_name) for pattern in NOT_DECAYED_GOOGLE)
