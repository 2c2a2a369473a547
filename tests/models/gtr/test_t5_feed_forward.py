import numpy as np
import pytest

from gtr_keras.models.gtr.t5_feed_forward import T5FeedForward


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


def test_feed_forward_round_trips_its_config():
    layer = T5FeedForward(8, 16, "gated-gelu", 0.1)
    clone = T5FeedForward.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
