import numpy as np
import pytest
import tensorflow as tf
from conftest import FIXTURES

from gtr_keras.models.gtr.layers import (
    MaskedMeanPooling,
    RelativePositionBias,
    T5Attention,
    T5EncoderBlock,
    T5FeedForward,
    relative_position_buckets,
)


def test_buckets_equal_reference_t5_including_bucket_edges():
    reference = np.load(f"{FIXTURES}/tiny-gtr-reference.npz")
    ours = relative_position_buckets(reference["offsets"])
    np.testing.assert_array_equal(ours, reference["buckets"])
    # The float32 log puts offset 16 in bucket 10 (not 9) and 32 in 12, as the reference does.
    assert relative_position_buckets(np.array([16, 32, 64, -16]))[:3].tolist() == [16 + 10, 16 + 12, 16 + 14]


def test_position_bias_saturates_beyond_max_distance():
    layer = RelativePositionBias(num_heads=2)
    bias = layer(np.ones((1, 300), "int32")).numpy()
    assert bias.shape == (1, 2, 300, 300)
    np.testing.assert_allclose(bias[0, :, 0, 200], bias[0, :, 0, 299])
    np.testing.assert_allclose(bias[0, :, 299, 0], bias[0, :, 250, 0])


def test_position_bias_masks_padded_keys():
    bias = RelativePositionBias(num_heads=1)(np.array([[1, 1, 0]])).numpy()
    assert (bias[0, 0, :, 2] < -1e8).all()
    assert (np.abs(bias[0, 0, :, :2]) < 100).all()


def test_attention_is_unscaled_dot_product():
    layer = T5Attention(hidden_dim=4, num_heads=1, key_value_dim=2)
    x = np.random.default_rng(0).normal(size=(1, 3, 4)).astype("float32")
    bias = np.zeros((1, 1, 3, 3), "float32")
    out = layer(x, bias).numpy()
    wq, wk, wv, wo = (d.kernel.numpy() for d in (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense))
    scores = (x[0] @ wq) @ (x[0] @ wk).T
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    np.testing.assert_allclose(out[0], weights @ (x[0] @ wv) @ wo, rtol=1e-5, atol=1e-6)


def test_heads_times_kv_may_differ_from_model_width():
    block = T5EncoderBlock(hidden_dim=16, num_heads=8, key_value_dim=4, intermediate_dim=32)
    out = block(np.ones((2, 5, 16), "float32"), np.zeros((2, 8, 5, 5), "float32"))
    assert out.shape == (2, 5, 16)
    assert block.attention.query_dense.kernel.shape == (16, 32)


def test_gated_gelu_feedforward():
    ffn = T5FeedForward(hidden_dim=4, intermediate_dim=6, activation="gated-gelu")
    x = np.random.default_rng(1).normal(size=(1, 2, 4)).astype("float32")
    out = ffn(x).numpy()
    inner = x @ ffn.input_denses[0].kernel.numpy()
    gate = x @ ffn.input_denses[1].kernel.numpy()
    gelu = 0.5 * gate * (1 + np.tanh(np.sqrt(2 / np.pi) * (gate + 0.044715 * gate**3)))
    np.testing.assert_allclose(out, (gelu * inner) @ ffn.output_dense.kernel.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="gated-gelu"):
        T5FeedForward(4, 6, activation="swish")


def test_mean_pooling_ignores_padding():
    x = tf.constant([[[1.0, 2.0], [3.0, 4.0], [50.0, 60.0]]])
    np.testing.assert_allclose(MaskedMeanPooling()(x, tf.constant([[1, 1, 0]])).numpy(), [[2.0, 3.0]])


@pytest.mark.parametrize(
    "layer",
    [
        RelativePositionBias(num_heads=3, num_buckets=16, max_distance=64),
        T5Attention(8, 2, 4, dropout=0.1),
        T5FeedForward(8, 16, "gated-gelu", 0.1),
        T5EncoderBlock(8, 2, 4, 16, "relu", 0.1, 1e-5),
    ],
)
def test_layers_round_trip_their_config(layer):
    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
