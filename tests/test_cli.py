import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from cosent_tf import SentenceEncoder, VectorIndex
from cosent_tf.cli import argument_parser, console_logging, main
from cosent_tf.console import TENSORFLOW_STARTUP_LINES
from cosent_tf.environment import keeps_weights_in_amx_layout
from tests.export.conftest import EXPORTED, feature_string_export, made
from tests.helpers import ONEDNN_ON_ANY_CPU, ROOT, make_model_dir
from tests.zoo import copy_of

SENTENCES = ["今天天气怎么样", "", "ＱＱ号码是多少？", "我想换手机", "明天会下雨吗"]


@pytest.fixture
def model_dir(tiny_config, tmp_path):
    make_model_dir(tmp_path / "model", tiny_config, threshold=0.5)
    (tmp_path / "texts.txt").write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    return tmp_path / "model"


def test_encode_writes_one_row_per_line(model_dir, tmp_path, capsys):
    main(["encode", str(model_dir), str(tmp_path / "texts.txt"), str(tmp_path / "vectors.npy")])
    vectors = np.load(tmp_path / "vectors.npy")
    np.testing.assert_allclose(vectors, SentenceEncoder.load(model_dir).encode(SENTENCES), atol=1e-6)
    assert "5 vectors of dimension 16" in capsys.readouterr().out
    main(["encode", str(model_dir), str(tmp_path / "texts.txt"), str(tmp_path / "raw.npy"), "--no-normalize"])
    assert not np.allclose(np.linalg.norm(np.load(tmp_path / "raw.npy"), axis=1), 1.0)


def test_similarity_keeps_each_line_and_appends_score_and_prediction(model_dir, tmp_path):
    (tmp_path / "pairs.tsv").write_text("你好\t你好呀\t1\n天气\t下雨\t0\n", encoding="utf-8")
    main(["similarity", str(model_dir), str(tmp_path / "pairs.tsv"), str(tmp_path / "scores.tsv")])
    lines = (tmp_path / "scores.tsv").read_text(encoding="utf-8").splitlines()
    cosines = SentenceEncoder.load(model_dir).similarity(["你好", "天气"], ["你好呀", "下雨"])
    for line, original, cosine in zip(lines, ["你好\t你好呀\t1", "天气\t下雨\t0"], cosines):
        prefix, score, prediction = line.rsplit("\t", 2)
        assert prefix == original and float(score) == pytest.approx(cosine, abs=1e-6)
        assert prediction == str(int(cosine > 0.5))


@pytest.mark.heavy
def test_search_build_then_query(model_dir, tmp_path):
    main(["search", "build", str(model_dir), str(tmp_path / "texts.txt"), str(tmp_path / "index")])
    assert len(VectorIndex.load(tmp_path / "index")) == 5
    (tmp_path / "queries.txt").write_text("我想换手机\nＱＱ号码是多少？\n", encoding="utf-8")
    main(
        [
            "search",
            "query",
            str(tmp_path / "index"),
            str(tmp_path / "queries.txt"),
            str(tmp_path / "hits.jsonl"),
            "--top-k",
            "3",
        ]
    )
    results = [json.loads(line) for line in (tmp_path / "hits.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["query"] for r in results] == ["我想换手机", "ＱＱ号码是多少？"]
    assert [r["hits"][0]["index"] for r in results] == [3, 2] and len(results[0]["hits"]) == 3
    assert results[0]["hits"][0]["text"] == "我想换手机"
    make_model_dir(tmp_path / "other", str(tmp_path / "tiny_config.json"))
    with pytest.raises(
        SystemExit,
        match=r"index: the index was built with the model .*model, not .*other; its "
        "vectors cannot be compared with another model's",
    ):
        main(
            [
                "search",
                "query",
                str(tmp_path / "index"),
                str(tmp_path / "queries.txt"),
                str(tmp_path / "other-hits.jsonl"),
                "--model-dir",
                str(tmp_path / "other"),
            ]
        )


@pytest.mark.heavy
def test_export_writes_a_saved_model(model_dir, tmp_path_factory, tmp_path):
    # the first export is the zoo's feature export, which `cosent-tf export` wrote (tests/export/conftest.py)
    zoo_export = feature_string_export(tmp_path_factory)
    assert made(zoo_export)["status"] == 0
    assert (zoo_export / EXPORTED / "saved_model.pb").exists()
    exported = copy_of(zoo_export / EXPORTED, tmp_path / "exported")
    # what replaces it is this module's model, with its threshold 0.5, as the test exported before the
    # zoo: the command then writes a model whose decision adds the decide signatures
    with pytest.raises(
        SystemExit,
        match="exported: already holds a SavedModel export; nothing was written: replace it with --overwrite",
    ):
        main(["export", str(model_dir), str(exported)])
    before = os.stat(exported / "saved_model.pb").st_mtime_ns
    main(["export", str(model_dir), str(exported), "--overwrite"])
    assert os.stat(exported / "saved_model.pb").st_mtime_ns != before
    described = json.loads((exported / "assets.extra" / "cosent_model.json").read_text(encoding="utf-8"))
    assert described["threshold"] == 0.5 and {"decide", "decide_ids"} <= set(described["signatures"])


def listing(folder):
    return sorted(
        os.path.relpath(os.path.join(root, name), folder)
        for root, dirs, files in os.walk(folder)
        for name in dirs + files
    )


@pytest.mark.parametrize(
    "arguments, message",
    [
        # A training run's folder: the model folder and the run's other outputs stay.
        (["export", "{run}/model", "{run}", "--overwrite"], "would hold the input"),
        (["export", "{run}/model", "{run}/model"], "would lie inside the input"),
        (["export", "{run}/model", "{run}/model/served"], "would lie inside the input"),
        (
            ["export", "{run}/model", "{tmp}/texts-folder"],
            r"texts-folder: already exists and is not a SavedModel "
            r"export \(it holds texts.txt\)",
        ),
        (
            ["search", "build", "{run}/model", "{tmp}/texts-folder/texts.txt", "{tmp}/texts-folder", "--overwrite"],
            "would hold the input",
        ),
        (
            ["search", "build", "{run}/model", "{tmp}/texts.txt", "{tmp}/texts-folder"],
            "already exists and is not a cosent-tf index",
        ),
        (["encode", "{run}/model", "{tmp}/texts.txt", "{tmp}/texts.txt"], "is also an input of this command"),
        (["encode", "{run}/model", "{tmp}/texts.txt", "{run}"], "is a folder; give the path of a file"),
    ],
)
def test_outputs_never_replace_inputs_or_other_files(arguments, message, model_dir, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    os.rename(model_dir, run / "model")
    (run / "metrics.json").write_text("{}")
    (tmp_path / "texts-folder").mkdir()
    (tmp_path / "texts-folder" / "texts.txt").write_text("你好\n", encoding="utf-8")
    before = {folder: listing(folder) for folder in (run, tmp_path / "texts-folder")}
    texts = (tmp_path / "texts.txt").read_bytes()
    with pytest.raises(SystemExit, match=message):
        main([a.format(tmp=tmp_path, run=run) for a in arguments])
    assert {folder: listing(folder) for folder in before} == before
    assert (tmp_path / "texts.txt").read_bytes() == texts


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["encode", "{tmp}/missing", "{tmp}/texts.txt", "{tmp}/out.npy"], "missing: model folder not found"),
        (["encode", "{model}", "{tmp}/nothere.txt", "{tmp}/out.npy"], "nothere.txt: cannot open"),
        (["encode", "{model}", "{tmp}/latin1.txt", "{tmp}/out.npy"], "latin1.txt, line 2: not valid UTF-8"),
        (
            ["similarity", "{model}", "{tmp}/texts.txt", "{tmp}/out.tsv"],
            r"texts.txt, line 1: expected two tab-separated texts \(text_a<TAB>text_b\), found no tab",
        ),
        (["search", "query", "{tmp}/noindex", "{tmp}/texts.txt", "{tmp}/out.jsonl"], "not a complete cosent-tf index"),
    ],
)
def test_bad_input_is_named_and_nothing_is_written(arguments, message, model_dir, tmp_path):
    (tmp_path / "latin1.txt").write_bytes("好\n".encode() + "café\n".encode("latin-1"))
    arguments = [a.format(tmp=tmp_path, model=model_dir) for a in arguments]
    with pytest.raises(SystemExit, match=message) as raised:
        main(arguments)
    assert str(raised.value).startswith("error: ")
    assert not os.path.exists(arguments[-1])


@pytest.mark.slow
def test_help_answers_without_importing_tensorflow():
    code = (
        "import sys\nfrom cosent_tf.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('tensorflow imported:', 'tensorflow' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.stdout.rstrip().endswith("tensorflow imported: False") and result.stderr == ""
    assert "encode" in result.stdout and "--verbose" in result.stdout


# TensorFlow's start-up lines kept out of a command's stderr unless --verbose: asserted on the console
# script's processes of test_console_script_on_amx_keeps_bf16_weights_in_amx_layout_for_the_process
# below, one quiet and one --verbose, which run the console script's entry point as the `cosent-tf`
# script does (two processes of their own here cost 13 s of TensorFlow start-ups).


@pytest.mark.slow
def test_console_script_is_installed_with_help():
    script = os.path.join(os.path.dirname(sys.executable), "cosent-tf")
    result = subprocess.run([script, "search", "query", "--help"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "--top-k" in result.stdout


BF16 = ["--precision", "bf16"]


@pytest.mark.parametrize(
    "argv, flags, preset, kept",
    [
        (["encode", "m", "t.txt", "v.npy"] + BF16, {"amx_tile", "amx_bf16", "avx512_bf16"}, None, True),
        (["similarity", "m", "p.tsv", "s.tsv"] + BF16, {"amx_bf16"}, None, True),
        (["search", "build", "m", "c.txt", "index"] + BF16, {"amx_bf16"}, None, True),
        (["search", "query", "index", "q.txt", "h.jsonl"] + BF16, {"amx_bf16"}, None, True),
        (["evaluate", "m", "p.tsv"] + BF16, {"amx_bf16"}, None, True),
        (["encode", "m", "t.txt", "v.npy"], {"amx_bf16"}, None, False),  # float32: no AMX kernel
        (["encode", "m", "t.txt", "v.npy"] + BF16, {"avx512_bf16", "avx512f"}, None, False),  # no AMX
        (["encode", "m", "t.txt", "v.npy"] + BF16, {"amx_bf16"}, "0", False),  # the user chose
        (["encode", "m", "t.txt", "v.npy"] + BF16, {"amx_bf16"}, "", False),
        (["export", "m", "out"] + BF16, {"amx_bf16"}, None, False),  # export traces; servers choose
        (["train", "--train", "t.tsv"] + BF16, {"amx_bf16"}, None, False),  # weights change
    ],
)
def test_weights_stay_in_amx_layout_only_for_bf16_inference_on_amx(argv, flags, preset, kept):
    args = argument_parser().parse_args(argv)
    environ = {} if preset is None else {"TF_ONEDNN_ASSUME_FROZEN_WEIGHTS": preset}
    assert keeps_weights_in_amx_layout(args, frozenset(flags), environ) is kept


# The console script's entry point in a process of its own, on a CPU that reports the flags
# given. Then a Dense layer of a compiled function has its weights changed between two calls:
# where TensorFlow took TF_ONEDNN_ASSUME_FROZEN_WEIGHTS, the second call still sees the first.
CONSOLE_PROCESS = """
import json, os, sys
import cosent_tf.cli as cli
from cosent_tf import environment
flags = frozenset(sys.argv[1].split(","))
environment.cpu_flags = lambda: flags
sys.argv = ["cosent-tf"] + sys.argv[2:]
cli.console_main()
from cosent_tf.backend import keras, tf
layer = keras.layers.Dense(16, activation="gelu")
call = tf.function(layer)
x = tf.random.normal([64, 32])
first = call(x).numpy()
layer.kernel.assign(layer.kernel * 2.0)
second = call(x).numpy()
stale = bool((first == second).all())
print(json.dumps({"variable": os.environ.get("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS"), "stale": stale}))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags, kept, verbose", [("amx_tile,amx_bf16,avx512_bf16", True, False), ("avx512_bf16,avx512f", False, True)]
)
def test_console_script_on_amx_keeps_bf16_weights_in_amx_layout_for_the_process(
    model_dir, tmp_path, flags, kept, verbose
):
    """Also what a command's process prints of TensorFlow's start-up: nothing unless --verbose (one
    process each way: a fresh process's stderr, TensorFlow first imported by the command). With
    TF_ENABLE_ONEDNN_OPTS=1 TensorFlow prints its oneDNN line at import on any CPU, so the quiet
    process shows that a start-up line is held back, and the verbose one that it is shown."""
    texts, out = str(tmp_path / "texts.txt"), str(tmp_path / "vectors.npy")
    env = {k: v for k, v in os.environ.items() if k not in ("TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "COSENT_TF_VERBOSE")}
    result = subprocess.run(
        [sys.executable, "-c", CONSOLE_PROCESS, flags]
        + ["--verbose"] * verbose
        + ["encode", str(model_dir), texts, out]
        + BF16,
        env=dict(env, PYTHONPATH=ROOT, **ONEDNN_ON_ANY_CPU),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert report == {"variable": "1" if kept else None, "stale": kept}
    assert ("keeps each Dense layer's weights in its AMX layout" in result.stderr) is kept
    assert bool(TENSORFLOW_STARTUP_LINES.search(result.stderr)) is verbose, result.stderr[:2000]
    assert "COSENT_TF_VERBOSE" not in os.environ
    expected = SentenceEncoder.load(model_dir, "bf16").encode(SENTENCES)
    np.testing.assert_allclose(np.load(out), expected, atol=2e-2)


def test_console_logging_shows_progress_and_warnings_on_stderr_while_it_lasts(capsys):
    log = logging.getLogger("cosent_tf.training.engine")
    handlers = list(logging.getLogger("cosent_tf").handlers)
    with console_logging():
        log.info("progress")
        log.warning("careful")
        log.debug("detail")
    out, err = capsys.readouterr()
    assert (out, err) == ("", "progress\ncareful\n")
    assert logging.getLogger("cosent_tf").handlers == handlers


def printed_json(capsys):
    """The JSON object a command printed: its whole stdout (progress goes to stderr)."""
    return json.loads(capsys.readouterr().out)


@pytest.mark.heavy
def test_evaluate_scores_a_pair_file_and_a_beir_triple(model_dir, tmp_path, capsys, tiny_config):
    from cosent_tf.evaluation import retrieval_metrics

    (tmp_path / "pairs.csv").write_text(
        "sentence1,sentence2,label\n今天,明天,1\n天气,下雨,0\n手机,号码,1\n", encoding="utf-8"
    )
    main(["evaluate", str(model_dir), str(tmp_path / "pairs.csv"), "--output", str(tmp_path / "eval")])
    encoder = SentenceEncoder.load(model_dir)
    scores = encoder.similarity(["今天", "天气", "手机"], ["明天", "下雨", "号码"])
    metrics = json.loads((tmp_path / "eval.json").read_text())
    assert metrics["threshold"] == 0.5 and metrics["accuracy"] == pytest.approx(np.mean((scores > 0.5) == [1, 0, 1]))
    assert printed_json(capsys)["spearman"] == pytest.approx(metrics["spearman"])
    rows = [line.split("\t") for line in (tmp_path / "eval.tsv").read_text(encoding="utf-8").splitlines()]
    assert [float(r[3]) for r in rows] == pytest.approx(scores, abs=1e-6) and [r[4] for r in rows] == [
        str(int(s > 0.5)) for s in scores
    ]

    (tmp_path / "q.jsonl").write_text(
        '{"_id": "1", "text": "今天天气"}\n{"_id": "2", "text": "手机"}\n', encoding="utf-8"
    )
    (tmp_path / "c.jsonl").write_text(
        "".join(json.dumps({"_id": str(i), "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(SENTENCES)),
        encoding="utf-8",
    )
    (tmp_path / "r.tsv").write_text("1\t0\t1\n1\t4\t1\n2\t3\t2\n", encoding="utf-8")
    main(
        [
            "evaluate",
            str(model_dir),
            "--queries",
            str(tmp_path / "q.jsonl"),
            "--corpus",
            str(tmp_path / "c.jsonl"),
            "--qrels",
            str(tmp_path / "r.tsv"),
        ]
    )
    expected = retrieval_metrics(encoder.encode(["今天天气", "手机"]), encoder.encode(SENTENCES), [{0, 4}, {3}])
    # no query is a corpus text: nothing of its own to take out
    assert printed_json(capsys)["beir"] == pytest.approx(
        {**expected, "own_text_excluded": 0, "own_text_only_left_out": 0}
    )

    make_model_dir(tmp_path / "scorer", tiny_config, kind="interaction")
    with pytest.raises(SystemExit, match="retrieval metrics need a feature model"):
        main(["evaluate", str(tmp_path / "scorer"), str(tmp_path / "pairs.csv"), "--retrieval"])
    with pytest.raises(SystemExit, match="--queries, --corpus and --qrels go together"):
        main(["evaluate", str(model_dir), "--queries", str(tmp_path / "q.jsonl")])


@pytest.mark.heavy
def test_evaluate_retrieval_leaves_each_querys_own_text_out_of_its_ranking_and_says_how_many(
    mining_models, tmp_path, capsys
):
    # Each first text with a match is also a second text (the last one once its punctuation is
    # dropped): searched with itself in the corpus, it would find itself first. 号码's only match is itself.
    rows = [
        ("我想换手机", "换个手机", 1),
        ("今天天气怎么样", "我想换手机", 0),
        ("今天天气怎么样", "天气如何", 1),
        ("ＱＱ号码是多少", "今天天气怎么样？", 0),
        ("ＱＱ号码是多少", "手机多少钱", 0),
        ("号码", "号码", 1),
    ]
    (tmp_path / "pairs.tsv").write_text("".join(f"{a}\t{b}\t{y}\n" for a, b, y in rows), encoding="utf-8")
    main(["evaluate", str(mining_models / "encoder"), str(tmp_path / "pairs.tsv"), "--retrieval"])
    captured = capsys.readouterr()
    assert (
        f"--retrieval {tmp_path / 'pairs.tsv'}: 3 of 3 queries have their own text in the corpus; it is left out of "
        "their rankings, since a query's own text is not an answer to it; left out of the metrics, having no other "
        "relevant text: 1 of them\n"
    ) in captured.err
    got = json.loads(captured.out)["retrieval"]

    # brute force: every corpus text but the query's own, by cosine
    encoder = SentenceEncoder.load(mining_models / "encoder")
    corpus = ["换个手机", "我想换手机", "天气如何", "今天天气怎么样？", "手机多少钱", "号码"]
    queries, own, answers = ["我想换手机", "今天天气怎么样"], [1, 3], [0, 2]
    cosines = encoder.encode(queries) @ encoder.encode(corpus).T
    ranks = [
        1 + sum(row[d] > row[answer] for d in range(len(corpus)) if d not in (mine, answer))
        for row, mine, answer in zip(cosines, own, answers)
    ]
    assert got["recall@1"] == pytest.approx(np.mean([rank == 1 for rank in ranks]))
    assert got["mrr@10"] == pytest.approx(np.mean([1 / rank for rank in ranks]))
    assert got["ndcg@10"] == pytest.approx(np.mean([1 / np.log2(rank + 1) for rank in ranks]))
    assert (got["queries"], got["corpus"], got["own_text_excluded"], got["own_text_only_left_out"]) == (2, 6, 3, 1)


@pytest.mark.parametrize("command", [["train", "--help"], ["encode", "--help"], ["--help"]])
def test_every_help_text_formats(command, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(command)
    assert stopped.value.code == 0 and "usage: cosent-tf" in capsys.readouterr().out


def test_a_training_scripts_help_formats(capsys):
    from cosent_tf.cli import train_main

    with pytest.raises(SystemExit) as stopped:
        train_main(["--help"])
    assert stopped.value.code == 0 and "--recipe" in capsys.readouterr().out


def test_the_cli_reference_is_the_parsers_help_now():
    import importlib.util

    spec = importlib.util.spec_from_file_location("cli_reference", os.path.join(ROOT, "tools", "cli_reference.py"))
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    with open(generator.PAGE, encoding="utf-8") as page:
        committed = page.read()
    assert committed == generator.reference(), (
        f"docs/cli.md differs from the parsers' help: run `{generator.REGENERATE}` and commit the page"
    )
