import numpy as np
from conftest import FIXTURES

from gtr_keras.models.gtr.relative_position_bias import RelativePositionBias, relative_position_buckets


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


def test_relative_position_bias_round_trips_its_config():
    layer = RelativePositionBias(num_heads=3, num_buckets=16, max_distance=64)
    clone = RelativePositionBias.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
