"""Model directories of gtr-keras' first format: recognised by their `config.json`, loaded with their checks."""

import json
import shutil

import numpy as np
import pytest
from conftest import FIXTURES

from gtr_keras.convert.legacy_format import first_format_config, load_first_format
from gtr_keras.errors import CheckpointError
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder

LEGACY = f"{FIXTURES}/tiny-gtr-legacy"


def test_only_a_first_format_config_is_recognised(tmp_path):
    assert first_format_config(LEGACY)["model"]["num_layers"] == 3
    assert first_format_config(f"{FIXTURES}/tiny-gtr-preset-0.1") is None
    assert first_format_config(tmp_path) is None


def test_a_first_format_directory_loads_its_settings_and_weights():
    embedder = load_first_format(GTRTextEmbedder, LEGACY, first_format_config(LEGACY))
    assert (embedder.document_length, embedder.query_length, embedder.embedding_dim) == (512, 64, 64)
    random = load_first_format(GTRTextEmbedder, LEGACY, first_format_config(LEGACY), load_weights=False)
    assert not np.allclose(embedder.encode_queries(["a wing"]), random.encode_queries(["a wing"]))


def test_a_newer_format_version_is_refused_naming_the_file(tmp_path):
    copy = shutil.copytree(LEGACY, tmp_path / "legacy")
    config = json.loads((copy / "config.json").read_text())
    config["format_version"] = 2
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"legacy/config\.json: format_version 2 is newer"):
        load_first_format(GTRTextEmbedder, str(copy), config)
