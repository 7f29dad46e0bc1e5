"""The independent side of the Hugging Face parity tests; runs in the reference environment.

Imports torch, transformers and sentence-transformers, never cosent_tf or TensorFlow: the
tests (tests/huggingface/test_parity.py) call it with ``COSENT_REFERENCE_PYTHON``.

    hf_reference.py make ROOT VOCAB TEXTS.json
        writes random models with transformers' and sentence-transformers' own savers, and
        ROOT/reference.npz with their outputs on the texts (see make()).
    hf_reference.py predict OUT.npz TEXTS.json [--st FOLDER] [--cross FOLDER]
        what SentenceTransformer(FOLDER).encode and CrossEncoder(FOLDER).predict (raw logits),
        and AutoModelForSequenceClassification, give on the texts.
"""

import argparse
import json
import os
import shutil

import numpy as np
import torch
from sentence_transformers import CrossEncoder, SentenceTransformer, models
from transformers import BertConfig, BertForSequenceClassification, BertModel, BertTokenizer

SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def _texts(path):
    with open(path, encoding="utf-8") as f:
        texts = json.load(f)
    return texts["sentences"], [tuple(pair) for pair in texts["pairs"]]


def make(root, vocab, texts_path):
    """Folders under ``root``, each from transformers' or sentence-transformers' own savers:

    - bert-safetensors: BertModel, model.safetensors, tokenizer.json only (transformers 5's layout);
    - bert-bin: the same weights as pytorch_model.bin, with vocab.txt (the older layout);
    - st-mean: sentence-transformers over bert-safetensors, mean pooling, Normalize, max_seq_length 48;
    - cross-1, cross-2: BertForSequenceClassification with 1 and 2 labels.

    reference.npz: the BertModel's masked mean of the last layer, its first position and its
    pooler_output (one padded batch), SentenceTransformer.encode, and the cross-encoders' logits
    on the pairs (token_type_ids from the tokenizer).
    """
    sentences, pairs = _texts(texts_path)
    torch.manual_seed(0)
    with open(vocab, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    config = BertConfig(vocab_size=vocab_size, max_position_embeddings=128, **SIZES)
    tokenizer = BertTokenizer(vocab)
    bert = BertModel(config).eval()
    bert.save_pretrained(os.path.join(root, "bert-safetensors"))
    tokenizer.save_pretrained(os.path.join(root, "bert-safetensors"))
    bin_folder = os.path.join(root, "bert-bin")
    os.makedirs(bin_folder)
    config.save_pretrained(bin_folder)
    torch.save(bert.state_dict(), os.path.join(bin_folder, "pytorch_model.bin"))
    shutil.copyfile(vocab, os.path.join(bin_folder, "vocab.txt"))

    transformer = models.Transformer(os.path.join(root, "bert-safetensors"), max_seq_length=48)
    pooling = models.Pooling(SIZES["hidden_size"], "mean")
    st = SentenceTransformer(modules=[transformer, pooling, models.Normalize()])
    st.save(os.path.join(root, "st-mean"))

    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = bert(**batch)
    mask = batch["attention_mask"].unsqueeze(-1).float()
    outputs = {
        "mean": ((out.last_hidden_state * mask).sum(1) / mask.sum(1)).numpy(),
        "cls": out.last_hidden_state[:, 0].numpy(),
        "pooler": out.pooler_output.numpy(),
        "st": st.encode(sentences),
    }
    pair_batch = tokenizer([a for a, _ in pairs], [b for _, b in pairs], padding=True, return_tensors="pt")
    for labels in (1, 2):
        cross = BertForSequenceClassification(BertConfig(num_labels=labels, **config.to_dict())).eval()
        cross.save_pretrained(os.path.join(root, f"cross-{labels}"))
        tokenizer.save_pretrained(os.path.join(root, f"cross-{labels}"))
        with torch.no_grad():
            outputs[f"cross-{labels}"] = cross(**pair_batch).logits.numpy()
    np.savez(os.path.join(root, "reference.npz"), **outputs)


def predict(out, texts_path, st_folder=None, cross_folder=None):
    sentences, pairs = _texts(texts_path)
    outputs = {}
    if st_folder:
        outputs["st"] = SentenceTransformer(st_folder).encode(sentences)
    if cross_folder:
        outputs["cross"] = CrossEncoder(cross_folder).predict(pairs, activation_fn=torch.nn.Identity())
    np.savez(out, **outputs)


def main():
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("make")
    made.add_argument("root")
    made.add_argument("vocab")
    made.add_argument("texts")
    predicted = commands.add_parser("predict")
    predicted.add_argument("out")
    predicted.add_argument("texts")
    predicted.add_argument("--st")
    predicted.add_argument("--cross")
    args = parser.parse_args()
    if args.command == "make":
        make(args.root, args.vocab, args.texts)
    else:
        predict(args.out, args.texts, args.st, args.cross)


if __name__ == "__main__":
    main()
