"""The ``cosent-tf`` command: encode, similarity, search and export with a trained model folder.

Every output is written through a temporary file and a rename, so an interrupted
command leaves either the previous file or none, never a truncated one. Outputs are
checked before the work starts: an output file may not be a folder or an input, and an
output folder (index, export) must be new, empty, or (with ``--overwrite``) an earlier
output of the same kind that holds no input.
"""
import argparse
import json
import os
import sys

import numpy as np

from .data import read_lines, read_pair_lines
from .errors import CosentError
from .io import atomic_path, check_output_file, check_output_folder, write_text


def _encode(args):
    from .inference import SentenceEncoder

    check_output_file(args.output, [args.texts])
    encoder = SentenceEncoder.load(args.model_dir, args.precision)
    vectors = encoder.encode(read_lines(args.texts, args.strict), args.batch_size, normalize=not args.no_normalize)
    with atomic_path(args.output) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, vectors)
    print(f"{args.output}: {vectors.shape[0]} vectors of dimension {vectors.shape[1]}")


def _similarity(args):
    from .inference import PairScorer, SentenceEncoder
    from .model_dir import read_spec

    check_output_file(args.output, [args.pairs])
    cls = PairScorer if read_spec(args.model_dir).kind == "interaction" else SentenceEncoder
    matcher = cls.load(args.model_dir, args.precision)
    texts_a, texts_b, lines = read_pair_lines(args.pairs, args.strict)
    scores = matcher.similarity(texts_a, texts_b, args.batch_size)
    columns = [[f"{s:.6f}" for s in scores]]
    if matcher.threshold is not None:
        columns.append([str(int(s > matcher.threshold)) for s in scores])
    write_text(args.output, "".join("\t".join([line, *row]) + "\n" for line, *row in zip(lines, *columns)))
    extra = f" and 0/1 at the tuned threshold {matcher.threshold:.4f}" if matcher.threshold is not None else ""
    print(f"{args.output}: {len(scores)} pairs, each line with its score{extra}")


def _search_build(args):
    from .inference import SentenceEncoder, VectorIndex

    inputs = [args.model_dir, args.corpus]
    check_output_folder(args.index_dir, VectorIndex.FOLDER, args.overwrite, inputs)
    encoder = SentenceEncoder.load(args.model_dir, args.precision)
    index = encoder.build_index(read_lines(args.corpus, args.strict), args.batch_size)
    index.save(args.index_dir, args.overwrite, inputs)
    print(f"{args.index_dir}: {len(index)} vectors")


def _search_query(args):
    from .inference import SentenceEncoder, VectorIndex

    check_output_file(args.output, [args.queries])
    index = VectorIndex.load(args.index_dir)
    model_dir = args.model or index.model
    if not model_dir:
        raise CosentError(f"{args.index_dir}: the index does not record its model; pass --model MODEL_DIR")
    if args.model and index.model and os.path.realpath(args.model) != os.path.realpath(index.model):
        raise CosentError(f"{args.index_dir}: the index was built with the model {index.model}, not {args.model}; "
                          "its vectors cannot be compared with another model's: query it without --model, "
                          "or build an index with this model")
    encoder = SentenceEncoder.load(model_dir, args.precision)
    queries = read_lines(args.queries, args.strict)
    hits = encoder.search(queries, index, args.top_k, args.batch_size)
    write_text(args.output, "".join(
        json.dumps({"query": query, "hits": [hit._asdict() for hit in row]}, ensure_ascii=False) + "\n"
        for query, row in zip(queries, hits)))
    print(f"{args.output}: top {args.top_k} of {len(index)} for {len(queries)} queries")


def _export(args):
    from .export import export_saved_model

    signatures = export_saved_model(args.model_dir, args.output_dir, args.overwrite)
    print(f"{args.output_dir}: SavedModel with signatures {', '.join(signatures)}")


def argument_parser():
    parser = argparse.ArgumentParser(
        prog="cosent-tf", description="Use a trained cosent-tf model folder (a training run's OUTPUT_DIR/model).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, handler, help_text, parent=commands):
        sub = parent.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    def inference_options(sub):
        sub.add_argument("--batch-size", type=int, default=64)
        sub.add_argument("--precision", default="float32", choices=["float32", "bf16"])
        sub.add_argument("--strict", action="store_true", help="an empty line or text is an error, not a warning")

    sub = command("encode", _encode, "Embed a text file (one sentence a line) into an .npy matrix.")
    sub.add_argument("model_dir")
    sub.add_argument("texts", help="UTF-8 text file, one sentence a line (row i of the output is line i)")
    sub.add_argument("output", help=".npy file to write (float32, one row per line)")
    sub.add_argument("--no-normalize", action="store_true", help="keep raw vectors instead of unit length")
    inference_options(sub)

    sub = command("similarity", _similarity,
                  "Score the pairs of a TSV file (text_a<TAB>text_b[<TAB>...]); writes each line with its score "
                  "(cosine, or the interaction model's score) and, when the model has a tuned threshold, 0/1.")
    sub.add_argument("model_dir")
    sub.add_argument("pairs")
    sub.add_argument("output")
    inference_options(sub)

    search = command("search", None, "Build a vector index of a corpus, or query one.")
    actions = search.add_subparsers(dest="action", required=True, metavar="ACTION")
    sub = command("build", _search_build, "Encode a corpus file (one text a line) into an index folder.", actions)
    sub.add_argument("model_dir")
    sub.add_argument("corpus")
    sub.add_argument("index_dir", help="a new or empty folder (or an earlier index, with --overwrite)")
    sub.add_argument("--overwrite", action="store_true", help="replace INDEX_DIR if it holds an earlier index")
    inference_options(sub)
    sub = command("query", _search_query,
                  "Find the top-k corpus texts of each query line by exact cosine; writes JSON lines.", actions)
    sub.add_argument("index_dir")
    sub.add_argument("queries", help="UTF-8 text file, one query a line")
    sub.add_argument("output", help=".jsonl file: one {query, hits: [{index, score, text}]} per query")
    sub.add_argument("--model", help="model folder (default: the one that built the index)")
    sub.add_argument("--top-k", type=int, default=10)
    inference_options(sub)

    sub = command("export", _export,
                  "Write a TensorFlow SavedModel whose serving signature takes raw UTF-8 strings "
                  "(tokenisation runs in the graph; serving needs tensorflow and tensorflow-text).")
    sub.add_argument("model_dir")
    sub.add_argument("output_dir", help="a new or empty folder (or an earlier export, with --overwrite)")
    sub.add_argument("--overwrite", action="store_true", help="replace OUTPUT_DIR if it holds an earlier SavedModel")
    return parser


def main(argv=None):
    args = argument_parser().parse_args(argv)
    try:
        args.handler(args)
    except (CosentError, ValueError) as error:
        raise SystemExit(f"error: {error}") from None
    except KeyboardInterrupt:  # outputs are written atomically: nothing half-done is left
        raise SystemExit("stopped: SIGINT received; nothing was written") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
