"""The loaders of the other formats, registered with the model family: each given the resolved source."""

import json
import shutil

import numpy as np
import pytest
from conftest import FIXTURES, TINY_ST

from gtr_keras.errors import CheckpointError, UserError
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.models.gtr.presets import parameter_count, preset_config
from gtr_keras.models.model_files import model_formats
from gtr_keras.models.model_files.model_source import resolve_model_source

TEXT = ["lift on a wing"]


def test_each_format_loads_to_the_same_embeddings():
    # The two fixtures hold the same tiny model in two formats.
    loaded = [
        GTRTextEmbedder.from_preset(resolve_model_source(path)).encode_queries(TEXT)
        for path in (TINY_ST, f"{FIXTURES}/tiny-gtr-preset-0.1")
    ]
    for other in loaded[1:]:
        np.testing.assert_allclose(other, loaded[0], atol=1e-6, rtol=0)


def test_keras_hubs_generic_loader_reads_no_sentence_transformers_checkpoint_and_the_embedder_does():
    """docs/models.md's door for that layout: `GTRTextEmbedder.from_preset` (or `gtr_keras.load`)."""
    import keras_hub

    with pytest.raises(ValueError, match="no converter .* model type `'t5'`"):
        keras_hub.models.TextEmbedder.from_preset(TINY_ST)
    assert type(GTRTextEmbedder.from_preset(TINY_ST)) is GTRTextEmbedder


def test_an_architecture_loads_randomly_initialised_without_a_preprocessor():
    embedder = GTRTextEmbedder.from_preset("gtr-tiny")
    assert embedder.preprocessor is None and embedder.count_params() == parameter_count(preset_config("gtr-tiny"))


def test_a_keras_hub_preset_is_checked_before_keras_hub_reads_it(tmp_path):
    copy = shutil.copytree(f"{FIXTURES}/tiny-gtr-preset-0.1", tmp_path / "preset")
    config = json.loads((copy / "config.json").read_text())
    config["config"]["num_layers"] = 2
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"preset/config\.json: num_layers is 2 but model\.weights\.h5 holds 3"):
        GTRTextEmbedder.from_preset(copy)


def test_other_formats_take_no_keras_hub_arguments():
    with pytest.raises(UserError, match="takes no \\['num_classes'\\]"):
        GTRTextEmbedder.from_preset(TINY_ST, num_classes=2)


def test_a_format_without_a_registered_loader_is_named(monkeypatch):
    monkeypatch.setattr(model_formats, "_LOADERS", {})
    with pytest.raises(UserError, match="tiny-gtr-st: no loader of sentence-transformers models is registered"):
        GTRTextEmbedder.from_preset(TINY_ST)


@pytest.mark.large
def test_the_converters_are_registered_in_a_process_that_imports_only_the_embedder():
    import subprocess
    import sys

    from conftest import REPO

    script = (
        "from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder\n"
        f"print(GTRTextEmbedder.from_preset({str(TINY_ST)!r}).embedding_dim)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
