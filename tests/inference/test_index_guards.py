"""The guards a review of the quantised index asked for: another model's encoder cannot search an
index (whatever its width), an index description without its sizes, approximate settings without a
kind, a bounded IVF training sample, a stale int8 ranges file, and the widths a Matryoshka run
records."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from cosent_tf import ConfigError, SentenceEncoder, VectorIndex
from cosent_tf.cli import main as cosent_tf
from cosent_tf.inference import ann as approximate
from cosent_tf.inference.parts import ranges_path
from cosent_tf.inference.vectors import check_dim
from cosent_tf.training.engine import trained_widths
from tests.helpers import distinct_texts, make_model_dir, write_config
from tests.inference.test_index_precision import clustered_units

CORPUS = distinct_texts(7, 40)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two feature models of width 16 (other weights) and one of width 32."""
    root = tmp_path_factory.mktemp("guards")
    narrow = write_config(root / "narrow.json", hidden=16)
    wide = write_config(root / "wide.json", hidden=32, intermediate=64)
    make_model_dir(root / "a", narrow, pooling="last-avg")
    make_model_dir(root / "b", narrow, pooling="last-avg")
    make_model_dir(root / "wide", wide, pooling="last-avg")
    return root


def test_an_encoder_of_another_width_cannot_search_an_index(models):
    index = SentenceEncoder.load(models / "a").build_index(CORPUS, dim=8)
    wide = SentenceEncoder.load(models / "wide")
    wide.path = None  # an encoder in memory: no folder to compare, its width still tells
    with pytest.raises(ConfigError, match="built from a model whose vectors have 16 dimensions.*makes 32"):
        wide.search(["我是中国人"], index)


def test_another_model_of_the_same_width_cannot_search_an_index(models, tmp_path):
    SentenceEncoder.load(models / "a").build_index(CORPUS).save(str(tmp_path / "index"))
    index = VectorIndex.load(tmp_path / "index")
    with pytest.raises(ConfigError, match="was built with the model"):
        SentenceEncoder.load(models / "b").search(["我是中国人"], index)
    hits = SentenceEncoder.load(models / "a").search(["我是中国人"], index, top_k=3)
    assert len(hits[0]) == 3


def test_an_index_description_without_its_sizes_is_refused(tmp_path):
    vectors = clustered_units(0, 30, 8)
    VectorIndex.build(vectors, [f"t{i}" for i in range(30)], precision="binary").save(str(tmp_path / "index"))
    info_path = tmp_path / "index" / "index.json"
    info = json.loads(info_path.read_text(encoding="utf-8"))
    del info["dimension"]
    info_path.write_text(json.dumps(info), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"index\.json: no 'dimension' recorded"):
        VectorIndex.load(tmp_path / "index")


def test_settings_of_an_approximate_index_need_its_kind():
    vectors = clustered_units(0, 30, 8)
    with pytest.raises(ConfigError, match="m: settings of an approximate index; say which"):
        VectorIndex.build(vectors, [f"t{i}" for i in range(30)], m=16)


def test_a_quantised_index_loads_without_reading_every_float32_vector_and_refuses_a_broken_one_when_met(tmp_path):
    vectors = clustered_units(1, 50, 8)
    VectorIndex.build(vectors, [f"t{i}" for i in range(50)], precision="int8").save(str(tmp_path / "index"))
    stored = np.load(tmp_path / "index" / "vectors.npy")
    stored[7] = np.nan
    np.save(tmp_path / "index" / "vectors.npy", stored)
    index = VectorIndex.load(tmp_path / "index")  # no scan of all float32 rows
    with pytest.raises(ValueError, match="corpus vector 7 gives NaN"):
        index.search(vectors[7:8], top_k=50, rescore_multiplier=1)


def test_the_ivf_training_sample_is_bounded_whatever_the_lists_ask(monkeypatch):
    vectors = clustered_units(2, 400, 8)
    monkeypatch.setattr(approximate, "IVF_TRAIN_MOST", 64)
    sample = approximate._training_sample(vectors, nlist=100)  # 50 a list would be all 400
    assert sample.shape == (64, 8)
    assert {tuple(row) for row in sample} <= {tuple(row) for row in vectors}


def test_a_float32_encode_over_an_int8_one_takes_its_stale_ranges_away(models, tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(CORPUS[:6]) + "\n", encoding="utf-8")
    output = tmp_path / "vectors.npy"
    cosent_tf(["encode", str(models / "a"), str(texts), str(output), "--vector-precision", "int8"])
    assert (tmp_path / "vectors.ranges.npy").exists() and ranges_path(str(output)).endswith("vectors.ranges.npy")
    codes = output.read_bytes()
    output.unlink()
    with pytest.raises(SystemExit, match="vectors.ranges.npy: exists"):  # it goes only with --overwrite
        cosent_tf(["encode", str(models / "a"), str(texts), str(output)])
    assert not output.exists()
    output.write_bytes(codes)
    cosent_tf(["encode", str(models / "a"), str(texts), str(output), "--overwrite"])
    assert np.load(output).dtype == np.float32
    assert not (tmp_path / "vectors.ranges.npy").exists()


def test_a_matryoshka_run_records_the_widths_its_loss_weighs():
    assert trained_widths([64, 312, 128], [1.0, 1.0, 0.0]) == [312, 64]
    assert trained_widths([64, 312], None) == [312, 64]
    assert trained_widths(None, None) is None


def test_the_full_width_of_a_model_trained_without_it_warns(caplog):
    with caplog.at_level(logging.WARNING, logger="cosent_tf"):
        assert check_dim(312, 312, [128, 64], "model") is None
        assert check_dim(312, 312, [312, 64], "model") is None
    assert len(caplog.records) == 1
    assert "not its full width 312" in caplog.records[0].getMessage()


def test_search_build_with_a_setting_but_no_index_kind_asks_for_it(models, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="--hnsw-m is a setting of an hnsw index: pass --index hnsw with it"):
        cosent_tf(["search", "build", str(models / "a"), str(corpus), str(tmp_path / "index"), "--hnsw-m", "8"])
    assert not (tmp_path / "index").exists()
