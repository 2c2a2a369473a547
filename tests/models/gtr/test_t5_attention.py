import numpy as np

from gtr_keras.models.gtr.t5_attention import T5Attention


def test_attention_is_unscaled_dot_product():
    layer = T5Attention(hidden_dim=4, num_heads=1, key_value_dim=2)
    x = np.random.default_rng(0).normal(size=(1, 3, 4)).astype("float32")
    bias = np.zeros((1, 1, 3, 3), "float32")
    out = layer(x, bias).numpy()
    wq, wk, wv, wo = (
        d.kernel.numpy() for d in (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense)
    )
    scores = (x[0] @ wq) @ (x[0] @ wk).T
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    np.testing.assert_allclose(out[0], weights @ (x[0] @ wv) @ wo, rtol=1e-5, atol=1e-6)


def test_attention_round_trips_its_config():
    layer = T5Attention(8, 2, 4, dropout=0.1)
    clone = T5Attention.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
