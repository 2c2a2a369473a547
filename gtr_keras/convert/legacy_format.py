"""Model directories of gtr-keras' first format (`config.json` with `"format": "gtr-keras"`,
`model.weights.h5`, `spiece.model`): they still load, and `gtr-keras migrate` rewrites them as
keras-hub presets.
"""

import os

from gtr_keras.errors import CheckpointError
from gtr_keras.models.gtr.gtr_tokenizer import DOCUMENT_LENGTH, QUERY_LENGTH
from gtr_keras.models.model_files.model_directory import (
    CONFIG_FILE,
    LEGACY_FORMAT,
    WEIGHTS_FILE,
    assign_weights,
    check_architecture,
    check_budgets,
    read_json,
    read_spiece,
    read_weights,
)
from gtr_keras.utils import files

LEGACY_FORMAT_VERSION = 1


def first_format_config(directory):
    """The `config.json` of a model directory of the first format, or None for anything else."""
    path = os.path.join(directory, CONFIG_FILE)
    if not files.isfile(path):
        return None
    config = read_json(path)
    return config if config.get("format") == LEGACY_FORMAT else None


def load_first_format(embedder_cls, directory, config, load_weights=True, dtype=None):
    """An `embedder_cls` (a `GTRTextEmbedder` class) from a first-format directory and its `config`."""
    config_path = os.path.join(directory, CONFIG_FILE)
    if config.get("format_version", 0) > LEGACY_FORMAT_VERSION:
        raise CheckpointError(f"{config_path}: format_version {config['format_version']} is newer than this gtr-keras")
    model_args = {k: v for k, v in config["model"].items() if k != "name"}
    tok = {"document_length": DOCUMENT_LENGTH, "query_length": QUERY_LENGTH, **config.get("tokenizer", {})}
    check_budgets(tok, config_path, "tokenizer.")
    weights_path = os.path.join(directory, WEIGHTS_FILE)
    tensors = read_weights(weights_path) if load_weights else {}
    check_architecture(
        model_args, {path: value.shape for path, value in tensors.items()}, config_path, WEIGHTS_FILE, "model."
    )
    embedding_dim = model_args.pop("embedding_dim", 768)
    embedder = embedder_cls.from_parts(
        model_args,
        read_spiece(directory),
        tok["document_length"],
        tok["query_length"],
        embedding_dim,
        lowercase=tok.get("lowercase", False),
        dtype=dtype,
    )
    if load_weights:
        assign_weights(embedder, tensors, weights_path)
    return embedder
