"""CoSENT over the global batch under tf.distribute (cosent_tf.losses._pairs.gather_across_replicas).

Each case runs in its own process: the CPU is split into two logical devices, which must
happen before TensorFlow starts, and MirroredStrategy uses them as two replicas.
"""

import json
import subprocess
import sys

import numpy as np
import pytest

ONE_STEP = """
import json, sys
import numpy as np
import cosent_tf as ct
from cosent_tf.backend import keras, tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
kind = sys.argv[1]
rng = np.random.default_rng(0)
if kind == "feature":  # 8 pairs: 16 interleaved rows, 4 pairs a replica
    inputs = rng.normal(size=(16, 5)).astype("float32")
    labels = np.repeat(rng.integers(0, 3, 8), 2).astype("float32")
else:  # 8 concatenated pairs, one score each
    inputs = rng.normal(size=(8, 5)).astype("float32")
    labels = rng.integers(0, 3, 8).astype("float32")


def one_step(strategy, global_batch):
    with strategy.scope():
        width, loss = (4, ct.CoSENTLoss) if kind == "feature" else (1, ct.InteractionCoSENTLoss)
        layer = keras.layers.Dense(width, kernel_initializer=keras.initializers.GlorotUniform(7))
        model = keras.Sequential([keras.Input((5,)), layer])
        loss = loss(global_batch=global_batch)
        model.compile(optimizer=keras.optimizers.SGD(1.0), loss=loss)
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


def one_step_three_ways(kind):
    done = subprocess.run([sys.executable, "-c", ONE_STEP, kind], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["feature", "interaction"])
def test_under_two_replicas_cosent_ranks_the_global_batch_as_one_device_would(kind):
    steps = one_step_three_ways(kind)
    one_device, gathered, per_slice = steps["one_device"], steps["gathered"], steps["per_slice"]
    assert gathered["loss"] == pytest.approx(one_device["loss"], rel=1e-5)
    for expected, actual in zip(one_device["gradients"], gathered["gradients"]):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
    # The trap: ranking each replica's slice alone is another loss with another gradient.
    assert per_slice["loss"] != pytest.approx(one_device["loss"], rel=1e-3)
    kernel_gap = np.abs(np.subtract(per_slice["gradients"][0], one_device["gradients"][0])).max()
    assert kernel_gap > 1e-3 * np.abs(one_device["gradients"][0]).max()
