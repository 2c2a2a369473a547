import keras
import numpy as np
import pytest

from gtr_keras.errors import CheckpointError
from gtr_keras.models.gtr.gtr_backbone import GTRBackbone

INIT_KWARGS = {
    "vocabulary_size": 10,
    "num_layers": 2,
    "hidden_dim": 8,
    "key_value_dim": 3,  # num_heads * key_value_dim differs from hidden_dim, as in GTR-XL/XXL
    "num_heads": 2,
    "intermediate_dim": 16,
}
INPUT_DATA = {
    "token_ids": np.array([[5, 6, 1, 0, 0], [7, 8, 9, 1, 0]], "int32"),
    "padding_mask": np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0]], "int32"),
}


@pytest.mark.parametrize("feedforward", ["relu", "gated-gelu"])
def test_backbone_basics(feedforward, tmp_path):
    """What keras-hub's `run_backbone_test` and `run_model_saving_test` check: the output's shape, and the same
    outputs after `from_config` and after a `.keras` round trip. (Their `TestCase` imports `grain`, whose import
    prints a warning on stderr without JAX, which the one-line error tests would see.)"""
    backbone = GTRBackbone(**INIT_KWARGS, feedforward=feedforward)
    output = keras.ops.convert_to_numpy(backbone(INPUT_DATA))
    assert output.shape == (2, 5, 8) and np.isfinite(output).all()
    clone = GTRBackbone.from_config(backbone.get_config())
    clone.set_weights(backbone.get_weights())
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(clone(INPUT_DATA)), output)
    backbone.save(tmp_path / "backbone.keras")
    loaded = keras.saving.load_model(tmp_path / "backbone.keras")
    assert type(loaded) is GTRBackbone
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(INPUT_DATA)), output)


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "bfloat16"])
def test_mixed_precision_computes_in_the_policy_but_the_position_bias_in_float32(policy):
    backbone = GTRBackbone(**INIT_KWARGS, dtype=policy)
    assert backbone(INPUT_DATA).dtype == "bfloat16"
    assert backbone.encoder_blocks[0].compute_dtype == "bfloat16" and backbone.final_norm.compute_dtype == "bfloat16"
    assert backbone.relative_position_bias.compute_dtype == "float32"
    expected_variables = "float32" if policy == "mixed_bfloat16" else "bfloat16"
    assert backbone.token_embedding.embeddings.dtype == expected_variables


def test_one_relative_position_bias_is_shared_by_every_block():
    backbone = GTRBackbone(**INIT_KWARGS)
    bias_weights = [w for w in backbone.weights if "relative_position_bias" in w.path]
    assert len(bias_weights) == 1 and bias_weights[0].shape == (32, 2)
    assert len(backbone.encoder_blocks) == 2


def test_padding_leaves_the_other_tokens_unchanged():
    backbone = GTRBackbone(**INIT_KWARGS)
    trimmed = {name: value[:, :4] for name, value in INPUT_DATA.items()}
    np.testing.assert_allclose(backbone(INPUT_DATA).numpy()[:, :4], backbone(trimmed).numpy(), atol=1e-5)


def test_load_weights_takes_a_file_of_exactly_its_weights(tmp_path):
    source = GTRBackbone(**INIT_KWARGS)
    source.save_weights(tmp_path / "model.weights.h5")
    target = GTRBackbone(**INIT_KWARGS)
    target.load_weights(tmp_path / "model.weights.h5")
    np.testing.assert_array_equal(target(INPUT_DATA).numpy(), source(INPUT_DATA).numpy())


def test_load_weights_refuses_a_file_of_more_blocks_than_the_model(tmp_path):
    GTRBackbone(**{**INIT_KWARGS, "num_layers": 3}).save_weights(tmp_path / "model.weights.h5")
    with pytest.raises(CheckpointError, match="model.weights.h5"):
        GTRBackbone(**INIT_KWARGS).load_weights(tmp_path / "model.weights.h5")


def test_load_weights_refuses_non_finite_weights_naming_the_weight(tmp_path):
    source = GTRBackbone(**INIT_KWARGS)
    source.final_norm.scale.assign(np.full((8,), np.nan, "float32"))
    source.save_weights(tmp_path / "model.weights.h5")
    with pytest.raises(CheckpointError, match=r"model.weights.h5: weight final_norm/scale holds 8 non-finite values"):
        GTRBackbone(**INIT_KWARGS).load_weights(tmp_path / "model.weights.h5")


def test_get_config_holds_every_setting():
    config = GTRBackbone(**INIT_KWARGS, dropout=0.1, max_distance=64).get_config()
    assert {key: config[key] for key in INIT_KWARGS} == INIT_KWARGS
    assert (config["feedforward"], config["num_buckets"], config["max_distance"], config["dropout"]) == (
        "relu",
        32,
        64,
        0.1,
    )
    assert GTRBackbone.from_config(config).get_config() == config
