"""How fast does ``SentenceEncoder.encode`` embed sentences here?

Measures, in one run, sentences per second of ``SentenceEncoder.encode`` (tokenisation
included, batches of 64 sorted by length) on the first N sentences of the shared BQ
test file, for the small random BERT (L4 H312 A12, [CLS] pooling, maxlen 64) in
float32 and mixed bfloat16, and writes medians (with min-max) of R repetitions after a
warm-up pass to ``benchmarks/encode_throughput.json``.

    .venv/bin/python benchmarks/encode_throughput.py [--sentences 20000] [--repeats 3]
"""
import argparse
import os
import statistics
import tempfile
import time

import cosent_tf as ct
from cosent_tf.io import write_json
from cosent_tf.training import SMALL_RANDOM_CONFIG


def bq_test_sentences(data_dir, count):
    pairs = ct.load_task(os.path.join(data_dir, "senteval_cn"), "BQ", "test")
    return [t for a, b in zip(pairs.texts_a, pairs.texts_b) for t in (a, b)][:count]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "encode_throughput.json"))
    args = parser.parse_args()

    sentences = bq_test_sentences(args.data_dir, args.sentences)
    vocab = os.path.join(args.data_dir, "vocab", "bert-base-chinese-vocab.txt")
    results = {"sentences": len(sentences), "batch_size": args.batch_size, "repeats": args.repeats,
               "model": "random BERT L4 H312 A12 I1248, cls pooling, maxlen 64"}
    with tempfile.TemporaryDirectory() as folder:
        ct.save_model_dir(folder, ct.build_encoder(SMALL_RANDOM_CONFIG), ct.ModelSpec("feature", maxlen=64),
                          SMALL_RANDOM_CONFIG, vocab)
        for precision in ("float32", "bf16"):
            encoder = ct.SentenceEncoder.load(folder, precision)
            encoder.encode(sentences[: 20 * args.batch_size], args.batch_size)  # warm-up: trace, allocate
            rates = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                encoder.encode(sentences, args.batch_size, show_progress=False)
                rates.append(len(sentences) / (time.perf_counter() - start))
            results[precision] = {"sentences_per_second": round(statistics.median(rates), 1),
                                  "min": round(min(rates), 1), "max": round(max(rates), 1)}
            print(f"{precision}: {results[precision]}", flush=True)
    write_json(args.output, results)


if __name__ == "__main__":
    main()
