"""Training with --matryoshka-dims: the options checked before anything is written, the widths
recorded in the run and its model folder, a run that learns at its widths, resumes with them and
refuses others, the engine's step under two replicas and in micro-batches, and the report's note."""

import dataclasses
import json
import re

import numpy as np
import pytest
from scipy import stats

from cosent_tf.errors import ConfigError
from cosent_tf.experiments.report import retrieval_tables
from cosent_tf.experiments.runs import load_runs, method_name
from cosent_tf.experiments.scripts import train_main
from cosent_tf.losses import MatryoshkaLoss, get_loss
from cosent_tf.process_keras import keras
from cosent_tf.training.config import RunConfig
from cosent_tf.training.engine import Matcher, train
from cosent_tf.training.run_data import load_run_data
from tests.either_keras import cosines, sentence_encoder
from tests.experiments.test_report import fake_run
from tests.helpers import make_tiny_setup, write_config
from tests.training.run_helpers import tiny_config
from tests.training.test_learning import synonym_pairs, write_task
from tests.training.test_scripts import SCRIPT_ENTRIES

# tiny_setup's model makes vectors of 16 dimensions
WIDTHS = ["--matryoshka-dims", "16,8", "--matryoshka-weights", "1,0.5"]


@pytest.mark.parametrize(
    "option, value, message",
    [
        ("--matryoshka-dims", "0", "each width must be at least 1, got 0 in '0'"),
        ("--matryoshka-dims", "16,-8", "each width must be at least 1, got -8 in '16,-8'"),
        ("--matryoshka-dims", "16,a", "'a' in '16,a' is not an integer"),
        ("--matryoshka-dims", "16,,8", "'' in '16,,8' is not an integer"),
        ("--matryoshka-dims", "16,8,16", "'16,8,16' names a width twice"),
        ("--matryoshka-weights", "1,-0.5", "each weight must be at least 0, got -0.5 in '1,-0.5'"),
        ("--matryoshka-weights", "1,nan", "must be a finite number, got nan"),
        ("--matryoshka-weights", "1,x", "'x' is not a number"),
    ],
)
def test_widths_and_weights_are_checked_when_parsed(option, value, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        train_main(["BQ", option, value])
    assert stopped.value.code == 2
    assert f"argument {option}: {message}" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, kind, loss, message",
    [
        (
            ["--matryoshka-dims", "16,8", "--matryoshka-weights", "1"],
            "feature",
            "cosent",
            r"--matryoshka-weights: 1 weights for 2 widths \[16, 8\]; give one each",
        ),
        (
            ["--matryoshka-weights", "1,0.5"],
            "feature",
            "cosent",
            "--matryoshka-weights weighs the widths of --matryoshka-dims: give those too",
        ),
        (
            ["--matryoshka-dims", "16,8", "--matryoshka-weights", "0,0"],
            "feature",
            "cosent",
            "--matryoshka-weights: every weight is 0, so the loss is 0: give one a weight",
        ),
        (
            WIDTHS,
            "feature",
            "sbert",
            "--matryoshka-dims with --kind feature --loss sbert: the Sentence-BERT loss trains a head on the whole "
            "vector, not the vector's own cosines",
        ),
        (
            WIDTHS,
            "interaction",
            "ce",
            "--matryoshka-dims with --kind interaction --loss ce: an interaction model scores a pair at once, "
            "without a sentence vector to cut",
        ),
        (
            ["--matryoshka-dims", "32,8"],
            "feature",
            "cosent",
            r"--matryoshka-dims 32,8: the model of .*config\.json makes vectors of 16 dimensions, fewer than 32; "
            "give widths of at most 16",
        ),
    ],
    ids=["weights-count", "weights-alone", "all-weights-0", "sbert", "interaction", "too-wide"],
)
def test_matryoshka_options_that_cannot_train_are_refused_before_anything_is_written(
    extra, kind, loss, message, tiny_setup
):
    tmp_path, options = tiny_setup
    out = tmp_path / "run"
    with pytest.raises(SystemExit, match=message):
        train_main(["BQ", "--epochs", "1", *options, *extra, "--output-dir", str(out)], kind=kind, loss=loss)
    assert not out.exists()


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(matryoshka_dims=[16, 2.5]), "--matryoshka-dims: each width must be a positive integer, got 2.5"),
        (dict(matryoshka_dims="16,8"), "--matryoshka-dims: give a list of widths, got '16,8'"),
        (dict(matryoshka_dims=[16, 8], matryoshka_weights=[1, "half"]), "--matryoshka-weights: each must be a number"),
    ],
)
def test_settings_given_in_python_are_checked_as_the_options_are(settings, message, tiny_setup):
    with pytest.raises(ConfigError, match=re.escape(message)):
        tiny_config(tiny_setup[0], **settings).resolved()


@pytest.mark.parametrize("loss", ["cosent", "mnrl"])
def test_the_engine_trains_the_runs_loss_at_its_widths(loss, tiny_setup):
    tmp_path, _ = tiny_setup
    cfg = tiny_config(tmp_path, task="BQ", loss=loss, matryoshka_dims=[16, 4], matryoshka_weights=[1.0, 0.5])
    cfg = cfg.resolved()
    data = load_run_data(cfg)
    matcher = Matcher(cfg, data.task)
    matcher.group_size = data.group_size
    _, wrapped, labels = matcher.training_model(data.train)
    plain = Matcher(dataclasses.replace(cfg, matryoshka_dims=None, matryoshka_weights=None), data.task)
    plain.group_size = data.group_size
    _, inner, _ = plain.training_model(data.train)
    assert isinstance(wrapped, MatryoshkaLoss) and (wrapped.dims, wrapped.weights) == ([16, 4], [1.0, 0.5])
    assert keras.losses.serialize(wrapped.loss) == keras.losses.serialize(inner)
    # on a batch of the run's own stream: the plain loss at full width plus half of it at width 4
    inputs, y_true = next(iter(matcher.dataset(matcher.prepare(data.train), labels, 0)))
    vectors = np.asarray(matcher.model(inputs))
    expected = float(inner(y_true, vectors)) + 0.5 * float(inner(y_true, vectors[:, :4]))
    assert float(wrapped(y_true, vectors)) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("script", sorted(SCRIPT_ENTRIES))
def test_every_training_script_takes_the_widths(script, tiny_setup, capsys):
    """--matryoshka-dims is an engine option: each script has it, and a loss that cannot be cut says why."""
    tmp_path, options = tiny_setup
    kind, loss, task = SCRIPT_ENTRIES[script]
    argv = ([] if task else ["BQ"]) + [*options, *WIDTHS, "--print-config"]
    problem = get_loss(kind, loss).matryoshka_problem
    if problem:
        with pytest.raises(SystemExit, match=re.escape(problem)):
            train_main(argv, kind=kind, loss=loss, task=task)
        return
    settings = train_main(argv, kind=kind, loss=loss, task=task)
    assert (settings["matryoshka_dims"], settings["matryoshka_weights"]) == ([16, 8], [1.0, 0.5])
    assert json.loads(capsys.readouterr().out)["matryoshka_dims"] == [16, 8]


def test_a_resumed_run_with_other_widths_is_refused(tiny_setup):
    tmp_path, options = tiny_setup
    out = tmp_path / "run"
    short = ["--epochs", "2", "--steps-per-epoch", "1"]  # a run folder is all this needs
    train_main(["BQ", *short, "--output-dir", str(out), *options, *WIDTHS])
    (out / "metrics.json").unlink()  # as if stopped before the end, with training state saved
    (out / "backup").mkdir()
    (out / "backup" / "state").write_text("")
    saved = (out / "config.json").read_text()
    assert json.loads(saved)["matryoshka_dims"] == [16, 8]
    for extra, difference in [
        (["--matryoshka-dims", "16,4", "--matryoshka-weights", "1,0.5"], "matryoshka_dims [16, 8] there, [16, 4] now"),
        ([], "matryoshka_dims [16, 8] there, None now; matryoshka_weights [1.0, 0.5] there, None now"),
        (["--matryoshka-dims", "16,8"], "matryoshka_weights [1.0, 0.5] there, None now"),
    ]:
        with pytest.raises(SystemExit, match=re.escape(f"holds an unfinished run with other settings ({difference})")):
            train_main(["BQ", *short, "--output-dir", str(out), *options, *extra])
    assert (out / "config.json").read_text() == saved


@pytest.mark.slow
def test_a_run_learns_at_its_narrow_width(tiny_setup):
    """On pairs that share no characters (an untrained encoder cannot rank them), the vectors cut to
    the narrow width rank the test pairs far better than the same run left at initialisation
    (lr 1e-12) does at that width."""
    tmp_path, _ = tiny_setup
    rng = np.random.default_rng(0)
    rows = {split: synonym_pairs(rng, n, graded=True) for split, n in (("train", 512), ("valid", 128), ("test", 128))}
    write_task(tmp_path / "learn", "STS-B", rows)
    vocab_size = len((tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines())
    config = write_config(
        tmp_path / "c32.json", vocab_size=vocab_size, hidden=32, layers=1, heads=2, intermediate=64, max_position=256
    )
    settings = dict(
        task="STS-B",
        data_dir=str(tmp_path / "learn"),
        config=config,
        vocab=str(tmp_path / "vocab.txt"),
        batch_size=16,
        epochs=4,
        pooling="last-avg",
        matryoshka_dims=[32, 8],
    )
    test_a, test_b, labels = zip(*rows["test"])
    spearman = {}
    # At lr 1e-12 no step moves a weight: one step of one epoch is the run left at initialisation.
    for name, lr, length in (("untrained", 1e-12, dict(epochs=1, steps_per_epoch=1)), ("trained", 1e-3, {})):
        train(RunConfig(lr=lr, output_dir=str(tmp_path / name), **{**settings, **length}))
        encoder = sentence_encoder(tmp_path / name / "model")
        spearman[name] = stats.spearmanr(cosines(encoder, test_a, test_b, dim=8), labels)[0]
    # measured: 0.79 trained, 0.29 untrained (0.72 and 0.10 on another draw of the pairs)
    assert spearman["trained"] > spearman["untrained"] + 0.3, spearman


MATRYOSHKA_ENGINE_CASES = [
    ("cosent", 3, {"matryoshka_dims": [12, 4], "matryoshka_weights": [1.0, 0.5]}),
    ("mnrl", 3, {"hard_negatives_from_labels": True, "symmetric": True, "matryoshka_dims": [16, 8, 2]}),
]


@pytest.fixture(scope="module")
def two_device_widths(tmp_path_factory):
    """One two-logical-device process for both cases (the CPU is split when cosent_tf is imported)."""
    # imported here: test_distribute imports the Keras 2 engine, which a Keras 3 process collecting
    # this module must not
    from tests.training.test_distribute import engine_case_id, run_two_device_process

    setup, _ = make_tiny_setup(tmp_path_factory.mktemp("two-device-widths"))
    cases = {engine_case_id("feature", *case): ["feature", *case] for case in MATRYOSHKA_ENGINE_CASES}
    return run_two_device_process(setup, cases)


@pytest.mark.slow
@pytest.mark.keras2_only(
    reason="tests/training/two_device_steps.py steps the Keras 2 engine under tf.distribute; Keras 3's "
    "mirrored step is tests/keras3/test_training.py's"
)
@pytest.mark.parametrize("loss, micro_batch_size, options", MATRYOSHKA_ENGINE_CASES)
def test_an_engine_step_at_several_widths_on_two_replicas_in_micro_batches_equals_one_on_one_device(
    loss, micro_batch_size, options, two_device_widths
):
    """tests/training/test_distribute.py's engine step with the widths: the one-device step takes the
    whole batch at once, the two-replica one gathers the global batch and computes each replica's
    gradient in micro-batches (GradientCacheModel)."""
    from tests.training.test_distribute import engine_case_id

    steps = two_device_widths.result(engine_case_id("feature", loss, micro_batch_size, options))
    one_device, mirrored = steps["one_device"], steps["mirrored"]
    assert (one_device["replicas"], mirrored["replicas"]) == (1, 2)
    assert mirrored["loss"] == pytest.approx(one_device["loss"], rel=1e-5)
    scale = max(np.abs(g).max() for g in one_device["gradients"])
    for expected, actual in zip(one_device["gradients"], mirrored["gradients"]):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5 * scale)


def test_the_report_notes_the_widths_a_run_trained(tmp_path):
    retrieval = {"BQ": {"recall@1": 0.5, "recall@5": 0.6, "recall@10": 0.7, "mrr@10": 0.55, "ndcg@10": 0.6}}
    common = dict(retrieval=retrieval, pooling="last-avg")
    runs = [
        fake_run(tmp_path / "cosent", "BQ", "feature", "cosent", {"BQ": 0.5}, **common),
        fake_run(
            tmp_path / "mnrl",
            "BQ",
            "feature",
            "mnrl",
            {"BQ": 0.4},
            symmetric=True,
            matryoshka_dims=[64, 312, 128],
            **common,
        ),
        fake_run(
            tmp_path / "angle",
            "BQ",
            "feature",
            "angle",
            {"BQ": 0.3},
            matryoshka_dims=[312, 128, 64],
            matryoshka_weights=[1.0, 1.0, 0.5],
            **common,
        ),
    ]
    text = retrieval_tables(load_runs(runs))
    assert "| BERT + CoSENT |" in text
    assert "| BERT + MNRL (matryoshka 312,128,64) (symmetric) |" in text
    assert "| BERT + AnglE (matryoshka 312,128,64 weighted 1/1/0.5) |" in text


def test_a_matryoshka_run_has_a_row_of_its_own_beside_the_plain_run():
    plain = {"architecture": "bert", "kind": "feature", "loss": "cosent"}
    assert method_name(plain) == "BERT + CoSENT"
    assert method_name({**plain, "matryoshka_dims": [64, 312]}) == "BERT + CoSENT (matryoshka 312,64)"
