import contextlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from cosent_tf import ConfigError, SentenceEncoder, build_encoder
from cosent_tf.backend import TENSORFLOW_STARTUP_LINES, dtype_policy, inference_policy_name, keras, tf
from cosent_tf.models.architectures import TokenDense
from tests.helpers import ONEDNN_ON_ANY_CPU, ROOT, make_model_dir

# A few training steps of a tiny [CLS] encoder: the single-query attention of the last block
# makes matmuls over a size-1 dimension, forward and backward, for every sequence length.
TRAIN_A_FEW_STEPS = """
import json, os, sys, tempfile
import numpy as np
import cosent_tf as ct
from cosent_tf.backend import keras
config = os.path.join(tempfile.mkdtemp(), "config.json")
with open(config, "w") as f:
    json.dump(dict(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                   intermediate_size=32, hidden_act="gelu", max_position_embeddings=64), f)
rng = np.random.default_rng(0)
ids = [rng.integers(5, 64, int(rng.integers(2, 20))).astype(np.int32) for _ in range(48)]
keras.utils.set_random_seed(0)
model = ct.build_encoder(config)
model.compile(optimizer=ct.FusedAdam(1e-3), loss=ct.CoSENTLoss())
labels = rng.integers(0, 2, 24).astype(np.float32)
model.fit(ct.pair_dataset(ids[:24], ids[24:], labels, batch_size=4, seed=0), epochs=2, verbose=0)
print("ONEDNN_PRIMITIVE_CACHE_CAPACITY=" + os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"])
"""


@pytest.mark.slow
@pytest.mark.parametrize("preset", [None, "1024"])
def test_onednn_primitive_cache_is_off_unless_the_user_sets_it(preset):
    """Training reuses no primitive from oneDNN's own cache (see docs/platform.md, "oneDNN's primitive cache").

    With the cache on (a user's explicit setting, which environment keeps) the same steps do
    take primitives from it, so the check below would see the route around it removed.
    """
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_PRIMITIVE_CACHE_CAPACITY"}
    env.update(ONEDNN_VERBOSE="2", PYTHONPATH=ROOT, **ONEDNN_ON_ANY_CPU)  # the cache is oneDNN's ops'
    if preset is not None:
        env["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = preset
    # A process per setting: oneDNN reads its cache capacity and verbose switch once, when it loads.
    result = subprocess.run(
        [sys.executable, "-c", TRAIN_A_FEW_STEPS], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert f"ONEDNN_PRIMITIVE_CACHE_CAPACITY={preset or 0}" in log
    misses, hits = log.count("create:cache_miss"), log.count("create:cache_hit")
    assert misses > 0, "oneDNN verbose printed no primitive creation: the check cannot see the cache"
    if preset is None:
        assert hits == 0
    else:
        assert hits > 0


def test_scopes_put_the_dtype_policy_and_every_generator_back_even_on_error():
    import random

    import numpy as np

    from cosent_tf.backend import dtype_policy, keras, random_seed, tf

    random.seed(3), np.random.seed(3), tf.random.set_seed(3)
    expected = (random.random(), np.random.random(), float(tf.random.uniform([])))
    random.seed(3), np.random.seed(3), tf.random.set_seed(3)
    with pytest.raises(RuntimeError), random_seed(42), dtype_policy("mixed_bfloat16"):
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
        seeded = (random.random(), np.random.random())
        raise RuntimeError("a failing run")
    assert keras.mixed_precision.global_policy().name == "float32"
    assert (random.random(), np.random.random(), float(tf.random.uniform([]))) == expected
    with random_seed(42):
        assert (random.random(), np.random.random()) == seeded  # the same seed, the same draws


def test_architectures_are_named_with_their_choices():
    from cosent_tf import ConfigError
    from cosent_tf.backend import policy_name
    from cosent_tf.models.architectures import get_architecture

    assert get_architecture("wobert").word_level and not get_architecture("nezha").learned_positions
    with pytest.raises(ConfigError, match="unknown architecture 'gpt'; choose one of albert, bert, nezha"):
        get_architecture("gpt")
    assert [policy_name(p) for p in ("bf16", "fp16", "float32")] == ["mixed_bfloat16", "mixed_float16", "float32"]
    with pytest.raises(ConfigError, match="unknown precision 'int8'; choose one of float32, bf16, fp16"):
        policy_name("int8")


def test_tensorflow_start_up_lines_are_held_back_and_everything_else_passes(capfd):
    from cosent_tf.console import tensorflow_start_up_held_back

    with tensorflow_start_up_held_back():
        os.write(2, b"I0000 port.cc:153] oneDNN custom operations are on. You may see...\n")
        os.write(2, b"E0000 cuda_platform.cc:52] failed call to cuInit: INTERNAL\n")
        os.write(2, b"a real problem\n")
    assert capfd.readouterr().err == "a real problem\n"


@pytest.mark.slow
def test_importing_cosent_tf_prints_nothing_and_only_a_tf_keras_used_first_is_refused():
    env = {k: v for k, v in os.environ.items() if k not in ("TF_USE_LEGACY_KERAS", "TF_KERAS", "COSENT_TF_VERBOSE")}
    # A fresh interpreter for each check below: each is what one import order, or one environment,
    # does at import, which a single process can show only once (and this one has seen already).
    lazy = (
        "import sys, cosent_tf; print('tensorflow' in sys.modules); import tensorflow as tf; print(tf.keras.__name__)"
    )
    light = subprocess.run([sys.executable, "-c", lazy], capture_output=True, text=True, env=env, timeout=300)
    # `import cosent_tf` sets Keras 2 up without importing TensorFlow; the user's import then gets it
    assert light.stdout.split() == ["False", "tf_keras.api._v2.keras"], light.stderr[-2000:]
    # JAX (installed here with the keras3 extra) is left out of TensorFlow's import, and importable after it
    quiet_code = "import sys, cosent_tf.backend; print('jax' in sys.modules); import jax"
    quiet = subprocess.run([sys.executable, "-c", quiet_code], capture_output=True, text=True, env=env, timeout=300)
    assert quiet.returncode == 0 and quiet.stdout == "False\n" and quiet.stderr == "", quiet.stderr[-2000:]
    shown = subprocess.run(
        [sys.executable, "-c", "import cosent_tf.backend"],
        capture_output=True,
        text=True,
        env={**env, "COSENT_TF_VERBOSE": "1"},
        timeout=300,
    )
    assert TENSORFLOW_STARTUP_LINES.search(shown.stderr)  # the lines exist here, so their absence above counts
    # tensorflow imported first: tf.keras is resolved on first use, so the engine still gets Keras 2
    tensorflow_first = subprocess.run(
        [sys.executable, "-c", "import tensorflow as tf; import cosent_tf.backend; print(tf.keras.__name__)"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert tensorflow_first.returncode == 0, tensorflow_first.stderr
    assert tensorflow_first.stdout.startswith("tf_keras")
    # tf.keras used first: it is Keras 3 for good, and the engine says so by name
    keras3_first = subprocess.run(
        [sys.executable, "-c", "import tensorflow as tf; tf.keras.layers; import cosent_tf.backend"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert keras3_first.returncode != 0
    assert "tf.keras was used before cosent_tf was imported and is Keras 3" in keras3_first.stderr
    assert "import cosent_tf first" in keras3_first.stderr and "cosent_tf.keras3" in keras3_first.stderr


def test_repeatable_dropout_draws_the_same_masks_for_the_same_seed():
    from cosent_tf.backend import keras, repeatable_dropout, tf

    inputs = keras.Input((64,))
    hidden = keras.layers.Dropout(0.5)(keras.layers.Dense(64)(inputs))
    model = keras.Model(inputs, keras.layers.Dropout(0.3)(hidden))
    x = np.ones((4, 64), dtype=np.float32)

    @tf.function
    def run(seed):
        with repeatable_dropout(seed):
            return model(x, training=True)

    first, again = run(tf.constant([1, 2])), run(tf.constant([1, 2]))
    other = run(tf.constant([1, 3]))
    np.testing.assert_array_equal(first, again)
    assert np.mean(first.numpy() == 0) > 0.3  # both dropouts dropped units
    assert np.mean(first.numpy() != other.numpy()) > 0.3
    # outside the block dropout is Keras's own, random on every call
    assert np.mean(model(x, training=True).numpy() != model(x, training=True).numpy()) > 0.3


@pytest.mark.parametrize("keyed", [False, True], ids=["keras", "repeatable"])
def test_bfloat16_dropout_drops_its_rate_of_units(keyed):
    """A uniform number drawn in bfloat16 has 7 bits, so rate 0.1 would drop 13/128 = 0.1016 of
    the units: 10 standard errors away from 0.1 over 4 million units."""
    from cosent_tf.backend import dtype_policy, repeatable_dropout

    with dtype_policy("mixed_bfloat16"):
        layer = keras.layers.Dropout(0.1)
    x = tf.ones([2000, 2000], tf.bfloat16)
    with repeatable_dropout(tf.constant([1, 2])) if keyed else contextlib.nullcontext():
        y = layer(x, training=True).numpy().astype(np.float32)
    assert layer(x, training=True).dtype == tf.bfloat16
    assert abs(np.mean(y == 0) - 0.1) < 0.0006
    kept = y[y != 0]
    np.testing.assert_array_equal(kept, np.float32(tf.cast(1 / 0.9, tf.bfloat16)))


def _dense_pair(activation):
    """A Keras Dense and a TokenDense with the same weights, built for 8 input features."""
    plain, token = keras.layers.Dense(5, activation=activation), TokenDense(5, activation=activation)
    plain.build((None, None, 8))
    token.build((None, None, 8))
    token.set_weights(plain.get_weights())
    return plain, token


@pytest.mark.parametrize("activation", ["gelu", None])
def test_token_dense_computes_what_keras_dense_computes_and_keeps_the_static_shape(activation):
    plain, token = _dense_pair(activation)
    inputs = np.random.default_rng(0).normal(size=(3, 7, 8)).astype(np.float32)
    np.testing.assert_allclose(token(inputs).numpy(), plain(inputs).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(token(inputs[:, 0]).numpy(), plain(inputs[:, 0]).numpy(), rtol=1e-6, atol=1e-6)
    symbolic = keras.Input((None, 8))
    assert token(symbolic).shape.as_list() == [None, None, 5]


def test_token_dense_puts_the_bias_straight_after_the_matmul_so_that_they_fuse():
    def bias_inputs(layer):
        graph = tf.function(layer).get_concrete_function(tf.TensorSpec((None, None, 8), tf.float32)).graph
        return {op.inputs[0].op.type for op in graph.get_operations() if op.type == "BiasAdd"}

    plain, token = _dense_pair("gelu")
    assert bias_inputs(token) == {"MatMul"}
    assert bias_inputs(plain) == {"Reshape"}  # Keras's tensordot: what keeps oneDNN from fusing


@pytest.mark.parametrize(
    "policy, training, before_bias",
    [
        ("float32", True, "MatMul"),
        ("float32", False, "MatMul"),
        ("mixed_bfloat16", False, "MatMul"),  # encoding: fused (frozen weights take that to AMX)
        ("mixed_bfloat16", True, "EnsureShape"),  # training: apart, the matmul alone reaches AMX
    ],
)
def test_token_dense_keeps_only_a_bf16_training_matmul_apart_from_its_bias(policy, training, before_bias):
    with dtype_policy(policy):
        layer = TokenDense(5, activation="gelu")
        layer.build((None, None, 8))
    call = tf.function(lambda x: layer(x, training=training))
    graph = call.get_concrete_function(tf.TensorSpec((None, None, 8), tf.float32)).graph
    (bias_add,) = [op for op in graph.get_operations() if op.type == "BiasAdd"]
    before = bias_add.inputs[0].op
    assert before.type == before_bias
    assert before.type == "MatMul" or before.inputs[0].op.type == "MatMul"  # nothing else in between

    inputs = np.random.default_rng(0).normal(size=(3, 7, 8)).astype(np.float32)
    kept_apart, fused = call(inputs), layer(inputs, training=False)
    assert kept_apart.shape == (3, 7, 5) and kept_apart.dtype == fused.dtype
    np.testing.assert_allclose(np.float32(kept_apart), np.float32(fused), atol=1e-2)


def test_bert4keras_blocks_are_built_with_token_dense(tiny_config):
    encoder = build_encoder(tiny_config)
    attention = encoder.get_layer("Transformer-0-MultiHeadSelfAttention")
    feed_forward = encoder.get_layer("Transformer-0-FeedForward")
    assert all(isinstance(d, TokenDense) for d in (attention.q_dense, attention.o_dense, feed_forward.i0_dense))


def test_inference_policy_keeps_weights_in_the_compute_dtype():
    assert [inference_policy_name(p) for p in ("float32", "bf16", "fp16")] == ["float32", "bfloat16", "float16"]
    with pytest.raises(ConfigError, match="unknown precision 'int8'"):
        inference_policy_name("int8")


# A process that sets TF_ONEDNN_ASSUME_FROZEN_WEIGHTS: it encodes with a model folder in both
# precisions, trains a plain Keras model (which nothing guards), then tries to train a cosent_tf
# encoder. Each result is one JSON line.
FROZEN_WEIGHTS_PROCESS = """
import json, sys
import numpy as np
import cosent_tf as ct
from cosent_tf.backend import keras, tf
model_dir, config, output, texts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
np.savez(output, **{p: ct.SentenceEncoder.load(model_dir, p).encode(texts) for p in ("float32", "bf16")})
keras.utils.set_random_seed(0)
x, y = tf.random.normal([64, 8]), tf.random.normal([64, 4])
plain = keras.Sequential([keras.layers.Dense(32, activation="gelu"), keras.layers.Dense(4)])
plain.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
print(json.dumps({"plain_losses": plain.fit(x, y, epochs=6, batch_size=64, verbose=0).history["loss"]}))
encoder = ct.build_encoder(config)
encoder.compile(optimizer=ct.FusedAdam(1e-3), loss=ct.CoSENTLoss())
ids = [np.arange(5, 5 + n, dtype=np.int32) for n in (3, 4, 5, 6)]
try:
    encoder.fit(ct.pair_dataset(ids[:2], ids[2:], np.array([0.0, 1.0], np.float32), batch_size=2), verbose=0)
    print(json.dumps({"trained": True}))
except Exception as error:  # Keras's tracing wraps it in a StagingError that keeps its message
    print(json.dumps({"refused": str(error)}))
"""


@pytest.mark.slow
def test_frozen_weights_process_encodes_the_same_vectors_and_refuses_to_train(tmp_path, tiny_config):
    """With TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 (oneDNN keeps fused Dense weights reordered, for
    AMX) a model folder encodes what it encodes without it, and training a cosent_tf model is
    refused: TensorFlow would go on using the first weights, as the plain Keras model shows."""
    make_model_dir(tmp_path / "model", tiny_config)
    texts = ["我们是中国人", "你好", "他在这里说话了", "大"]
    env = dict(os.environ, TF_ONEDNN_ASSUME_FROZEN_WEIGHTS="1", PYTHONPATH=ROOT, **ONEDNN_ON_ANY_CPU)
    # A process of its own: oneDNN reads the variable when TensorFlow starts, and it would leave
    # this process's training with stale weights.
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            FROZEN_WEIGHTS_PROCESS,
            str(tmp_path / "model"),
            str(tiny_config),
            str(tmp_path / "v.npz"),
        ]
        + texts,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    frozen = np.load(tmp_path / "v.npz")
    for precision, tolerance in (("float32", 1e-5), ("bf16", 2e-2)):
        expected = SentenceEncoder.load(str(tmp_path / "model"), precision).encode(texts)
        np.testing.assert_allclose(frozen[precision], expected, atol=tolerance)

    keras.utils.set_random_seed(0)
    x, y = tf.random.normal([64, 8]), tf.random.normal([64, 4])
    plain = keras.Sequential([keras.layers.Dense(32, activation="gelu"), keras.layers.Dense(4)])
    plain.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    learned = plain.fit(x, y, epochs=6, batch_size=64, verbose=0).history["loss"]
    stale = lines[0]["plain_losses"]
    assert stale[0] == pytest.approx(learned[0], rel=1e-5)  # the same model and data
    assert learned[0] - learned[-1] > 3 * (stale[0] - stale[-1])  # but the weights stayed put there

    assert "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS is set in this process" in lines[1]["refused"]


def test_cpu_flags_are_the_first_processors_flags_line(tmp_path):
    from cosent_tf.environment import cpu_flags

    (tmp_path / "cpuinfo").write_text(
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\nflags\t\t: fpu avx512_bf16 amx_bf16 amx_tile\n\n"
        "processor\t: 1\nflags\t\t: fpu\n",
        encoding="utf-8",
    )
    assert cpu_flags(tmp_path / "cpuinfo") == {"fpu", "avx512_bf16", "amx_bf16", "amx_tile"}
    assert cpu_flags(tmp_path / "missing") == frozenset()


@pytest.mark.parametrize(
    "now, at_import, frozen",
    [
        ("1", None, True),
        ("TRUE", None, True),
        (None, "true", True),
        ("0", None, False),
        ("false", "0", False),
        (None, None, False),
        ("", None, False),
    ],
)
def test_weights_count_as_frozen_when_the_variable_is_true_now_or_was_at_import(monkeypatch, now, at_import, frozen):
    from cosent_tf import environment

    monkeypatch.setattr(environment, "FROZEN_WEIGHTS_AT_IMPORT", at_import)
    if now is None:
        monkeypatch.delenv(environment.FROZEN_WEIGHTS_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(environment.FROZEN_WEIGHTS_VARIABLE, now)
    assert environment.weights_assumed_frozen() is frozen


# What starts TensorFlow when imported; cosent_tf.backend imports them with the start-up lines held back.
STARTS_TENSORFLOW = ("tensorflow", "tf_keras", "keras", "bert4keras", "tensorflow_text")


def _top_level_imports(tree):
    """(line, absolute-or-relative module name) of each import at a module's top level, in order."""
    import ast

    for node in tree.body:
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, "." * node.level + (node.module or "")


def test_no_module_starts_tensorflow_before_the_backend_holds_its_start_up_lines_back():
    import ast

    package = os.path.join(ROOT, "cosent_tf")
    early = []
    for folder, _, files in os.walk(package):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path == os.path.join(package, "backend.py"):
                continue
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for line, module in _top_level_imports(tree):
                if module.lstrip(".") == "backend" or module == "cosent_tf.backend":
                    break  # the backend is imported first: what follows finds TensorFlow started
                if module.split(".")[0] in STARTS_TENSORFLOW:
                    early.append(f"{os.path.relpath(path, ROOT)}:{line} imports {module}")
    assert early == []


def test_the_package_losses_and_layers_are_tf_keras_classes_in_a_keras2_process():
    import tf_keras

    from cosent_tf import layers, losses, process_keras
    from cosent_tf.losses.registry import LOSSES
    from cosent_tf.maths.ops import TensorFlowOps

    assert (process_keras.KERAS_MAJOR, process_keras.keras) == (2, tf_keras)
    assert isinstance(process_keras.ops(), TensorFlowOps)
    for name in losses.CLASSES:
        base = tf_keras.layers.Layer if name == "SentenceBertHead" else tf_keras.losses.Loss
        assert issubclass(getattr(losses, name), base), name
    for name in ("Pooling", "PaddingMask"):
        assert issubclass(getattr(layers, name), tf_keras.layers.Layer)
    built = LOSSES["feature", "cosent"].build(scale=7.0, epsilon=0.5, max_label=1.0, positive_above=0.5)
    assert isinstance(built, tf_keras.losses.Loss) and built.scale == 7.0
