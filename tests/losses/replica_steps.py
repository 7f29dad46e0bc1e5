"""The processes of tests/losses/test_distributed.py and test_matryoshka.py: a Dense encoder
trained with each case's loss under tf.distribute, every case of a module in one process, since
a process start costs more than a case.

``python replica_steps.py replicas CASES RESULTS`` runs with two logical CPU devices
(COSENT_TF_CPU_DEVICES=2, which the tests set: the split happens when cosent_tf is imported).
CASES is a JSON list of [check, name]: check "three-ways" is one step on one device, on the two
replicas with the global batch and on the two replicas each with its slice; check "steps" is
three SGD steps on one device (what a two-worker cluster must match).

``python replica_steps.py worker CASES RESULTS``, with TF_CONFIG set, is one worker of a
MultiWorkerMirroredStrategy cluster: check "steps" of every name in CASES, all under the one
strategy a process can make.

One JSON line per check is appended to RESULTS as soon as it ends, ``{"case": "check:name",
"result": ...}`` or ``{"case": ..., "error": traceback}``: a case that raises costs only its
own test, and a process that dies keeps what it had written.

A name is a loss of tests/losses/test_distributed.py (case below); "cosent-feature@3,1" is
that loss wrapped in a MatryoshkaLoss at the widths 3 and 1 (test_matryoshka.py).
"""

import json
import sys
import traceback

import numpy as np

import cosent_tf as ct
from cosent_tf.backend import keras, tf
from cosent_tf.losses import AnglELoss, CoSENTIBNLoss, MatryoshkaLoss, MultipleNegativesRankingLoss

SYMMETRIC = ("query_to_doc", "doc_to_query")
STEPS = 3  # the few SGD steps of check "steps"


def plain_case(name, rng):
    """(inputs, labels, width of the model's output, make(global_batch) -> the loss) of 8 examples."""
    graded = np.repeat(rng.integers(0, 3, 8), 2).astype("float32")  # 8 interleaved pairs, their labels
    if name == "cosent-interaction":  # 8 concatenated pairs, one score each
        return rng.normal(size=(8, 5)), rng.integers(0, 3, 8).astype("float32"), 1, ct.InteractionCoSENTLoss
    if name.startswith("mnrl"):  # 8 groups of anchor, positive and (mnrl-hard) two hard negatives
        rows = 8 * (4 if name.startswith("mnrl-hard") else 2)
        directions = SYMMETRIC if name.endswith("symmetric") else ("query_to_doc",)

        def make(global_batch):
            return MultipleNegativesRankingLoss(group_size=rows // 8, directions=directions, global_batch=global_batch)

        return rng.normal(size=(rows, 5)), np.zeros(rows, "float32"), 4, make
    if name == "cosent-ibn":  # half of the pairs positive, for the in-batch part
        labels = np.repeat([1, 0, 1, 1, 0, 0, 1, 0], 2).astype("float32")

        def make(global_batch):
            return CoSENTIBNLoss(cosine_w=1.0, ibn_w=1.0, angle_w=1.0, global_batch=global_batch)

        return rng.normal(size=(16, 5)), labels, 4, make
    return rng.normal(size=(16, 5)), graded, 4, {"cosent-feature": ct.CoSENTLoss, "angle": AnglELoss}[name]


def case(name, rng):
    """plain_case, or for "loss@dims" that loss wrapped in a MatryoshkaLoss at those widths."""
    if "@" not in name:
        return plain_case(name, rng)
    inner, widths = name.split("@")
    inputs, labels, width, make = plain_case(inner, rng)
    dims = [int(dim) for dim in widths.split(",")]
    return inputs, labels, width, lambda global_batch: MatryoshkaLoss(make(global_batch=global_batch), dims)


def dense_model(strategy, width, loss, rate):
    with strategy.scope():
        # a seeded initializer gives the same kernel each time it is made, in every process
        layer = keras.layers.Dense(width, kernel_initializer=keras.initializers.GlorotUniform(7))
        model = keras.Sequential([keras.Input((5,)), layer])
        model.compile(optimizer=keras.optimizers.SGD(rate), loss=loss)
    return model


def three_ways(name, mirrored):
    inputs, labels, width, make = case(name, np.random.default_rng(0))
    inputs = inputs.astype("float32")

    def one_step(strategy, global_batch):
        model = dense_model(strategy, width, make(global_batch=global_batch), 1.0)
        before = [w.copy() for w in model.get_weights()]
        data = tf.data.Dataset.from_tensor_slices((inputs, labels)).batch(len(inputs))
        history = model.fit(data, epochs=1, verbose=0)
        # plain SGD with rate 1: the weights moved by minus the gradient
        gradients = [(b - a).tolist() for b, a in zip(before, model.get_weights())]
        return {"loss": history.history["loss"][0], "gradients": gradients}

    return {
        "one_device": one_step(tf.distribute.get_strategy(), True),
        "gathered": one_step(mirrored, True),
        "per_slice": one_step(mirrored, False),
    }


def steps(name, strategy):
    """A few SGD steps, each on a batch of its own; the weights before and after them."""
    rng = np.random.default_rng(0)
    batches = [case(name, rng) for _ in range(STEPS)]
    width, make = batches[0][2], batches[0][3]
    inputs = np.concatenate([batch[0] for batch in batches]).astype("float32")
    labels = np.concatenate([batch[1] for batch in batches])
    model = dense_model(strategy, width, make(global_batch=True), 0.5)
    start = [w.tolist() for w in model.get_weights()]
    # each worker gets its half of every batch, whole examples (as the engine's batches are shared)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = tf.data.Dataset.from_tensor_slices((inputs, labels)).batch(len(inputs) // STEPS).with_options(options)
    history = model.fit(data, epochs=1, verbose=0)
    return {
        "replicas": strategy.num_replicas_in_sync,
        "loss": history.history["loss"][0],
        "start": start,
        "weights": [w.tolist() for w in model.get_weights()],
    }


def record(results, case_id, check, *args):
    try:
        line = {"case": case_id, "result": check(*args)}
    except Exception:
        line = {"case": case_id, "error": traceback.format_exc()}
    results.write(json.dumps(line) + "\n")
    results.flush()


def main(mode, cases, results_path):
    if mode == "worker":
        # made first, before any other op: the cluster's collectives are set up with it
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with open(results_path, "a", encoding="utf-8") as results:
        for check, name in json.loads(cases):
            if check == "three-ways":
                record(results, f"{check}:{name}", three_ways, name, strategy)
            elif mode == "worker":
                record(results, f"{check}:{name}", steps, name, strategy)
            else:
                record(results, f"{check}:{name}", steps, name, tf.distribute.get_strategy())


if __name__ == "__main__":
    main(*sys.argv[1:4])
