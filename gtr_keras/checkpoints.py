"""Model directories (keras-hub presets), and import of sentence-transformers GTR checkpoints.

A gtr-keras model directory is a keras-hub preset directory, as
`GTRTextEmbedder.save_to_preset` writes it: `config.json` + `model.weights.h5`
(the `GTRBackbone`), `task.json` + `task.weights.h5` (the `GTRTextEmbedder` and
its projection), `preprocessor.json` (token budgets), `tokenizer.json` +
`assets/tokenizer/vocabulary.spm` (the SentencePiece model) and `metadata.json`.
`keras_hub.models.TextEmbedder.from_preset(DIR)` loads it after `import gtr_keras`.

Directories of gtr-keras' first format (`config.json` with `"format": "gtr-keras"`,
`model.weights.h5`, `spiece.model`) still load, and `gtr-keras migrate` rewrites them.

`convert_sentence_transformers` reads the layout that `sentence-transformers` writes
and the Hugging Face Hub serves for `sentence-transformers/gtr-t5-{base,large,xl,xxl}`:
`modules.json`, `config.json` + `model.safetensors` (T5 encoder), `1_Pooling/config.json`,
`2_Dense/config.json` + `2_Dense/model.safetensors`, `sentence_bert_config.json` and
`spiece.model`.
"""

import hashlib
import json
import os

import numpy as np

from gtr_keras.backbone import GTRBackbone
from gtr_keras.errors import CheckpointError
from gtr_keras.files import atomic_directory
from gtr_keras.preprocessor import GTRTextEmbedderPreprocessor
from gtr_keras.presets import HUB_IDS
from gtr_keras.tokenizer import DOCUMENT_LENGTH, QUERY_LENGTH, GTRTokenizer

LEGACY_FORMAT = "gtr-keras"
LEGACY_FORMAT_VERSION = 1
HF_PREFIX = "hf://"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
SPIECE_FILE = "spiece.model"
HUB_FILES = [
    "modules.json", "config.json", "model.safetensors", "sentence_bert_config.json", "spiece.model",
    "1_Pooling/config.json", "2_Dense/config.json", "2_Dense/model.safetensors",
]


def save(model, directory):
    """Writes a `GTRTextEmbedder` (or an `Encoder`'s) as a model directory, atomically.

    The directory is a keras-hub preset (`save_to_preset`); a crash leaves no half directory.

    Example:
    >>> gtr_keras.save(encoder, "models/my-gtr")
    """
    embedder = getattr(model, "model", model)
    with atomic_directory(directory) as staging:
        embedder.save_to_preset(str(staging))


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
    if "://" not in path and not os.path.isdir(path) and path not in HUB_IDS:
        raise CheckpointError(f"{path}: no such model directory")
    if os.path.isdir(path):
        config_path = os.path.join(path, CONFIG_FILE)
        config = _read_json(config_path)
        known = "registered_name" in config or config.get("format") == LEGACY_FORMAT
        if not known and not os.path.isfile(os.path.join(path, "modules.json")):
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
    """SHA-256 (hex) of all that determines a GTR model's embeddings.

    Covers every weight (position, shape, dtype, values), the SentencePiece
    vocabulary, the architecture, the compute dtype and both token budgets;
    the same model gives the same fingerprint in any directory format.
    Resumed jobs and indexes record it to detect a changed model.

    Args:
        model: a `GTRTextEmbedder`, or an `Encoder` (its `.model`).

    Example:
    >>> fingerprint(gtr_keras.load("models/gtr-base")) == fingerprint(gtr_keras.load("models/copy"))
    True
    """
    embedder = getattr(model, "model", model)
    settings = {key: value for key, value in embedder.backbone.get_config().items() if key not in ("name", "dtype")}
    settings.update(embedding_dim=embedder.embedding_dim, compute_dtype=embedder.compute_dtype,
                    query_length=embedder.query_length, document_length=embedder.document_length)
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8"))
    digest.update(embedder.preprocessor.tokenizer.proto)
    for number, weight in enumerate(embedder.weights):
        value = np.ascontiguousarray(weight.numpy())
        digest.update(f"{number}:{value.shape}:{value.dtype}".encode("utf-8"))
        digest.update(value.tobytes())
    return digest.hexdigest()


def load_foreign_format(preset, load_weights=True, dtype=None, **kwargs):
    """A `GTRTextEmbedder` from a source that is not a keras-hub preset, or None for a preset.

    Sources: a sentence-transformers checkpoint directory, `hf://ORG/NAME`, a
    name of `HUB_IDS`, or a model directory of gtr-keras' first format.
    """
    preset = os.fspath(preset)
    legacy_config = _legacy_config(preset)
    if legacy_config is not None:
        return _load_legacy(preset, legacy_config, load_weights, dtype)
    if preset in HUB_IDS:
        source = HUB_IDS[preset]
    elif preset.startswith(HF_PREFIX) or os.path.isfile(os.path.join(preset, "modules.json")):
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
    config = _legacy_config(source)
    if config is None:
        raise CheckpointError(f"{os.path.join(source, CONFIG_FILE)}: not a model directory of the first format")
    save(_load_legacy(source, config), directory)


def _legacy_config(directory):
    """The `config.json` of a model directory of the first format, or None for anything else."""
    path = os.path.join(directory, CONFIG_FILE)
    if not os.path.isfile(path):
        return None
    config = _read_json(path)
    return config if config.get("format") == LEGACY_FORMAT else None


def _load_legacy(directory, config, load_weights=True, dtype=None):
    from gtr_keras.text_embedder import GTRTextEmbedder

    config_path = os.path.join(directory, CONFIG_FILE)
    if config.get("format_version", 0) > LEGACY_FORMAT_VERSION:
        raise CheckpointError(f"{config_path}: format_version {config['format_version']} is newer than this gtr-keras")
    model_args = {k: v for k, v in config["model"].items() if k != "name"}
    tok = config.get("tokenizer", {})
    tokenizer = GTRTokenizer(_read_spiece(directory), lowercase=tok.get("lowercase", False))
    preprocessor = GTRTextEmbedderPreprocessor(
        tokenizer, tok.get("document_length", DOCUMENT_LENGTH), tok.get("query_length", QUERY_LENGTH)
    )
    embedding_dim = model_args.pop("embedding_dim", 768)
    embedder = GTRTextEmbedder(GTRBackbone(**model_args, dtype=dtype), preprocessor, embedding_dim)
    if load_weights:
        weights_path = os.path.join(directory, WEIGHTS_FILE)
        _require(weights_path)
        _assign(embedder, _read_legacy_weights(weights_path), weights_path)
    return embedder


def _legacy_path(h5_name):
    """The variable path of a weight of the first format's `model.weights.h5` (Keras' auto-named layers)."""
    parts = h5_name.split("/")[1:]
    layer = parts[0]
    top = {
        "embedding": "token_embedding/embeddings",
        "relative_position_bias": "relative_position_bias/embeddings",
        "rms_normalization": "final_norm/scale",
        "dense": "projection/kernel",
    }
    if layer in top:
        return top[layer]
    block = "block_" + (layer.rsplit("_", 1)[1] if layer != "t5_encoder_block" else "0")
    sublayer = {
        "attention/query_dense": "attention/query/kernel",
        "attention/key_dense": "attention/key/kernel",
        "attention/value_dense": "attention/value/kernel",
        "attention/output_dense": "attention/output/kernel",
        "attention_norm": "attention_norm/scale",
        "feedforward_norm": "feedforward_norm/scale",
        "feedforward_block/input_denses/dense": "feedforward/input/kernel",
        "feedforward_block/input_denses/dense_1": "feedforward/gate/kernel",
        "feedforward_block/output_dense": "feedforward/output/kernel",
    }["/".join(parts[1:-2])]
    return f"{block}/{sublayer}"


def _read_legacy_weights(path):
    import h5py

    tensors = {}

    def collect(name, item):
        if isinstance(item, h5py.Dataset):
            tensors[_legacy_path(name)] = item[()]

    try:
        with h5py.File(path, "r") as f:
            f.visititems(collect)
    except (OSError, KeyError, IndexError) as error:
        raise CheckpointError(f"{path}: unreadable or unexpected weights file ({error})") from error
    return tensors


def resolve_source(source, cache_dir=None):
    """A local checkpoint directory for `source`: a path, or a Hugging Face Hub repo id.

    Hub ids (e.g. `sentence-transformers/gtr-t5-base`) are downloaded with
    `huggingface_hub`; without network access this fails with a message saying
    how to bring the files by hand.
    """
    if source.startswith(HF_PREFIX):
        source = source[len(HF_PREFIX):]
    elif os.path.isdir(source):
        return source
    if os.path.exists(source):
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

    root = resolve_source(source, cache_dir)
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
    st_config = _read_json(st_config_path) if os.path.exists(st_config_path) else {}
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
    length = _read_json(path).get("model_max_length") if os.path.exists(path) else None
    return length if isinstance(length, int) and length <= 100_000 else DOCUMENT_LENGTH


def _check_pooling(path):
    if not os.path.exists(path):
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


def _weights_by_path(embedder):
    """The embedder's weights by path below the models (`block_0/attention/query/kernel`, `projection/kernel`)."""
    by_path = {}
    for variable in embedder.weights:
        path = variable.path
        for owner in (embedder.name, embedder.backbone.name):
            path = path[len(owner) + 1:] if path.startswith(f"{owner}/") else path
        by_path[path] = variable
    return by_path


def _assign(model, tensors, source):
    """Assigns `{weight path: array}` (paths as `_weights_by_path` names them); every weight must be there."""
    for path, variable in _weights_by_path(model).items():
        if path not in tensors:
            raise CheckpointError(f"{source}: no weight for {path}")
        value = np.asarray(tensors[path])
        if value.shape != tuple(variable.shape):
            raise CheckpointError(
                f"{source}: weight {path} has shape {value.shape}, but the model built from the "
                f"config expects {tuple(variable.shape)}"
            )
        variable.assign(value.astype(np.float32))


def _read_tensors(directory):
    safetensors_path = os.path.join(directory, "model.safetensors")
    if os.path.exists(safetensors_path):
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        try:
            return load_file(safetensors_path)
        except (SafetensorError, OSError, ValueError) as error:
            raise CheckpointError(f"{safetensors_path}: corrupt or unreadable safetensors file ({error})") from error
    bin_path = os.path.join(directory, "pytorch_model.bin")
    if os.path.exists(bin_path):
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
    with open(path, "rb") as f:
        proto = f.read()
    try:
        import sentencepiece

        sentencepiece.SentencePieceProcessor(model_proto=proto)
    except Exception as error:
        raise CheckpointError(f"{path}: corrupt SentencePiece model ({error})") from error
    return proto


def _read_json(path):
    _require(path)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CheckpointError(f"{path}: corrupt JSON ({error})") from error


def _require(path):
    if not os.path.exists(path):
        raise CheckpointError(f"{path}: missing")
