import numpy as np

from gtr_keras.models.gtr.t5_encoder_block import T5EncoderBlock


def test_heads_times_kv_may_differ_from_model_width():
    block = T5EncoderBlock(hidden_dim=16, num_heads=8, key_value_dim=4, intermediate_dim=32)
    out = block(np.ones((2, 5, 16), "float32"), np.zeros((2, 8, 5, 5), "float32"))
    assert out.shape == (2, 5, 16)
    assert block.attention.query_dense.kernel.shape == (16, 32)


def test_encoder_block_round_trips_its_config():
    layer = T5EncoderBlock(8, 2, 4, 16, "relu", 0.1, 1e-5)
    clone = T5EncoderBlock.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
