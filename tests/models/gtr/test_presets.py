import numpy as np
import pytest

from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.models.gtr.presets import PRESET_SOURCES, PRESETS, parameter_count, preset_config


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


def test_the_bundled_model_stays_under_50_mb():
    import os

    from gtr_keras.models.gtr.presets import BUNDLED_MODEL_DIR

    root = BUNDLED_MODEL_DIR
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(root) for f in names)
    assert size <= 50e6, size  # issue #26: the package ships it


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match="gtr-base"):
        preset_config("gtr-huge")


def test_keras_hub_lists_the_published_and_the_bundled_presets_by_name():
    import keras_hub

    import gtr_keras
    from gtr_keras.models.gtr.presets import BUNDLED_MODEL_DIR

    presets = gtr_keras.GTRTextEmbedder.presets
    assert set(presets) == {
        "gtr_t5_base_en",
        "gtr_t5_large_en",
        "gtr_t5_xl_en",
        "gtr_t5_xxl_en",
        "gtr_small_distilled_en",
    }
    assert presets["gtr_t5_base_en"]["kaggle_handle"] == "hf://sentence-transformers/gtr-t5-base"
    assert presets["gtr_t5_xxl_en"]["metadata"]["params"] == parameter_count(preset_config("gtr-xxl"))
    assert set(presets) <= set(keras_hub.models.Backbone.presets)
    bundled = gtr_keras.load(BUNDLED_MODEL_DIR).encode_queries(["lift on a wing"])
    for load in (keras_hub.models.TextEmbedder.from_preset, gtr_keras.GTRTextEmbedder.from_preset):
        np.testing.assert_array_equal(load("gtr_small_distilled_en").encode_queries(["lift on a wing"]), bundled)
    assert type(keras_hub.models.Backbone.from_preset("gtr_small_distilled_en")) is gtr_keras.GTRBackbone


@pytest.mark.parametrize(
    "name, repo",
    [("gtr_t5_base_en", "sentence-transformers/gtr-t5-base"), ("gtr_t5_xl_en", "sentence-transformers/gtr-t5-xl")],
)
def test_a_published_preset_name_is_downloaded_from_its_hugging_face_id(monkeypatch, name, repo):
    import huggingface_hub

    import gtr_keras
    from gtr_keras.errors import CheckpointError

    asked = []

    def offline(repo_id, **kwargs):
        asked.append(repo_id)
        raise OSError("offline")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(CheckpointError, match=f"could not download '{repo}'"):
        gtr_keras.GTRTextEmbedder.from_preset(name)
    assert asked == [repo]


def test_an_architecture_only_size_gives_a_randomly_initialised_model_by_name():
    embedder = GTRTextEmbedder.from_preset("gtr-tiny")
    assert embedder.preprocessor is None and embedder.count_params() == parameter_count(preset_config("gtr-tiny"))


@pytest.fixture
def hub_downloads_give_the_tiny_checkpoint(monkeypatch):
    """`huggingface_hub.snapshot_download` of any GTR repository answers with the committed tiny checkpoint."""
    import huggingface_hub
    from conftest import TINY_ST

    asked = []

    def download(repo_id, **kwargs):
        asked.append(repo_id)
        return TINY_ST

    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    return asked


@pytest.mark.parametrize("name", sorted(PRESET_SOURCES))
def test_every_name_of_the_table_loads_the_same_model_through_both_loaders(
    name, hub_downloads_give_the_tiny_checkpoint
):
    import gtr_keras

    text = ["lift on a wing"]
    np.testing.assert_array_equal(
        gtr_keras.load(name).encode_queries(text), gtr_keras.GTRTextEmbedder.from_preset(name).encode_queries(text)
    )
    if PRESET_SOURCES[name].startswith("hf://"):
        assert set(hub_downloads_give_the_tiny_checkpoint) == {PRESET_SOURCES[name].removeprefix("hf://")}
