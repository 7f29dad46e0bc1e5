"""The two-logical-device process of tests/training/test_distribute.py: every check that needs
the CPU split in two, in one process, since the split happens when cosent_tf is imported
(COSENT_TF_CPU_DEVICES=2, which the test sets) and a process start costs more than a case.

``python two_device_steps.py SETUP CASES RESULTS``: SETUP is the tiny set-up's folder
(tests.helpers.make_tiny_setup), CASES a JSON object of case id -> [kind, loss,
micro_batch_size, options] for the engine step; the strategy's own check and the training
script's refusal of a batch the replicas cannot share run every time. One JSON line per check is appended to RESULTS
as soon as it ends, ``{"case": id, "result": ...}`` or ``{"case": id, "error": traceback}``: a
case that raises costs only its own test, and a process that dies keeps what it had written.
"""

import dataclasses
import json
import logging
import os
import sys
import traceback

from cosent_tf.backend import keras, random_seed
from cosent_tf.training.config import RunConfig
from cosent_tf.training.distribute import get_strategy
from cosent_tf.training.engine import Matcher
from cosent_tf.training.run_data import load_run_data

MIRRORED_STRATEGY = "mirrored strategy"  # the id of the check that the strategy itself is quiet
UNSHARED_BATCH = "a batch the replicas cannot share"  # the id of the training script's refusal of one


def one_step(strategy, cfg, data):
    """The engine's model, loss and batches under ``strategy``, trained one step with plain SGD
    at rate 1, so that the weights move by minus the gradient."""
    with random_seed(cfg.seed), strategy.scope():
        matcher = Matcher(cfg, data.task)
        # A random BERT's [CLS] vectors are nearly equal for every text (cosines 1 - 1e-7), where
        # float32 rounding decides the gradient: spread the weights as a trained model's are.
        matcher.model.set_weights([w * 20 if w.ndim == 2 else w for w in matcher.model.get_weights()])
        model, loss, labels = matcher.training_model(data.train)
        model.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss)
    before = [w.copy() for w in model.get_weights()]
    keys = matcher.duplicate_keys(data.train)
    batches = matcher.dataset(matcher.prepare(data.train), labels, 0, strategy.num_replicas_in_sync, keys)
    history = model.fit(batches, steps_per_epoch=1, epochs=1, verbose=0)
    moved = [(b - a).tolist() for b, a in zip(before, model.get_weights())]
    return {"replicas": strategy.num_replicas_in_sync, "loss": history.history["loss"][0], "gradients": moved}


_ONE_DEVICE_STEPS = {}  # the one-device step of each case's run settings, shared by its micro-batch sizes


def engine_step(setup, kind, loss, micro_batch_size, options):
    """One step on one device and one on the two replicas (there in micro-batches of
    ``micro_batch_size`` pairs, 0 for none), from the same weights and batch. The one-device step
    is the same for every micro-batch size of a run's settings: it is computed once for them."""
    cfg = RunConfig(
        task="BQ",
        kind=kind,
        loss=loss,
        data_dir=f"{setup}/data",
        config=f"{setup}/config.json",
        vocab=f"{setup}/vocab.txt",
        batch_size=8,
        pooling="last-avg" if kind == "feature" else None,
        **options,
    ).resolved()
    data = load_run_data(cfg)
    mirrored_cfg = dataclasses.replace(cfg, micro_batch_size=micro_batch_size or None)
    settings = json.dumps([kind, loss, options], sort_keys=True)
    if settings not in _ONE_DEVICE_STEPS:
        _ONE_DEVICE_STEPS[settings] = one_step(get_strategy("default"), cfg, data)
    return {
        "group_size": data.group_size,
        "one_device": _ONE_DEVICE_STEPS[settings],
        "mirrored": one_step(get_strategy("mirrored"), mirrored_cfg, data),
    }


def mirrored_replicas():
    return {"replicas": get_strategy("mirrored").num_replicas_in_sync}


def unshared_batch_refused(setup):
    """The training script's body (train_main) on a batch of 7 pairs for the 2 replicas: the
    message it ends the script with, and whether its output folder was made."""
    from cosent_tf.experiments.scripts import train_main

    out = f"{setup}/unshared"
    options = ["--data-dir", f"{setup}/data", "--config", f"{setup}/config.json", "--vocab", f"{setup}/vocab.txt"]
    try:
        train_main(["BQ", *options, "--strategy", "mirrored", "--batch-size", "7", "--output-dir", out])
    except SystemExit as ended:
        return {"exit": ended.code, "output_dir_made": os.path.exists(out)}
    return {"exit": None, "output_dir_made": os.path.exists(out)}


def record(results, case, check, *args):
    try:
        line = {"case": case, "result": check(*args)}
    except Exception:
        line = {"case": case, "error": traceback.format_exc()}
    results.write(json.dumps(line) + "\n")
    results.flush()


def main(setup, cases, results_path):
    # A warning get_strategy logs would reach stderr, which the mirrored strategy's test reads.
    logging.basicConfig(level=logging.WARNING)
    with open(results_path, "a", encoding="utf-8") as results:
        # First, while no strategy is made yet: get_strategy warns, if at all, when it makes one.
        record(results, MIRRORED_STRATEGY, mirrored_replicas)
        for case, (kind, loss, micro_batch_size, options) in json.loads(cases).items():
            keras.backend.clear_session()  # each case's models named as in a process of their own
            record(results, case, engine_step, setup, kind, loss, micro_batch_size, options)
        record(results, UNSHARED_BATCH, unshared_batch_refused, setup)


if __name__ == "__main__":
    main(*sys.argv[1:4])
