"""The promises of the README and the docs pages, checked against what the code prints.

Each message quoted in the guide's bad-input table (docs/guide.md) is produced here from real
bad input and must match the quote, with the table's placeholders (PATH, CONFIG, VOCAB, CKPT,
OUTPUT_DIR, N, B, M, S and ...) standing for what varies. The pages' Python blocks run as
written, and every `cosent-tf COMMAND` line they show names a command the CLI has.
"""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from cosent_tf import CheckpointError, ConfigError, DataError, RunConfig, build_encoder, save_checkpoint, train
from cosent_tf.cli import main as cosent_tf
from cosent_tf.cli import train_main
from cosent_tf.data.benchmarks import read_nli, read_senteval
from cosent_tf.data.files import read_pair_file
from cosent_tf.models.sources import SMALL_RANDOM_CONFIG
from cosent_tf.models.tokenization import check_vocab_size, load_vocab
from tests.helpers import (
    ROOT,
    SHARED_DATA,
    SHARED_VOCAB,
    made_vocab,
    make_model_dir,
    requires_shared_data,
    write_config,
    write_tiny_data,
)

# The pages a user reads, in the order their Python blocks build on each other: the README's
# Keras quickstart saves the model folder that the guide's blocks load.
PAGES = (
    "README.md",
    "docs/guide.md",
    "docs/reproducing.md",
    "docs/performance.md",
    "docs/architecture.md",
    "docs/platform.md",
    "docs/keras3.md",
    "CONTRIBUTING.md",
)


def read_page(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


TEXTS = {page: read_page(page) for page in PAGES}
GUIDE = TEXTS["docs/guide.md"]
TABLE = GUIDE[GUIDE.index("| input | what the user sees |") :].split("\n\n")[0]
PYTHON_BLOCKS = [
    (page, block) for page, text in TEXTS.items() for block in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
]


def quote_pattern(quote):
    """A regular expression for a quoted message: placeholders match what they stand for."""
    pattern = re.escape(quote)
    pattern = pattern.replace(r"\ \.\.\.", ".*").replace(r"\.\.\.", ".*")
    for name in ("PATH", "CONFIG", "VOCAB", "CKPT", "OUTPUT_DIR", "MODEL_DIR"):
        pattern = re.sub(rf"\b{name}\b", ".+?", pattern)
    return re.sub(r"\b[NBMS]\b", r"\\d+", pattern)


def message(action):
    try:
        action()
    except (DataError, ConfigError, CheckpointError) as error:
        return str(error)
    except SystemExit as error:
        return str(error.code)
    raise AssertionError("no error")


def write(path, content):
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(content, bytes) else lambda c: path.write_text(c, encoding="utf-8"))(content)
    return path


def data_cases(tmp_path):
    yield "PATH: cannot open (...)", lambda: read_senteval(tmp_path / "absent.data")
    bad = write(tmp_path / "latin1.data", b"a\tb\t1\n" + "caf\xe9\tb\t0\n".encode("latin-1"))
    yield "PATH, line N: not valid UTF-8 at byte B (...)", lambda: read_senteval(bad)
    yield "PATH, line N: label 'yes' is not a number", lambda: read_senteval(write(tmp_path / "y.data", "a\tb\tyes\n"))
    yield "is not finite", lambda: read_senteval(write(tmp_path / "inf.data", "a\tb\tinf\n"))
    bq = tmp_path / "BQ" / "BQ.train.data"
    bq.parent.mkdir()
    write(bq, "a\tb\t2\n")
    from cosent_tf.data.benchmarks import load_task

    yield "BQ.train.data, line N: label '2' is not 0 or 1", lambda: load_task(tmp_path, "BQ", "train")
    yield "label '5.5' is outside 0-5", lambda: read_senteval(write(tmp_path / "s.data", "a\tb\t5.5\n"), task="STS-B")
    yield (
        "PATH, line N: label '0_5' is not a plain decimal number",
        lambda: read_senteval(write(tmp_path / "u.data", "a\tb\t0_5\n")),
    )
    yield (
        "PATH, line N: without exactly 3 tab-separated fields, skipped: found 2 (an error under --strict)",
        lambda: read_senteval(write(tmp_path / "f.data", "a\tb\n"), strict=True),
    )
    yield "PATH, line N: not valid JSON (...)", lambda: read_nli(write(tmp_path / "j.jsonl", "{oops\n"))
    yield (
        "PATH, line N: no field 'sentence2', 'gold_label'; this line has 'sentence1'",
        lambda: read_nli(write(tmp_path / "m.jsonl", '{"sentence1": "a"}\n')),
    )
    yield (
        "sentence1 must be a string",
        lambda: read_nli(write(tmp_path / "n.jsonl", '{"sentence1": 1, "sentence2": "b", "gold_label": "neutral"}\n')),
    )


def own_file_cases(tmp_path):
    pairs = tmp_path / "pairs.tsv"
    yield (
        "pairs.tsv, line N: label 'yes' is not a number or an NLI word (contradiction/neutral/entailment)",
        lambda: read_pair_file(write(pairs, "a\tb\t1\nc\td\tyes\n")),
    )
    yield (
        "pairs.tsv, line N: label 'neutral' is an NLI word, but line 1's '1' is a number: use one kind of label",
        lambda: read_pair_file(write(pairs, "a\tb\t1\nc\td\tneutral\n")),
    )

    yield (
        "pairs.tsv, line N: line N is longer than 1 MB; is this a text file?",
        lambda: read_pair_file(write(pairs, "a\tb\t1\n" + "x" * (1 << 20) + "\tb\t0\n")),
    )
    yield (
        "pairs.tsv, line N: label '1e39' is not finite as a 32-bit float, which labels are stored in (±3.4e38 at most)",
        lambda: read_pair_file(write(pairs, "a\tb\t1\nc\td\t1e39\n")),
    )
    yield (
        "a.csv, line 1: no column 'sentence1'; the header has 'q1', 'sentence2', 'label' (name the columns with "
        "--text-a-field ...)",
        lambda: read_pair_file(write(tmp_path / "a.csv", "q1,sentence2,label\na,b,1\n")),
    )
    yield (
        "a.csv, line N: a row of 2 fields under a header of 3",
        lambda: read_pair_file(write(tmp_path / "a.csv", "sentence1,sentence2,label\na,b,1\nc,d\n")),
    )
    yield (
        "a.csv, line N: not valid CSV (...)",
        lambda: read_pair_file(write(tmp_path / "a.csv", 'sentence1,sentence2,label\n"a,b,1\n')),
    )
    yield (
        "a.jsonl, line N: no field 'sentence2'; this line has 'sentence1', 'label' (...)",
        lambda: read_pair_file(write(tmp_path / "a.jsonl", '{"sentence1": "a", "label": 1}\n')),
    )
    yield (
        "sentence2 must be a string",
        lambda: read_pair_file(write(tmp_path / "a.jsonl", '{"sentence1": "a", "sentence2": 2, "label": 1}\n')),
    )
    yield "a.tsv: no usable pairs in this file", lambda: read_pair_file(write(tmp_path / "a.tsv", ""))
    yield (
        "a.xlsx: cannot tell the format from the extension '.xlsx'; name it with --format (tsv, csv, jsonl)",
        lambda: read_pair_file(write(tmp_path / "a.xlsx", "")),
    )


def model_cases(tmp_path):
    small = write_config(tmp_path / "small.json", vocab_size=1000)
    yield "CONFIG: vocab_size is 1000 but VOCAB has 21128 tokens", lambda: check_vocab_size(small, made_vocab())
    zero = write_config(tmp_path / "zero.json", layers=0)
    yield "CONFIG: num_hidden_layers must be a positive integer, got 0", lambda: build_encoder(zero)
    odd = write_config(tmp_path / "odd.json", hidden=64, heads=3)
    yield "CONFIG: hidden_size 64 is not a multiple of num_attention_heads 3", lambda: build_encoder(odd)
    repeated = write(tmp_path / "vocab.txt", "[PAD]\n[UNK]\n好\n[CLS]\n好\n")
    yield "VOCAB, line N: token '好' repeats line M", lambda: load_vocab(repeated)
    deep = write_config(tmp_path / "deep.json", layers=2)
    shallow = write_config(tmp_path / "shallow.json", layers=1)
    save_checkpoint(build_encoder(deep), tmp_path / "ckpt", deep)
    yield (
        "CKPT: does not fit the model config: the checkpoint has 16 variable(s) of layers beyond the config's "
        "num_hidden_layers 1 (...)",
        lambda: build_encoder(shallow, str(tmp_path / "ckpt")),
    )
    yield (
        "CKPT: this checkpoint has no pooler (bert/pooler/dense/kernel, ... missing), so pooling 'pooler' cannot be "
        "used with it (nor --head pooler); choose cls, ...",
        lambda: build_encoder(deep, str(tmp_path / "ckpt"), pooling="pooler"),
    )
    save_checkpoint(build_encoder(shallow), tmp_path / "shallow-ckpt", shallow)
    yield (
        "CKPT: does not fit the model config: missing 16 variable(s): ...",
        lambda: build_encoder(deep, str(tmp_path / "shallow-ckpt")),
    )
    wide = write_config(tmp_path / "wide.json", layers=2, intermediate=48)
    yield "... (16, 32) != (16, 48)", lambda: build_encoder(wide, str(tmp_path / "ckpt"))
    data = next(p for p in os.listdir(tmp_path / "ckpt") if p.startswith("bert_model.ckpt.data"))
    broken = tmp_path / "broken"
    save_checkpoint(build_encoder(deep), broken, deep)
    with open(broken / data, "r+b") as f:
        f.truncate(100)
    yield (
        "CKPT: cannot read this checkpoint's weights (...); it may be truncated or corrupted",
        lambda: build_encoder(deep, str(broken)),
    )
    yield (
        "nowhere (from ...): data folder not found; pass --data-dir: the shared data root (with senteval_cn/, cnsd/ "
        "and vocab/) or a senteval_cn folder",
        lambda: train_main(["BQ", "--data-dir", "nowhere", "--config", deep, "--vocab", made_vocab()]),
    )
    yield (
        "PATH (from ...): vocabulary not found; pass --vocab (a checkpoint folder brings its own), or a --data-dir "
        "with vocab/",
        lambda: train_main(["BQ", "--data-dir", ".", "--config", deep]),
    )
    long = write_config(tmp_path / "long.json", max_position=512)
    for split in ("train", "valid", "test"):
        write(tmp_path / "data" / "BQ" / f"BQ.{split}.data", "一\t二\t1\n三\t四\t0\n")
    write(tmp_path / "ones" / "BQ" / "BQ.train.data", "".join(f"{i}\t{i}\t1\n" for i in range(48)))
    for split in ("valid", "test"):
        write(tmp_path / "ones" / "BQ" / f"BQ.{split}.data", "一\t二\t1\n三\t四\t0\n")
    yield (
        "PATH: all 48 pairs (after any sampling) have the label 1: CoSENT ranks pairs by their labels, so every "
        "step's loss would be 0",
        lambda: train_main(["BQ", "--config", long, "--vocab", made_vocab(), "--data-dir", str(tmp_path / "ones")]),
    )
    yield (
        "CONFIG: maxlen 600 is longer than the model's 512 position embeddings ...",
        lambda: train_main(
            ["BQ", "--config", long, "--vocab", made_vocab(), "--maxlen", "600", "--data-dir", str(tmp_path / "data")]
        ),
    )


def hugging_face_cases(tmp_path):
    import json
    import sys

    from tests.helpers import make_model_dir

    yield (
        "hfl/chinese-roberta-wwm-ext (from ...): no such folder here, and it reads as a Hugging Face hub name, "
        "but nothing is downloaded: download the model where there is internet (huggingface-cli download ...), "
        "then pass FOLDER",
        lambda: build_encoder(None, "hfl/chinese-roberta-wwm-ext"),
    )
    config = write_config(tmp_path / "config.json")
    make_model_dir(tmp_path / "model", config, pooling="last-avg")
    assert cosent_tf(["export", "--format", "hf", str(tmp_path / "model"), str(tmp_path / "hf")]) == 0
    hf_config = json.loads((tmp_path / "hf" / "config.json").read_text())
    write(tmp_path / "hf" / "config.json", json.dumps({**hf_config, "model_type": "xlm-roberta"}))
    yield (
        "PATH: model_type 'xlm-roberta' is not supported from Hugging Face folders; cosent-tf reads model_type "
        "'bert' (...)",
        lambda: build_encoder(None, str(tmp_path / "hf")),
    )
    write(tmp_path / "hf" / "config.json", json.dumps(hf_config))
    (tmp_path / "hf" / "model.safetensors").rename(tmp_path / "hf" / "pytorch_model.bin")
    saved = sys.modules.pop("torch", None)
    sys.modules["torch"] = None  # as if torch were not installed
    try:
        yield (
            "PATH: reading pytorch_model.bin needs torch: pip install cosent-tf[torch] (...)",
            lambda: build_encoder(None, str(tmp_path / "hf")),
        )
    finally:
        del sys.modules["torch"]
        if saved is not None:
            sys.modules["torch"] = saved
    write(
        tmp_path / "hf" / "modules.json",
        '[{"path": "", "type": "sentence_transformers.models.Transformer"}, '
        '{"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}, '
        '{"name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]',
    )
    yield (
        "PATH: module '2' (sentence_transformers.models.Dense) is not supported: a Dense module changes the pooled "
        "vectors (the one cosent-tf export --dim writes keeps their first dimensions), and cosent-tf reads a "
        "sentence-transformers folder's pooled vectors only; load the model folder it was exported from, or an "
        "export at full width, and cut its vectors with --dim (dim= in Python)",
        lambda: build_encoder(None, str(tmp_path / "hf")),
    )
    make_model_dir(tmp_path / "cross", config, kind="interaction")
    yield (
        "MODEL_DIR: this interaction model's head reads the [CLS] hidden state directly (as the original "
        "experiments), which BertForSequenceClassification cannot express: it scores through BERT's pooler (train "
        "with --head pooler for a Hugging Face folder); export it as a SavedModel (or as ONNX: --format onnx)",
        lambda: cosent_tf(["export", "--format", "hf", str(tmp_path / "cross"), str(tmp_path / "out")]),
    )


def run_cases(tmp_path):
    write_tiny_data(tmp_path / "data")
    data = dict(task="BQ", data_dir=str(tmp_path / "data"), vocab=made_vocab())
    mine = tmp_path / "mine"
    (mine / "model").mkdir(parents=True)
    write(mine / "config.json", "{}")
    yield (
        "OUTPUT_DIR: does not look like a cosent-tf training run (it holds config.json, model but no .cosent-run, "
        "which every run writes first); nothing was written: choose a new or empty --output-dir",
        lambda: train(RunConfig(**data, output_dir=str(mine))),
    )
    yield (
        "--batch-size 1: the cosent loss ranks the pairs of a batch against each other, so a batch of fewer than 2 "
        "pairs gives a loss of 0 at every step and the model never changes; pass --batch-size 2 or more",
        lambda: train(RunConfig(**data, batch_size=1, output_dir=str(tmp_path / "one"))),
    )
    yield (
        "--epsilon (RunConfig.epsilon) is 5.0: the contrastive loss's cosine threshold must be at least -1 and below 1",
        lambda: RunConfig(loss="contrastive", epsilon=5.0).resolved(),
    )


def in_batch_cases(tmp_path):
    from cosent_tf.data.groups import groups_from_pairs, read_group_file
    from cosent_tf.data.tasks import TASKS
    from cosent_tf.losses import get_loss
    from cosent_tf.training.run_data import load_run_data

    rows = write(tmp_path / "rows.tsv", "花呗\t花呗如何还款\t借呗额度\n借呗\t借呗开通\t余额宝\n")
    yield (
        "PATH, line N: label ... is not a number or an NLI word (contradiction/neutral/entailment); this looks like "
        "(anchor, positive, negative ...) rows for in-batch negatives: train it with --loss mnrl, or give pairs "
        "with a label",
        lambda: read_pair_file(rows),
    )
    yield (
        "PATH, line N: group size 4 takes 2 hard negative(s) per example, but this line's example has 1 (N of N "
        "examples have fewer): pass --group-size 3 or less, or give those lines more negatives (a row is not "
        "padded by repeating a negative, which would count twice in the softmax)",
        lambda: read_group_file(rows).group_size(4),
    )
    same = write(tmp_path / "same.tsv", "花呗\t花呗如何还款\t借呗额度\n花呗\t花呗还款\t余额宝\n")
    yield (
        "PATH: every anchor is the same text ('花呗'): its in-batch negatives, the other examples' positives, would "
        "all be its own positives; give examples of different anchors, or train a pair loss (--loss cosent)",
        lambda: read_group_file(same).check_in_batch(),
    )
    unmatched = write(tmp_path / "unmatched.tsv", "花呗\t借呗\t0\n余额\t转账\t0\n")
    yield (
        "PATH: no pair is labelled as a match (label above 0.5): in-batch negatives train on the positive pairs; "
        "give pairs labelled as matches, or train a pair loss (--loss cosent)",
        lambda: groups_from_pairs(read_pair_file(unmatched), TASKS["BQ"], False, 0),
    )
    own = dict(vocab=made_vocab(), loss="mnrl", output_dir=str(tmp_path / "run"))
    yield (
        "PATH: has no labels to take hard negatives from (its rows are an anchor, its positive and any negatives): "
        "leave out --hard-negatives-from-labels, or give labelled pairs",
        lambda: load_run_data(RunConfig(train_file=str(rows), hard_negatives_from_labels=True, **own).resolved()),
    )
    yield (
        "--loss mnrl trains feature models (sentence encoders) only: in-batch negatives compare each anchor's "
        "sentence vector with the vectors of the other texts of its batch, and an interaction model scores a pair "
        "at once, without a vector per text; train a feature model (--kind feature), or an interaction model with "
        "one of ce, cosent",
        lambda: RunConfig(kind="interaction", loss="mnrl").resolved(),
    )
    yield (
        "--batch-size 1: the mnrl loss takes the other examples of a batch as each anchor's negatives, so a batch "
        "of fewer than 2 examples gives a loss of 0 at every step and the model never changes; pass --batch-size 2 "
        "or more",
        lambda: get_loss("feature", "mnrl").check_batch(1),
    )
    yield (
        "--group-size: not an option of --loss cosent, which would ignore it; --group-size is an option of --loss "
        "mnrl of feature models",
        lambda: RunConfig(loss="cosent", group_size=3).resolved(),
    )
    yield (
        "--head: an option of interaction models (--kind interaction), what their head reads; a feature model has no "
        "head: it pools its vectors (--pooling)",
        lambda: RunConfig(head_input="pooler").resolved(),
    )
    yield (
        "--per-replica-loss: --strategy default trains on one replica, whose share of each batch is the whole batch, "
        "so the loss would be the same; it is an option of --strategy mirrored or multi-worker",
        lambda: RunConfig(global_batch_loss=False).resolved(),
    )


def output_cases(tmp_path):
    texts = write(tmp_path / "texts.txt", "你好\n")
    earlier = write(tmp_path / "vectors.npy", "an earlier output")
    yield (
        "PATH: exists; nothing was written: pass --overwrite to replace it, or choose another name",
        lambda: cosent_tf(["encode", str(tmp_path / "model"), str(texts), str(earlier)]),
    )


def mining_cases(tmp_path):
    from cosent_tf.inference.matchers import SentenceEncoder
    from cosent_tf.mining import rank_window

    yield (
        "the corpus has 5 texts, fewer than the rank window's start 10: give a larger corpus, or a window that "
        "starts at 5 or lower",
        lambda: rank_window((10, 50), 5),
    )
    config = write_config(tmp_path / "config.json")
    make_model_dir(tmp_path / "cross", config, kind="interaction")
    make_model_dir(tmp_path / "encoder", config)
    yield (
        "--model PATH: an interaction model (a cross-encoder: it scores the two texts of a pair together), but "
        "--model needs a feature model (a bi-encoder: a vector per text, compared by cosine)",
        lambda: SentenceEncoder.check_folder(tmp_path / "cross", option="--model"),
    )
    unmatched = write(tmp_path / "unmatched.tsv", "花呗\t借呗\t0\n余额\t转账\t0\n")
    yield (
        "PATH: no pair is labelled as a match (label above 0.5): mining needs each anchor's positive; give pairs "
        "labelled as matches",
        lambda: cosent_tf(
            [
                "mine",
                "--data",
                str(unmatched),
                "--model",
                str(tmp_path / "encoder"),
                "--range",
                "1-2",
                "--output",
                "m.jsonl",
            ]
        ),
    )
    yield (
        "--rerank-top 5 is below --top-k 10: the hits past 5 would have no interaction score; rerank at least --top-k",
        lambda: cosent_tf(
            [
                "search",
                "query",
                "index",
                "queries.txt",
                "hits.jsonl",
                "--rerank",
                "cross",
                "--rerank-top",
                "5",
                "--top-k",
                "10",
            ]
        ),
    )


def decision_cases(tmp_path):
    """The match decision's bad input, through calibrate, similarity --decide and evaluate --reliability."""
    import numpy as np

    from cosent_tf.calibration import DECISION_FILE, fit_decision, write_decision
    from cosent_tf.export.huggingface import export_hf
    from cosent_tf.exports import EXPORT_RECORD

    config = write_config(tmp_path / "config.json")
    make_model_dir(tmp_path / "encoder", config, pooling="last-avg")
    make_model_dir(tmp_path / "other", config, pooling="last-avg")
    encoder = str(tmp_path / "encoder")

    def pairs(name, labels):
        return str(write(tmp_path / name, "".join(f"文{i}\t字{i}\t{label}\n" for i, label in enumerate(labels))))

    def decide():
        return cosent_tf(["similarity", encoder, "今天", "明天", "--decide"])

    yield (
        "PATH: every one of its N pairs is a match; a threshold and a calibration map need pairs of both classes",
        lambda: cosent_tf(["calibrate", encoder, pairs("matches.tsv", [1] * 60)]),
    )
    yield (
        "PATH has N pairs (N matches, N not); a calibration map needs at least 50 pairs with at least 10 of each",
        lambda: cosent_tf(["calibrate", encoder, pairs("few.tsv", [0, 1] * 10)]),
    )
    yield (
        "... after the cut 2",
        lambda: cosent_tf(["calibrate", encoder, pairs("nli.tsv", [0, 1, 2] * 20), "--cut", "2"]),
    )
    yield (
        "PATH: --cut is for graded labels; these are 0/1 and already say match or not",
        lambda: cosent_tf(["calibrate", encoder, pairs("binary.tsv", [0, 1] * 30), "--cut", "0.5"]),
    )
    yield (
        "PATH: no match decision (no decision.json: ...); fit one on labelled pairs: cosent-tf calibrate MODEL_DIR "
        "LABELLED_FILE",
        decide,
    )
    yield (
        "--reliability PATH: PATH has no calibration map to draw (...); fit one on labelled pairs: cosent-tf "
        "calibrate MODEL_DIR LABELLED_FILE",
        lambda: cosent_tf(["evaluate", encoder, pairs("test.tsv", [0, 1] * 30), "--reliability", "r.png"]),
    )
    grades = np.arange(60) % 6
    write_decision(encoder, fit_decision(np.linspace(0, 1, 60), grades, "sts.tsv", graded=True))
    yield (
        "the decision fitted on sts.tsv: its labels were graded (0.0 to 5.0) and no cut made them match / no match; "
        "recalibrate with a cut: cosent-tf calibrate MODEL_DIR FILE --cut LABEL (a label above LABEL is a match)",
        decide,
    )
    matches = np.arange(60) % 2
    write_decision(tmp_path / "other", fit_decision(np.linspace(0, 1, 60), matches, "valid.tsv"))
    shutil.copy(tmp_path / "other" / DECISION_FILE, tmp_path / "encoder" / DECISION_FILE)
    yield (
        "PATH: was fitted on another model's scores (its weights fingerprint is not this folder's), so its thresholds "
        "and probabilities mean nothing here; fit one for this model: cosent-tf calibrate MODEL_DIR LABELLED_FILE",
        decide,
    )
    write_decision(encoder, fit_decision(np.linspace(0, 1, 60), matches, "valid.tsv"))
    yield (
        "--reliability PATH: PATH's labels are graded (0 to 5), and ...'s decision has no cut that makes them "
        "match / no match; ...",
        lambda: cosent_tf(["evaluate", encoder, pairs("sts.tsv", grades), "--reliability", "r.png"]),
    )
    edited = json.loads((tmp_path / "encoder" / DECISION_FILE).read_text(encoding="utf-8"))
    for calibration, quote in (
        (
            {"method": "isotonic", "scores": [0.2, 0.6, 0.9], "values": [0.1, 0.8, 0.3]},
            "PATH: calibration: knot N's value 0.3 is below knot N's 0.8: the map must not fall as the score rises",
        ),
        (
            {"method": "platt", "slope": -2.0, "intercept": 0.0},
            "the Platt slope is -2.0, so the map falls as the score rises",
        ),
    ):
        write(tmp_path / "encoder" / DECISION_FILE, json.dumps(dict(edited, calibration=calibration)))
        yield quote, decide
    write_decision(encoder, fit_decision(np.linspace(0, 1, 60), matches, "valid.tsv"))  # the export reads it
    export_hf(encoder, str(tmp_path / "exported"))
    yield (
        "PATH: is an export of the cosent-tf model folder PATH, and an export is written whole from its model folder: "
        "calibrate that folder (cosent-tf calibrate PATH FILE), then export it again; the export carries its decision",
        lambda: cosent_tf(["calibrate", str(tmp_path / "exported"), pairs("own.tsv", [0, 1] * 30)]),
    )
    foreign = shutil.copytree(tmp_path / "exported", tmp_path / "foreign")
    (foreign / EXPORT_RECORD).unlink()
    yield (
        "PATH: is a Hugging Face folder, not a cosent-tf model folder, and cosent-tf writes nothing into another "
        "program's folder: calibrate the cosent-tf model folder it was exported from, or ...",
        lambda: cosent_tf(["calibrate", str(foreign), pairs("own.tsv", [0, 1] * 30)]),
    )


CASES = {
    "decision": decision_cases,
    "mining": mining_cases,
    "outputs": output_cases,
    "in-batch": in_batch_cases,
    "data": data_cases,
    "run": run_cases,
    "own files": own_file_cases,
    "model": model_cases,
    "hugging face": hugging_face_cases,
}


@pytest.mark.parametrize("group", sorted(CASES))
def test_each_message_of_the_bad_input_table_is_what_the_code_prints(group, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the relative paths of the table's messages
    for quote, action in CASES[group](tmp_path):
        assert f"`{quote}" in TABLE or quote in TABLE, f"the guide's table no longer quotes: {quote}"
        printed = message(action)
        assert re.search(quote_pattern(quote), printed), f"docs/guide.md: {quote}\nprinted: {printed}"


def test_an_option_out_of_range_is_named(capsys):
    with pytest.raises(SystemExit):
        train_main(["BQ", "--batch-size", "0"])
    assert "argument --batch-size: must be at least 1, got 0" in capsys.readouterr().err
    assert "`argument --batch-size: must be at least 1, got 0`" in TABLE


def test_an_unknown_qrels_id_is_named(tmp_path):
    from cosent_tf.data.retrieval import read_retrieval_files

    queries = write(tmp_path / "queries.jsonl", '{"_id": "q1", "text": "a"}\n')
    corpus = write(tmp_path / "corpus.jsonl", '{"_id": "d1", "text": "b"}\n')
    qrels = write(tmp_path / "qrels.tsv", "q1\td9\t1\n")
    quote = "qrels.tsv, line N: corpus-id 'd9' is not in corpus.jsonl"
    assert quote in TABLE
    assert re.search(
        quote_pattern(quote).replace("corpus\\.jsonl", ".*corpus\\.jsonl"),
        message(lambda: read_retrieval_files(queries, corpus, qrels)),
    )


@pytest.mark.parametrize("page", PAGES)
def test_cosent_tf_help_lists_the_commands_each_page_shows(page, capsys):
    with pytest.raises(SystemExit) as stopped:
        cosent_tf(["--help"])
    assert stopped.value.code == 0
    listed = capsys.readouterr().out
    for command in re.findall(r"^cosent-tf (?:--\S+ \S+ )?(\w+)", TEXTS[page], flags=re.MULTILINE):
        assert command in listed, f"{page}: cosent-tf {command}"


@pytest.mark.parametrize("page", PAGES)
def test_each_page_links_to_pages_that_exist(page):
    folder = os.path.dirname(os.path.join(ROOT, page))
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", TEXTS[page]):
        assert os.path.exists(os.path.join(folder, target)), f"{page} links to {target}, which is not there"


def loads_downloaded_checkpoints(block):
    return 'SentenceEncoder.load("checkpoints/' in block


def make_what_the_pages_load(block):
    """The folders a page's block loads that a user would have made or downloaded first: make
    demo's model and an interaction run's (copied from the quickstart's folder, and random), and
    checkpoints in the Hugging Face layouts (random, exported here)."""
    from cosent_tf import export_hf

    config = write_config("config.json")
    if "runs/demo-cosent-STS-B/model" in block and not os.path.exists("runs/demo-cosent-STS-B/model"):
        shutil.copytree("runs/quickstart/model", "runs/demo-cosent-STS-B/model")
        make_model_dir("runs/interact-cosent-BQ/model", config, kind="interaction", threshold=0.0, vocab=SHARED_VOCAB)
    if "exports/mine-ids" in block:  # the serving client's export, of a model folder like the quickstart's
        from cosent_tf.export import export_saved_model

        export_saved_model("runs/quickstart/model", "exports/mine-ids", inputs="ids")
    if loads_downloaded_checkpoints(block):
        make_model_dir("sources/st", config, pooling="cls", vocab=SHARED_VOCAB)
        export_hf("sources/st", "checkpoints/bge-base-zh-v1.5")
        export_hf("sources/st", "checkpoints/chinese-macbert-base")
        for name in ("modules.json", "sentence_bert_config.json", "1_Pooling", "2_Normalize"):  # a bare BertModel
            path = os.path.join("checkpoints/chinese-macbert-base", name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        make_model_dir("sources/cross", config, kind="interaction", head_input="pooler", vocab=SHARED_VOCAB)
        export_hf("sources/cross", "checkpoints/my-bert-cross-encoder")


# Every STS_B_EVERY-th pair of STS-B's valid and test files: the blocks score them again and again
# (the quickstart's validation after each epoch, its test, two calibrations), and all of them made
# most of this test's time; a quarter still gives a Spearman of the trained model above 0.
STS_B_EVERY = 4


def lay_out_shared_data(root):
    """``root`` as ../shared/data for the pages' blocks: the shared data itself (links), but for
    STS-B's valid and test files, which hold every STS_B_EVERY-th line of the shared ones. The
    train file is the shared one, so that the quickstart samples its 640 pairs from all 5231."""
    source = os.path.abspath(SHARED_DATA)
    root.mkdir(parents=True)
    for name in os.listdir(source):
        if name != "senteval_cn":
            os.symlink(os.path.join(source, name), root / name)
    for task in os.listdir(os.path.join(source, "senteval_cn")):
        if task != "STS-B":
            (root / "senteval_cn").mkdir(exist_ok=True)
            os.symlink(os.path.join(source, "senteval_cn", task), root / "senteval_cn" / task)
    sts_b = root / "senteval_cn" / "STS-B"
    sts_b.mkdir(parents=True)
    os.symlink(os.path.join(source, "senteval_cn", "STS-B", "STS-B.train.data"), sts_b / "STS-B.train.data")
    for split in ("valid", "test"):
        with open(os.path.join(source, "senteval_cn", "STS-B", f"STS-B.{split}.data"), encoding="utf-8") as f:
            kept = f.readlines()[::STS_B_EVERY]
        (sts_b / f"STS-B.{split}.data").write_text("".join(kept), encoding="utf-8")


@pytest.mark.slow
@requires_shared_data
def test_the_pages_python_blocks_run_as_written(tmp_path, monkeypatch, capsys):
    # a clone's layout: the repository root as the working folder, the shared data at ../shared/data
    lay_out_shared_data(tmp_path / "shared" / "data")
    # The blocks' model, SMALL_RANDOM_CONFIG, is the small random BERT's width and vocabulary in one
    # light layer (see tests/test_vectors_docs.py): what is checked is what the blocks print and
    # write, its figures as patterns, not the L4/H312 model's training, which was most of their time.
    import cosent_tf.training
    from cosent_tf.models import sources
    from tests.test_vectors_docs import LIGHT_312

    light = write_config(tmp_path / "light-312.json", **LIGHT_312)
    for module in (sources, cosent_tf.training):  # the package keeps the name once looked up
        monkeypatch.setattr(module, "SMALL_RANDOM_CONFIG", light)
    (tmp_path / "clone").mkdir()
    monkeypatch.chdir(tmp_path / "clone")
    assert [page for page, _ in PYTHON_BLOCKS] == ["README.md"] + ["docs/guide.md"] * 4
    for number, (page, block) in enumerate(PYTHON_BLOCKS, start=1):
        make_what_the_pages_load(block)
        exec(compile(block, f"{page} python block {number}", "exec"), {"__name__": f"page_block_{number}"})
    printed = capsys.readouterr().out
    assert re.search(r"\{'spearman': 0\.\d+, 'pearson': -?0\.\d+\}", printed), printed[-2000:]
    assert "Hit(index=1, score=" in printed and "text='怎么开通花呗')" in printed
    assert os.listdir("runs/quickstart/logs")  # TensorBoard's event files
    with open(SMALL_RANDOM_CONFIG, encoding="utf-8") as f:  # the quickstart's model, served from ids
        assert f"(2, {json.load(f)['hidden_size']})" in printed
