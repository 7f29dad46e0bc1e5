"""What many test modules share: paths, made-up vocabularies, configs, data and model folders,
and a way to signal a subprocess at a point of its log. Fixtures live in conftest.py."""

import contextlib
import json
import logging
import os
import stat
import subprocess
import tempfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
SHARED_DATA = os.environ.get("COSENT_SHARED_DATA", os.path.join(ROOT, "..", "shared", "data"))
# TensorFlow turns its oneDNN ops on by default only on CPUs with AVX512-VNNI, AVX512-BF16,
# AVX-VNNI or AMX; tests of what those ops do (TF_ONEDNN_ASSUME_FROZEN_WEIGHTS) run their
# subprocess with them on, so that they hold on an AVX2-only CPU too.
ONEDNN_ON_ANY_CPU = {"TF_ENABLE_ONEDNN_OPTS": "1"}
SHARED_VOCAB = os.path.join(SHARED_DATA, "vocab", "bert-base-chinese-vocab.txt")

requires_shared_data = pytest.mark.skipif(
    not os.path.isdir(SHARED_DATA), reason=f"shared data not found at {SHARED_DATA}"
)


def write_vocab(path, size=21128):
    """A BERT-style vocabulary of ``size`` tokens made here, for tests that need a vocabulary but
    not the shared one: [PAD], [unused1-99], [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103 (the
    ids of the Chinese BERT vocab), printable ASCII and full-width punctuation, then CJK
    ideographs from U+4E00 until the size is reached."""
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(1, 100)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += [chr(c) for c in range(33, 127)] + list("，。？！：；、（）“”")
    tokens += [chr(c) for c in range(0x4E00, 0x4E00 + size - len(tokens))]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(tokens) + "\n")
    return str(path)


_MADE_VOCAB = []


def made_vocab():
    """The path of a vocabulary written once per test session by :func:`write_vocab`."""
    if not _MADE_VOCAB:
        _MADE_VOCAB.append(write_vocab(os.path.join(tempfile.mkdtemp(prefix="cosent-tf-tests-"), "vocab.txt")))
    return _MADE_VOCAB[0]


def write_config(path, vocab_size=21128, hidden=16, layers=2, heads=2, intermediate=32, max_position=64, **extra):
    config = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        hidden_act="gelu",
        max_position_embeddings=max_position,
        type_vocab_size=2,
        **extra,
    )
    with open(path, "w") as f:
        json.dump(config, f)
    return str(path)


def make_model_dir(
    directory,
    config,
    kind="feature",
    pooling="cls",
    head="score",
    maxlen=32,
    threshold=None,
    vocab=None,
    head_input="cls",
):
    """A model folder holding a random tiny model; returns the Keras model it holds."""
    from cosent_tf import ModelSpec, build_encoder, build_interaction_model, save_model_dir

    if kind == "feature":
        model, spec = build_encoder(config, pooling=pooling), ModelSpec("feature", pooling=pooling, maxlen=maxlen)
    else:
        model = build_interaction_model(config, head=head, head_input=head_input)
        pair_segments = head_input == "pooler"
        spec = ModelSpec("interaction", head=head, head_input=head_input, pair_segments=pair_segments, maxlen=maxlen)
    spec.threshold = threshold
    save_model_dir(directory, model, spec, config, vocab or made_vocab())
    return model


CHARACTERS = "我你他她们是的不了在有人这中大为上个国和地到以说时要就出会可也"


def distinct_texts(seed, count, avoid=(), shortest=3, longest=8):
    """``count`` distinct texts of ``shortest`` to ``longest`` characters of CHARACTERS, none in
    ``avoid``: CJK only, so that two different texts are never duplicates after normalisation."""
    rng = np.random.default_rng(seed)
    texts, taken = [], set(avoid)
    while len(texts) < count:
        text = "".join(rng.choice(list(CHARACTERS), int(rng.integers(shortest, longest + 1))))
        if text not in taken:
            taken.add(text)
            texts.append(text)
    return texts


def tiny_pairs(rng, count, scores):
    """Pairs whose label is how many characters the two sentences share (learnable)."""
    rows = []
    for _ in range(count):
        first = "".join(rng.choice(list(CHARACTERS), 6))
        shared = int(rng.integers(0, 6))
        second = first[:shared] + "".join(rng.choice(list(CHARACTERS), 6 - shared))
        rows.append((first, second, shared if scores else int(shared >= 3)))
    return rows


def write_tiny_data(root, seed=0, counts=(48, 24, 24)):
    rng = np.random.default_rng(seed)
    for task in ("ATEC", "BQ", "LCQMC", "PAWSX", "STS-B"):
        os.makedirs(root / "senteval_cn" / task, exist_ok=True)
        for split, count in zip(("train", "valid", "test"), counts):
            lines = [f"{a}\t{b}\t{label}" for a, b, label in tiny_pairs(rng, count, task == "STS-B")]
            (root / "senteval_cn" / task / f"{task}.{split}.data").write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.makedirs(root / "cnsd" / "cnsd-snli", exist_ok=True)
    names = ["contradiction", "contradiction", "neutral", "neutral", "entailment", "entailment"]
    rows = [{"sentence1": a, "sentence2": b, "gold_label": names[shared]} for a, b, shared in tiny_pairs(rng, 40, True)]
    (root / "cnsd" / "cnsd-snli" / "dev.jsonl").write_text(
        "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8"
    )


def run_until(command, line_start, send):
    """Start ``command``, send it signal ``send`` once its log (stderr) shows a line starting with
    ``line_start``; (exit status, its whole stderr)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    shown = []
    for line in process.stderr:
        shown.append(line)
        if line.startswith(line_start):
            process.send_signal(send)
            break
    _, rest = process.communicate(timeout=120)
    return process.returncode, "".join(shown) + rest


def make_tiny_setup(tmp_path):
    """A vocabulary, a one-layer config and tiny data for the five tasks and CNSD under ``tmp_path``:
    ``(tmp_path, the training script options that use them)``."""
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(CHARACTERS)
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    config = write_config(tmp_path / "config.json", vocab_size=len(vocab), hidden=16, layers=1, max_position=256)
    write_tiny_data(tmp_path / "data")
    return tmp_path, [
        "--data-dir",
        str(tmp_path / "data"),
        "--config",
        config,
        "--vocab",
        str(tmp_path / "vocab.txt"),
        "--batch-size",
        "8",
        "--lr",
        "1e-3",
    ]


def free_port():
    """A TCP port of localhost that nothing listens on now."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def localhost_workers(count):
    """The environments of ``count`` workers of a localhost cluster, each with its TF_CONFIG
    (MultiWorkerMirroredStrategy reads it); worker 0 is the chief."""
    cluster = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(count)]}
    return [
        {**os.environ, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}
        for index in range(count)
    ]


def reference_python(what):
    """The sentence-transformers reference environment's Python (``COSENT_REFERENCE_PYTHON``, default
    ``.venv-reference/bin/python``), absolute; the test fails, saying ``what`` needs it, where it is missing."""
    python = os.path.abspath(
        os.environ.get("COSENT_REFERENCE_PYTHON", os.path.join(ROOT, ".venv-reference", "bin", "python"))
    )
    if not os.path.exists(python):
        pytest.fail(
            f"{python} does not exist: {what} with sentence-transformers in an environment of its own; run it with "
            "`make test`, which builds .venv-reference (or set COSENT_REFERENCE_PYTHON)"
        )
    return python


class _KeptMessages(logging.Handler):
    def __init__(self, level):
        super().__init__(level)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def warnings_logged(name, level=logging.WARNING):
    """The messages of the warnings (with ``level``: the records of that level and above) that the
    logger ``name`` and its children log within the block: a list, filled as they come. Within the
    block the logger lets them through whatever its level."""
    logger, kept = logging.getLogger(name), _KeptMessages(level)
    before = logger.level
    logger.addHandler(kept)
    logger.setLevel(level)
    try:
        yield kept.messages
    finally:
        logger.removeHandler(kept)
        logger.setLevel(before)


@contextlib.contextmanager
def umask(mask):
    """The block runs under the umask ``mask``; the process's own comes back after it."""
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def kept_from_others(folder):
    """What under ``folder`` (itself included) lacks a permission the process's umask lets
    everyone have: a file without a read bit, a folder without a read or search bit. Under the
    usual umask 022, what another user (a server) could not read; each as (path, mode)."""
    mask = os.umask(0)
    os.umask(mask)
    kept = []
    for top, _folders, files in os.walk(folder):
        for name, wanted in [(top, 0o555)] + [(os.path.join(top, file), 0o444) for file in files]:
            mode = stat.S_IMODE(os.lstat(name).st_mode)
            if not os.path.islink(name) and mode & wanted & ~mask != wanted & ~mask:
                kept.append((os.path.relpath(name, folder), oct(mode)))
    return kept


def read_until_closed(terminal, shown):
    """Append what the terminal ``terminal`` (a pty's side) shows to ``shown`` until its other side
    is closed: run in a thread, as a terminal holds a few kilobytes only."""
    while True:
        try:
            chunk = os.read(terminal, 65536)
        except OSError:  # the other side is closed
            return
        if not chunk:
            return
        shown.append(chunk)
