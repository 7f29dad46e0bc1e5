"""Is the input pipeline fast enough that the model is the bottleneck?

Measures, in one run on the shared BQ train file (first N pairs, batches of 32 pairs):
  * pipeline alone: batches per second produced by ``pair_dataset`` (tokenised up front),
  * training: steps per second of the small random BERT (L4 H312) trained with CoSENT,
and writes both, with their ratio, to ``benchmarks/pipeline_vs_model.json``.

    .venv/bin/python benchmarks/pipeline_vs_model.py [--pairs 6400] [--data-dir ../shared/data]
"""
import argparse
import os
import statistics
import time

import cosent_tf as ct
from cosent_tf.backend import keras
from cosent_tf.io import write_json
from cosent_tf.training import SMALL_RANDOM_CONFIG


def timed_passes(run, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6400)
    parser.add_argument("--train-steps", type=int, default=30)
    parser.add_argument("--data-dir", default="../shared/data")
    args = parser.parse_args()

    vocab = os.path.join(args.data_dir, "vocab", "bert-base-chinese-vocab.txt")
    data = ct.load_task(os.path.join(args.data_dir, "senteval_cn"), "BQ", "train").subset(range(args.pairs))
    tokenizer = ct.SentenceTokenizer(vocab, maxlen=64)
    start = time.perf_counter()
    ids_a, ids_b = tokenizer.encode_all(data.texts_a), tokenizer.encode_all(data.texts_b)
    tokenize_seconds = time.perf_counter() - start
    dataset = ct.pair_dataset(ids_a, ids_b, data.labels, batch_size=32, seed=0)
    batches = -(-args.pairs // 32)

    pipeline_times = timed_passes(lambda: sum(1 for _ in dataset), 3)
    pipeline_rate = batches / statistics.median(pipeline_times)

    keras.utils.set_random_seed(0)
    encoder = ct.build_encoder(SMALL_RANDOM_CONFIG)
    encoder.compile(keras.optimizers.Adam(1e-4), loss=ct.CoSENTLoss())
    train_slice = dataset.take(args.train_steps)
    encoder.fit(dataset.take(3), verbose=0)  # trace once before timing
    train_times = timed_passes(lambda: encoder.fit(train_slice, verbose=0), 3)
    train_rate = args.train_steps / statistics.median(train_times)

    results = {
        "pairs": args.pairs, "batch_pairs": 32,
        "tokenize_pairs_per_second": round(args.pairs / tokenize_seconds, 1),
        "pipeline_batches_per_second": round(pipeline_rate, 1),
        "pipeline_seconds_min_max": [round(min(pipeline_times), 3), round(max(pipeline_times), 3)],
        "train_steps_per_second": round(train_rate, 3),
        "train_seconds_min_max": [round(min(train_times), 2), round(max(train_times), 2)],
        "pipeline_to_train_ratio": round(pipeline_rate / train_rate, 1),
    }
    write_json(os.path.join(os.path.dirname(os.path.abspath(__file__)), "pipeline_vs_model.json"), results)
    for key, value in results.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
