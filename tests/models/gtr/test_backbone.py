import numpy as np
import pytest
from keras_hub.src.tests.test_case import TestCase

from gtr_keras.errors import CheckpointError
from gtr_keras.models.gtr.backbone import GTRBackbone

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


class GTRBackboneTest(TestCase):
    def test_backbone_basics(self):
        self.run_backbone_test(
            cls=GTRBackbone,
            init_kwargs=INIT_KWARGS,
            input_data=INPUT_DATA,
            expected_output_shape=(2, 5, 8),
            run_mixed_precision_check=False,  # the relative position bias stays float32: test_mixed_precision
            run_quantization_check=False,  # quantized models are refused at saving (test_saving.py)
        )

    def test_gated_gelu_backbone_basics(self):
        self.run_backbone_test(
            cls=GTRBackbone,
            init_kwargs={**INIT_KWARGS, "feedforward": "gated-gelu"},
            input_data=INPUT_DATA,
            expected_output_shape=(2, 5, 8),
            run_mixed_precision_check=False,
            run_quantization_check=False,
        )

    def test_saved_model(self):
        self.run_model_saving_test(cls=GTRBackbone, init_kwargs=INIT_KWARGS, input_data=INPUT_DATA)


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
        "relu", 32, 64, 0.1)
    assert GTRBackbone.from_config(config).get_config() == config
