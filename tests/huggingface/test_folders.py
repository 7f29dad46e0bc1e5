"""Hugging Face folders without torch: tokenizer files, sentence-transformers modules, errors, and
export -> import round trips. The BERT config and weight names are in test_bert.py, the weight
files in test_weights.py, parity with transformers itself in test_parity.py."""

import json
import logging
import os
import stat

import numpy as np
import pytest

from cosent_tf import CheckpointError, ConfigError, PairScorer, SentenceEncoder, build_encoder, export_hf
from cosent_tf.cli import main as cli_main
from cosent_tf.cli import train_main
from cosent_tf.data.tasks import get_task
from cosent_tf.huggingface.folders import read_sentence_transformers, read_tokenizer_json
from cosent_tf.inference.model_dir import read_spec
from cosent_tf.models.tokenization import SentenceTokenizer, load_vocab
from cosent_tf.training.config import RunConfig
from tests.helpers import made_vocab, make_model_dir, umask, write_config
from tests.huggingface.helpers import hf_folder

TEXTS = ["今天天气很好", "我想吃苹果", "Café au LAIT", ""]


def tokenizer_json(tokens, **normalizer):
    return {
        "normalizer": {
            "type": "BertNormalizer",
            "clean_text": True,
            "handle_chinese_chars": True,
            "strip_accents": None,
            "lowercase": True,
            **normalizer,
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "model": {
            "type": "WordPiece",
            "unk_token": "[UNK]",
            "continuing_subword_prefix": "##",
            "vocab": {token: i for i, token in enumerate(tokens)},
        },
    }


def test_tokenizer_json_gives_the_vocabulary_and_the_same_ids(tmp_path):
    tokens = load_vocab(made_vocab())
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer_json(tokens)), encoding="utf-8")
    assert load_vocab(tmp_path / "tokenizer.json") == tokens
    from_json = SentenceTokenizer(tmp_path / "tokenizer.json", 16).encode_all(TEXTS)
    from_txt = SentenceTokenizer(made_vocab(), 16).encode_all(TEXTS)
    assert [list(a) for a in from_json] == [list(b) for b in from_txt]


@pytest.mark.parametrize(
    "part, change, message",
    [
        ("normalizer", {"type": "Sequence"}, "normalizer 'Sequence' is not supported"),
        ("normalizer", {"lowercase": False, "strip_accents": True}, "strip_accents True is not supported"),
        ("normalizer", {"handle_chinese_chars": False}, "handle_chinese_chars False is not supported"),
        ("model", {"type": "BPE"}, "tokenizer model 'BPE' is not supported"),
        ("pre_tokenizer", {"type": "Whitespace"}, "pre_tokenizer 'Whitespace' is not supported"),
        ("model", {"vocab": {"[PAD]": 0, "[UNK]": 2}}, "ids are not 0..1 without gaps"),
    ],
)
def test_tokenizer_settings_the_tokenizer_would_not_reproduce_are_named(part, change, message, tmp_path):
    spec = tokenizer_json(["[PAD]", "[UNK]"])
    spec[part] = {**spec[part], **change}
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(ConfigError, match=message):
        read_tokenizer_json(tmp_path / "tokenizer.json")


def st_folder(tmp_path, config, pooling_config, modules=("Transformer", "Pooling", "Normalize"), settings=None):
    """A sentence-transformers folder around an exported random BERT."""
    source = tmp_path / "source"
    make_model_dir(source, config, pooling="last-avg")
    folder = tmp_path / "st"
    export_hf(str(source), str(folder))
    paths = {"Transformer": "", "Pooling": "1_Pooling", "Normalize": "2_Normalize", "Dense": "2_Dense"}
    (folder / "modules.json").write_text(
        json.dumps(
            [
                {"idx": i, "name": str(i), "path": paths[m], "type": f"sentence_transformers.models.{m}"}
                for i, m in enumerate(modules)
            ]
        )
    )
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling_config))
    (folder / "sentence_bert_config.json").write_text(json.dumps(settings or {"max_seq_length": 20}))
    return folder


@pytest.mark.parametrize(
    "pooling_config, pooling",
    [
        ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "cls"),
        ({"pooling_mode_mean_tokens": True}, "last-avg"),
        ({"embedding_dimension": 16, "pooling_mode": "max"}, "max"),  # sentence-transformers 6
    ],
)
def test_sentence_transformers_pooling_is_read_in_both_layouts(pooling_config, pooling, tiny_config, tmp_path):
    folder = st_folder(tmp_path, tiny_config, pooling_config)
    modules = read_sentence_transformers(folder)
    assert (modules.pooling, modules.maxlen) == (pooling, 20)
    spec = read_spec(str(folder))
    assert (spec.kind, spec.pooling, spec.maxlen) == ("feature", pooling, 20)
    assert RunConfig(checkpoint=str(folder)).resolved().pooling == pooling
    assert RunConfig(checkpoint=str(folder), pooling="max").resolved().pooling == "max"
    (folder / "modules.json").unlink()  # a bare transformers folder: the engine's default, as for Google checkpoints
    assert RunConfig(checkpoint=str(folder)).resolved().pooling == "cls"


MEAN = {"pooling_mode_mean_tokens": True}
SETTINGS_LOG = "cosent_tf.training.config"


def logged(caplog):
    return [record.getMessage() for record in caplog.records if record.name == SETTINGS_LOG]


@pytest.mark.parametrize(
    "settings, positions, maxlen, origin",
    [
        ({"max_seq_length": 48}, 64, 48, "max_seq_length 48"),
        # beyond the position embeddings: cut to them, as a sentence-transformers folder is loaded
        ({"max_seq_length": 100}, 40, 40, "max_seq_length 100 cut to the model's 40 position embeddings"),
        # none: the tokenizer's model_max_length (the export wrote its model's maxlen, 32)
        ({"do_lower_case": False}, 64, 32, "the length 32 (no max_seq_length: the tokenizer's model_max_length)"),
    ],
)
def test_a_run_from_a_sentence_transformers_folder_takes_its_length_unless_an_option_overrides_it(
    settings, positions, maxlen, origin, tmp_path, caplog
):
    folder = str(
        st_folder(tmp_path, write_config(tmp_path / "tiny.json", max_position=positions), MEAN, settings=settings)
    )
    assert maxlen != get_task("BQ").maxlen  # not the default it replaces
    with caplog.at_level(logging.INFO, SETTINGS_LOG):
        cfg = RunConfig(task="BQ", checkpoint=folder).resolved()
    assert (cfg.maxlen, cfg.pooling) == (maxlen, "last-avg")
    assert logged(caplog) == [
        f"--maxlen {maxlen}: the --checkpoint folder's {origin}",
        "--pooling last-avg: the --checkpoint folder's pooling mean (last-avg here)",
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO, SETTINGS_LOG):
        cfg = RunConfig(task="BQ", checkpoint=folder, maxlen=24, pooling="cls").resolved()
    assert (cfg.maxlen, cfg.pooling) == (24, "cls")
    assert logged(caplog) == [
        f"NOTE: --maxlen 24 overrides the --checkpoint folder's {origin}: the trained model and its exports will "
        "cut texts at 24 tokens",
        "NOTE: --pooling cls overrides the --checkpoint folder's pooling mean (last-avg here): the trained model "
        "and its exports will pool with cls",
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO, SETTINGS_LOG):  # the folder's own values, given again: nothing overridden
        cfg = RunConfig(task="BQ", checkpoint=folder, maxlen=maxlen, pooling="last-avg").resolved()
    assert (cfg.maxlen, cfg.pooling, logged(caplog)) == (maxlen, "last-avg", [])
    # a cross-encoder cuts pairs, not texts, and pools nothing: the folder's settings are not its own
    cfg = RunConfig(task="BQ", kind="interaction", checkpoint=folder).resolved()
    assert cfg.maxlen == get_task("BQ").interaction_maxlen


def test_train_says_on_the_console_which_folder_setting_an_option_overrides(tiny_config, tmp_path, capsys):
    folder = str(st_folder(tmp_path, tiny_config, MEAN, settings={"max_seq_length": 48}))
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("我想还款\t怎么还钱\t1\n今天天气\t明天下雨\t0\n" * 4, encoding="utf-8")
    command = ["train", "--train", str(pairs), "--checkpoint", folder, "--print-config"]
    cli_main(command)
    printed = capsys.readouterr()
    assert json.loads(printed.out)["maxlen"] == 48
    assert "--maxlen 48: the --checkpoint folder's max_seq_length 48\n" in printed.err
    cli_main([*command, "--maxlen", "64"])
    printed = capsys.readouterr()
    assert json.loads(printed.out)["maxlen"] == 64
    assert (
        "NOTE: --maxlen 64 overrides the --checkpoint folder's max_seq_length 48: the trained model and its exports "
        "will cut texts at 64 tokens\n" in printed.err
    )


@pytest.mark.parametrize(
    "pooling_config, modules, message",
    [
        ({"pooling_mode_mean_sqrt_len_tokens": True}, None, "pooling mean_sqrt_len_tokens is not supported"),
        ({"pooling_mode": ["mean", "max"]}, None, "pooling mean \\+ max is not supported"),
        ({"pooling_mode": "mean"}, ("Transformer", "Pooling", "Dense"), "module '2' .*Dense.* is not supported"),
    ],
)
def test_sentence_transformers_modules_cosent_tf_cannot_run_are_named(
    pooling_config, modules, message, tiny_config, tmp_path
):
    folder = st_folder(tmp_path, tiny_config, pooling_config, modules or ("Transformer", "Pooling"))
    with pytest.raises(ConfigError, match=message):
        SentenceEncoder.load(str(folder))


@pytest.mark.heavy
def test_export_then_load_gives_the_same_vectors_and_scores(tiny_config, tmp_path):
    make_model_dir(tmp_path / "feature", tiny_config, pooling="max")
    with umask(0o022):  # as on most servers: what the export writes, others may read
        assert export_hf(str(tmp_path / "feature"), str(tmp_path / "st")) == "sentence-transformers"
    for top, folders, files in os.walk(tmp_path / "st"):
        modes = {name: stat.S_IMODE(os.stat(os.path.join(top, name)).st_mode) for name in folders + files}
        assert modes == {name: 0o755 if name in folders else 0o644 for name in modes}, top
    for name in ("modules.json", "sentence_bert_config.json", "1_Pooling/config.json", "vocab.txt", "README.md"):
        assert (tmp_path / "st" / name).exists(), name
    original, loaded = SentenceEncoder.load(str(tmp_path / "feature")), SentenceEncoder.load(str(tmp_path / "st"))
    assert (loaded.spec.pooling, loaded.spec.maxlen) == ("max", original.spec.maxlen)
    np.testing.assert_allclose(loaded.encode(TEXTS), original.encode(TEXTS), atol=1e-6)

    make_model_dir(tmp_path / "cross", tiny_config, kind="interaction", head="softmax", head_input="pooler")
    assert export_hf(str(tmp_path / "cross"), str(tmp_path / "hf-cross")) == "sequence-classification"
    config = json.loads((tmp_path / "hf-cross" / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"] and config["num_labels"] == 2
    original, loaded = PairScorer.load(str(tmp_path / "cross")), PairScorer.load(str(tmp_path / "hf-cross"))
    assert (loaded.spec.head, loaded.spec.head_input, loaded.spec.pair_segments) == ("softmax", "pooler", True)
    np.testing.assert_allclose(
        loaded.similarity(TEXTS, TEXTS[::-1]), original.similarity(TEXTS, TEXTS[::-1]), atol=1e-6
    )


@pytest.mark.heavy
def test_pair_segments_reach_the_model(tiny_config, tmp_path):
    model = make_model_dir(tmp_path / "cross", tiny_config, kind="interaction", head_input="pooler")
    scorer = PairScorer.load(str(tmp_path / "cross"))
    ids = scorer.tokenizer.encode_pairs(["今天"], ["天气"])[0][None]
    expected = model.predict([ids, np.array([[0, 0, 0, 0, 1, 1, 1]])], verbose=0)[0, -1]
    zeros = model.predict([ids, np.zeros_like(ids)], verbose=0)[0, -1]
    error = abs(scorer.similarity(["今天"], ["天气"])[0] - expected)
    assert error < 1e-7 and abs(expected - zeros) > 1e-6  # zeros would be seen: their effect is far above error


@pytest.mark.parametrize(
    "kind, settings, message",
    [
        (
            "feature",
            {"pooling": "first-last-avg"},
            "pooling 'first-last-avg' cannot be expressed in sentence-transformers",
        ),
        ("feature", {"pooling": "pooler"}, "pooling 'pooler' cannot be expressed"),
        ("interaction", {}, "reads the \\[CLS\\] hidden state directly .*train with --head pooler"),
    ],
)
def test_exports_hugging_face_cannot_express_are_refused(kind, settings, message, tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config, kind=kind, **settings)
    with pytest.raises(ConfigError, match=message):
        export_hf(str(tmp_path / "model"), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_a_hub_name_says_how_to_get_the_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        CheckpointError,
        match="reads as a Hugging Face hub name, but nothing is downloaded.*"
        "huggingface-cli download hfl/chinese-roberta-wwm-ext",
    ):
        RunConfig(checkpoint="hfl/chinese-roberta-wwm-ext").resolved()
    with pytest.raises(CheckpointError, match="hub name"):
        build_encoder(None, "BAAI/bge-small-zh")


def test_tokenizer_config_decides_lower_casing(tiny_config, tmp_path):
    folder = hf_folder(tmp_path, tiny_config)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": False}))
    encoder = SentenceEncoder.load(str(folder))
    assert encoder.spec.do_lower_case is False and encoder.spec.pooling == "last-avg"
    assert encoder.tokenizer.tokenize("AB")[1:-1] != SentenceTokenizer(made_vocab()).tokenize("AB")[1:-1]


def test_training_starts_from_a_sentence_transformers_folder_and_keeps_its_settings(tiny_setup):
    tmp_path, options = tiny_setup
    vocab = options[options.index("--vocab") + 1]
    config = options[options.index("--config") + 1]
    make_model_dir(tmp_path / "source", config, pooling="max", vocab=vocab)
    export_hf(str(tmp_path / "source"), str(tmp_path / "st"))
    own = [
        o
        for i, o in enumerate(options)
        if o not in ("--config", "--vocab") and options[i - 1] not in ("--config", "--vocab")
    ]
    metrics = train_main(
        ["STS-B", "--epochs", "1", "--checkpoint", str(tmp_path / "st"), "--output-dir", str(tmp_path / "run")] + own
    )
    assert np.isfinite(metrics["test"]["spearman"])
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (recorded["pooling"], recorded["config"]) == ("max", str(tmp_path / "st" / "config.json"))
    # the folder's max_seq_length (its model's maxlen, 32), not STS-B's 64, through to the re-export
    assert json.loads((tmp_path / "st" / "sentence_bert_config.json").read_text())["max_seq_length"] == 32
    assert recorded["maxlen"] == 32 != get_task("STS-B").maxlen
    spec = read_spec(str(tmp_path / "run" / "model"))
    assert (spec.pooling, spec.maxlen) == ("max", 32)
    export_hf(str(tmp_path / "run" / "model"), str(tmp_path / "again"))
    assert json.loads((tmp_path / "again" / "sentence_bert_config.json").read_text())["max_seq_length"] == 32
    assert json.loads((tmp_path / "again" / "tokenizer_config.json").read_text())["model_max_length"] == 32
    assert read_sentence_transformers(tmp_path / "again").pooling == "max"


def test_an_interaction_run_from_a_classifier_folder_starts_from_its_head(tiny_setup, caplog):
    from cosent_tf.data.tasks import get_task
    from cosent_tf.training.engine import Matcher

    tmp_path, options = tiny_setup
    vocab, config = (options[options.index(flag) + 1] for flag in ("--vocab", "--config"))
    make_model_dir(tmp_path / "source", config, kind="interaction", head_input="pooler", vocab=vocab)
    export_hf(str(tmp_path / "source"), str(tmp_path / "cross"))
    cfg = RunConfig(task="BQ", kind="interaction", loss="cosent", checkpoint=str(tmp_path / "cross")).resolved()
    assert (cfg.head_input, cfg.config, cfg.vocab) == (
        "pooler",
        str(tmp_path / "cross" / "config.json"),
        str(tmp_path / "cross" / "vocab.txt"),
    )
    matcher = Matcher(cfg, get_task("BQ"))
    assert matcher.spec.pair_segments and matcher.sep_id == matcher.tokenizer.sep_id
    texts_a, texts_b = ["我是你", "他们不在"], ["你是我", "他在"]
    scores = matcher.scores(matcher.tokenizer.encode_pairs(texts_a, texts_b))
    np.testing.assert_allclose(scores, PairScorer.load(str(tmp_path / "cross")).similarity(texts_a, texts_b), atol=1e-6)
    # a two-label classifier cannot fill CoSENT's one-score head: it starts fresh, and says so
    make_model_dir(tmp_path / "two", config, kind="interaction", head="softmax", head_input="pooler", vocab=vocab)
    export_hf(str(tmp_path / "two"), str(tmp_path / "cross-2"))
    cfg = RunConfig(task="BQ", kind="interaction", loss="cosent", checkpoint=str(tmp_path / "cross-2")).resolved()
    with caplog.at_level(logging.WARNING):
        Matcher(cfg, get_task("BQ"))
    assert "cosent/Match-Score/kernel has shape (16, 2), the model needs (16, 1)" in caplog.text
    assert "the head starts from random weights" in caplog.text


@pytest.mark.heavy
def test_training_from_a_folder_with_only_tokenizer_json_writes_its_vocabulary(tiny_setup):
    tmp_path, options = tiny_setup
    vocab, config = (options[options.index(flag) + 1] for flag in ("--vocab", "--config"))
    make_model_dir(tmp_path / "source", config, pooling="cls", vocab=vocab)
    export_hf(str(tmp_path / "source"), str(tmp_path / "hf"))
    for name in ("modules.json", "sentence_bert_config.json"):
        (tmp_path / "hf" / name).unlink()
    tokens = load_vocab(tmp_path / "hf" / "vocab.txt")
    (tmp_path / "hf" / "vocab.txt").unlink()  # transformers 5's layout: tokenizer.json only
    (tmp_path / "hf" / "tokenizer.json").write_text(json.dumps(tokenizer_json(tokens)), encoding="utf-8")
    own = options[:2] + options[6:]  # data dir and batching; config and vocabulary come from the folder
    train_main(
        ["BQ", "--epochs", "1", "--checkpoint", str(tmp_path / "hf"), "--output-dir", str(tmp_path / "run")] + own
    )
    assert load_vocab(tmp_path / "run" / "model" / "vocab.txt") == tokens
    encoder = SentenceEncoder.load(str(tmp_path / "run" / "model"))
    assert encoder.tokenizer.encode("我是你") == SentenceTokenizer(vocab, 32).encode("我是你")


def test_an_older_sentence_transformers_layout_with_the_transformer_in_its_own_folder_loads(tiny_config, tmp_path):
    import shutil

    folder = st_folder(tmp_path, tiny_config, {"pooling_mode_mean_tokens": True})
    before = SentenceEncoder.load(str(folder)).encode(TEXTS)
    (folder / "0_Transformer").mkdir()
    for name in ("config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "sentence_bert_config.json"):
        shutil.move(folder / name, folder / "0_Transformer" / name)
    modules = json.loads((folder / "modules.json").read_text())
    modules[0]["path"] = "0_Transformer"
    (folder / "modules.json").write_text(json.dumps(modules))
    encoder = SentenceEncoder.load(str(folder))
    assert (encoder.spec.pooling, encoder.spec.maxlen) == ("last-avg", 20)
    np.testing.assert_array_equal(encoder.encode(TEXTS), before)
