"""keras-hub's generic `from_preset` loaders take every name of the presets table and every GTR format."""

import huggingface_hub
import keras_hub
import numpy as np
import pytest
from conftest import FIXTURES, TINY_ST

import gtr_keras
from gtr_keras.models.gtr.presets import PRESET_SOURCES
from gtr_keras.models.model_files.model_source import resolve_model_source
from gtr_keras.patches.keras_hub_preset_loader import GTRPresetLoader, get_preset_loader

TEXT = ["lift on a wing"]


@pytest.fixture
def hub_downloads_give_the_tiny_checkpoint(monkeypatch):
    """`huggingface_hub.snapshot_download` of any GTR repository answers with the committed tiny checkpoint."""
    asked = []

    def download(repo_id, **kwargs):
        asked.append(repo_id)
        return TINY_ST

    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    return asked


LOADERS = {
    "gtr_keras.load": lambda name: gtr_keras.load(name).model,
    "GTRTextEmbedder.from_preset": gtr_keras.GTRTextEmbedder.from_preset,
    "keras_hub TextEmbedder.from_preset": keras_hub.models.TextEmbedder.from_preset,
}


@pytest.mark.parametrize("name", sorted(PRESET_SOURCES))
def test_every_name_of_the_table_loads_the_same_model_through_every_loader(
    name, hub_downloads_give_the_tiny_checkpoint
):
    embeddings = [LOADERS[loader](name).encode_queries(TEXT) for loader in sorted(LOADERS)]
    for other in embeddings[1:]:
        np.testing.assert_array_equal(other, embeddings[0])
    backbone = keras_hub.models.Backbone.from_preset(name)
    assert type(backbone) is gtr_keras.GTRBackbone
    tokenizer = keras_hub.tokenizers.Tokenizer.from_preset(name)
    preprocessor = keras_hub.models.TextEmbedderPreprocessor.from_preset(name, sequence_length=16)
    assert type(tokenizer) is gtr_keras.GTRTokenizer and type(preprocessor) is gtr_keras.GTRTextEmbedderPreprocessor
    assert preprocessor.sequence_length == 16 and tokenizer.proto == preprocessor.tokenizer.proto
    if PRESET_SOURCES[name].startswith("hf://"):
        assert set(hub_downloads_give_the_tiny_checkpoint) == {PRESET_SOURCES[name].removeprefix("hf://")}


def test_a_sentence_transformers_checkpoint_loads_through_keras_hub():
    embedder = keras_hub.models.TextEmbedder.from_preset(TINY_ST)
    np.testing.assert_allclose(
        embedder.encode_queries(TEXT), gtr_keras.load(TINY_ST).encode_queries(TEXT), atol=0, rtol=0
    )


def test_only_gtr_sources_that_keras_hub_cannot_read_get_the_gtr_loader(tmp_path):
    assert isinstance(get_preset_loader("gtr-small-distilled"), GTRPresetLoader)
    assert isinstance(get_preset_loader(TINY_ST), GTRPresetLoader)
    seen = []
    get_preset_loader(f"{FIXTURES}/tiny-gtr-preset-0.1", keras_hub_loader=seen.append)
    get_preset_loader("bert_base_en", keras_hub_loader=seen.append)
    assert seen == [f"{FIXTURES}/tiny-gtr-preset-0.1", "bert_base_en"]
    assert GTRPresetLoader(resolve_model_source("gtr-tiny")).check_backbone_class() is gtr_keras.GTRBackbone
