"""``--strategy mirrored`` on Keras 3's JAX backend: keras.distribution's DataParallel over two logical
CPU devices (COSENT_TF_CPU_DEVICES=2, which cosent_tf turns into XLA's device count when imported).

JAX reads its device count once, when its backend starts, and this suite's process has started it
with one device: the two-device cases run in one process of their own (:data:`TWO_DEVICES`).
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cosent_tf.training.config import RunConfig
from tests.keras3.support import ROOT
from tests.keras3.test_training import TINY, tiny_run  # noqa: F401  (a fixture)

# (1) one SGD step at rate 1 (so the step is the gradient itself) of the tiny encoder on a fixed batch
# of 8 pairs under DataParallel, the same step on one device, and CoSENT over the batch and the mean of
# its two halves' (what each device alone would rank); (2) the engine's run, default then mirrored,
# with each batch's logged loss and the trained weights.
TWO_DEVICES = """
import contextlib, json, sys
import cosent_tf.keras3  # before JAX starts: COSENT_TF_CPU_DEVICES sets XLA's CPU device count
import jax, keras, numpy as np
from cosent_tf.keras3 import build_encoder
from cosent_tf.keras3.backbones import backbone_from_config
from cosent_tf.keras3.training import train
from cosent_tf.losses import get_loss
from cosent_tf.training.config import RunConfig

config, fields = json.loads(sys.argv[1]), json.loads(sys.argv[2])
figures = {"devices": len(jax.local_devices())}
rng = np.random.default_rng(0)
x = rng.integers(1000, 5000, size=(16, 12)).astype("int32")
x[:, 0] = 101
y = np.repeat(rng.uniform(0, 5, size=8), 2).astype("float32")

def step(distribution):
    keras.utils.set_random_seed(3)
    with distribution.scope() if distribution else contextlib.nullcontext():
        encoder = build_encoder(backbone_from_config(config), "last-avg")
        encoder.compile(optimizer=keras.optimizers.SGD(1.0), loss=get_loss("feature", "cosent").build(scale=20.0))
        before = [np.asarray(w) for w in encoder.get_weights()]
        loss = encoder.fit(x, y, batch_size=16, epochs=1, verbose=0, shuffle=False).history["loss"][0]
    devices = len(encoder.weights[0].value.sharding.device_set)
    return before, [np.asarray(w) for w in encoder.get_weights()], loss, devices

start, one, figures["loss_one"], _ = step(None)
data_parallel = keras.distribution.DataParallel(devices=jax.local_devices())
_, two, figures["loss_two"], figures["weight_devices"] = step(data_parallel)
figures["moved"] = max(float(np.max(np.abs(a - s))) for a, s in zip(one, start))
figures["worst"] = max(float(np.max(np.abs(a - b))) for a, b in zip(one, two))
keras.utils.set_random_seed(3)
vectors = np.asarray(build_encoder(backbone_from_config(config), "last-avg")(x))
cosent = get_loss("feature", "cosent").build(scale=20.0)
figures["halves"] = float(np.mean([float(cosent(y[i : i + 8], vectors[i : i + 8])) for i in (0, 8)]))

class Logged(keras.callbacks.Callback):
    losses = []
    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))
    def on_train_end(self, logs=None):
        self.weights = [np.asarray(w) for w in self.model.get_weights()]

try:
    train(RunConfig(**{**fields, "strategy": "mirrored", "batch_size": 7, "output_dir": fields["output_dir"] + "-odd"}))
except Exception as error:
    figures["odd_batch"] = f"{type(error).__name__}: {error}"
for strategy in ("default", "mirrored"):
    logged = Logged()
    logged.losses = []
    run = RunConfig(**{**fields, "strategy": strategy, "output_dir": f"{fields['output_dir']}-{strategy}"})
    metrics = train(run, callbacks=[logged])
    figures[strategy] = {"losses": logged.losses, "replicas": metrics["replicas"], "steps": metrics["steps"]}
    np.savez(f"{fields['output_dir']}-{strategy}.npz", *logged.weights)
print(json.dumps(figures))
"""


@pytest.fixture(scope="module")
def two_devices(tmp_path_factory):
    """The figures of :data:`TWO_DEVICES` and the folder of its runs' weights."""
    import keras

    from cosent_tf.keras3.backbones import backbone_from_config
    from cosent_tf.keras3.training import save_model_folder
    from tests.keras3.support import SHARED_VOCAB
    from tests.keras3.test_training import pair_files

    folder = tmp_path_factory.mktemp("data-parallel")
    keras.utils.set_random_seed(7)
    start = str(folder / "start")
    model = backbone_from_config(TINY)
    save_model_folder(start, model, "bert", TINY, SHARED_VOCAB, pooling="last-avg", maxlen=32, do_lower_case=True)
    train_file, valid_file = pair_files(str(folder), count=24)
    fields = dict(
        task="tiny",
        train_file=train_file,
        valid_file=valid_file,
        checkpoint=start,
        keras=3,
        epochs=1,
        batch_size=8,
        lr=1e-2,
        maxlen=32,
        pooling="last-avg",
        output_dir=str(folder / "run"),
    )
    env = {**os.environ, "KERAS_BACKEND": "jax", "COSENT_TF_CPU_DEVICES": "2"}
    env.pop("XLA_FLAGS", None)
    command = [sys.executable, "-c", textwrap.dedent(TWO_DEVICES), json.dumps(TINY), json.dumps(fields)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), folder


@pytest.mark.heavy
@pytest.mark.backends("jax")
def test_cosent_over_a_batch_sharded_on_two_devices_is_the_global_batchs(two_devices):
    """The step's loss and gradient under DataParallel are one device's over the whole batch (float32
    sums in another order: within 1e-5 of the step), not the mean of each device's half, which ranks
    other pairs and differs by far more."""
    figures, _ = two_devices
    assert figures["devices"] == 2 and figures["weight_devices"] == 2  # the weights live on both devices
    assert figures["moved"] > 1.0  # the gradient (the step of SGD at rate 1) is far from 0
    assert figures["worst"] / figures["moved"] < 1e-5, figures
    assert figures["loss_two"] == pytest.approx(figures["loss_one"], rel=1e-5)
    assert abs(figures["halves"] - figures["loss_one"]) > 0.1, figures


@pytest.mark.heavy
@pytest.mark.backends("jax")
def test_a_mirrored_run_on_two_devices_follows_the_one_device_run(two_devices):
    """The engine's run under --strategy mirrored (2 replicas, batches of 8 sharded 4 and 4) logs the
    one-device run's loss at every step and ends at its weights. Adam's steps (lr 1e-2) move each
    weight by up to about 1e-2 a step; float32 sums over the shards in another order leave about 1e-7
    of a step, so 1e-5 absolute keeps a wide margin, while any other batch or loss is off by far more."""
    figures, folder = two_devices
    one, two = figures["default"], figures["mirrored"]
    assert (one["replicas"], two["replicas"]) == (1, 2) and one["steps"] == two["steps"] == 3
    np.testing.assert_allclose(two["losses"], one["losses"], rtol=1e-5)
    weights_one, weights_two = (np.load(folder / f"run-{strategy}.npz") for strategy in ("default", "mirrored"))
    for name in weights_one.files:
        np.testing.assert_allclose(weights_two[name], weights_one[name], atol=1e-5)


@pytest.mark.heavy
@pytest.mark.backends("jax")
def test_a_batch_the_two_devices_cannot_share_is_refused_naming_batch_size(two_devices):
    figures, folder = two_devices
    assert figures["odd_batch"] == (
        "ConfigError: --batch-size 7 pairs cannot be shared equally by the 2 replicas of --strategy mirrored: make it "
        "a multiple of that"
    )
    assert not (folder / "run-odd").exists()


@pytest.mark.backends("jax")
def test_per_replica_loss_is_refused_on_jax(tiny_run):  # noqa: F811
    from cosent_tf.errors import ConfigError
    from cosent_tf.keras3.training import resolve

    cfg, _ = tiny_run
    with pytest.raises(ConfigError, match="--per-replica-loss on the jax backend: --strategy mirrored there is one"):
        resolve(RunConfig(**{**cfg.__dict__, "strategy": "mirrored", "global_batch_loss": False}))
