"""One model source: what a path is is decided once, and its files are read once each."""

import builtins
import collections
import json
import os

import numpy as np
import pytest

from cosent_tf import ConfigError, build_encoder, build_interaction_model, save_checkpoint
from cosent_tf.inference.model_dir import load_model_dir
from cosent_tf.models import checkpoint_files, tokenization
from cosent_tf.models.sources import (
    COSENT_MODEL,
    GOOGLE,
    SMALL_RANDOM_CONFIG,
    ModelSource,
    open_model_folder,
    open_source,
)
from cosent_tf.models.spec import SPEC_FILE, read_spec
from cosent_tf.models.tokenization import SentenceTokenizer
from tests.helpers import made_vocab, make_model_dir

TOKENS = np.array([[101, 872, 1962, 102, 0]], np.int32)
INPUTS = [TOKENS, np.zeros_like(TOKENS)]


@pytest.fixture
def count_reads(monkeypatch):
    """{file name, or 'vocabulary' or 'variable list': times read} from the moment the fixture is
    asked for: JSON files opened by name, a vocabulary's lines read, and a checkpoint's variable
    list (what opening a checkpoint reads)."""
    reads = collections.Counter()
    real_open, real_lines = builtins.open, tokenization.decoded_lines
    real_list = checkpoint_files.list_checkpoint_variables

    def counting_open(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)):
            reads[os.path.basename(os.fspath(file))] += 1
        return real_open(file, *args, **kwargs)

    def counting_list(prefix, shown=None):
        reads["variable list"] += 1
        return real_list(prefix, shown)

    def counting_lines(path, *args, **kwargs):
        reads["vocabulary"] += 1
        return real_lines(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(checkpoint_files, "list_checkpoint_variables", counting_list)
    monkeypatch.setattr(tokenization, "decoded_lines", counting_lines)
    return reads


@pytest.fixture
def google_checkpoint(tiny_config, tmp_path):
    encoder = build_encoder(tiny_config, pooling="pooler")
    save_checkpoint(encoder, tmp_path / "ckpt", tiny_config, vocab_path=made_vocab())
    return str(tmp_path / "ckpt"), encoder


def test_tokenizer_encoder_and_weights_from_one_source_read_each_file_once(google_checkpoint, count_reads):
    folder, saved = google_checkpoint
    source = open_source(folder)
    source.check_vocab()
    source.check_maxlen("bert", 32)
    source.variables()  # what a run's pre-flight check opens
    tokenizer = SentenceTokenizer(source, 32)
    encoder = build_encoder(source, pooling="pooler")
    build_interaction_model(source, head_input="pooler")
    assert count_reads["bert_config.json"] == 1
    assert count_reads["vocabulary"] == 1
    assert count_reads["variable list"] == 1
    assert source.format == GOOGLE and tokenizer.do_lower_case
    np.testing.assert_array_equal(encoder.predict(INPUTS, verbose=0), saved.predict(INPUTS, verbose=0))


def test_a_model_folder_loads_from_its_source_reading_each_file_once(tiny_config, tmp_path, count_reads):
    make_model_dir(tmp_path / "model", tiny_config, kind="interaction", head="softmax")
    count_reads.clear()
    source = open_model_folder(tmp_path / "model")
    spec, _, tokenizer = load_model_dir(source)
    assert (spec.kind, spec.head, source.format) == ("interaction", "softmax", COSENT_MODEL)
    assert read_spec(source) is spec
    for name in (SPEC_FILE, "bert_config.json", "vocabulary", "variable list"):
        assert count_reads[name] == 1, name
    assert tokenizer.maxlen == spec.maxlen


def test_a_cased_model_folder_is_tokenised_cased(tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config)
    spec_path = tmp_path / "model" / SPEC_FILE
    record = json.loads(spec_path.read_text())
    spec_path.write_text(json.dumps({**record, "do_lower_case": False}))
    source = open_source(str(tmp_path / "model"))  # as --checkpoint, to fine-tune further
    assert source.format == COSENT_MODEL and source.do_lower_case is False
    assert SentenceTokenizer(source, 16).do_lower_case is False
    assert SentenceTokenizer(source, 16, do_lower_case=True).do_lower_case is True  # an explicit choice wins


def test_nothing_given_is_the_bundled_random_config(tmp_path):
    source = open_source(None, vocab=made_vocab())
    assert isinstance(source, ModelSource) and source.checkpoint is None and source.random_weights
    assert source.config_path == SMALL_RANDOM_CONFIG and os.path.isfile(SMALL_RANDOM_CONFIG)
    with pytest.raises(ConfigError, match="no vocabulary given"):
        open_source(None).vocab()


def test_a_source_checks_maxlen_and_vocabulary_size(tmp_path):
    from tests.helpers import write_config

    config = write_config(tmp_path / "config.json", vocab_size=1000, max_position=16)
    source = open_source(None, config=config, vocab=made_vocab())
    with pytest.raises(ConfigError, match=r"vocab_size is 1000 but .*vocab.txt has 21128 tokens"):
        source.check_vocab()
    with pytest.raises(ConfigError, match="maxlen 32 is longer than the model's 16 position embeddings"):
        source.check_maxlen("bert", 32)
    source.check_maxlen("nezha", 32)  # relative positions: no limit
