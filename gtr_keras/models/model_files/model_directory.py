"""A model directory's files: their names, reading weights, and the checks of settings against weights.

A gtr-keras model directory is a keras-hub preset directory, as
`GTRTextEmbedder.save_to_preset` writes it: `config.json` + `model.weights.h5`
(the `GTRBackbone`), `task.json` + `task.weights.h5` (the `GTRTextEmbedder` and
its projection), `preprocessor.json` (token budgets), `tokenizer.json` +
`assets/tokenizer/vocabulary.spm` (the SentencePiece model) and `metadata.json`.

Loading checks the settings against the weights: a setting that the weights
contradict (`num_layers` one lower than the blocks in `model.weights.h5`, a
changed `hidden_dim`, a token budget below 2, ...) raises `CheckpointError`
naming the file and setting, and a weights file must hold exactly the built
model's weights (Keras alone would ignore extra ones). `GTRBackbone` and
`GTRTextEmbedder` call these checks when they load; this module imports no model
class.

Model directories may be local or on any file system TensorFlow knows (`gs://...`, `ram://...`): a
remote one is checked in a temporary local copy (`utils.files.local_copy`), its files named under the
remote path.
"""

import json
import os
import re

import numpy as np

from gtr_keras.errors import CheckpointError
from gtr_keras.utils import files

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
SHARDED_WEIGHTS_FILE = "model.weights.json"
TASK_FILE = "task.json"
TASK_WEIGHTS_FILE = "task.weights.h5"
PREPROCESSOR_FILE = "preprocessor.json"
SPIECE_FILE = "spiece.model"
SAFETENSORS_FILE = "model.safetensors"  # the weights of a Hugging Face checkpoint
TEXT_EMBEDDER = "gtr_keras>GTRTextEmbedder"  # the registered name of the task a model directory holds
RERANKER = "gtr_keras>Reranker"  # or, for a reranker's model directory
# What a directory that `gtr_keras.save` replaces may be: a keras-hub preset (sharded weights included, and
# what downloads add).
PRESET_DIRECTORY = files.DirectoryKind(
    "a keras-hub preset",
    (CONFIG_FILE, "metadata.json"),
    (
        CONFIG_FILE,
        "metadata.json",
        "model*.weights.h5",
        SHARDED_WEIGHTS_FILE,
        TASK_FILE,
        "task*.weights.h5",
        "task.weights.json",
        PREPROCESSOR_FILE,
        "tokenizer.json",
        "assets",
        "README.md",
        "MODEL_CARD.md",
        ".gitattributes",
    ),
)
MODEL_DIRECTORIES = (PRESET_DIRECTORY,)


def check_model_directory(directory, load_weights=True):
    """Checks a model directory (keras-hub preset) for settings that contradict its weights or each other.

    Reads the JSON files and the shapes in the weight files; builds no model.
    The token budgets of `preprocessor.json` and of `task.json`'s
    preprocessor must be integers of at least 2. Every architecture setting
    that the weights show (`num_layers`, `vocabulary_size`, `hidden_dim`,
    `num_heads`, `key_value_dim`, `intermediate_dim`, `feedforward`,
    `num_buckets`; `embedding_dim` in `task.json`) must match them, in
    `config.json` (what `Backbone.from_preset` builds) and in `task.json`
    (what `TextEmbedder.from_preset` builds). `config.json` and
    `preprocessor.json` must agree with their copies in `task.json`.
    `GTRBackbone.load_weights` and `GTRTextEmbedder.load_task_weights` run
    this on the directory of the file they load, then `check_weights_file`.

    Args:
        directory: the model directory.
        load_weights: also check the settings against the weight files.

    Raises:
        CheckpointError: the first problem, naming the file and the setting.

    Example:
    >>> check_model_directory("models/m")  # doctest: +SKIP
    CheckpointError: models/m/config.json: num_layers is 3 but model.weights.h5 holds 4 encoder blocks
    """
    directory = os.fspath(directory)
    if not files.is_local(directory):
        with files.local_copy(directory) as local:
            return check_model_directory(local, load_weights)
    config_path, task_path, preprocessor_path = (
        os.path.join(directory, name) for name in (CONFIG_FILE, TASK_FILE, PREPROCESSOR_FILE)
    )
    backbone = read_json(config_path).get("config", {})
    task_file = read_json(task_path) if files.isfile(task_path) else None
    if task_file is None and files.isfile(preprocessor_path):
        raise CheckpointError(
            f"{task_path}: missing (the model directory has a preprocessor, so a text embedder; "
            "without its task, keras-hub would build a random projection)"
        )
    if task_file is not None and task_file.get("registered_name") not in (TEXT_EMBEDDER, RERANKER):
        raise CheckpointError(
            f"{task_path}: names {task_file.get('registered_name')!r}, not {TEXT_EMBEDDER!r} "
            "(keras-hub would build a random projection in its place)"
        )
    task = (task_file or {}).get("config", {})
    task_backbone = (task.get("backbone") or {}).get("config", {})
    task_preprocessor = (task.get("preprocessor") or {}).get("config", {})
    preprocessor = read_json(preprocessor_path).get("config", {}) if files.isfile(preprocessor_path) else {}
    check_budgets(preprocessor, preprocessor_path)
    check_budgets(task_preprocessor, task_path, "preprocessor.")
    if load_weights:
        weights_path = os.path.join(directory, WEIGHTS_FILE)
        if not files.isfile(weights_path) and files.isfile(os.path.join(directory, SHARDED_WEIGHTS_FILE)):
            weights_path = os.path.join(directory, SHARDED_WEIGHTS_FILE)
        shapes = read_weights(weights_path, values=False)
        weights_name = os.path.basename(weights_path)
        # The architecture settings that weights show are GTR's; a reranker's keras-hub backbone checks its own.
        gtr = (task_file or {}).get("registered_name") != RERANKER
        if gtr:
            check_architecture(backbone, shapes, config_path, weights_name)
            check_architecture(task_backbone, shapes, task_path, weights_name, "backbone.")
        task_weights_path = os.path.join(directory, TASK_WEIGHTS_FILE)
        if task and not files.isfile(task_weights_path):
            raise CheckpointError(
                f"{task_weights_path}: missing ({TASK_FILE} is there: the projection's weights would be random); "
                "copy the whole model directory again"
            )
        if task and gtr:
            check_architecture(task, read_weights(task_weights_path, values=False), task_path, TASK_WEIGHTS_FILE)
    _check_agreement(config_path, backbone, task_backbone, "backbone")
    _check_agreement(preprocessor_path, preprocessor, task_preprocessor, "preprocessor")


def check_weights_file(model, path):
    """Checks that a Keras weights file holds exactly a model's weights: each one, in its shape, and no other.

    Keras loads a file that holds more weights than the model (say, a 4-block
    file into a model whose config asks for 3 blocks) without a word; this
    refuses it. A model directory's file is first checked with
    `check_model_directory`, so that the setting at fault is named.

    Args:
        model: a `GTRBackbone`, or a `GTRTextEmbedder` (its task weights: those
            outside the backbone, as `task.weights.h5` holds them).
        path: a `.weights.h5` file, or the `.weights.json` index of sharded ones.

    Raises:
        CheckpointError: naming the file and the first missing, extra or
            misshapen weight.

    Example:
    >>> check_weights_file(backbone, "models/m/model.weights.h5")  # doctest: +SKIP
    """
    path = os.fspath(path)
    directory, name = os.path.split(path)
    config_path = os.path.join(directory, CONFIG_FILE)
    model_files = (WEIGHTS_FILE, SHARDED_WEIGHTS_FILE, TASK_WEIGHTS_FILE)
    if (
        name in model_files
        and files.isfile(config_path)
        and read_json(config_path).get("registered_name") == ("gtr_keras>GTRBackbone")
    ):
        # keras-hub's download cache of a remote preset (`keras_hub.models.TextEmbedder.from_preset("gs://...")`)
        # holds no backbone weights yet when the task weights load: those are checked when they load.
        complete = any(files.isfile(os.path.join(directory, file)) for file in (WEIGHTS_FILE, SHARDED_WEIGHTS_FILE))
        check_model_directory(directory, load_weights=complete)
    weights = file_weights_by_path(model)
    check_shapes(
        {key: tuple(variable.shape) for key, variable in weights.items()}, read_weights(path, values=False), path
    )


_BUDGETS = ("sequence_length", "document_length", "query_length")
_ARCHITECTURE = {  # settings that the weights show, and how to say what the weights hold
    "num_layers": "{} encoder blocks",
    "vocabulary_size": "{} token embedding rows",
    "hidden_dim": "{}-dimensional token embeddings",
    "num_heads": "relative position biases for {} heads",
    "key_value_dim": "attention projections of {} dimensions per head",
    "intermediate_dim": "{}-dimensional feed-forward layers",
    "feedforward": "{} feed-forward layers",
    "num_buckets": "relative position biases for {} buckets",
    "embedding_dim": "a projection to {} dimensions",
}
_NOT_COMPARED = ("name", "trainable", "dtype", "tokenizer", "config_file")
_TOP_WEIGHTS = {
    "embedding": "token_embedding/embeddings",
    "relative_position_bias": "relative_position_bias/embeddings",
    "rms_normalization": "final_norm/scale",
    "final_norm": "final_norm/scale",
    "dense": "projection/kernel",
}
_BLOCK_WEIGHTS = {
    "attention/query_dense": "attention/query/kernel",
    "attention/key_dense": "attention/key/kernel",
    "attention/value_dense": "attention/value/kernel",
    "attention/output_dense": "attention/output/kernel",
    "attention_norm": "attention_norm/scale",
    "feedforward_norm": "feedforward_norm/scale",
    "feedforward_block/input_denses/dense": "feedforward/input/kernel",
    "feedforward_block/input_denses/dense_1": "feedforward/gate/kernel",
    "feedforward_block/output_dense": "feedforward/output/kernel",
}


def check_budgets(config, path, prefix=""):
    for key in _BUDGETS:
        value = config.get(key)
        if key in config and (isinstance(value, bool) or not isinstance(value, int) or value < 2):
            raise CheckpointError(f"{path}: {prefix}{key} must be at least 2 (one token and EOS), got {value!r}")


def _architecture(shapes):
    """The architecture settings that weights `{path: shape}` show (those of the weights present)."""

    def matrix(path):
        shape = tuple(shapes.get(path, ()))
        return shape if len(shape) == 2 else None

    implied = {}
    if matrix("token_embedding/embeddings"):
        implied["vocabulary_size"], implied["hidden_dim"] = matrix("token_embedding/embeddings")
    if matrix("relative_position_bias/embeddings"):
        implied["num_buckets"], implied["num_heads"] = matrix("relative_position_bias/embeddings")
    blocks = {path.split("/")[0] for path in shapes if path.startswith("block_")}
    if blocks:
        implied["num_layers"] = len(blocks)
        implied["feedforward"] = "gated-gelu" if "block_0/feedforward/gate/kernel" in shapes else "relu"
    if matrix("block_0/attention/query/kernel") and implied.get("num_heads"):
        implied["key_value_dim"] = matrix("block_0/attention/query/kernel")[1] // implied["num_heads"]
    if matrix("block_0/feedforward/input/kernel"):
        implied["intermediate_dim"] = matrix("block_0/feedforward/input/kernel")[1]
    if matrix("projection/kernel"):
        implied["embedding_dim"] = matrix("projection/kernel")[1]
    return implied


def check_architecture(config, shapes, config_path, weights_name, prefix=""):
    """Raises `CheckpointError` naming the first setting of `config` that weights `{path: shape}` contradict."""
    implied = _architecture(shapes)
    for key, holds in _ARCHITECTURE.items():
        if key in config and key in implied and config[key] != implied[key]:
            raise CheckpointError(
                f"{config_path}: {prefix}{key} is {config[key]!r} but {weights_name} holds {holds.format(implied[key])}"
            )


def _check_agreement(path, config, task_copy, part):
    for key, value in config.items():
        if key not in _NOT_COMPARED and key in task_copy and task_copy[key] != value:
            raise CheckpointError(
                f"{path}: {key} is {value!r} but the {part} in {TASK_FILE} has {task_copy[key]!r} "
                f"(TextEmbedder.from_preset reads {TASK_FILE}); make them agree"
            )


def _weight_path(h5_name):
    """The variable path (as `weights_by_path` names it) of a dataset of a Keras weights file, in the
    layout of either format; the dataset's own name for one that is no GTR weight."""
    parts = h5_name.split("/")
    parts = parts[1:] if parts[0] in ("layers", "encoder_blocks") else parts
    if parts[-2:] != ["vars", "0"]:
        return h5_name
    layer, sublayer = parts[0], "/".join(parts[1:-2])
    if not sublayer and layer in _TOP_WEIGHTS:
        return _TOP_WEIGHTS[layer]
    block = re.fullmatch(r"t5_encoder_block(?:_(\d+))?", layer)
    if block and sublayer in _BLOCK_WEIGHTS:
        return f"block_{block.group(1) or 0}/{_BLOCK_WEIGHTS[sublayer]}"
    return h5_name


def read_weights(path, values=True):
    """The weights in a Keras weights file (`.weights.h5`, or the `.weights.json` index of sharded ones)
    by variable path (`_weight_path`): arrays, or their shapes. Optimizer state is left out."""
    import h5py

    paths = [path]
    if path.endswith(".json"):
        shards = read_json(path).get("weight_map", {}).values()
        names = {name for shard in shards for name in (shard if isinstance(shard, list) else [shard])}
        paths = [os.path.join(os.path.dirname(path), name) for name in sorted(names)]
    weights = {}

    def collect(name, item):
        if isinstance(item, h5py.Dataset) and not name.startswith("optimizer/"):
            weights[_weight_path(name)] = item[()] if values else item.shape

    for file in paths:
        require_file(file)
        try:
            with h5py.File(file, "r") as f:
                f.visititems(collect)
        except (OSError, KeyError) as error:
            raise CheckpointError(f"{file}: unreadable weights file ({error})") from error
    return weights


def weights_by_path(model):
    """A model's weights by path below the models (`block_0/attention/query/kernel`, `projection/kernel`)."""
    owners = (model.name, getattr(model, "backbone", model).name)
    by_path = {}
    for variable in model.weights:
        path = variable.path
        for owner in owners:
            path = path[len(owner) + 1 :] if path.startswith(f"{owner}/") else path
        by_path[path] = variable
    return by_path


def check_shapes(expected, stored, source):
    """Raises `CheckpointError` unless `stored` `{path: shape}` holds exactly the paths and shapes of `expected`."""
    missing, extra = sorted(set(expected) - set(stored)), sorted(set(stored) - set(expected))
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CheckpointError(f"{source}: no weight for {missing[0]}{more}")
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise CheckpointError(f"{source}: holds {extra[0]}{more}, which the model built from its config does not have")
    for path, shape in expected.items():
        if tuple(stored[path]) != tuple(shape):
            raise CheckpointError(
                f"{source}: weight {path} has shape {tuple(stored[path])}, but the model built from the "
                f"config expects {tuple(shape)}"
            )


def file_weights_by_path(model):
    """The weights that a Keras weights file of `model` holds, by path (`weights_by_path`): all of a
    `GTRBackbone`'s; of a `GTRTextEmbedder`, those outside its backbone (its `task.weights.h5`)."""
    weights = weights_by_path(model)
    if hasattr(model, "backbone"):
        backbone_weights = {id(variable) for variable in model.backbone.weights}
        weights = {key: variable for key, variable in weights.items() if id(variable) not in backbone_weights}
    return weights


def assign_weights(model, tensors, source):
    """Assigns `{weight path: array}` (paths as `weights_by_path` names them): exactly the model's weights."""
    weights = weights_by_path(model)
    check_shapes(
        {path: tuple(v.shape) for path, v in weights.items()},
        {path: np.shape(value) for path, value in tensors.items()},
        source,
    )
    check_finite(tensors, source)
    for path, variable in weights.items():
        variable.assign(np.asarray(tensors[path]).astype(np.float32))


def check_finite(weights, source):
    """Raises `CheckpointError` naming `source` and the first weight of `{path: array or variable}` that holds
    NaN or infinity (a damaged or diverged model would give NaN embeddings and rankings without a word)."""
    for path, value in weights.items():
        array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
        if array.dtype.kind not in "fV":  # "V": bfloat16 (ml_dtypes), which numpy does not count as floating
            continue
        finite = np.isfinite(array.astype(np.float32))
        if not finite.all():
            count = int(array.size - finite.sum())
            raise CheckpointError(f"{source}: weight {path} holds {count} non-finite values (NaN or infinity)")


def read_spiece(directory):
    path = os.path.join(directory, SPIECE_FILE)
    require_file(path)
    proto = files.read_bytes(path)
    try:
        import sentencepiece

        sentencepiece.SentencePieceProcessor(model_proto=proto)
    except Exception as error:
        raise CheckpointError(f"{path}: corrupt SentencePiece model ({error})") from error
    return proto


def read_json(path):
    require_file(path)
    try:
        return json.loads(files.read_bytes(path).decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise CheckpointError(f"{path}: corrupt JSON ({error})") from error


def require_file(path):
    if not files.exists(path):
        raise CheckpointError(f"{path}: missing")


def check_safetensors(path):
    """Raises `CheckpointError` naming `path` where it is not a whole safetensors file: a damaged header, or a
    file shorter than its header says (a truncated download or copy). Reads the header only (of a local copy
    of a remote file), before a model is built from the file.

    Example:
    >>> check_safetensors("tests/fixtures/tiny-bert-cross-encoder/model.safetensors")
    """
    require_file(path)
    from safetensors import SafetensorError, safe_open

    with files.local_copy(path) as local:
        try:
            with safe_open(local, framework="numpy") as f:
                f.keys()
        except (SafetensorError, OSError) as error:
            raise CheckpointError(f"{local}: corrupt or unreadable safetensors file ({error})") from None
