"""The public API is what the guide's table says: each call written in docs/guide.md's "The
library, piece by piece" names parameters that the real function or class has, positional ones
in their order; and the reader for one's own pair files is a user-level name."""

import importlib
import inspect
import re

import pytest

import cosent_tf
from tests.test_readme import GUIDE

API_TABLE = GUIDE[GUIDE.index("| piece | API |") :].split("\n\n")[0]
# The packages and modules whose names the table may use (`losses.cosent_loss`, `load_matcher(...)`).
PACKAGES = ("models", "huggingface", "data", "training", "inference", "export", "evaluation", "losses")
MODULES = ("layers", "optimizers", "callbacks")
POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def arguments(text):
    """The top-level arguments of a call's argument text: split at commas outside brackets and
    quotes."""
    parts, depth, quote, start = [], 0, None, 0
    for index, character in enumerate(text):
        if quote:
            quote = None if character == quote else quote
        elif character in "\"'":
            quote = character
        elif character in "([{":
            depth += 1
        elif character in ")]}":
            depth -= 1
        elif character == "," and depth == 0:
            parts.append(text[start:index].strip())
            start = index + 1
    parts.append(text[start:].strip())
    return [part for part in parts if part]


def calls(code):
    """(name, argument text) of every call written in a code span, nested ones included."""
    for match in re.finditer(r"([A-Za-z_][\w.]*)\(", code):
        depth, end = 1, match.end()
        while depth and end < len(code):
            depth += {"(": 1, ")": -1}.get(code[end], 0)
            end += 1
        yield match.group(1), code[match.end() : end - 1]


def documented_calls():
    spans = re.findall(r"`([^`]*)`", API_TABLE)
    return [(name, text) for span in spans for name, text in calls(span)]


def public_object(name):
    """What a name of the table is: a public name of cosent_tf or of one of its packages (their
    ``_HOMES``), one defined in one of its Keras namespaces, or ``package.name``."""
    *package, short = name.split(".")
    homes = [f"cosent_tf.{'.'.join(package)}"] if package else ["cosent_tf", *(f"cosent_tf.{p}" for p in PACKAGES)]
    homes += [] if package else [f"cosent_tf.{m}" for m in MODULES]
    for home in homes:
        module = importlib.import_module(home)
        if short in getattr(module, "_HOMES", {}) or short in getattr(module, "__all__", ()):
            return getattr(module, short)
        defined_here = getattr(getattr(module, short, None), "__module__", None) == module.__name__
        if home.split(".")[-1] in MODULES and defined_here and not short.startswith("_"):
            return getattr(module, short)
    raise AssertionError(f"docs/guide.md's API table calls {name}, which no public module of cosent_tf exports")


def test_the_table_writes_calls_of_the_real_functions():
    assert {"build_encoder", "build_interaction_model", "read_pair_file"} <= {name for name, _ in documented_calls()}


@pytest.mark.parametrize("name, text", documented_calls(), ids=[f"{n}({t})" for n, t in documented_calls()])
def test_each_call_in_the_api_table_names_real_parameters_in_order(name, text):
    parameters = inspect.signature(public_object(name)).parameters
    positional = [p for p, parameter in parameters.items() if parameter.kind in POSITIONAL]
    in_order = True  # until a `...` stands for arguments left out
    for index, argument in enumerate(arguments(text)):
        keyword = re.match(r"(\w+)\s*=(?!=)", argument)
        if keyword:
            assert keyword.group(1) in parameters, f"{name}() has no parameter {keyword.group(1)!r}: {list(parameters)}"
        elif argument == "...":
            in_order = False
        elif re.fullmatch(r"\w+", argument) and in_order:
            assert index < len(positional) and positional[index] == argument, (
                f"{name}(): the table's argument {index + 1} is {argument!r}, the function's is "
                f"{positional[index] if index < len(positional) else 'none'!r}"
            )
        elif re.fullmatch(r"\w+", argument):
            assert argument in parameters, f"{name}() has no parameter {argument!r}: {list(parameters)}"


def test_the_reader_of_ones_own_pair_files_is_a_user_level_name(tmp_path):
    from cosent_tf import PairFileFormat, read_pair_file

    assert {"read_pair_file", "PairFileFormat"} <= set(cosent_tf.__all__)
    csv_file = tmp_path / "pairs.csv"
    csv_file.write_text('q1,q2,same\n"花呗, 怎么还",花呗如何还钱,1\n今天天气,明天下雨吗,0\n', encoding="utf-8")
    jsonl_file = tmp_path / "pairs.jsonl"
    jsonl_file.write_text(
        '{"sentence1": "花呗, 怎么还", "sentence2": "花呗如何还钱", "label": 1}\n'
        '{"sentence1": "今天天气", "sentence2": "明天下雨吗", "label": 0}\n',
        encoding="utf-8",
    )
    from_csv = read_pair_file(csv_file, PairFileFormat(text_a_field="q1", text_b_field="q2", label_field="same"))
    from_jsonl = read_pair_file(jsonl_file)
    for pairs in (from_csv, from_jsonl):
        assert list(pairs.texts_a) == ["花呗, 怎么还", "今天天气"]
        assert list(pairs.texts_b) == ["花呗如何还钱", "明天下雨吗"]
        assert list(pairs.labels) == [1, 0]
