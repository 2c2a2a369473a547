import numpy as np

from gtr_keras.model import GTREncoder


def _inputs():
    return {
        "token_ids": np.array([[5, 6, 7, 1, 0, 0], [9, 1, 0, 0, 0, 0]], "int32"),
        "padding_mask": np.array([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]], "int32"),
    }


def test_outputs_are_unit_norm_and_projected_to_embedding_dim():
    model = GTREncoder.from_preset("gtr-tiny", embedding_dim=32)
    out = model(_inputs()).numpy()
    assert out.shape == (2, 32)
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), 1.0, rtol=1e-6)
    assert model.get_layer("projection").use_bias is False


def test_padding_does_not_change_embeddings():
    model = GTREncoder.from_preset("gtr-tiny")
    inputs = _inputs()
    trimmed = {k: v[:, :4] for k, v in inputs.items()}
    np.testing.assert_allclose(model(inputs).numpy(), model(trimmed).numpy(), atol=1e-6)


def test_config_round_trip_rebuilds_the_same_architecture():
    model = GTREncoder.from_preset("gtr-tiny", feedforward="gated-gelu", dropout=0.1)
    clone = GTREncoder.from_config(model.get_config())
    assert clone.get_config() == model.get_config()
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(clone(_inputs()).numpy(), model(_inputs()).numpy(), atol=1e-6)


def test_dropout_only_in_training():
    model = GTREncoder.from_preset("gtr-tiny", dropout=0.5)
    a, b = model(_inputs(), training=False), model(_inputs(), training=False)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(model(_inputs(), training=True), a)


def test_bfloat16_policy_keeps_float32_unit_norm_output():
    model = GTREncoder.from_preset("gtr-tiny", dtype="mixed_bfloat16")
    out = model(_inputs())
    assert out.dtype == "float32"
    assert model.get_layer("block_0").compute_dtype == "bfloat16"
    np.testing.assert_allclose(np.linalg.norm(out.numpy(), axis=-1), 1.0, rtol=1e-3)
