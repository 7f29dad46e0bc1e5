"""Training on several devices with ``tf.distribute``: the strategies ``--strategy`` names.

* ``default``: one device (TensorFlow's default strategy).
* ``mirrored``: every accelerator of this machine (``MirroredStrategy``), or its logical CPU
  devices where it has none.
* ``multi-worker``: one replica set per machine (``MultiWorkerMirroredStrategy``), the
  machines listed in the ``TF_CONFIG`` environment variable, TensorFlow's convention.

``--batch-size`` stays the global number of pairs: each replica gets an equal slice of whole
pairs, and CoSENT ranks the global batch (see :class:`cosent_tf.losses.CoSENTLoss`).

``COSENT_TF_CPU_DEVICES=N`` (read when cosent_tf is imported, see :mod:`cosent_tf.backend`)
splits the CPU into N logical devices, which ``mirrored`` then uses as N replicas: a way to
try (and test) the strategies on a machine without accelerators. It is no faster than one
device.
"""

import contextlib
import json
import os

from .backend import tf
from .errors import ConfigError

STRATEGIES = ("default", "mirrored", "multi-worker")

_made = {}  # one strategy object per name for the process: a second one's collectives would clash


def get_strategy(name: str = "default") -> "tf.distribute.Strategy":
    """The strategy called ``name`` (:data:`STRATEGIES`); the same object on every call."""
    if name not in STRATEGIES:
        raise ConfigError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    if name == "default":
        return tf.distribute.get_strategy()
    if name not in _made:
        if name == "mirrored":
            devices = (
                None
                if tf.config.list_logical_devices("GPU")
                else [d.name for d in tf.config.list_logical_devices("CPU")]
            )
            _made[name] = tf.distribute.MirroredStrategy(devices)
        else:
            if "TF_CONFIG" not in os.environ:
                raise ConfigError(
                    "--strategy multi-worker reads the cluster from the TF_CONFIG environment variable, which is not "
                    'set; e.g. TF_CONFIG=\'{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                    '"task": {"type": "worker", "index": 0}}\' on the first machine, index 1 on the second'
                )
            try:
                json.loads(os.environ["TF_CONFIG"])
            except ValueError as error:
                raise ConfigError(f"TF_CONFIG is not JSON: {error}") from None
            _made[name] = tf.distribute.MultiWorkerMirroredStrategy()
    return _made[name]


def _cluster(strategy):
    """The strategy's cluster resolver under multi-worker, else None."""
    resolver = getattr(strategy, "cluster_resolver", None)
    return resolver if resolver is not None and resolver.cluster_spec().as_dict() else None


def is_chief(strategy) -> bool:
    """Whether this process writes the run's outputs: always, but under multi-worker only the
    chief (the ``chief`` task, or worker 0 where there is none)."""
    cluster = _cluster(strategy)
    if cluster is None or cluster.task_type == "chief":
        return True
    return cluster.task_type == "worker" and cluster.task_id == 0 and "chief" not in cluster.cluster_spec().jobs


@contextlib.contextmanager
def started_together(strategy):
    """Run the block (a run's checks before its first collective) on every worker, and go on
    only if it passed on all of them.

    Under multi-worker a worker that refuses to start (an input it cannot read, a run folder
    it may not use) would otherwise end the others in their first collective, the broadcast
    of the model's initial weights, with a TensorFlow error about a closed connection that
    says nothing of why. At the end of the block the workers exchange whether it passed: one
    whose block raised says so before re-raising, and the others raise a ConfigError naming
    it. Without a cluster this is the block alone.
    """
    try:
        yield
    except Exception:
        _workers_not_ready(strategy, ready=False)
        raise
    refused = _workers_not_ready(strategy, ready=True)
    if refused:
        raise ConfigError(
            f"{worker(strategy)}: {' and '.join(refused)} could not start the run (its log says why); "
            "nothing was trained here: run the same command again on every worker once that is fixed"
        )


def _workers_not_ready(strategy, ready: bool) -> list:
    """Every worker calls this once, in the same place: the names of those not ``ready``."""
    cluster = _cluster(strategy)
    if cluster is None:
        return [] if ready else ["this process"]
    spec = cluster.cluster_spec()
    tasks = [(job, i) for job in ("chief", "worker") if job in spec.jobs for i in range(spec.num_tasks(job))]
    mine = tf.one_hot(tasks.index((cluster.task_type, cluster.task_id)), len(tasks)) * (0.0 if ready else 1.0)

    @tf.function  # eagerly, the strategy warns that it is slow
    def summed_over_replicas():  # a worker with several devices counts its flag once per device
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: mine), axis=None)

    counts = summed_over_replicas().numpy()
    return [f"{job} {i}" for (job, i), count in zip(tasks, counts) if count > 0]


def worker(strategy) -> str:
    """This process's place in a multi-worker cluster (``worker 1``), or ``this process``."""
    cluster = _cluster(strategy)
    return "this process" if cluster is None else f"{cluster.task_type} {cluster.task_id}"
