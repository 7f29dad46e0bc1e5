"""Contestant (c): sentence-transformers 6.2 (CoSENTLoss, ``encode``) on torch's CPU build.

The model is a randomly initialised ``transformers.BertModel`` of the same shape as the
project's small config (L4 H312 A12 I1248, vocab 21128, dropout 0.1) with [CLS]
pooling, tokenised by ``BertTokenizerFast`` over the shared Chinese vocab, maxlen 64.

* train: the loop sentence-transformers' trainer runs per step, without the trainer's
  own bookkeeping: ``model.preprocess`` (tokenise) each column (padded to the batch's longest),
  ``CoSENTLoss(model, scale=20)``, backward, ``torch.optim.AdamW`` (weight decay 0, the
  trainer's default) at lr 2e-5. Batches of 32 pairs in a seeded shuffle.
* encode: ``model.encode(sentences, batch_size=64)``, which sorts by length itself.
* bf16: ``torch.autocast("cpu", dtype=torch.bfloat16)`` around forward and loss, the
  counterpart of Keras's mixed_bfloat16 (weights stay float32).

Runs in ``.venv-reference`` (torch 2.13.0 CPU + sentence-transformers); never imported by
the package.
"""

import contextlib
import os
import sys
import tempfile

import numpy as np
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.losses import CoSENTLoss
from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
from transformers import BertConfig, BertModel, BertTokenizerFast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def build_model(folder):
    config = common.model_config()
    torch.manual_seed(0)
    bert = BertModel(
        BertConfig(
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            num_hidden_layers=config["num_hidden_layers"],
            num_attention_heads=config["num_attention_heads"],
            intermediate_size=config["intermediate_size"],
            hidden_act=config["hidden_act"],
            hidden_dropout_prob=config["hidden_dropout_prob"],
            attention_probs_dropout_prob=config["attention_probs_dropout_prob"],
            max_position_embeddings=config["max_position_embeddings"],
            type_vocab_size=config["type_vocab_size"],
        ),
        add_pooling_layer=False,
    )
    bert.save_pretrained(folder)
    BertTokenizerFast(common.vocab_path(), do_lower_case=True).save_pretrained(folder)
    transformer = Transformer(folder, max_seq_length=common.MAXLEN)
    return SentenceTransformer(modules=[transformer, Pooling(config["hidden_size"], pooling_mode="cls")], device="cpu")


def precision_context(precision):
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def train(precision):
    texts_a, texts_b, labels = common.train_pairs()
    with tempfile.TemporaryDirectory() as folder:
        model = build_model(folder)
    model.train()
    loss_fn = CoSENTLoss(model, scale=common.SCALE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=common.LEARNING_RATE, weight_decay=0.0)
    order = np.random.default_rng(0).permutation(len(labels))
    clock, losses = common.StepClock(), []
    for start in range(0, len(order), common.BATCH_PAIRS):
        index = order[start : start + common.BATCH_PAIRS]
        features = [model.preprocess([texts_a[i] for i in index]), model.preprocess([texts_b[i] for i in index])]
        batch_labels = torch.tensor([labels[i] for i in index], dtype=torch.float32)
        with precision_context(precision):
            loss = loss_fn(features, batch_labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        clock.tick()
        if clock.out_of_time():
            break
    return {**common.train_figures(clock, losses), "threads": torch.get_num_threads()}


def encode(precision):
    sentences = common.test_sentences()
    with tempfile.TemporaryDirectory() as folder:
        model = build_model(folder)
    model.eval()

    def run(texts):
        with precision_context(precision), torch.inference_mode():
            return model.encode(texts, batch_size=common.ENCODE_BATCH, show_progress_bar=False, convert_to_numpy=True)

    return {**common.encode_figures(run, sentences), "threads": torch.get_num_threads()}


if __name__ == "__main__":
    common.contestant_main({"train": train, "encode": encode})
