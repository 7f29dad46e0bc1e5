"""The losses over the global batch under tf.distribute (cosent_tf.maths.ops.Ops.gather_across_replicas).

Each case runs in its own process: the CPU is split into two logical devices, which must
happen before TensorFlow starts, and MirroredStrategy uses them as two replicas. The
multi-worker case starts two processes, a localhost cluster of one replica each.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import localhost_workers

# What every case script shares: the loss of each case, by name, as the name's rows need it.
LOSS_CASES = """
import numpy as np
import cosent_tf as ct
from cosent_tf.losses import AnglELoss, CoSENTIBNLoss, MultipleNegativesRankingLoss

SYMMETRIC = ("query_to_doc", "doc_to_query")


def case(name, rng):
    '''(inputs, labels, width of the model's output, make(global_batch) -> the loss) of 8 examples.'''
    graded = np.repeat(rng.integers(0, 3, 8), 2).astype("float32")  # 8 interleaved pairs, their labels
    if name == "cosent-interaction":  # 8 concatenated pairs, one score each
        return rng.normal(size=(8, 5)), rng.integers(0, 3, 8).astype("float32"), 1, ct.InteractionCoSENTLoss
    if name.startswith("mnrl"):  # 8 groups of anchor, positive and (mnrl-hard) two hard negatives
        rows = 8 * (4 if name.startswith("mnrl-hard") else 2)
        directions = SYMMETRIC if name.endswith("symmetric") else ("query_to_doc",)
        make = lambda global_batch: MultipleNegativesRankingLoss(
            group_size=rows // 8, directions=directions, global_batch=global_batch
        )
        return rng.normal(size=(rows, 5)), np.zeros(rows, "float32"), 4, make
    if name == "cosent-ibn":  # half of the pairs positive, for the in-batch part
        labels = np.repeat([1, 0, 1, 1, 0, 0, 1, 0], 2).astype("float32")
        make = lambda global_batch: CoSENTIBNLoss(cosine_w=1.0, ibn_w=1.0, angle_w=1.0, global_batch=global_batch)
        return rng.normal(size=(16, 5)), labels, 4, make
    return rng.normal(size=(16, 5)), graded, 4, {"cosent-feature": ct.CoSENTLoss, "angle": AnglELoss}[name]
"""

ONE_STEP = (
    LOSS_CASES
    + """
import json, sys
from cosent_tf.backend import keras, tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
inputs, labels, width, make = case(sys.argv[1], np.random.default_rng(0))
inputs = inputs.astype("float32")


def one_step(strategy, global_batch):
    with strategy.scope():
        layer = keras.layers.Dense(width, kernel_initializer=keras.initializers.GlorotUniform(7))
        model = keras.Sequential([keras.Input((5,)), layer])
        model.compile(optimizer=keras.optimizers.SGD(1.0), loss=make(global_batch=global_batch))
    before = [w.copy() for w in model.get_weights()]
    data = tf.data.Dataset.from_tensor_slices((inputs, labels)).batch(len(inputs))
    history = model.fit(data, epochs=1, verbose=0)
    # plain SGD with rate 1: the weights moved by minus the gradient
    gradients = [(b - a).tolist() for b, a in zip(before, model.get_weights())]
    return {"loss": history.history["loss"][0], "gradients": gradients}


mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
print(json.dumps({
    "one_device": one_step(tf.distribute.get_strategy(), True),
    "gathered": one_step(mirrored, True),
    "per_slice": one_step(mirrored, False),
}))
"""
)


def one_step_three_ways(case):
    done = subprocess.run([sys.executable, "-c", ONE_STEP, case], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    ["cosent-feature", "cosent-interaction", "angle", "mnrl", "mnrl-hard-symmetric", "cosent-ibn"],
)
def test_under_two_replicas_the_loss_takes_the_global_batch_as_one_device_would(case):
    steps = one_step_three_ways(case)
    one_device, gathered, per_slice = steps["one_device"], steps["gathered"], steps["per_slice"]
    assert gathered["loss"] == pytest.approx(one_device["loss"], rel=1e-5)
    for expected, actual in zip(one_device["gradients"], gathered["gradients"]):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
    # The trap (--per-replica-loss): each replica's slice alone is another loss, with fewer pairs
    # to rank or fewer in-batch candidates, and another gradient.
    assert per_slice["loss"] != pytest.approx(one_device["loss"], rel=1e-3)
    kernel_gap = np.abs(np.subtract(per_slice["gradients"][0], one_device["gradients"][0])).max()
    assert kernel_gap > 1e-3 * np.abs(one_device["gradients"][0]).max()


# A few SGD steps of a Dense encoder, in one process or as one worker of a MultiWorkerMirroredStrategy
# cluster (TF_CONFIG set); prints the weights after them.
STEPS = (
    LOSS_CASES
    + """
import json, os, sys
from cosent_tf.backend import keras, tf

name, steps = sys.argv[1], 3
rng = np.random.default_rng(0)
batches = [case(name, rng) for _ in range(steps)]
width, make = batches[0][2], batches[0][3]
inputs = np.concatenate([batch[0] for batch in batches]).astype("float32")
labels = np.concatenate([batch[1] for batch in batches])
if "TF_CONFIG" in os.environ:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
else:
    strategy = tf.distribute.get_strategy()
with strategy.scope():
    layer = keras.layers.Dense(width, kernel_initializer=keras.initializers.GlorotUniform(7))
    model = keras.Sequential([keras.Input((5,)), layer])
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss=make(global_batch=True))
start = [w.tolist() for w in model.get_weights()]
# each worker gets its half of every batch, whole examples (as the engine's batches are shared)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
data = tf.data.Dataset.from_tensor_slices((inputs, labels)).batch(len(inputs) // steps).with_options(options)
history = model.fit(data, epochs=1, verbose=0)
print(json.dumps({
    "replicas": strategy.num_replicas_in_sync,
    "loss": history.history["loss"][0],
    "start": start,
    "weights": [w.tolist() for w in model.get_weights()],
}))
"""
)


def ran(process, stdout, stderr):
    assert process.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("case", ["mnrl-hard-symmetric", "cosent-ibn"])
def test_two_workers_on_localhost_step_as_one_process_on_the_global_batch(case):
    command = [sys.executable, "-c", STEPS, case]
    alone = subprocess.run(command, capture_output=True, text=True, timeout=300)
    one_process = ran(alone, alone.stdout, alone.stderr)
    workers = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for env in localhost_workers(2)
    ]
    try:
        outputs = [worker.communicate(timeout=300) for worker in workers]
    finally:
        for worker in workers:  # one left waiting for its peer: end it, and the test fails
            worker.kill()
    chief, other = (ran(worker, *output) for worker, output in zip(workers, outputs))
    assert (one_process["replicas"], chief["replicas"], other["replicas"]) == (1, 2, 2)
    assert chief["loss"] == pytest.approx(one_process["loss"], rel=1e-5)
    # the steps moved the weights far beyond the tolerance
    assert max(np.abs(np.subtract(w, s)).max() for w, s in zip(one_process["weights"], one_process["start"])) > 1e-2
    for expected, chiefs, others in zip(one_process["weights"], chief["weights"], other["weights"]):
        np.testing.assert_allclose(chiefs, expected, rtol=0, atol=1e-5)
        np.testing.assert_array_equal(others, chiefs)  # the replicas stay in sync
