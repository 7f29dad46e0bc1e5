import numpy as np
import pytest

from cosent_tf import build_encoder
from cosent_tf.backend import tf
from cosent_tf.inference.runtime import batched_outputs, cosine_scores, inference_function


@pytest.mark.parametrize("rows", [1, 2, 3, 8])
def test_a_batch_computed_in_two_halves_equals_the_model_on_the_whole_batch(tiny_config, rows):
    encoder = build_encoder(tiny_config, pooling="cls")
    rng = np.random.default_rng(rows)
    token_ids = rng.integers(672, 2000, size=(rows, 9)).astype(np.int32)
    token_ids[:, 0], token_ids[:, -1] = 101, 102
    token_ids[0, 5:] = 0  # padding: the first half's longest row is not the batch's
    segment_ids = np.zeros_like(token_ids)
    function = inference_function(encoder)
    np.testing.assert_allclose(
        function(token_ids, segment_ids).numpy(), encoder([token_ids, segment_ids], training=False).numpy(), atol=1e-6
    )

    # the traced graph calls the model twice: two halves the executor can run side by side, both
    # calls of one function that holds the model's graph (traced once)
    whole = tf.function(lambda ids, segments: encoder([ids, segments], training=False))
    model_softmaxes = sum(
        op.type == "Softmax" for op in whole.get_concrete_function(token_ids, segment_ids).graph.get_operations()
    )
    graph = function.get_concrete_function(token_ids, segment_ids).graph.as_graph_def()
    call_ops = ("PartitionedCall", "StatefulPartitionedCall")
    calls = [node.attr["f"].func.name for node in graph.node if node.op in call_ops]
    assert len(calls) == 2 and len(set(calls)) == 1
    (called,) = [f for f in graph.library.function if f.signature.name == calls[0]]
    assert model_softmaxes > 0 and sum(node.op == "Softmax" for node in called.node_def) == model_softmaxes


def test_batched_outputs_come_back_in_input_order(tiny_config):
    encoder = build_encoder(tiny_config, pooling="last-avg")
    token_ids = [np.array([101] + [672 + i] * n + [102], np.int32) for i, n in enumerate([5, 1, 9, 3, 3, 7])]
    vectors = batched_outputs(encoder, token_ids, batch_size=4)
    for ids, vector in zip(token_ids, vectors):
        single = encoder.predict([ids[None], np.zeros_like(ids)[None]], verbose=0)[0]
        np.testing.assert_allclose(vector, single, atol=1e-5)
    cosines = cosine_scores(encoder, token_ids[:3], token_ids[3:], batch_size=4)
    expected = [
        np.dot(vectors[i], vectors[i + 3]) / np.linalg.norm(vectors[i]) / np.linalg.norm(vectors[i + 3])
        for i in range(3)
    ]
    np.testing.assert_allclose(cosines, expected, rtol=1e-5)


def test_a_progress_bar_asked_for_draws_nothing_into_a_redirected_stderr(tiny_config, capfd):
    encoder = build_encoder(tiny_config, pooling="cls")
    token_ids = [np.array([101, 672 + i, 102], np.int32) for i in range(6)]
    batched_outputs(encoder, token_ids, batch_size=2, show_progress=True)
    out, err = capfd.readouterr()  # stderr is a file here, as in `cosent-tf encode ... 2> log`
    assert "\r" not in err and "encoding" not in err and out == ""
