"""Where a training step of this engine goes: CoSENT's share, achieved GFLOP/s, matmul peak.

* matmul peak: the best GFLOP/s of a square ``tf.matmul`` (1024, 2048) in each precision.
* loss share: at 64 pairs per batch (128 rows), the time of CoSENT's forward and
  backward on the encoder's output over the time of a whole training step
  (``FusedAdam``, length-grouped batches of the benchmark's BQ pairs).
* bf16 over float32 at the bench's 32 pairs: the two precisions' training steps taking turns
  on the same batches in this one process (``turn_taking_seconds``).
* achieved GFLOP/s: the FLOPs the encoder's matmuls perform on those batches (counted from
  the shapes; the [CLS]-only last block counted as it runs; backward = 2× forward) over the
  measured step time, in float32 and mixed_bfloat16, against the peak of the same precision.

    .venv/bin/python benchmarks/micro.py micro float32 OUTPUT_JSON
"""

import functools
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402

import cosent_tf as ct  # noqa: E402
from cosent_tf.backend import dtype_policy, policy_name, random_seed, tf  # noqa: E402

import common  # noqa: E402

LOSS_SHARE_PAIRS = 64
STEPS = 12
# The bf16-over-float32 ratio at the bench's batch size, from steps of the two precisions taking
# turns in one process: this machine's speed drifts by 15% and more between processes minutes
# apart, which decides a ratio of two separate jobs more than the precisions do.
TURNS_PAIRS, TURNS_STEPS, TURNS_ROUNDS = common.BATCH_PAIRS, 24, 3


def median_seconds(run, repeats, warmup=3):
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_peak(dtype):
    best = 0.0
    for n in (1024, 2048):
        a = tf.cast(tf.random.normal([n, n]), dtype)
        product = tf.function(tf.matmul)
        seconds = median_seconds(lambda a=a, product=product: product(a, a).numpy(), 5)
        best = max(best, 2 * n**3 / seconds / 1e9)
    return best


def forward_flops(batch, length, config):
    """Matmul FLOPs of one forward pass of the encoder on a (batch, length) input."""
    h, i, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    full_block = 2 * length * (4 * h * h + 2 * h * i) + 4 * length * length * h
    # The last block computes keys and values for every token, the rest for [CLS] only.
    last_block = 2 * length * 2 * h * h + 2 * (2 * h * h + 2 * h * i) + 4 * length * h
    return batch * ((layers - 1) * full_block + last_block)


@functools.lru_cache(maxsize=1)
def encoded_train_pairs():
    """The benchmark's BQ train pairs as token ids, made once: ``main`` batches them twice."""
    texts_a, texts_b, labels = common.train_pairs()
    tokenizer = ct.SentenceTokenizer(common.vocab_path(), common.MAXLEN)
    return tokenizer.encode_all(texts_a), tokenizer.encode_all(texts_b), labels


def training_batches(pairs_per_batch, steps=STEPS):
    ids_a, ids_b, labels = encoded_train_pairs()
    dataset = ct.pair_dataset(ids_a, ids_b, labels, batch_size=pairs_per_batch, seed=0)
    return [
        ((tf.constant(ids), tf.constant(segments)), tf.constant(y))
        for (ids, segments), y in dataset.take(steps).as_numpy_iterator()
    ]


def training_step(config_path):
    """(model, loss, a compiled training step of it: (inputs, labels) -> loss value), built under
    the global dtype policy: the engine's encoder, ``FusedAdam`` and CoSENT, without Keras's fit."""
    model = ct.build_encoder(config_path)
    optimizer, loss = ct.FusedAdam(common.LEARNING_RATE), ct.CoSENTLoss(common.SCALE)
    signature = [(tf.TensorSpec([None, None], tf.int32),) * 2, tf.TensorSpec([None], tf.float32)]

    @tf.function(input_signature=signature)
    def train_step(inputs, labels):
        with tf.GradientTape() as tape:
            value = loss(labels, model(inputs, training=True))
        optimizer.apply_gradients(zip(tape.gradient(value, model.trainable_variables), model.trainable_variables))
        return value

    return model, loss, train_step


def mean_padded_length(batches):
    return float(np.mean([ids.shape[1] for (ids, _), _ in batches]))


def step_measurements(precision, batches):
    with dtype_policy(policy_name(precision)), random_seed(0):
        return _step_measurements(batches)


def _step_measurements(batches):
    model, loss, train_step = training_step(common.MODEL_CONFIG)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], tf.float32)])
    def loss_step(vectors, labels):
        with tf.GradientTape() as tape:
            tape.watch(vectors)
            value = loss(labels, vectors)
        return tape.gradient(value, vectors)

    def all_steps():
        for inputs, labels in batches:
            train_step(inputs, labels).numpy()

    step_seconds = median_seconds(all_steps, 3, warmup=1) / len(batches)
    vectors = [model(inputs, training=False) for inputs, _ in batches]

    def all_losses():
        for v, (_, labels) in zip(vectors, batches):
            loss_step(v, labels).numpy()

    loss_seconds = median_seconds(all_losses, 3, warmup=1) / len(batches)
    return step_seconds, loss_seconds


def turn_taking_seconds(config_path, batches, rounds):
    """{precision: seconds} of ``rounds`` passes over ``batches`` by a float32 and a bf16 training
    step taking turns on each batch (which goes first alternates), each traced beforehand."""
    steps = {}
    for precision in ("float32", "bf16"):
        with dtype_policy(policy_name(precision)), random_seed(0):
            _, _, steps[precision] = training_step(config_path)
            for inputs, labels in batches:  # traces every length
                steps[precision](inputs, labels).numpy()
    seconds = dict.fromkeys(steps, 0.0)
    order = list(steps)
    for _ in range(rounds):
        for inputs, labels in batches:
            for precision in order:
                started = time.perf_counter()
                steps[precision](inputs, labels).numpy()
                seconds[precision] += time.perf_counter() - started
            order.reverse()
    return seconds


def main():
    config = common.model_config()
    peaks = {"float32": matmul_peak(tf.float32), "bf16": matmul_peak(tf.bfloat16)}
    batches = training_batches(LOSS_SHARE_PAIRS)
    flops = 3 * sum(forward_flops(*ids.shape, config) for (ids, _), _ in batches) / len(batches)
    results = {
        "pairs_per_batch": LOSS_SHARE_PAIRS,
        "steps": len(batches),
        "mean_padded_length": mean_padded_length(batches),
        "train_step_gflop": flops / 1e9,
    }
    for precision in ("float32", "bf16"):
        step_seconds, loss_seconds = step_measurements(precision, batches)
        results[precision] = {
            "matmul_peak_gflops": peaks[precision],
            "step_seconds": step_seconds,
            "loss_seconds": loss_seconds,
            "loss_share": loss_seconds / step_seconds,
            "achieved_gflops": flops / step_seconds / 1e9,
            "fraction_of_peak": flops / step_seconds / 1e9 / peaks[precision],
        }
        print(precision, results[precision], flush=True)
    batches = training_batches(TURNS_PAIRS, TURNS_STEPS)
    results["turns"] = {
        "pairs_per_batch": TURNS_PAIRS,
        "steps": len(batches) * TURNS_ROUNDS,
        "mean_padded_length": mean_padded_length(batches),
        "seconds": turn_taking_seconds(common.MODEL_CONFIG, batches, TURNS_ROUNDS),
    }
    print("turns", results["turns"], flush=True)
    return results


if __name__ == "__main__":
    common.contestant_main({"micro": lambda _: main()})
