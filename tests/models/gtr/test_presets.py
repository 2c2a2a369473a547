import pytest

from gtr_keras.models.gtr.presets import PRESETS, parameter_count, preset_config
from gtr_keras.models.gtr.text_embedder import GTRTextEmbedder


@pytest.mark.parametrize("name, published", [("gtr-base", 110e6), ("gtr-large", 335e6)])
def test_built_base_and_large_match_published_sizes(name, published):
    model = GTRTextEmbedder.from_architecture(name)
    assert abs(model.count_params() - published) / published < 0.01
    assert model.count_params() == parameter_count(preset_config(name))


@pytest.mark.parametrize("name, published", [("gtr-xl", 1.24e9), ("gtr-xxl", 4.8e9)])
def test_xl_and_xxl_sizes_from_config(name, published):
    config = preset_config(name)
    assert config["num_heads"] * config["key_value_dim"] != config["hidden_dim"]
    assert abs(parameter_count(config) - published) / published < 0.02


def test_every_preset_projects_to_768_except_tiny():
    for name in PRESETS:
        assert preset_config(name).get("embedding_dim", 768) == (64 if name == "gtr-tiny" else 768)


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match="gtr-base"):
        preset_config("gtr-huge")
