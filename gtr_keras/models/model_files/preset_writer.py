"""Writing a model directory as a unit: `write_preset` stages keras-hub's `save_to_preset` and replaces the
directory with the staged one, recording the weights' dtype and the vocabulary's SHA-256."""

import hashlib
import json

import keras

from gtr_keras.errors import CheckpointError
from gtr_keras.models.gtr.gtr_tokenizer import METADATA_FILE, VOCABULARY_SHA256
from gtr_keras.models.model_files.model_directory import CONFIG_FILE, MODEL_DIRECTORIES, PREPROCESSOR_FILE, TASK_FILE
from gtr_keras.utils.files import atomic_directory


def write_preset(embedder, preset_dir, save):
    """Writes `embedder` to `preset_dir` through `save(staging_dir)` (keras-hub's `save_to_preset`), atomically.

    keras-hub writes the files one by one into the directory: killed midway, it would leave a directory
    that loads as a mix of the old and the new model. Here they are written to a staging directory that
    then replaces `preset_dir`, local or on any file system: an existing `preset_dir` must be empty or a
    model directory (`model_directory.MODEL_DIRECTORIES`), else nothing is written. A quantized
    model is refused, as its weights would not load back. Mixed dtype policies (`mixed_bfloat16`) are
    recorded as their weights' dtype, which keras-hub's loader reads (it refuses mixed policies).

    Args:
        embedder: a `GTRTextEmbedder` (or a `Reranker`).
        preset_dir: the directory to write.
        save: a function writing `embedder`'s preset files into the directory it is given.

    Raises:
        CheckpointError: a quantized model.
        DataError: `preset_dir` is a directory of something else, naming a file there.

    Example:
    >>> write_preset(embedder, "models/my-gtr", functools.partial(keras_hub.models.TextEmbedder.save_to_preset,
    ...                                                           embedder))  # doctest: +SKIP
    """
    quantized = sorted(
        {
            layer.dtype_policy.name
            for layer in embedder._flatten_layers()
            if getattr(layer.dtype_policy, "quantization_mode", None)
        }
    )
    if quantized:
        raise CheckpointError(
            f"{preset_dir}: a quantized model ({', '.join(quantized)}) is not saved as a model directory "
            "(its weights would not load back); save the float model, and quantize after loading"
        )
    with atomic_directory(preset_dir, MODEL_DIRECTORIES) as staging:
        save(str(staging))
        for name in (CONFIG_FILE, TASK_FILE, PREPROCESSOR_FILE):
            path = staging / name
            if path.exists():
                path.write_text(json.dumps(_weights_dtypes(json.loads(path.read_text())), indent=4))
        proto = getattr(embedder.preprocessor.tokenizer, "proto", None) if embedder.preprocessor is not None else None
        if proto is not None:  # a SentencePiece model (a WordPiece vocabulary has none)
            metadata = json.loads((staging / METADATA_FILE).read_text())
            metadata[VOCABULARY_SHA256] = hashlib.sha256(proto).hexdigest()
            (staging / METADATA_FILE).write_text(json.dumps(metadata, indent=4))


def _weights_dtypes(config):
    """A saved config with every mixed dtype policy (`mixed_bfloat16`) replaced by its weights' dtype."""
    if isinstance(config, list):
        return [_weights_dtypes(item) for item in config]
    if not isinstance(config, dict):
        return config
    if config.get("class_name") == "DTypePolicy" and config.get("config", {}).get("name", "").startswith("mixed_"):
        policy = keras.DTypePolicy(config["config"]["name"])
        return {**config, "config": {**config["config"], "name": policy.variable_dtype}}
    return {key: _weights_dtypes(value) for key, value in config.items()}
