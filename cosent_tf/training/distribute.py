"""Training on several devices with ``tf.distribute``: the strategies ``--strategy`` names.

* ``default``: one device (TensorFlow's default strategy).
* ``mirrored``: every accelerator of this machine (``MirroredStrategy``), or its logical CPU
  devices where it has none.
* ``multi-worker``: one replica set per machine (``MultiWorkerMirroredStrategy``), the
  machines listed in the ``TF_CONFIG`` environment variable, TensorFlow's convention. Each
  worker checks TF_CONFIG and waits at most ``--worker-timeout`` seconds for the others to
  listen; then TensorFlow, whose own wait has no limit and ignores SIGTERM and SIGINT, must
  connect them within that time again, or the process ends saying so.

``--batch-size`` stays the global number of pairs: each replica gets an equal slice of whole
pairs, and CoSENT ranks the global batch (see :class:`cosent_tf.losses.CoSENTLoss`).

On Keras 3's JAX backend ``mirrored`` is ``keras.distribution.DataParallel`` over JAX's local
devices (:class:`DataParallelStrategy`): one program over the global batch, sharded along its
rows, so every loss sees the global batch as one array; ``multi-worker`` is refused there
(:mod:`cosent_tf.training.keras_support`). On Keras 3's TensorFlow backend ``multi-worker`` is the
same MultiWorkerMirroredStrategy as on Keras 2, with two of Keras 3's methods put right for it
(:func:`fitting`).

``COSENT_TF_CPU_DEVICES=N`` (read when cosent_tf is imported, see :mod:`cosent_tf.backend` and
:mod:`cosent_tf.environment`) splits the CPU into N logical devices, TensorFlow's and JAX's, which
``mirrored`` then uses as N replicas: a way to try (and test) the strategies on a machine without
accelerators. It is no faster than one device.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional

from ..choices import STRATEGIES
from ..environment import split_cpu, split_jax_cpu_checked
from ..errors import ConfigError, TrainingInterrupted, lookup
from ..io import json_type
from ..process_keras import KERAS_MAJOR, keras, tf

logger = logging.getLogger(__name__)

JOBS = ("chief", "worker")  # the tasks MultiWorkerMirroredStrategy trains on, in TensorFlow's order
TF_CONFIG_EXAMPLE = (
    'e.g. TF_CONFIG=\'{"cluster": {"worker": ["host1:12345", "host2:12345"]}, "task": {"type": "worker", '
    '"index": 0}}\' on the first machine, index 1 on the second'
)
WAIT_LOG_EVERY = 30.0  # seconds between the lines that say a worker is still being waited for
PROBE_EVERY = 0.5  # seconds between two rounds of connection attempts to the workers not seen yet

# Said once, when --strategy mirrored finds nothing to mirror on: a plain run, which the user
# may not expect from the option's name.
ONE_DEVICE_WARNING = (
    "--strategy mirrored found one device (%s): 1 replica, as --strategy default would give; "
    "set COSENT_TF_CPU_DEVICES=N before the command to split the CPU into N logical devices (to try the "
    "strategy: it is no faster), or run on a machine with several GPUs"
)

_made: dict = {}  # one strategy object per name for the process: a second one's collectives would clash


class DataParallelStrategy:
    """``--strategy mirrored`` on Keras 3's JAX backend: ``keras.distribution.DataParallel`` over
    ``devices`` (JAX's), with the few things of a ``tf.distribute.Strategy`` the engine reads.

    JAX compiles one program for the global batch, its rows sharded over the devices, and the
    variables replicated: a loss sees the whole batch (so CoSENT ranks the global batch without a
    gather) and the gradient is the global batch's. Keras reads the distribution when variables are
    made, when a batch is sharded and when the step is compiled, so the model is built, compiled and
    fitted within :meth:`scope`, which sets it for the process and puts the one before back after.
    """

    def __init__(self, devices: list) -> None:
        self.devices = list(devices)
        self.distribution = keras.distribution.DataParallel(devices=self.devices)
        self.num_replicas_in_sync = len(self.devices)

    def scope(self) -> contextlib.AbstractContextManager:
        return self.distribution.scope()


@contextlib.contextmanager
def fitting(strategy, model):
    """The context ``model.fit`` runs in under ``strategy``: a keras.distribution's scope, which
    JAX reads for each batch and step; none for a tf.distribute strategy, which the model holds,
    except on Keras 3 across workers (:func:`_keras3_across_workers`)."""
    if isinstance(strategy, DataParallelStrategy):
        with strategy.scope():
            yield
    elif KERAS_MAJOR == 3 and _cluster(strategy) is not None:
        with _keras3_across_workers(model, strategy):
            yield
    else:
        yield


@contextlib.contextmanager
def _keras3_across_workers(model, strategy):
    """Within the block Keras 3's ``model.fit`` runs under a MultiWorkerMirroredStrategy, which its
    TensorFlow trainer (keras/src/backend/tensorflow/trainer.py) fails twice without this
    (keras-team/keras issue 20585); the model's own two methods stand in, and are removed after:

    * ``_maybe_symbolic_build`` reduces the first batch, a tuple of PerReplica values, in one
      ``strategy.reduce`` call to learn its shapes; one worker's strategy passes a nest through,
      but across workers the tuple goes to the all-reduce, which cannot make it a tensor. Here the
      shapes come from this worker's own slice, the shapes that reduce would give.
    * ``reduce_per_replica`` averages each logged figure over the replicas with
      ``strategy.reduce("MEAN", value, axis=0)`` across workers (one worker's strategy averages
      a list instead): a scalar has no axis 0. Here each figure leaves the step as a
      one-element vector, which that reduce averages to the scalar one worker's would give.
    """
    step = model.train_step

    def own_slice(value):
        return strategy.experimental_local_results(value)[0]

    def build(iterator=None, data_batch=None):
        if iterator is not None:
            for _, _, batches in iterator:
                data_batch = tf.nest.map_structure(own_slice, next(batches))
                break
        with strategy.scope():
            model._symbolic_build(data_batch=data_batch)

    def train_step(data):
        return {name: tf.reshape(value, [1]) for name, value in step(data).items()}

    model._maybe_symbolic_build, model.train_step = build, train_step
    try:
        yield
    finally:
        del model._maybe_symbolic_build, model.train_step


def _data_parallel() -> DataParallelStrategy:
    import jax

    devices = jax.local_devices()
    split_jax_cpu_checked(devices)
    made = DataParallelStrategy(devices)
    if made.num_replicas_in_sync == 1:
        logger.warning(ONE_DEVICE_WARNING, f"{devices[0].platform.upper()}:{devices[0].id}")
    return made


def get_strategy(name: str = "default", worker_timeout: float = 300.0) -> tf.distribute.Strategy:
    """The strategy called ``name`` (:data:`STRATEGIES`); the same object on every call.

    ``multi-worker`` first checks TF_CONFIG and waits, at most ``worker_timeout`` seconds, until
    every other worker of its cluster listens on its port (see :func:`wait_for_workers`); then
    TensorFlow connects them, and the process ends if that takes more than ``worker_timeout``
    again (:func:`_ended_unless_done_within`). ``mirrored`` on a machine with one device logs a
    warning (:data:`ONE_DEVICE_WARNING`) when it is made: it then runs on 1 replica, as ``default``.
    """
    lookup(dict.fromkeys(STRATEGIES), name, "strategy")  # a tuple of names: the check alone
    if name == "default":
        return tf.distribute.get_strategy()
    if name not in _made:
        if name == "mirrored" and KERAS_MAJOR == 3 and keras.backend.backend() == "jax":
            _made[name] = _data_parallel()
        elif name == "mirrored":
            split_cpu(tf)  # done when the Keras 2 engine was imported; Keras 3's processes split here
            devices = (
                None
                if tf.config.list_logical_devices("GPU")
                else [d.name for d in tf.config.list_logical_devices("CPU")]
            )
            _made[name] = tf.distribute.MirroredStrategy(devices)
            if _made[name].num_replicas_in_sync == 1:
                logger.warning(ONE_DEVICE_WARNING, _made[name].extended.worker_devices[0].rpartition("device:")[2])
        else:
            tasks, me = read_tf_config()
            wait_for_workers(tasks, me, worker_timeout)
            with _ended_unless_done_within(worker_timeout, f"{me[0]} {me[1]}"):
                _made[name] = tf.distribute.MultiWorkerMirroredStrategy()
    return _made[name]


def partial_batch_note(pairs: int, batch_size: int, replicas: int) -> Optional[str]:
    """What the replicas leave out of each pass over ``pairs`` training pairs, said where a run
    under a strategy cannot follow a one-device run step for step; None where it can.

    Each replica gets an equal slice of whole pairs, so the pass's last, partial batch is cut to
    a multiple of ``replicas`` (:func:`cosent_tf.data.batching.batch_indices`): its other pairs
    sit the pass out, different ones each pass, where one device trains on all of them.
    """
    rest = pairs % batch_size
    left_out = rest % replicas
    if replicas == 1 or not left_out:
        return None
    steps = pairs // batch_size
    outcome = (
        f"leaves a partial batch of {rest}, cut to {rest - left_out} for the {replicas} replicas to share equally: "
        f"{left_out} pair(s) sit each pass out (different ones each time), where one device trains on all {rest}"
        if rest >= replicas
        else f"leaves {rest} pair(s) after its whole batches, fewer than the {replicas} replicas: they sit "
        f"each pass out (different ones each time), and a pass takes {steps} steps where one device takes {steps + 1}"
    )
    return (
        f"each pass over the {pairs} train pairs {outcome}; so this run does not follow a one-device run step "
        f"for step (it would with a multiple of {replicas} pairs left after the whole batches of {batch_size})"
    )


def read_tf_config() -> tuple:
    """The cluster of the TF_CONFIG environment variable, checked: ``({(job, index): (host, port)},
    (job, index) of this process)``. Each fault is a ConfigError naming TF_CONFIG and the key:
    TensorFlow would otherwise train alone on a TF_CONFIG without a cluster, or fail in C++."""
    if "TF_CONFIG" not in os.environ:
        raise ConfigError(
            "--strategy multi-worker reads the cluster from the TF_CONFIG environment variable, which is not set; "
            + TF_CONFIG_EXAMPLE
        )
    try:
        config = json.loads(os.environ["TF_CONFIG"])
    except ValueError as error:
        raise ConfigError(f"TF_CONFIG is not JSON: {error}; {TF_CONFIG_EXAMPLE}") from None
    if not isinstance(config, dict):
        raise ConfigError(
            f'TF_CONFIG must be a JSON object with "cluster" and "task", not {json_type(type(config))}; '
            + TF_CONFIG_EXAMPLE
        )
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not cluster:
        shown = "missing" if cluster is None else f"{json.dumps(cluster)[:60]}"
        raise ConfigError(
            f'TF_CONFIG: "cluster" must be an object of job name -> list of "host:port" addresses, not {shown}; '
            + TF_CONFIG_EXAMPLE
        )
    tasks = {}
    for job, addresses in cluster.items():
        if job not in JOBS:
            raise ConfigError(
                f'TF_CONFIG: cluster job "{job}" is not one that --strategy multi-worker trains on ("chief", "worker")'
            )
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            raise ConfigError(
                f'TF_CONFIG: cluster["{job}"] must be a list of "host:port" strings, not {json.dumps(addresses)[:60]}'
            )
        if job == "chief" and len(addresses) > 1:
            raise ConfigError(f'TF_CONFIG: cluster["chief"] lists {len(addresses)} addresses; a cluster has one chief')
        for index, address in enumerate(addresses):
            tasks[job, index] = _host_and_port(address, f'cluster["{job}"][{index}]')
    if not cluster.get("worker"):
        raise ConfigError('TF_CONFIG: "cluster" has no "worker" job with an address; ' + TF_CONFIG_EXAMPLE)
    seen: dict = {}
    for (job, index), address in tasks.items():
        if address in seen:
            raise ConfigError(
                f"TF_CONFIG: the address {_address(address)} is listed twice ({seen[address]} and {job} {index}); "
                "give each task its own host:port"
            )
        seen[address] = f"{job} {index}"
    if not isinstance(task, dict):
        shown = "missing" if task is None else json.dumps(task)[:60]
        raise ConfigError(f'TF_CONFIG: "task" must be an object like {{"type": "worker", "index": 0}}, not {shown}')
    job, own_index = task.get("type"), task.get("index")
    if not isinstance(job, str) or job not in cluster:
        raise ConfigError(
            f'TF_CONFIG: task "type" {json.dumps(job)} is not a job of the cluster ({", ".join(cluster)})'
        )
    if isinstance(own_index, bool) or not isinstance(own_index, int):
        raise ConfigError(f'TF_CONFIG: task "index" must be an integer, not {json.dumps(own_index)}')
    if not 0 <= own_index < len(cluster[job]):
        raise ConfigError(
            f'TF_CONFIG: task "index" {own_index} is out of range: cluster["{job}"] lists {len(cluster[job])} '
            f"address(es), index 0 to {len(cluster[job]) - 1}"
        )
    return tasks, (job, own_index)


def _host_and_port(address: str, key: str) -> tuple:
    host, colon, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [::1]:port
    if not colon or not host or not port.isdigit():
        raise ConfigError(f'TF_CONFIG: {key} {address!r} is not a "host:port" address')
    if not 1 <= int(port) <= 65535:
        raise ConfigError(f"TF_CONFIG: {key} {address!r}: port {int(port)} is out of range (1 to 65535)")
    return host, int(port)


def _address(host_port) -> str:
    host, port = host_port
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def wait_for_workers(tasks: dict, me: tuple, timeout: float):
    """Hold this task's port and return once every other task of ``tasks`` accepts a connection
    on its own; a ConfigError naming those that did not within ``timeout`` seconds.

    TensorFlow's start-up waits for every worker inside C++, with no time limit, deaf to SIGINT
    and (its preemption notifier's handler) SIGTERM. This wait is in Python: it says whom it waits
    for, ends on SIGTERM or SIGINT with a TrainingInterrupted, and holds this task's port (a plain
    listening socket, which the others' checks connect to) until TensorFlow's server takes it over.
    """
    name = f"{me[0]} {me[1]}"
    port = tasks[me][1]
    others = {task: address for task, address in tasks.items() if task != me}
    # On every interface and with SO_REUSEADDR, as TensorFlow's server binds; never accepted: the
    # others' checks only connect.
    dual_stack = socket.has_dualstack_ipv6()
    try:
        listener = socket.create_server(
            ("", port),
            family=socket.AF_INET6 if dual_stack else socket.AF_INET,
            backlog=len(tasks) + 8,
            dualstack_ipv6=dual_stack,
        )
    except OSError as error:
        in_use = error.errno == errno.EADDRINUSE
        raise ConfigError(
            f"TF_CONFIG: this task's address {_address(tasks[me])} ({name}): "
            + (f"port {port} on this machine is in use by another process" if in_use else f"port {port}: {error}")
            + "; end that process or give this task another port in TF_CONFIG (on every machine)"
        ) from None
    try:
        with _signals_noted() as received:
            _wait(name, others, timeout, received)
    finally:
        listener.close()


def _wait(name, others, timeout, received):
    def named(tasks):
        return " and ".join(f"{job} {index} ({_address(others[job, index])})" for job, index in tasks)

    def stop_if_signalled():
        if received:
            raise TrainingInterrupted(
                received[0],
                f"{signal.Signals(received[0]).name} received while {name} waited for "
                f"{' and '.join(f'{job} {index}' for job, index in waiting)} to start; nothing was trained or written",
            )

    waiting, reasons = sorted(others, key=lambda t: (JOBS.index(t[0]), t[1])), {}
    started = time.monotonic()
    next_log = started
    while True:
        for task in list(waiting):
            left = timeout - (time.monotonic() - started)
            try:
                with socket.create_connection(others[task], timeout=max(0.1, min(1.0, left))):
                    waiting.remove(task)
            except OSError as error:
                reasons[task] = error.strerror or str(error) or type(error).__name__
            stop_if_signalled()
        if not waiting:
            return
        now = time.monotonic()
        if now - started >= timeout:
            why = "; ".join(f"{job} {index}: {reasons[job, index]}" for job, index in waiting)
            raise ConfigError(
                f"{name}: {named(waiting)} did not start within {timeout:g} seconds ({why}); nothing was trained: "
                "start the same command on every machine of TF_CONFIG's cluster, or wait longer with "
                "--worker-timeout SECONDS"
            )
        if now >= next_log:
            waited = f"still waiting, after {now - started:.0f} seconds," if next_log > started else "waiting"
            logger.info(
                "%s: %s for %s to start (up to %g seconds, --worker-timeout) ...", name, waited, named(waiting), timeout
            )
            next_log = now + WAIT_LOG_EVERY
        time.sleep(max(0.0, min(PROBE_EVERY, timeout - (now - started))))
        stop_if_signalled()


# The watchdog of _ended_unless_done_within, a process of its own: TensorFlow's start-up holds
# Python's lock, so no thread of this process could run. It ends when its stdin closes.
WATCHDOG = """
import os, select, signal, sys
pid, timeout, late, interrupted = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
def end(message):
    print(message, file=sys.stderr, flush=True)
    os.kill(pid, signal.SIGKILL)
    sys.exit()
for number in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C, and many schedulers, signal the whole process group
    signal.signal(number, lambda number, frame: end(interrupted.format(signal.Signals(number).name)))
if not select.select([sys.stdin], [], [], timeout)[0]:
    end(late)
"""


@contextlib.contextmanager
def _ended_unless_done_within(timeout, name):
    """End the process, saying why, if the block runs longer than ``timeout`` seconds or its
    process group gets SIGINT (Ctrl-C) or SIGTERM meanwhile.

    For TensorFlow's start of the cluster, which waits in C++ with no limit, holding Python's
    lock, deaf to SIGINT and SIGTERM: it hangs when a worker was seen listening but never joins
    (it stopped just after, or its port belongs to another program). Nothing is written before
    training starts, so ending the process (SIGKILL, from a watchdog process) loses nothing.
    """
    late = (
        f"error: {name}: TensorFlow did not connect the cluster's workers within {timeout:g} seconds, although each "
        "listened on its port (one may have stopped since, or its port belongs to another program); nothing was "
        "trained: start the same command on every machine again, or wait longer with --worker-timeout SECONDS"
    )
    interrupted = f"stopped: {{}} received while TensorFlow connected {name} to the cluster; nothing was trained"
    watchdog = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", WATCHDOG, str(os.getpid()), str(timeout), late, interrupted],
        stdin=subprocess.PIPE,
    )
    try:
        yield
    finally:
        watchdog.stdin.close()
        watchdog.wait()


@contextlib.contextmanager
def _signals_noted():
    """Within the block SIGTERM and SIGINT are noted in the list yielded, for the wait to end on at
    its next check: an exception raised in the handler could land inside logging, which would
    swallow it. The handlers before are put back after the block. Python runs signal handlers
    in the main thread only: elsewhere nothing is noted."""
    received = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {
        number: signal.signal(number, lambda number, frame: received.append(number))
        for number in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        yield received
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


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
