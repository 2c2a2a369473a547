"""Model directories (keras-hub presets), and import of sentence-transformers GTR checkpoints.

A gtr-keras model directory is a keras-hub preset directory, as
`GTRTextEmbedder.save_to_preset` writes it: `config.json` + `model.weights.h5`
(the `GTRBackbone`), `task.json` + `task.weights.h5` (the `GTRTextEmbedder` and
its projection), `preprocessor.json` (token budgets), `tokenizer.json` +
`assets/tokenizer/vocabulary.spm` (the SentencePiece model) and `metadata.json`.
`keras_hub.models.TextEmbedder.from_preset(DIR)` loads it after `import gtr_keras`.

Directories of gtr-keras' first format (`config.json` with `"format": "gtr-keras"`,
`model.weights.h5`, `spiece.model`) still load, and `gtr-keras migrate` rewrites them.

Loading checks the settings against the weights: a setting that the weights
contradict (`num_layers` one lower than the blocks in `model.weights.h5`, a
changed `hidden_dim`, a token budget below 2, ...) raises `CheckpointError`
naming the file and setting, and a weights file must hold exactly the built
model's weights (Keras alone would ignore extra ones).

`convert_sentence_transformers` reads the layout that `sentence-transformers` writes
and the Hugging Face Hub serves for `sentence-transformers/gtr-t5-{base,large,xl,xxl}`:
`modules.json`, `config.json` + `model.safetensors` (T5 encoder), `1_Pooling/config.json`,
`2_Dense/config.json` + `2_Dense/model.safetensors`, `sentence_bert_config.json` and
`spiece.model`.

Model directories may be local or on any file system TensorFlow knows
(`gs://...`, `ram://...`): a remote one is copied to a temporary local
directory to load (`local_model_directory`), and `save` writes locally and
uploads.
"""

import contextlib
import hashlib
import json
import os
import re

import numpy as np

from gtr_keras import files
from gtr_keras.backbone import GTRBackbone
from gtr_keras.errors import CheckpointError, UserError
from gtr_keras.files import atomic_directory
from gtr_keras.preprocessor import GTRTextEmbedderPreprocessor
from gtr_keras.presets import HUB_IDS
from gtr_keras.tokenizer import DOCUMENT_LENGTH, QUERY_LENGTH, GTRTokenizer

LEGACY_FORMAT = "gtr-keras"
LEGACY_FORMAT_VERSION = 1
HF_PREFIX = "hf://"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
SHARDED_WEIGHTS_FILE = "model.weights.json"
TASK_FILE = "task.json"
TASK_WEIGHTS_FILE = "task.weights.h5"
PREPROCESSOR_FILE = "preprocessor.json"
SPIECE_FILE = "spiece.model"
# Schemes whose sources are not file systems: keras-hub's or `resolve_source`'s downloads.
DOWNLOAD_PREFIXES = (HF_PREFIX, "kaggle://", "modelscope://")
HUB_FILES = [
    "modules.json", "config.json", "model.safetensors", "sentence_bert_config.json", "spiece.model",
    "1_Pooling/config.json", "2_Dense/config.json", "2_Dense/model.safetensors",
]


def is_remote(path):
    """True for a path on a file system other than the local one (`gs://`, `ram://`, ...), which
    `local_model_directory` copies; False for local paths and download ids (`hf://`, `kaggle://`)."""
    return isinstance(path, (str, os.PathLike)) and not files.is_local(path) and not (
        os.fspath(path).startswith(DOWNLOAD_PREFIXES)
    )


@contextlib.contextmanager
def local_model_directory(directory):
    """A local directory holding model directory `directory`: itself when local, else a temporary copy.

    Errors about the copy's files raised in the block name them under
    `directory`, not under the temporary copy.

    Raises:
        CheckpointError: `directory` does not exist.
        DataError: its file system is one TensorFlow does not know.

    Example:
    >>> with local_model_directory("gs://bucket/models/gtr-base") as local:  # doctest: +SKIP
    ...     embedder = GTRTextEmbedder.from_preset(local)
    """
    path = os.fspath(directory)
    if not is_remote(path):
        yield path.removeprefix("file://")
        return
    path = path.rstrip("/")
    if not files.exists(path) or not files.isdir(path):
        raise CheckpointError(f"{path}: no such model directory")
    with files.local_copy(path) as local:
        try:
            yield local
        except UserError as error:
            raise type(error)(str(error).replace(local, path)) from error


def save(model, directory):
    """Writes a `GTRTextEmbedder` (or an `Encoder`'s) as a model directory, atomically.

    The directory is a keras-hub preset (`save_to_preset`); a crash leaves no
    half directory. A directory on another file system (`gs://...`) is
    written locally, then uploaded.

    Example:
    >>> gtr_keras.save(encoder, "models/my-gtr")
    """
    embedder = getattr(model, "model", model)
    with atomic_directory(directory) as staging:
        embedder.save_to_preset(str(staging))


def check_model_source(path):
    """Raises `CheckpointError` for a local model path that is neither a directory nor a name of `HUB_IDS`.

    Cheap (no model is read), so commands call it before reading their inputs.
    Ids with a scheme (`hf://`, `gs://`, ...) are checked where they are read.
    """
    path = os.fspath(path).removeprefix("file://")
    if "://" not in path and not files.isdir(path) and path not in HUB_IDS:
        raise CheckpointError(f"{path}: no such model directory")


def load(directory, jit_compile=False, dtype=None, query_length=None, document_length=None):
    """An `Encoder` (numpy batches in, numpy embeddings out) for a model directory or checkpoint.

    A shortcut for `GTRTextEmbedder.from_preset(directory, dtype=dtype)` with
    other token budgets and XLA; the model is `encoder.model`.

    Args:
        directory: a model directory, or anything `GTRTextEmbedder.from_preset`
            takes (a sentence-transformers checkpoint, `hf://...`).
        jit_compile: compile the forward pass with XLA.
        dtype: optional dtype policy for the model: `"bfloat16"` for
            bfloat16 inference (float32 embeddings out), `"mixed_bfloat16"`
            to train in bfloat16.
        query_length: token budget for queries instead of the saved one.
        document_length: token budget for documents instead of the saved one.

    Example:
    >>> encoder = gtr_keras.load("models/gtr-base")
    >>> fast = gtr_keras.load("models/gtr-base", dtype="bfloat16", document_length=256)
    """
    from gtr_keras.text_embedder import GTRTextEmbedder

    path = os.fspath(directory)
    if is_remote(path):
        with local_model_directory(path) as local:
            return load(local, jit_compile, dtype, query_length, document_length)
    check_model_source(path)
    path = path.removeprefix("file://")
    if "://" not in path and files.isdir(path):
        config_path = os.path.join(path, CONFIG_FILE)
        config = _read_json(config_path)
        known = "registered_name" in config or config.get("format") == LEGACY_FORMAT
        if not known and not files.isfile(os.path.join(path, "modules.json")):
            raise CheckpointError(
                f"{config_path}: not a gtr-keras model directory (a keras-hub preset). "
                "For a Hugging Face T5 checkpoint, use its sentence-transformers repository with "
                "`gtr-keras convert SRC OUT_DIR`."
            )
    try:
        embedder = GTRTextEmbedder.from_preset(path, dtype=dtype)
    except CheckpointError:
        raise
    except (ValueError, OSError, KeyError, TypeError) as error:
        raise CheckpointError(f"{path}: cannot load the model ({type(error).__name__}: {error})") from error
    if query_length:
        embedder.preprocessor.query_length = query_length
    if document_length:
        embedder.preprocessor.sequence_length = document_length
    return embedder.batch_encoder(jit_compile)


def fingerprint(model):
    """SHA-256 (hex) of a GTR model: its weights, vocabulary and architecture.

    Covers every weight (position, shape, dtype, values), the SentencePiece
    vocabulary and the architecture; the same model gives the same
    fingerprint in any directory format. The token budgets are not covered
    (callers record them beside it where they matter); the precision is, as
    the weights' dtype. Resumed jobs and indexes record it to detect a changed
    model.

    Args:
        model: a `GTRTextEmbedder`, or an `Encoder` (its `.model`).

    Example:
    >>> fingerprint(gtr_keras.load("models/gtr-base")) == fingerprint(gtr_keras.load("models/copy"))
    True
    """
    embedder = getattr(model, "model", model)
    settings = {key: value for key, value in embedder.backbone.get_config().items() if key not in ("name", "dtype")}
    settings["embedding_dim"] = embedder.embedding_dim
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8"))
    digest.update(embedder.preprocessor.tokenizer.proto)
    update_with_weights(digest, embedder.weights)
    return digest.hexdigest()


def update_with_weights(digest, weights):
    """Feeds every weight (position, shape, dtype, values) into a `hashlib` digest."""
    for number, weight in enumerate(weights):
        value = np.ascontiguousarray(weight.numpy())
        digest.update(f"{number}:{value.shape}:{value.dtype}".encode("utf-8"))
        digest.update(value.tobytes())


def load_foreign_format(preset, load_weights=True, dtype=None, **kwargs):
    """A `GTRTextEmbedder` from a source that is not a keras-hub preset, or None for a preset.

    Sources: a sentence-transformers checkpoint directory, `hf://ORG/NAME`, a
    name of `HUB_IDS`, or a model directory of gtr-keras' first format.
    """
    preset = os.fspath(preset)
    if is_remote(preset):
        with local_model_directory(preset) as local:
            return load_foreign_format(local, load_weights, dtype, **kwargs)
    directory = not preset.startswith(DOWNLOAD_PREFIXES)
    legacy_config = _legacy_config(preset) if directory else None
    if legacy_config is not None:
        return _load_legacy(preset, legacy_config, load_weights, dtype)
    if preset in HUB_IDS:
        source = HUB_IDS[preset]
    elif preset.startswith(HF_PREFIX) or (directory and files.isfile(os.path.join(preset, "modules.json"))):
        source = preset  # `resolve_source` takes hf:// ids and directories
    else:
        return None
    if kwargs:
        raise ValueError(f"{preset}: a sentence-transformers checkpoint takes no {sorted(kwargs)}")
    return convert_sentence_transformers(source, dtype=dtype, load_weights=load_weights)


def migrate(source, directory):
    """Rewrites a model directory of gtr-keras' first format as a keras-hub preset directory.

    Example:
    >>> migrate("models/old-gtr", "models/gtr")
    """
    source = os.fspath(source)
    with local_model_directory(source) as local:
        config = _legacy_config(local)
        if config is None:
            raise CheckpointError(f"{os.path.join(local, CONFIG_FILE)}: not a model directory of the first format")
        embedder = _load_legacy(local, config)
    save(embedder, directory)


def _legacy_config(directory):
    """The `config.json` of a model directory of the first format, or None for anything else."""
    path = os.path.join(directory, CONFIG_FILE)
    if not files.isfile(path):
        return None
    config = _read_json(path)
    return config if config.get("format") == LEGACY_FORMAT else None


def _load_legacy(directory, config, load_weights=True, dtype=None):
    from gtr_keras.text_embedder import GTRTextEmbedder

    config_path = os.path.join(directory, CONFIG_FILE)
    if config.get("format_version", 0) > LEGACY_FORMAT_VERSION:
        raise CheckpointError(f"{config_path}: format_version {config['format_version']} is newer than this gtr-keras")
    model_args = {k: v for k, v in config["model"].items() if k != "name"}
    tok = {"document_length": DOCUMENT_LENGTH, "query_length": QUERY_LENGTH, **config.get("tokenizer", {})}
    _check_budgets(tok, config_path, "tokenizer.")
    weights_path = os.path.join(directory, WEIGHTS_FILE)
    tensors = _read_weights(weights_path) if load_weights else {}
    _check_architecture(model_args, {path: value.shape for path, value in tensors.items()}, config_path,
                        WEIGHTS_FILE, "model.")
    tokenizer = GTRTokenizer(_read_spiece(directory), lowercase=tok.get("lowercase", False))
    preprocessor = GTRTextEmbedderPreprocessor(tokenizer, tok["document_length"], tok["query_length"])
    embedding_dim = model_args.pop("embedding_dim", 768)
    embedder = GTRTextEmbedder(GTRBackbone(**model_args, dtype=dtype), preprocessor, embedding_dim)
    if load_weights:
        _assign(embedder, tensors, weights_path)
    return embedder


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
    if is_remote(directory):
        with local_model_directory(directory) as local:
            return check_model_directory(local, load_weights)
    config_path, task_path, preprocessor_path = (
        os.path.join(directory, name) for name in (CONFIG_FILE, TASK_FILE, PREPROCESSOR_FILE)
    )
    backbone = _read_json(config_path).get("config", {})
    task = _read_json(task_path).get("config", {}) if files.isfile(task_path) else {}
    task_backbone = (task.get("backbone") or {}).get("config", {})
    task_preprocessor = (task.get("preprocessor") or {}).get("config", {})
    preprocessor = _read_json(preprocessor_path).get("config", {}) if files.isfile(preprocessor_path) else {}
    _check_budgets(preprocessor, preprocessor_path)
    _check_budgets(task_preprocessor, task_path, "preprocessor.")
    if load_weights:
        weights_path = os.path.join(directory, WEIGHTS_FILE)
        if not files.isfile(weights_path) and files.isfile(os.path.join(directory, SHARDED_WEIGHTS_FILE)):
            weights_path = os.path.join(directory, SHARDED_WEIGHTS_FILE)
        shapes = _read_weights(weights_path, values=False)
        weights_name = os.path.basename(weights_path)
        _check_architecture(backbone, shapes, config_path, weights_name)
        _check_architecture(task_backbone, shapes, task_path, weights_name, "backbone.")
        task_weights_path = os.path.join(directory, TASK_WEIGHTS_FILE)
        if task and files.isfile(task_weights_path):
            _check_architecture(task, _read_weights(task_weights_path, values=False), task_path, TASK_WEIGHTS_FILE)
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
    if name in model_files and files.isfile(config_path) and _read_json(config_path).get("registered_name") == (
        "gtr_keras>GTRBackbone"
    ):
        # keras-hub's download cache of a remote preset (`keras_hub.models.TextEmbedder.from_preset("gs://...")`)
        # holds no backbone weights yet when the task weights load: those are checked when they load.
        complete = any(files.isfile(os.path.join(directory, file)) for file in (WEIGHTS_FILE, SHARDED_WEIGHTS_FILE))
        check_model_directory(directory, load_weights=complete)
    weights = _weights_by_path(model)
    if hasattr(model, "backbone"):
        backbone_weights = {id(variable) for variable in model.backbone.weights}
        weights = {key: variable for key, variable in weights.items() if id(variable) not in backbone_weights}
    _check_shapes({key: tuple(variable.shape) for key, variable in weights.items()},
                  _read_weights(path, values=False), path)


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


def _check_budgets(config, path, prefix=""):
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


def _check_architecture(config, shapes, config_path, weights_name, prefix=""):
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
    """The variable path (as `_weights_by_path` names it) of a dataset of a Keras weights file, in the
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


def _read_weights(path, values=True):
    """The weights in a Keras weights file (`.weights.h5`, or the `.weights.json` index of sharded ones)
    by variable path (`_weight_path`): arrays, or their shapes. Optimizer state is left out."""
    import h5py

    paths = [path]
    if path.endswith(".json"):
        shards = _read_json(path).get("weight_map", {}).values()
        names = {name for shard in shards for name in (shard if isinstance(shard, list) else [shard])}
        paths = [os.path.join(os.path.dirname(path), name) for name in sorted(names)]
    weights = {}

    def collect(name, item):
        if isinstance(item, h5py.Dataset) and not name.startswith("optimizer/"):
            weights[_weight_path(name)] = item[()] if values else item.shape

    for file in paths:
        _require(file)
        try:
            with h5py.File(file, "r") as f:
                f.visititems(collect)
        except (OSError, KeyError) as error:
            raise CheckpointError(f"{file}: unreadable weights file ({error})") from error
    return weights


def resolve_source(source, cache_dir=None):
    """A local checkpoint directory for `source`: a path, or a Hugging Face Hub repo id.

    Hub ids (e.g. `sentence-transformers/gtr-t5-base`) are downloaded with
    `huggingface_hub`; without network access this fails with a message saying
    how to bring the files by hand.
    """
    if source.startswith(HF_PREFIX):
        source = source[len(HF_PREFIX):]
    elif files.isdir(source):
        return source
    if files.exists(source):
        raise CheckpointError(f"{source}: expected a checkpoint directory, got a file")
    if source.count("/") != 1 or source.startswith((".", "/")):
        raise CheckpointError(f"{source}: no such directory (and not a Hugging Face repo id like org/name)")
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(
            source, cache_dir=cache_dir,
            allow_patterns=HUB_FILES + ["pytorch_model.bin", "2_Dense/pytorch_model.bin"],
        )
    except Exception as error:
        raise CheckpointError(
            f"could not download {source!r} from the Hugging Face Hub ({type(error).__name__}: {error}). "
            "If this machine is offline, download the repository elsewhere (e.g. `huggingface-cli download "
            f"{source}`) and pass its directory instead."
        ) from error


def convert_sentence_transformers(source, query_length=QUERY_LENGTH, cache_dir=None, dtype=None,
                                  load_weights=True):
    """Builds a `GTRTextEmbedder` from a sentence-transformers GTR checkpoint.

    Args:
        source: checkpoint directory or Hugging Face repo id.
        query_length: query token budget (sentence-transformers has one length
            for everything; GTR queries use 64).
        cache_dir: Hugging Face cache directory for downloads.
        dtype: dtype policy of the model.
        load_weights: read the weights (else: the checkpoint's architecture,
            randomly initialised).

    Example:
    >>> embedder = convert_sentence_transformers("sentence-transformers/gtr-t5-base")
    >>> gtr_keras.save(embedder, "models/gtr-base")
    """
    from gtr_keras.text_embedder import GTRTextEmbedder

    if is_remote(source):
        with local_model_directory(source) as local:
            return convert_sentence_transformers(local, query_length, cache_dir, dtype, load_weights)
    root = resolve_source(os.fspath(source), cache_dir)
    modules = _read_json(os.path.join(root, "modules.json"))
    paths = {m.get("type", "").rsplit(".", 1)[-1]: m.get("path", "") for m in modules}
    for required in ("Transformer", "Pooling", "Dense"):
        if required not in paths:
            raise CheckpointError(
                f"{os.path.join(root, 'modules.json')}: no {required} module; a GTR checkpoint has "
                "Transformer, Pooling (mean), Dense (no bias) and Normalize"
            )
    transformer_dir = os.path.join(root, paths["Transformer"])
    hf_config_path = os.path.join(transformer_dir, "config.json")
    model_args = _model_args(_read_json(hf_config_path), hf_config_path)
    _check_pooling(os.path.join(root, paths["Pooling"], "config.json"))
    dense_dir = os.path.join(root, paths["Dense"])
    dense_config_path = os.path.join(dense_dir, "config.json")
    dense_config = _read_json(dense_config_path)
    if dense_config.get("bias", True) or "Identity" not in dense_config.get("activation_function", ""):
        raise CheckpointError(f"{dense_config_path}: GTR's projection has no bias and no activation")

    st_config_path = os.path.join(transformer_dir, "sentence_bert_config.json")
    st_config = _read_json(st_config_path) if files.exists(st_config_path) else {}
    document_length = st_config.get("max_seq_length") or _tokenizer_max_length(transformer_dir)
    tokenizer = GTRTokenizer(_read_spiece(transformer_dir), lowercase=st_config.get("do_lower_case", False))
    preprocessor = GTRTextEmbedderPreprocessor(tokenizer, document_length, min(query_length, document_length))
    embedder = GTRTextEmbedder(GTRBackbone(**model_args, dtype=dtype), preprocessor, dense_config["out_features"])
    if load_weights:
        tensors = _read_tensors(transformer_dir)
        tensors.update({f"dense.{k}": v for k, v in _read_tensors(dense_dir).items()})
        _assign(embedder, _hf_tensors_by_path(embedder, tensors, model_args["feedforward"]), root)
    return embedder


def _model_args(hf_config, path):
    if hf_config.get("model_type") != "t5":
        arch = hf_config.get("architectures") or hf_config.get("model_type")
        raise CheckpointError(f"{path}: unknown architecture {arch!r}; gtr-keras reads T5 encoders (model_type 't5')")
    feedforward = hf_config.get("feed_forward_proj", "relu")
    if feedforward not in ("relu", "gated-gelu"):
        raise CheckpointError(f"{path}: feed_forward_proj {feedforward!r} is not supported (relu, gated-gelu)")
    return dict(
        vocabulary_size=hf_config["vocab_size"],
        num_layers=hf_config["num_layers"],
        hidden_dim=hf_config["d_model"],
        key_value_dim=hf_config["d_kv"],
        num_heads=hf_config["num_heads"],
        intermediate_dim=hf_config["d_ff"],
        feedforward=feedforward,
        num_buckets=hf_config.get("relative_attention_num_buckets", 32),
        max_distance=hf_config.get("relative_attention_max_distance", 128),
        layer_norm_epsilon=hf_config.get("layer_norm_epsilon", 1e-6),
    )


def _tokenizer_max_length(directory):
    path = os.path.join(directory, "tokenizer_config.json")
    length = _read_json(path).get("model_max_length") if files.exists(path) else None
    return length if isinstance(length, int) and length <= 100_000 else DOCUMENT_LENGTH


def _check_pooling(path):
    if not files.exists(path):
        return
    pooling = _read_json(path)
    if "pooling_mode" in pooling:  # sentence-transformers >= 6
        modes = [pooling["pooling_mode"]]
    else:
        modes = [k[len("pooling_mode_"):] for k, v in pooling.items() if k.startswith("pooling_mode_") and v]
    if modes not in (["mean"], ["mean_tokens"]):
        raise CheckpointError(f"{path}: GTR uses mean pooling only, this checkpoint uses {modes or 'none'}")


def _hf_name(path, feedforward):
    """The Hugging Face T5 tensor name for a Keras weight path, and whether to transpose."""
    parts = path.split("/")
    if path == "token_embedding/embeddings":
        return "shared.weight", False
    if path == "relative_position_bias/embeddings":
        return "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", False
    if path == "final_norm/scale":
        return "encoder.final_layer_norm.weight", False
    if path == "projection/kernel":
        return "dense.linear.weight", True
    block = f"encoder.block.{parts[0].split('_')[1]}"
    sublayer = "/".join(parts[1:])
    names = {
        "attention_norm/scale": ("layer.0.layer_norm.weight", False),
        "attention/query/kernel": ("layer.0.SelfAttention.q.weight", True),
        "attention/key/kernel": ("layer.0.SelfAttention.k.weight", True),
        "attention/value/kernel": ("layer.0.SelfAttention.v.weight", True),
        "attention/output/kernel": ("layer.0.SelfAttention.o.weight", True),
        "feedforward_norm/scale": ("layer.1.layer_norm.weight", False),
        "feedforward/output/kernel": ("layer.1.DenseReluDense.wo.weight", True),
        "feedforward/input/kernel": (
            "layer.1.DenseReluDense.wi.weight" if feedforward == "relu" else "layer.1.DenseReluDense.wi_1.weight",
            True,
        ),
        "feedforward/gate/kernel": ("layer.1.DenseReluDense.wi_0.weight", True),
    }
    name, transpose = names[sublayer]
    return f"{block}.{name}", transpose


def _hf_tensors_by_path(model, tensors, feedforward):
    """The checkpoint's tensors under the model's variable paths (Hugging Face `[out, in]` kernels transposed)."""
    if "shared.weight" not in tensors and "encoder.embed_tokens.weight" in tensors:
        tensors["shared.weight"] = tensors["encoder.embed_tokens.weight"]
    by_path = {}
    for path, variable in _weights_by_path(model).items():
        name, transpose = _hf_name(path, feedforward)
        if name not in tensors:
            raise CheckpointError(f"checkpoint has no tensor {name!r} (needed for {path})")
        stored, expected = tensors[name].shape, tuple(variable.shape)
        if stored != (expected[::-1] if transpose else expected):
            raise CheckpointError(
                f"tensor {name!r} has shape {tuple(stored)} in the checkpoint, but the model built from its "
                f"config expects {expected[::-1] if transpose else expected}"
            )
        by_path[path] = tensors[name].T if transpose else tensors[name]
    return by_path


def _weights_by_path(model):
    """A model's weights by path below the models (`block_0/attention/query/kernel`, `projection/kernel`)."""
    owners = (model.name, getattr(model, "backbone", model).name)
    by_path = {}
    for variable in model.weights:
        path = variable.path
        for owner in owners:
            path = path[len(owner) + 1:] if path.startswith(f"{owner}/") else path
        by_path[path] = variable
    return by_path


def _check_shapes(expected, stored, source):
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


def _assign(model, tensors, source):
    """Assigns `{weight path: array}` (paths as `_weights_by_path` names them): exactly the model's weights."""
    weights = _weights_by_path(model)
    _check_shapes({path: tuple(v.shape) for path, v in weights.items()},
                  {path: np.shape(value) for path, value in tensors.items()}, source)
    for path, variable in weights.items():
        variable.assign(np.asarray(tensors[path]).astype(np.float32))


def _read_tensors(directory):
    safetensors_path = os.path.join(directory, "model.safetensors")
    if files.exists(safetensors_path):
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        try:
            return load_file(safetensors_path)
        except (SafetensorError, OSError, ValueError) as error:
            raise CheckpointError(f"{safetensors_path}: corrupt or unreadable safetensors file ({error})") from error
    bin_path = os.path.join(directory, "pytorch_model.bin")
    if files.exists(bin_path):
        try:
            import torch
        except ImportError as error:
            raise CheckpointError(
                f"{bin_path}: reading pytorch_model.bin needs PyTorch, which gtr-keras does not require. Use the "
                "checkpoint's model.safetensors files, or install the [reference] extra."
            ) from error
        try:
            state = torch.load(bin_path, map_location="cpu", weights_only=True)
        except Exception as error:
            raise CheckpointError(f"{bin_path}: corrupt or unreadable PyTorch file ({error})") from error
        return {k: v.float().numpy() for k, v in state.items()}
    raise CheckpointError(f"{safetensors_path}: missing (no model.safetensors or pytorch_model.bin in {directory})")


def _read_spiece(directory):
    path = os.path.join(directory, SPIECE_FILE)
    _require(path)
    proto = files.read_bytes(path)
    try:
        import sentencepiece

        sentencepiece.SentencePieceProcessor(model_proto=proto)
    except Exception as error:
        raise CheckpointError(f"{path}: corrupt SentencePiece model ({error})") from error
    return proto


def _read_json(path):
    _require(path)
    try:
        return json.loads(files.read_bytes(path).decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: corrupt JSON ({error})") from error


def _require(path):
    if not files.exists(path):
        raise CheckpointError(f"{path}: missing")
