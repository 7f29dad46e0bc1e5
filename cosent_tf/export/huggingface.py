"""Export a model folder as a Hugging Face folder: a sentence-transformers model (feature models)
or a ``BertForSequenceClassification`` (interaction models scoring through BERT's pooler), with
its tokenizer files, a model card and this tool's export record (:mod:`.savedmodel`).

A model folder's match decision (``decision.json``, :mod:`cosent_tf.calibration`) goes with it,
stamped for the exported weights, so that cosent-tf reading the export as a model folder takes it;
the model card then says what it was fitted on, its thresholds and calibration, and how to apply it
with NumPy and sentence-transformers alone. Without a decision the card has no such section.

A feature model exported at a width (``dim``) is the same folder with a Dense module between its
Pooling and Normalize that keeps the first ``dim`` dimensions (``2_Dense``, an identity slice;
Normalize moves to ``3_Normalize``): ``SentenceTransformer(folder).encode`` gives the vectors
``SentenceEncoder.encode(texts, dim=dim)`` gives. It carries no match decision (one fitted on the
full vectors' cosines does not hold for the cut ones); the card's "Width" section says so.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Optional

import numpy as np

from .. import huggingface
from ..calibration import MatchDecision, format_threshold, write_decision
from ..errors import ConfigError
from ..exports import HF_FOLDER
from ..io import atomic_directory
from ..models.adapter import model_arrays
from ..models.checkpoint_files import HEAD_SCOPE, checkpoint_files, read_config
from ..models.kinds import FEATURE, INTERACTION, head_layer_name
from ..models.spec import ModelSpec, read_model_decision, read_spec
from .engine_model import load_engine_model, model_width
from .savedmodel import check_export_folder, decision_at_width, export_width, write_export_record

# Architectures whose weights and tokenizer are Hugging Face's BertModel and BertTokenizer.
HF_ARCHITECTURES = ("bert", "roberta")


def export_hf(model_dir: str, out_dir: str, overwrite: bool = False, dim: Optional[int] = None) -> str:
    """Write ``out_dir`` (atomically) as a Hugging Face folder of the model folder ``model_dir``.

    A feature model becomes a sentence-transformers folder (``BertModel`` weights as
    ``model.safetensors``, the tokenizer, ``modules.json`` with its pooling and Normalize) that
    ``SentenceTransformer(out_dir)`` loads and encodes as :class:`cosent_tf.SentenceEncoder`
    does. An interaction model trained with ``--head pooler`` becomes a
    ``BertForSequenceClassification`` (num_labels 1 for a score, 2 for the softmax head) that
    ``AutoModelForSequenceClassification`` and sentence-transformers' ``CrossEncoder`` load.
    The folder also holds :data:`~cosent_tf.exports.EXPORT_RECORD`, which transformers
    and sentence-transformers do not read, and the model folder's match decision, if it has one
    (:func:`~cosent_tf.models.spec.read_model_decision`): ``decision.json`` stamped with the
    fingerprint of the exported weights, and a "Match decision" section in ``README.md`` with the
    few lines of Python that apply it without cosent-tf.

    Args:
        model_dir: a model folder written by training (or ``save_model_dir``).
        out_dir: the folder to write; an existing one must be empty, or this tool's export and
            ``overwrite`` true (:func:`~cosent_tf.export.savedmodel.check_export_folder`).
        overwrite: replace an earlier export in ``out_dir``.
        dim: a feature model's vectors cut to their first ``dim`` dimensions and renormalised
            (a Dense slice before Normalize; checked by
            :func:`~cosent_tf.export.savedmodel.export_width`); the export then carries no match
            decision. None (or the model's width): the full vectors.

    Returns:
        What was written: ``"sentence-transformers"`` or ``"sequence-classification"``.

    Raises:
        ConfigError: the model cannot be expressed as a Hugging Face BERT folder (another
            architecture, a word-level vocabulary, a pooling sentence-transformers lacks, an
            interaction head that does not read BERT's pooler), its ``decision.json`` is malformed
            or was fitted for another model, ``dim`` is above the model's width or given for an
            interaction model, or ``out_dir`` may not be written. Nothing is written then.

    Example:
        >>> export_hf("runs/bq-cosent/model", "exports/bq-cosent-hf")
        'sentence-transformers'
        >>> from sentence_transformers import SentenceTransformer
        >>> vectors = SentenceTransformer("exports/bq-cosent-hf").encode(["花呗如何还钱"])
        >>> export_hf("runs/bq-cosent/model", "exports/bq-cosent-hf-128", dim=128)
        'sentence-transformers'
        >>> SentenceTransformer("exports/bq-cosent-hf-128").encode(["花呗如何还钱"]).shape
        (1, 128)
    """
    check_export_folder(out_dir, HF_FOLDER, overwrite, model_dir)
    # a decision that cannot be used (fitted for other weights, edited) is refused before the model loads
    described = read_spec(model_dir)
    decision = read_model_decision(model_dir, described.kind, described.threshold)
    spec, model, tokenizer = load_engine_model(model_dir)
    problem = hf_problem(spec)
    if problem is not None:
        also = "" if spec.word_level else " (or as ONNX: --format onnx)"  # ONNX carries WordPiece files too
        raise ConfigError(f"{model_dir}: {problem}; export it as a SavedModel{also}")
    dim = export_width(spec, model, dim, model_dir)
    decision = decision_at_width(decision, dim, model_dir)
    with atomic_directory(out_dir, HF_FOLDER, overwrite, inputs=[model_dir]) as tmp:
        write_hf_files(tmp, model_dir, spec, model, tokenizer, decision, dim=dim)
        write_export_record(tmp, HF_FORMATS[spec.kind].written, model_dir, spec, dim=dim)
    return HF_FORMATS[spec.kind].written


def hf_problem(spec: ModelSpec) -> Optional[str]:
    """Why the model ``spec`` describes cannot be written as a Hugging Face folder; None when it can."""
    if spec.architecture not in HF_ARCHITECTURES or spec.word_level:
        return (
            f"a {spec.architecture} model{' with a word-level vocabulary' if spec.word_level else ''} cannot be "
            f"written as a Hugging Face BERT folder (only {', '.join(HF_ARCHITECTURES)} with a character vocabulary)"
        )
    return HF_FORMATS[spec.kind].problem(spec)


def write_hf_files(
    folder: str,
    model_dir: str,
    spec: ModelSpec,
    model: Any,
    tokenizer: Any,
    decision: Optional[MatchDecision],
    card_sections: tuple[str, ...] = (),
    dim: Optional[int] = None,
) -> None:
    """Write the Hugging Face folder of a loaded model into ``folder`` (a temporary folder that
    becomes the export): weights and config, tokenizer, the decision stamped for these weights and the
    model card with ``card_sections`` appended; a feature model's vectors cut to ``dim`` (checked by
    the caller, :func:`~cosent_tf.export.savedmodel.export_width`, which leaves no decision at a
    width). The model must pass :func:`hf_problem`."""
    hf_format = HF_FORMATS[spec.kind]
    config = read_config(checkpoint_files(model_dir)[0])
    arrays = model_arrays(model, spec, config)  # an interaction head's too, as cosent/<head layer>
    hf_format.write(folder, spec, model, config, arrays, dim)
    huggingface.write_tokenizer(folder, list(tokenizer.token_dict), spec.do_lower_case, spec.maxlen)
    if decision is not None:
        write_decision(folder, decision)  # after the weights: it is stamped with theirs
    card = _model_card(spec, hf_format, model_dir, decision, dim, model_width(model))
    with open(os.path.join(folder, "README.md"), "w", encoding="utf-8") as f:
        f.write("\n".join([card, *card_sections]))


def _sentence_transformers_pooling_problem(spec: ModelSpec) -> Optional[str]:
    if spec.pooling not in huggingface.ST_POOLING.values():
        return (
            f"pooling {spec.pooling!r} cannot be expressed in sentence-transformers, which pools with "
            f"{', '.join(huggingface.ST_POOLING)} ({', '.join(huggingface.ST_POOLING.values())} here)"
        )
    return None


def _write_sentence_transformers(
    folder: str,
    spec: ModelSpec,
    model: Any,
    config: dict[str, Any],
    arrays: dict[str, np.ndarray],
    dim: Optional[int] = None,
) -> None:
    if "bert/pooler/dense/kernel" not in arrays:
        # BertModel always has a pooler, which sentence-transformers' pooling never reads: zeros
        # keep transformers from reporting it missing at every load.
        hidden = config["hidden_size"]
        arrays["bert/pooler/dense/kernel"] = np.zeros((hidden, hidden), np.float32)
        arrays["bert/pooler/dense/bias"] = np.zeros((hidden,), np.float32)
    weights = huggingface.hf_weights(arrays, config["num_hidden_layers"])
    huggingface.write_hf_folder(folder, weights, huggingface.hf_config(config))
    huggingface.write_sentence_transformers_modules(
        folder, spec.pooling, config["hidden_size"], spec.maxlen, spec.do_lower_case, dim
    )


def _head_problem(spec: ModelSpec) -> Optional[str]:
    if not (spec.head_input == "pooler" and spec.pair_segments):
        return (
            "this interaction model's head reads the [CLS] hidden state directly (as the original experiments), "
            "which BertForSequenceClassification cannot express: it scores through BERT's pooler (train with "
            "--head pooler for a Hugging Face folder)"
        )
    return None


def _write_sequence_classification(
    folder: str,
    spec: ModelSpec,
    model: Any,
    config: dict[str, Any],
    arrays: dict[str, np.ndarray],
    dim: Optional[int] = None,
) -> None:
    assert spec.head is not None  # an interaction model's spec names its head (ModelSpec checks it)
    assert dim is None  # a width is refused for an interaction model (export_width)
    scope = HEAD_SCOPE + head_layer_name(spec.head)  # the head's arrays: model_arrays gives them so
    weights = huggingface.hf_weights(arrays, config["num_hidden_layers"], scope, prefix="bert.")
    labels = {value: key for key, value in huggingface.CLASSIFIER_HEADS.items()}[spec.head]
    hf_config = huggingface.hf_config(config, ("BertForSequenceClassification",), num_labels=labels)
    huggingface.write_hf_folder(folder, weights, hf_config)


@dataclasses.dataclass(frozen=True)
class _HfFormat:
    """What a model of one kind becomes in Hugging Face's terms."""

    written: str  # export_hf's answer and the export record's "export"
    problem: Callable[[ModelSpec], Optional[str]]  # why a model cannot be expressed so, or None
    # Writes the weights (the model's arrays, by checkpoint name) and config.json into the folder, and
    # for a feature model the modules that cut its vectors to a width (the last argument; None: full).
    write: Callable[[str, ModelSpec, Any, dict[str, Any], dict[str, np.ndarray], Optional[int]], None]
    usage: str  # the model card's example


# The Hugging Face folder of each model kind (cosent_tf.models.kinds): a feature model becomes a
# sentence-transformers model, an interaction model a BertForSequenceClassification.
HF_FORMATS = {
    FEATURE.name: _HfFormat(
        "sentence-transformers",
        _sentence_transformers_pooling_problem,
        _write_sentence_transformers,
        "from sentence_transformers import SentenceTransformer\n"
        "model = SentenceTransformer('THIS_FOLDER')\n"
        "vectors = model.encode(['第一句', '第二句'])",
    ),
    INTERACTION.name: _HfFormat(
        "sequence-classification",
        _head_problem,
        _write_sequence_classification,
        "from sentence_transformers import CrossEncoder\n"
        "model = CrossEncoder('THIS_FOLDER')\n"
        "scores = model.predict([('第一句', '第二句')])",
    ),
}


def _model_card(
    spec: ModelSpec,
    hf_format: _HfFormat,
    model_dir: str,
    decision: Optional[MatchDecision],
    dim: Optional[int] = None,
    width: Optional[int] = None,
) -> str:
    """The README.md of an export: where it came from, how to load it, its width (a feature
    model's, of ``width`` dimensions in full) and its match decision."""
    source = json.dumps(spec.source, ensure_ascii=False, sort_keys=True)
    card = (
        f"# {hf_format.written} model exported by cosent-tf\n\n"
        f"Exported from the cosent-tf model folder `{os.path.abspath(model_dir)}` "
        f"({spec.kind} model, {spec.pooling or spec.head}, maxlen {spec.maxlen}).\n\n"
        f"Training record: `{source}`\n\n```python\n{hf_format.usage}\n```\n"
    )
    if spec.kind == FEATURE.name and width is not None and (dim is not None or spec.matryoshka_dims):
        card += "\n" + width_section(spec, width, dim)
    return card if decision is None else card + "\n" + decision_section(spec, decision)


def width_section(spec: ModelSpec, width: int, dim: Optional[int]) -> str:
    """The model card's "Width" section of a feature model whose full vectors have ``width``
    dimensions: for an export at width ``dim``, how the folder cuts them, whether the model was
    trained for that width, and why the export carries no match decision; at full width
    (``dim`` None), the widths a Matryoshka-trained model may be cut to with ``truncate_dim``.

    Args:
        spec: the exported model's description (``matryoshka_dims``: the widths it was trained for).
        width: the model's full width.
        dim: the export's width, or None.

    Returns:
        Markdown, from the section's heading on.

    Example:
        >>> print(width_section(ModelSpec("feature", pooling="cls", matryoshka_dims=[312, 128]), 312, 128))
        ## Width
        ...
    """
    trained = spec.matryoshka_dims
    trained_text = (
        f"trained with Matryoshka losses at the widths {', '.join(map(str, trained))} (`--matryoshka-dims`)"
        if trained
        else f"trained at its full width {width} only"
    )
    if dim is None:
        some = min(trained or [width])
        return (
            "## Width\n\n"
            f"The vectors have {width} dimensions; the model was {trained_text}. Cut them to one of those widths "
            f"with sentence-transformers' `truncate_dim`, renormalising, as `cosent-tf encode --dim` does:\n\n"
            "```python\n"
            f"model = SentenceTransformer('THIS_FOLDER', truncate_dim={some})\n"
            "vectors = model.encode(['第一句', '第二句'], normalize_embeddings=True)\n"
            "```\n"
        )
    if not trained:
        fit = f"The model was {trained_text}, so its cut vectors lose more of their quality than a Matryoshka model's."
    elif dim in trained:
        fit = f"The model was {trained_text}: {dim} is one of them."
    else:
        fit = f"The model was {trained_text}: {dim} is not one of them, so its cut vectors lose more of their quality."
    return (
        "## Width\n\n"
        f"The vectors are the first {dim} of the model's {width} dimensions, renormalised to unit length: "
        f"the modules are Transformer, Pooling, Dense (`2_Dense`: the first {dim} rows of the identity, a zero "
        "bias, no activation) and Normalize, so `SentenceTransformer('THIS_FOLDER').encode(...)` gives them with "
        f"no argument. An export at full width gives the same vectors with `truncate_dim={dim}` and "
        "`encode(..., normalize_embeddings=True)`.\n\n"
        f"{fit}\n\n"
        "No match decision comes with this export: thresholds and probabilities fitted on the cosines of the "
        f"full vectors do not hold for vectors cut to {dim} dimensions. Calibrate the cut vectors' scores on "
        f"labelled pairs (`cosent-tf evaluate MODEL_DIR LABELLED_FILE --dim {dim}` gives their best threshold).\n"
    )


# What the model card calls each rule of cosent_tf.calibration.RULES.
RULE_NAMES = {"accuracy": "accuracy", "f1": "F1"}
# The model card's pairs, which the decision's example scores.
EXAMPLE_PAIRS = [("花呗如何还钱", "花呗怎么还款"), ("今天天气怎么样", "我想开通借呗")]


def _score_lines(spec: ModelSpec) -> tuple[str, list[str], str]:
    """How the model card's example scores pairs as cosent-tf does: (what the score is, the lines
    that load the model and compute float64 ``scores`` of ``pairs``, the import they need)."""
    if spec.kind == FEATURE.name:
        return (
            "the cosine of the two texts' vectors",
            [
                "model = SentenceTransformer(folder)",
                "first = model.encode([a for a, _ in pairs])  # unit vectors: the folder normalises them",
                "second = model.encode([b for _, b in pairs])",
                "scores = np.sum(first * second, axis=1).astype(np.float64)  # the cosine, as cosent-tf computes it",
            ],
            "from sentence_transformers import SentenceTransformer",
        )
    load = ["model = CrossEncoder(folder)"]
    if spec.head == "softmax":
        what = "the probability of label 1 under the classifier's softmax (its two labels)"
        load.append("scores = model.predict(pairs, apply_softmax=True)[:, 1].astype(np.float64)  # softmax's label 1")
    else:
        what = "the classifier's one logit (not the sigmoid CrossEncoder.predict applies to it by default)"
        load.append("# the logit itself: predict would apply a sigmoid to a one-label model's output")
        load.append("scores = model.predict(pairs, activation_fn=lambda logits: logits).astype(np.float64)")
    return what, load, "from sentence_transformers import CrossEncoder"


def decision_section(spec: ModelSpec, decision: MatchDecision) -> str:
    """The model card's "Match decision" section: what the export's ``decision.json`` was fitted
    on, its thresholds and maps, and the lines of Python (NumPy, json and sentence-transformers, no
    cosent-tf) that apply it: the score of each pair as cosent-tf computes it, then the probability
    of a match, the match (score above the threshold of the decision's rule) and, for graded labels,
    the expected label.

    Args:
        spec: the exported model's description.
        decision: its decision.

    Returns:
        Markdown, from the section's heading on.

    Example:
        >>> print(decision_section(read_spec("runs/bq-cosent/model"), read_decision("runs/bq-cosent/model")))
        ## Match decision
        ...
    """
    fitted = decision.fitted_on
    what, score_lines, import_line = _score_lines(spec)
    facts = [f"fitted on `{fitted.get('file')}`"]
    if fitted.get("pairs") is not None:
        facts[0] += f": {fitted['pairs']} pairs, {fitted.get('labels', 'binary')} labels"
    if fitted.get("positive_rate") is not None:
        cut = f" (a label above {fitted['cut']:g} is a match)" if fitted.get("cut") is not None else ""
        facts[0] += f", {fitted['positive_rate']:.1%} of them matches{cut}"
    facts.append(f"the score: {what}")
    lines = [
        "import json",
        "",
        "import numpy as np",
        import_line,
        "",
        "folder = 'THIS_FOLDER'",
        "with open(f'{folder}/decision.json', encoding='utf-8') as f:",
        "    decision = json.load(f)",
        f"pairs = {EXAMPLE_PAIRS!r}",
        *score_lines,
    ]
    if decision.thresholds is not None:
        rules = ", ".join(
            f"{format_threshold(value)} for the best {RULE_NAMES.get(rule, rule)}"
            for rule, value in decision.thresholds.items()
        )
        facts.append(
            f"a pair is a match when its score is above the threshold: {rules}; the decision (and `matches` "
            f"below) uses the {RULE_NAMES.get(decision.rule, decision.rule)} one"
        )
    calibration = decision.calibration
    if calibration is not None:
        losses = decision.held_out_log_loss or {}
        chosen = ", ".join(f"{method} {loss:.4f}" for method, loss in sorted(losses.items()))
        chosen = f", chosen by held-out log-loss ({chosen})" if chosen else ""
        if calibration.method == "platt":
            facts.append(
                f"calibration: Platt scaling, P(match) = sigmoid({calibration.slope:.6g} * score "
                f"{'-' if calibration.intercept < 0 else '+'} {abs(calibration.intercept):.6g}){chosen}"
            )
            lines += [
                "platt = decision['calibration']",
                "probabilities = 1 / (1 + np.exp(-(platt['slope'] * scores + platt['intercept'])))",
            ]
        else:
            facts.append(
                f"calibration: isotonic regression, P(match) linear between {len(calibration.scores)} knots "
                f"and flat beyond them{chosen}"
            )
            lines += [
                "isotonic = decision['calibration']",
                "probabilities = np.interp(scores, isotonic['scores'], isotonic['values'])",
            ]
    if decision.thresholds is not None:
        lines.append("matches = scores > decision['thresholds'][decision['rule']]")
    if decision.expected_label is not None:
        low, high = fitted.get("label_range", [0, 1])
        facts.append(f"expected label: an isotonic map from the score onto the labels' scale, {low:g} to {high:g}")
        lines += [
            "graded = decision['expected_label']",
            "expected_labels = np.interp(scores, graded['scores'], graded['values'])  # on the labels' scale",
        ]
    if decision.note:
        facts.append(f"note: {decision.note}")
    return (
        "## Match decision\n\n"
        "`decision.json` in this folder is the match decision cosent-tf fitted for these weights on labelled "
        "pairs. A score is a ranking, not a probability, and its scale differs from model to model: these "
        "thresholds and probabilities hold for this model on data like the data they were fitted on. For "
        "other data, refit them on your own labelled pairs with `cosent-tf calibrate` on the cosent-tf model "
        "folder, and export it again.\n\n"
        + "".join(f"- {fact}\n" for fact in facts)
        + "\nApplied with NumPy and sentence-transformers alone:\n\n```python\n"
        + "\n".join(lines)
        + "\n```\n"
    )
