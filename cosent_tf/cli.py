"""The command line: the ``cosent-tf`` command (encode, similarity, search and export with a
trained model folder) and :func:`train_main`, which every training script wraps.

Every output is written through a temporary file and a rename, so an interrupted
command leaves either the previous file or none, never a truncated one (a device or pipe,
``/dev/stdout``, is written as a stream). Outputs are checked before the work starts: an
output file may not be a folder, an input or inside one, nor lie inside a folder this tool
writes (:func:`output_kinds`); an output folder (index, export) must be new, empty, or (with
``--overwrite``) an earlier output of the same kind that holds no input. A failure ends the
command with one ``error: ...`` line naming the file (:func:`errors_reported`).
"""

import argparse
import contextlib
import logging
import math
import os
import signal
import sys
import traceback

import numpy as np

from . import environment
from .data.files import read_lines, read_pair_lines
from .errors import ConfigError, CosentError, TrainingInterrupted
from .io import (
    atomic_path,
    check_can_write_in,
    check_folder_apart,
    check_not_in_tool_folder,
    check_output_file,
    check_output_folder,
    is_inside,
    json_text,
    write_json,
    write_text,
)


@contextlib.contextmanager
def console_logging():
    """Within the block the package's log (progress, warnings, errors) shows on stderr, so that
    stdout carries a command's result alone (``cosent-tf train ... > metrics.json``). The
    handler is removed afterwards."""
    package = logging.getLogger("cosent_tf")
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.INFO)
    previous_level, previous_propagate = package.level, package.propagate
    package.setLevel(logging.INFO)
    package.propagate = False  # shown here once, not again by a handler of the root logger
    package.addHandler(handler)
    try:
        yield
    finally:
        package.removeHandler(handler)
        package.setLevel(previous_level)
        package.propagate = previous_propagate


@contextlib.contextmanager
def tensorflow_start_up_shown(verbose: bool):
    """With ``verbose``, TensorFlow's native start-up lines are shown if TensorFlow is first
    imported within the block (``COSENT_TF_VERBOSE=1``); the variable is put back afterwards."""
    previous = os.environ.get("COSENT_TF_VERBOSE")
    if verbose:
        os.environ["COSENT_TF_VERBOSE"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("COSENT_TF_VERBOSE", None)
        else:
            os.environ["COSENT_TF_VERBOSE"] = previous


VERBOSE_HELP = (
    "show TensorFlow's start-up lines (absl, oneDNN, CUDA probing), which are held back by default, "
    "and the traceback of an error"
)


def error_message(error) -> str:
    """The ``error: ...`` line's text for ``error``: an OSError says which file and what the system
    said (``out.npy: No space left on device``), not its errno and repr."""
    if isinstance(error, OSError):
        names = [os.fsdecode(name) for name in (error.filename, error.filename2) if name is not None]
        said = error.strerror or (str(error.args[0]) if error.args else type(error).__name__)
        return ": ".join([" -> ".join(names), said] if names else [said])
    return str(error)


@contextlib.contextmanager
def errors_reported(verbose: bool):
    """Within the block, bad input (CosentError, ValueError) and a failed file operation (OSError:
    a full or read-only disk, a path under a file) end the process with one ``error: ...`` line
    naming the file, and exit status 1; ``verbose`` prints the traceback first. Other exceptions
    are bugs, and keep their traceback."""
    try:
        yield
    except (CosentError, ValueError, OSError) as error:
        if verbose:
            traceback.print_exc()
        raise SystemExit(f"error: {error_message(error)}") from None


def output_kinds() -> tuple:
    """The folders this tool writes (by their :class:`cosent_tf.io.FolderKind`): no output of a
    command may land inside one, where it would be lost when the folder is replaced or make the
    folder look like someone else's."""
    from .export.savedmodel import HF_FOLDER, SAVED_MODEL
    from .inference.matchers import VectorIndex
    from .inference.model_dir import MODEL_FOLDER
    from .training.run_folder import RUN_FOLDER

    return MODEL_FOLDER, VectorIndex.FOLDER, SAVED_MODEL, HF_FOLDER, RUN_FOLDER


def summary_stream(output):
    """Where a command says what it wrote: stdout, unless the output is stdout itself
    (``/dev/stdout``), where the line would be mixed into the result."""
    try:
        if os.path.samestat(os.stat(output), os.fstat(sys.stdout.fileno())):
            return sys.stderr
    except (OSError, ValueError):  # not there yet, or a stdout without a file (captured)
        pass
    return sys.stdout


def _encode(args):
    from .inference.matchers import SentenceEncoder

    check_output_file(args.output, [args.model_dir, args.texts], output_kinds())
    said = summary_stream(args.output)
    encoder = SentenceEncoder.load(args.model_dir, args.precision)
    vectors = encoder.encode(read_lines(args.texts, args.strict), args.batch_size, normalize=not args.no_normalize)
    with atomic_path(args.output) as tmp, open(tmp, "wb") as f:
        np.save(_WriteOnly(f), vectors)
    print(f"{args.output}: {vectors.shape[0]} vectors of dimension {vectors.shape[1]}", file=said)


class _WriteOnly:
    """A file seen only through its ``write``: numpy writes a real file with ``tofile``, which
    needs a file it can seek in, and so fails on a pipe (``/dev/stdout``)."""

    def __init__(self, file):
        self.write = file.write


def _similarity(args):
    from .inference.matchers import load_matcher

    check_output_file(args.output, [args.model_dir, args.pairs], output_kinds())
    said = summary_stream(args.output)
    matcher = load_matcher(args.model_dir, args.precision)
    texts_a, texts_b, lines = read_pair_lines(args.pairs, args.strict)
    scores = matcher.similarity(texts_a, texts_b, args.batch_size)
    columns = [[f"{s:.6f}" for s in scores]]
    if matcher.threshold is not None:
        columns.append([str(int(s > matcher.threshold)) for s in scores])
    write_text(args.output, "".join("\t".join([line, *row]) + "\n" for line, *row in zip(lines, *columns)))
    extra = f" and 0/1 at the tuned threshold {matcher.threshold:.4f}" if matcher.threshold is not None else ""
    print(f"{args.output}: {len(scores)} pairs, each line with its score{extra}", file=said)


def _search_build(args):
    from .inference.matchers import SentenceEncoder, VectorIndex

    inputs = [args.model_dir, args.corpus]
    check_output_folder(args.index_dir, VectorIndex.FOLDER, args.overwrite, inputs, output_kinds())
    encoder = SentenceEncoder.load(args.model_dir, args.precision)
    index = encoder.build_index(read_lines(args.corpus, args.strict), args.batch_size)
    index.save(args.index_dir, args.overwrite, inputs)
    print(f"{args.index_dir}: {len(index)} vectors")


def _search_query(args):
    from .inference.matchers import SentenceEncoder, VectorIndex

    check_output_file(args.output, [args.index_dir, args.queries, args.model_dir], output_kinds())
    said = summary_stream(args.output)
    index = VectorIndex.load(args.index_dir)
    model_dir = index.model_path(args.model_dir)
    check_output_file(args.output, [model_dir], output_kinds())  # the model the index names
    encoder = SentenceEncoder.load(model_dir, args.precision)
    queries = read_lines(args.queries, args.strict)
    hits = encoder.search(queries, index, args.top_k, args.batch_size)
    write_text(
        args.output,
        "".join(
            json_text({"query": query, "hits": [hit._asdict() for hit in row]}, ensure_ascii=False) + "\n"
            for query, row in zip(queries, hits)
        ),
    )
    print(f"{args.output}: top {args.top_k} of {len(index)} for {len(queries)} queries", file=said)


def _export(args):
    from .export.savedmodel import export_hf, export_saved_model

    check_folder_apart(args.output_dir, [args.model_dir])
    check_not_in_tool_folder(args.output_dir, output_kinds())  # the rest is checked by the export
    if args.format == "hf":
        if args.precision != "float32":
            raise ConfigError("--precision is for --format savedmodel; a Hugging Face folder holds float32 weights")
        written = export_hf(args.model_dir, args.output_dir, args.overwrite)
        print(f"{args.output_dir}: Hugging Face folder ({written})")
        return
    signatures = export_saved_model(args.model_dir, args.output_dir, args.overwrite, args.precision)
    print(f"{args.output_dir}: SavedModel with signatures {', '.join(signatures)}")


def _train(args):
    from .training.engine import RunConfig

    settings = {k: v for k, v in vars(args).items() if k not in ("command", "handler", "overwrite", "name", "verbose")}
    settings["task"] = args.name or os.path.splitext(os.path.basename(args.train_file))[0]
    _run_training(RunConfig(**settings), args.overwrite)


def _file_format(args):
    from .data.files import PairFileFormat

    return PairFileFormat(args.file_format, args.text_a_field, args.text_b_field, args.label_field)


def _evaluate(args):
    from .data.files import read_pair_file, read_retrieval_files
    from .evaluation import evaluate_pairs, retrieval_by
    from .inference.matchers import load_matcher
    from .inference.model_dir import read_spec

    beir = [args.queries, args.corpus, args.qrels]
    if any(beir) and not all(beir):
        raise CosentError("--queries, --corpus and --qrels go together: pass all three")
    if not args.file and not any(beir):
        raise CosentError("nothing to evaluate: pass a pair FILE, or --queries, --corpus and --qrels")
    inputs = [args.model_dir, args.file, *beir]
    outputs = [args.output + ".json", args.output + ".tsv"] if args.output else []
    for path in outputs:
        check_output_file(path, inputs, output_kinds())
    spec = read_spec(args.model_dir)
    if (args.retrieval or any(beir)) and spec.kind != "feature":
        raise CosentError(
            f"{args.model_dir}: retrieval metrics need a feature model (sentence vectors), this one is {spec.kind}"
        )
    matcher = load_matcher(args.model_dir, args.precision)
    metrics, lines = {"model_dir": args.model_dir}, None
    if args.file:
        pairs = read_pair_file(args.file, _file_format(args), args.strict)
        pair_metrics, scores, predictions = evaluate_pairs(
            matcher, pairs, args.threshold, args.retrieval, args.batch_size
        )
        metrics.update(file=args.file, **pair_metrics)
        if pairs.label_kind == "binary" and predictions is None:
            print("no accuracy: the model folder has no tuned threshold; pass --threshold", file=sys.stderr)
        columns = [pairs.texts_a, pairs.texts_b, [f"{y:g}" for y in pairs.labels], [f"{x:.6f}" for x in scores]]
        if predictions is not None:
            columns.append([str(p) for p in predictions])
        lines = ["\t".join(row) for row in zip(*columns)]
    if any(beir):
        queries, corpus, relevant = read_retrieval_files(*beir)
        metrics["beir"] = retrieval_by(lambda texts: matcher.encode(texts, args.batch_size), queries, corpus, relevant)
    print(json_text(metrics, indent=2, ensure_ascii=False))
    if args.output:
        write_json(outputs[0], metrics)
        if lines is not None:
            write_text(outputs[1], "".join(line + "\n" for line in lines))


def _add_file_format_options(sub):
    from .data.files import FILE_FORMATS

    sub.add_argument(
        "--format",
        dest="file_format",
        choices=FILE_FORMATS,
        help="default: from the extension (.tsv .txt .data: TSV; .csv: CSV; .jsonl .json: JSONL)",
    )
    sub.add_argument("--text-a-field", default="sentence1", help="CSV column / JSON field of the first text")
    sub.add_argument("--text-b-field", default="sentence2", help="CSV column / JSON field of the second text")
    sub.add_argument(
        "--label-field", default="label", help="CSV column / JSON field of the label (gold_label for CNSD)"
    )


def argument_parser(command_name: str = None):
    """The ``cosent-tf`` parser. Given the command about to run, the others' options are left
    out: ``train``'s need TensorFlow to list, and ``cosent-tf --help`` should not wait for it."""
    parser = argparse.ArgumentParser(
        prog="cosent-tf",
        description="Train on your own pair files, and evaluate and use a trained model folder "
        "(a training run's OUTPUT_DIR/model).",
    )
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name, handler, help_text, parent=commands):
        sub = parent.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    def inference_options(sub):
        sub.add_argument("--batch-size", type=_number(int, 1), default=64)
        sub.add_argument("--precision", default="float32", choices=["float32", "bf16"])
        sub.add_argument("--strict", action="store_true", help="an empty line or text is an error, not a warning")

    sub = command(
        "train",
        _train,
        "Train a matcher on your own pair files (TSV, CSV or JSONL; labels 0/1, graded scores or NLI words) "
        "with the engine of the benchmark scripts: the same outputs, resume and checks.",
    )
    sub.add_argument("--train", dest="train_file", required=True, metavar="FILE")
    sub.add_argument(
        "--valid",
        dest="valid_file",
        metavar="FILE",
        help="default: a seeded --valid-fraction of --train, held out (the run says so)",
    )
    sub.add_argument(
        "--test",
        dest="test_file",
        metavar="FILE",
        help="default: none, and the final metrics are the valid ones (the run says so)",
    )
    sub.add_argument("--valid-fraction", type=_number(float, 0, 1, low_included=False), default=0.1, metavar="FRACTION")
    sub.add_argument("--name", help="the task's name in outputs (default: the train file's name)")
    sub.add_argument(
        "--kind",
        default="feature",
        choices=["feature", "interaction"],
        help="a sentence encoder scored by cosine, or a cross-encoder",
    )
    sub.add_argument(
        "--loss",
        default="cosent",
        help="feature: cosent, sbert, mse, contrastive; interaction: cosent, ce (default cosent)",
    )
    sub.add_argument(
        "--allow-single-label",
        action="store_true",
        help="train even if every train pair has the same label (nothing to rank)",
    )
    _add_file_format_options(sub)
    if command_name in (None, "train"):
        _add_run_options(sub)

    sub = command(
        "evaluate",
        _evaluate,
        "Spearman, Pearson and (binary labels) accuracy at the model's tuned threshold on a pair file; "
        "--retrieval adds Recall@1/5/10, MRR@10 and nDCG@10 for a feature model.",
    )
    sub.add_argument("model_dir")
    sub.add_argument("file", nargs="?", help="pair file (TSV, CSV or JSONL, as for train)")
    sub.add_argument(
        "--threshold", type=_finite, help="for accuracy (default: the model folder's tuned one)", metavar="SCORE"
    )
    sub.add_argument(
        "--retrieval",
        action="store_true",
        help="rank, for each first text with a positive pair, every distinct second text",
    )
    sub.add_argument("--queries", help="BEIR/MTEB-layout queries.jsonl (with --corpus and --qrels)")
    sub.add_argument("--corpus", help="BEIR/MTEB-layout corpus.jsonl")
    sub.add_argument("--qrels", help="BEIR/MTEB-layout qrels TSV (query-id, corpus-id, score)")
    sub.add_argument(
        "--output",
        metavar="PREFIX",
        help="write PREFIX.json (the metrics) and PREFIX.tsv (each pair with its label, score and 0/1 prediction)",
    )
    _add_file_format_options(sub)
    inference_options(sub)

    sub = command("encode", _encode, "Embed a text file (one sentence a line) into an .npy matrix.")
    sub.add_argument("model_dir")
    sub.add_argument("texts", help="UTF-8 text file, one sentence a line (row i of the output is line i)")
    sub.add_argument("output", help=".npy file to write (float32, one row per line)")
    sub.add_argument("--no-normalize", action="store_true", help="keep raw vectors instead of unit length")
    inference_options(sub)

    sub = command(
        "similarity",
        _similarity,
        "Score the pairs of a TSV file (text_a<TAB>text_b[<TAB>...]); writes each line with its score "
        "(cosine, or the interaction model's score) and, when the model has a tuned threshold, 0/1.",
    )
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
    sub = command(
        "query",
        _search_query,
        "Find the top-k corpus texts of each query line by exact cosine; writes JSON lines.",
        actions,
    )
    sub.add_argument("index_dir")
    sub.add_argument("queries", help="UTF-8 text file, one query a line")
    sub.add_argument("output", help=".jsonl file: one {query, hits: [{index, score, text}]} per query")
    sub.add_argument("--model-dir", help="model folder (default: the one that built the index)")
    sub.add_argument("--top-k", type=_number(int, 1), default=10)
    inference_options(sub)

    sub = command(
        "export",
        _export,
        "Write a TensorFlow SavedModel whose serving signature takes raw UTF-8 strings "
        "(tokenisation runs in the graph; serving needs tensorflow and tensorflow-text), or with --format hf "
        "a Hugging Face folder: sentence-transformers for a feature model, BertForSequenceClassification "
        "for an interaction model trained with --head pooler.",
    )
    sub.add_argument("model_dir", help="a cosent-tf model folder (or a Hugging Face one)")
    sub.add_argument("output_dir", help="a new or empty folder (or an earlier export, with --overwrite)")
    sub.add_argument(
        "--format",
        default="savedmodel",
        choices=["savedmodel", "hf"],
        help="savedmodel (default) or hf (model.safetensors, tokenizer and sentence-transformers files)",
    )
    sub.add_argument("--overwrite", action="store_true", help="replace OUTPUT_DIR if it holds an earlier export")
    sub.add_argument(
        "--precision",
        default="float32",
        choices=["float32", "bf16"],
        help="bf16: serve in bfloat16 with bfloat16 weights, float32 outputs (fast on CPUs with "
        "AVX512-BF16 or AMX, and on GPUs)",
    )
    return parser


# Commands that only run models forward: their processes never change a model's weights.
INFERENCE_COMMANDS = ("evaluate", "encode", "similarity", "search")


def keeps_weights_in_amx_layout(args, cpu_flags, environ) -> bool:
    """Whether a ``cosent-tf`` process that runs ``args`` should set ``TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1``:
    an inference command in bf16, on a CPU with AMX, where the user has not set the variable
    either way. oneDNN then keeps each Dense layer's weights in the layout its AMX kernel needs
    (bf16 encoding 1.05-1.35× faster on a Xeon, docs/performance.md item 13); elsewhere, and in
    float32, it gained nothing that was measured consistently."""
    return (
        args.command in INFERENCE_COMMANDS
        and args.precision == "bf16"
        and "amx_bf16" in cpu_flags
        and environ.get(environment.FROZEN_WEIGHTS_VARIABLE) is None
    )


def main(argv=None, *, whole_process=False) -> int:
    """The command line on ``argv`` (default: ``sys.argv[1:]``). ``whole_process``: this call is
    all the process does (the ``cosent-tf`` script), so it may set up TensorFlow for the command
    alone (:func:`keeps_weights_in_amx_layout`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    verbose = "--verbose" in argv  # train's options import TensorFlow while the parser is built
    try:
        with errors_reported(verbose), tensorflow_start_up_shown(verbose):
            args = argument_parser(next((a for a in argv if not a.startswith("-")), "")).parse_args(argv)
            with console_logging():
                if whole_process and keeps_weights_in_amx_layout(args, environment.cpu_flags(), os.environ):
                    # Not put back: TensorFlow reads it once, at its first fused matmul, and the
                    # training guard (backend.weights_assumed_frozen) must go on seeing it.
                    os.environ[environment.FROZEN_WEIGHTS_VARIABLE] = "1"
                    logging.getLogger("cosent_tf").info(
                        "AMX CPU, bf16: oneDNN keeps each Dense layer's weights in its AMX layout "
                        "(%s=1; set it to 0 to turn this off)",
                        environment.FROZEN_WEIGHTS_VARIABLE,
                    )
                args.handler(args)
    except KeyboardInterrupt:  # outputs are written atomically: nothing half-done is left
        raise SystemExit("stopped: SIGINT received; nothing was written") from None
    return 0


def console_main() -> int:
    """The ``cosent-tf`` console script: :func:`main` as the whole of its process."""
    return main(whole_process=True)


# The training scripts (scripts/*.py): options of cosent_tf.training.engine.RunConfig.


def _finite(text):
    """An argparse type: a finite float (``nan`` and ``inf`` parse as floats, but mean nothing here)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def _number(number_type, low, high=None, low_included=True):
    """An argparse type: ``number_type`` (int or float) in [low, high] (or (low, high]); errors say which."""

    def parse(text):
        try:
            value = number_type(text)
        except ValueError:
            what = "an integer" if number_type is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        above = value >= low if low_included else value > low
        if not (above and (high is None or value <= high) and math.isfinite(value)):
            limit = f"{'at least' if low_included else 'above'} {low}" + (
                f" and at most {high}" if high is not None else ""
            )
            raise argparse.ArgumentTypeError(f"must be {limit}, got {text}")
        return value

    return parse


def _add_run_options(parser):
    """The engine's options (model, batching, optimisation, output), common to every way of training."""
    from .backend import ARCHITECTURES, PRECISIONS
    from .layers import POOLING_MODES
    from .models.builders import HEAD_INPUTS
    from .optimizers import SCHEDULES
    from .training.distribute import STRATEGIES
    from .training.engine import RunConfig
    from .training.recipes import RECIPES

    parser.add_argument(
        "--config", help="BERT config json (default: the checkpoint's, else a small random L4/H312 BERT)"
    )
    parser.add_argument(
        "--checkpoint",
        help="a Google-format checkpoint folder or prefix, a Hugging Face model folder (model.safetensors or "
        "pytorch_model.bin), or a sentence-transformers folder, whose pooling is then the default",
    )
    parser.add_argument("--vocab", help="vocab.txt (default: the checkpoint folder's, else the shared one)")
    parser.add_argument(
        "--architecture",
        "--model",
        dest="architecture",
        default=RunConfig.architecture,
        choices=sorted(ARCHITECTURES),
        help="the transformer family (--model is its old name)",
    )
    parser.add_argument(
        "--pooling",
        choices=POOLING_MODES,
        help="feature models (default: a sentence-transformers checkpoint's, else the recipe's: cls, paper last-avg)",
    )
    parser.add_argument(
        "--head",
        dest="head_input",
        choices=HEAD_INPUTS,
        help="what an interaction model's head reads: cls, the [CLS] hidden state (the original experiments), or "
        "pooler, BERT's pooler (dense + tanh on [CLS]) as Hugging Face's BertForSequenceClassification, which "
        "`cosent-tf export --format hf` needs (default: pooler for such a checkpoint, else cls)",
    )
    defaults = "default: the task's, as in the original scripts (cosent_tf.data.tasks)"
    parser.add_argument(
        "--maxlen",
        type=_number(int, 3),
        help="tokens per text (interaction: per pair), [CLS] and [SEP] included; longer ones are cut, and the "
        "run reports how many and the longest; time and memory grow with it (attention with its square); " + defaults,
    )
    parser.add_argument("--batch-size", type=_number(int, 1), help="pairs per batch; " + defaults)
    parser.add_argument("--epochs", type=_number(int, 1), help=defaults)
    parser.add_argument("--steps-per-epoch", type=_number(int, 1), help="default: one pass over train (NLI 5000)")
    parser.add_argument(
        "--recipe",
        default=RunConfig.recipe,
        choices=list(RECIPES),
        help="; ".join(f"{recipe.name}: {recipe.title}" for recipe in RECIPES.values()).replace("%", "%%")
        + ". Each of its settings is overridden by its own option",
    )
    parser.add_argument("--lr", type=_number(float, 0, low_included=False), help="peak learning rate (default: 2e-5)")
    parser.add_argument(
        "--weight-decay",
        type=_number(float, 0),
        help="decoupled (AdamW-style) weight decay of every kernel; embeddings, layer norms and biases are "
        "not decayed (default: 0, paper recipe 0.01)",
    )
    parser.add_argument(
        "--warmup",
        type=_number(float, 0, 1),
        metavar="FRACTION",
        help="linear learning-rate warm-up over this fraction of all steps (default: 0, paper recipe 0.1)",
    )
    parser.add_argument(
        "--schedule",
        choices=SCHEDULES,
        help="after the warm-up: a constant learning rate, or linear decay to 0 at the last step "
        "(default: constant, paper recipe linear)",
    )
    parser.add_argument(
        "--scale", type=_number(float, 0, low_included=False), default=RunConfig.scale, help="CoSENT's lambda"
    )
    parser.add_argument("--epsilon", type=_finite, default=RunConfig.epsilon, help="contrastive threshold")
    parser.add_argument("--seed", type=int, default=RunConfig.seed)
    parser.add_argument("--max-train-pairs", type=_number(int, 1), help="train on a seeded subsample")
    parser.add_argument("--max-eval-pairs", type=_number(int, 1), help="validate and test on seeded subsamples")
    parser.add_argument(
        "--eval-every",
        type=_number(int, 0),
        default=0,
        metavar="STEPS",
        help="also validate every STEPS steps (for convergence curves)",
    )
    parser.add_argument("--no-group-by-length", dest="group_by_length", action="store_false")
    parser.add_argument(
        "--backup-every",
        type=_number(int, 0),
        default=0,
        metavar="STEPS",
        help="also save the training state every STEPS steps (it is always saved at epoch ends and on SIGTERM/SIGINT)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="any line the readers would skip or flag (wrong field count, empty text, repeated "
        "pair, NLI label '-') is an error naming file and line, instead of a warning",
    )
    parser.add_argument(
        "--precision",
        default=RunConfig.precision,
        choices=list(PRECISIONS),
        help="bf16: mixed bfloat16 (fast on CPUs with AVX512-BF16 or AMX, and on recent GPUs); fp16: mixed "
        "float16 with dynamic loss scaling, for GPUs without bfloat16 (T4, V100; slow on a CPU)",
    )
    parser.add_argument(
        "--strategy",
        default=RunConfig.strategy,
        choices=STRATEGIES,
        help="train on one device (default), on every device of this machine (mirrored), or across machines "
        "(multi-worker, the cluster in TF_CONFIG); --batch-size stays the global number of pairs",
    )
    parser.add_argument(
        "--worker-timeout",
        type=_number(float, 0, low_included=False),
        default=RunConfig.worker_timeout,
        metavar="SECONDS",
        help="--strategy multi-worker: how long a worker waits for the others to start before it stops with an "
        "error naming them (default: %(default)g)",
    )
    parser.add_argument(
        "--micro-batch-size",
        type=_number(int, 1),
        metavar="PAIRS",
        help="compute each batch's gradient PAIRS pairs at a time (gradient cache): the exact gradient of the "
        "whole --batch-size batch in the memory of PAIRS pairs, for about one more forward pass",
    )
    parser.add_argument(
        "--per-replica-loss",
        dest="global_batch_loss",
        action="store_false",
        help="under a strategy with several replicas, CoSENT ranks each replica's slice of the batch alone "
        "instead of the global batch (for comparison)",
    )
    parser.add_argument("--output-dir", help="a new or empty folder, or this run's own folder to resume it")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="train over a finished run (or one with other settings) in --output-dir, removing its outputs first",
    )


def training_parser(kind: str = "feature", loss: str = "cosent", task: str = None) -> argparse.ArgumentParser:
    """Options of a training script for ``kind`` models; ``task`` fixed, or the first argument."""
    from .data.tasks import MATCHING_TASKS
    from .losses import loss_names
    from .training.engine import RunConfig

    parser = argparse.ArgumentParser(
        description=f"Train a {kind} matcher ({loss}) and report Spearman on valid and test."
    )
    if task is None:
        parser.add_argument("task", choices=MATCHING_TASKS)
    parser.add_argument("--loss", default=loss, choices=loss_names(kind))
    parser.add_argument(
        "--data-dir",
        default=RunConfig.data_dir,
        help="shared data root (with senteval_cn/, cnsd/, vocab/) or a senteval_cn folder",
    )
    parser.add_argument(
        "--train-from-valid",
        type=_number(float, 0, 1, low_included=False),
        metavar="FRACTION",
        help="when the task has no train split, train on this seeded part of valid "
        "(results are then not comparable with published numbers)",
    )
    _add_run_options(parser)
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    return parser


def _run_training(cfg, overwrite):
    """Train ``cfg``, print the final metrics as JSON, the only line on stdout (the log and
    Keras's progress go to stderr); signals become an exit status. The caller shows the log
    (:func:`console_logging`) and reports errors (:func:`errors_reported`)."""
    from .training.engine import train

    try:
        with contextlib.redirect_stdout(sys.stderr):  # Keras's epoch lines and progress bar too
            metrics = train(cfg, overwrite)
    except TrainingInterrupted as stopped:
        print(f"stopped: {stopped}", file=sys.stderr, flush=True)
        raise SystemExit(128 + stopped.signal_number) from None
    except KeyboardInterrupt:  # outside fit (reading data, testing): what is on disk is complete
        print("stopped: SIGINT received; run the same command again to carry on", file=sys.stderr, flush=True)
        raise SystemExit(128 + signal.SIGINT) from None
    if "worker" in metrics:  # a multi-worker run's other worker: the chief has the results
        print(json_text(metrics))
    else:
        print(json_text({k: metrics[k] for k in ("valid", "test", "best_epoch", "wall_seconds")}))
    return metrics


def train_main(argv=None, kind: str = "feature", loss: str = "cosent", task: str = None) -> dict:
    """Parse a training script's command line, train, and print the final metrics as JSON."""
    from .training.engine import RunConfig

    argv = sys.argv[1:] if argv is None else list(argv)
    verbose = "--verbose" in argv  # the parser itself imports TensorFlow
    with errors_reported(verbose), tensorflow_start_up_shown(verbose):
        args = vars(training_parser(kind, loss, task).parse_args(argv))
        if task is not None:
            args["task"] = task
        overwrite, _ = args.pop("overwrite"), args.pop("verbose")
        with console_logging():
            return _run_training(RunConfig(kind=kind, **args), overwrite)


def _check_report_folder(output_dir, runs):
    """The report's folder may not be, or lie inside, one of the runs it reads or any folder this
    tool writes (a run, a model folder): its files there would make a run look like someone else's."""
    for run in runs:
        if is_inside(output_dir, run):
            raise ConfigError(
                f"{output_dir}: lies inside the run {run}, an input of the report; nothing was written: "
                "choose another --output-dir"
            )
    check_not_in_tool_folder(output_dir, output_kinds(), start=output_dir)
    check_can_write_in(output_dir, output_dir)


def report_main(argv=None) -> None:
    """``scripts/report.py``: tables and plots comparing finished runs."""
    from .experiments.report import write_report

    parser = argparse.ArgumentParser(description="Tables and plots comparing finished runs.")
    parser.add_argument("runs", nargs="+", help="run folders (each with metrics.json)")
    parser.add_argument("--output-dir", default="docs/results")
    parser.add_argument("--preface", default="", help="text placed above the tables")
    parser.add_argument("--verbose", action="store_true", help="show the traceback of an error")
    args = parser.parse_args(argv)
    with errors_reported(args.verbose):
        _check_report_folder(args.output_dir, args.runs)
        for path in write_report(args.runs, args.output_dir, args.preface):
            print(path)


if __name__ == "__main__":
    sys.exit(main())
