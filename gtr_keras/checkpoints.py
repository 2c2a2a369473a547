"""Model directories, and import of published sentence-transformers GTR checkpoints.

A gtr-keras model directory holds:

- `config.json`: `{"format": "gtr-keras", "format_version": 1, "model": {...GTREncoder
  arguments...}, "tokenizer": {"query_length": 64, "document_length": 512, "lowercase": false}}`
- `model.weights.h5`: the Keras weights,
- `spiece.model`: the SentencePiece model.

`convert_sentence_transformers` reads the layout that `sentence-transformers` writes
and the Hugging Face Hub serves for `sentence-transformers/gtr-t5-{base,large,xl,xxl}`:
`modules.json`, `config.json` + `model.safetensors` (T5 encoder), `1_Pooling/config.json`,
`2_Dense/config.json` + `2_Dense/model.safetensors`, `sentence_bert_config.json` and
`spiece.model`.
"""

import json
import os

import numpy as np

from gtr_keras.encoder import Encoder
from gtr_keras.files import atomic_directory
from gtr_keras.model import GTREncoder
from gtr_keras.tokenizer import DOCUMENT_LENGTH, QUERY_LENGTH, GTRTokenizer

FORMAT = "gtr-keras"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
SPIECE_FILE = "spiece.model"
HUB_FILES = [
    "modules.json", "config.json", "model.safetensors", "sentence_bert_config.json", "spiece.model",
    "1_Pooling/config.json", "2_Dense/config.json", "2_Dense/model.safetensors",
]


class CheckpointError(ValueError):
    """A checkpoint file is missing, unreadable or does not fit the model."""


def save(encoder, directory):
    """Writes an `Encoder` as a model directory (atomically: a crash leaves no half directory).

    Example:
    >>> gtr_keras.save(encoder, "models/my-gtr")
    """
    with atomic_directory(directory) as staging:
        config = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "model": encoder.model.get_config(),
            "tokenizer": {
                "query_length": encoder.query_length,
                "document_length": encoder.document_length,
                "lowercase": encoder.tokenizer.lowercase,
            },
        }
        with open(os.path.join(staging, CONFIG_FILE), "w") as f:
            json.dump(config, f, indent=2)
        encoder.model.save_weights(os.path.join(staging, WEIGHTS_FILE))
        encoder.tokenizer.save_assets(str(staging))


def load(directory, jit_compile=False, dtype=None, query_length=None, document_length=None):
    """Loads a model directory written by `save` or `gtr-keras convert`.

    Args:
        directory: the model directory.
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
    config_path = os.path.join(directory, CONFIG_FILE)
    config = _read_json(config_path)
    if config.get("format") != FORMAT:
        raise CheckpointError(
            f"{config_path}: not a gtr-keras model directory (no \"format\": \"gtr-keras\"). "
            "For a sentence-transformers checkpoint run `gtr-keras convert SRC OUT_DIR` first."
        )
    if config.get("format_version", 0) > FORMAT_VERSION:
        raise CheckpointError(f"{config_path}: format_version {config['format_version']} is newer than this gtr-keras")
    model_args = dict(config["model"])
    if dtype is not None:
        model_args["dtype"] = dtype
    model = GTREncoder(**model_args)
    weights_path = os.path.join(directory, WEIGHTS_FILE)
    _require(weights_path)
    try:
        model.load_weights(weights_path)
    except Exception as error:
        raise CheckpointError(f"{weights_path}: cannot load weights ({error})") from error
    tok = config.get("tokenizer", {})
    tokenizer = GTRTokenizer(_read_spiece(directory), lowercase=tok.get("lowercase", False))
    return Encoder(
        model, tokenizer,
        query_length or tok.get("query_length", QUERY_LENGTH),
        document_length or tok.get("document_length", DOCUMENT_LENGTH),
        jit_compile=jit_compile,
    )


def resolve_source(source, cache_dir=None):
    """A local checkpoint directory for `source`: a path, or a Hugging Face Hub repo id.

    Hub ids (e.g. `sentence-transformers/gtr-t5-base`) are downloaded with
    `huggingface_hub`; without network access this fails with a message saying
    how to bring the files by hand.
    """
    if os.path.isdir(source):
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


def convert_sentence_transformers(source, query_length=QUERY_LENGTH, cache_dir=None):
    """Builds an `Encoder` from a sentence-transformers GTR checkpoint.

    Args:
        source: checkpoint directory or Hugging Face repo id.
        query_length: query token budget (sentence-transformers has one length
            for everything; GTR queries use 64).
        cache_dir: Hugging Face cache directory for downloads.

    Example:
    >>> encoder = convert_sentence_transformers("sentence-transformers/gtr-t5-base")
    >>> gtr_keras.save(encoder, "models/gtr-base")
    """
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
    hf_config = _read_json(hf_config_path)
    model_args = _model_args(hf_config, hf_config_path)
    _check_pooling(os.path.join(root, paths["Pooling"], "config.json"))
    dense_dir = os.path.join(root, paths["Dense"])
    dense_config_path = os.path.join(dense_dir, "config.json")
    dense_config = _read_json(dense_config_path)
    if dense_config.get("bias", True) or "Identity" not in dense_config.get("activation_function", ""):
        raise CheckpointError(f"{dense_config_path}: GTR's projection has no bias and no activation")
    model_args["embedding_dim"] = dense_config["out_features"]

    model = GTREncoder(**model_args)
    tensors = _read_tensors(transformer_dir)
    tensors.update({f"dense.{k}": v for k, v in _read_tensors(dense_dir).items()})
    _assign(model, tensors, model_args)

    st_config_path = os.path.join(transformer_dir, "sentence_bert_config.json")
    st_config = _read_json(st_config_path) if os.path.exists(st_config_path) else {}
    document_length = st_config.get("max_seq_length") or _tokenizer_max_length(transformer_dir)
    tokenizer = GTRTokenizer(_read_spiece(transformer_dir), lowercase=st_config.get("do_lower_case", False))
    return Encoder(model, tokenizer, min(query_length, document_length), document_length)


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


def _assign(model, tensors, model_args):
    if "shared.weight" not in tensors and "encoder.embed_tokens.weight" in tensors:
        tensors["shared.weight"] = tensors["encoder.embed_tokens.weight"]
    for variable in model.weights:
        name, transpose = _hf_name(variable.path, model_args["feedforward"])
        if name not in tensors:
            raise CheckpointError(f"checkpoint has no tensor {name!r} (needed for {variable.path})")
        value = tensors[name].T if transpose else tensors[name]
        expected = tuple(variable.shape)
        if value.shape != expected:
            stored = value.T.shape if transpose else value.shape
            raise CheckpointError(
                f"tensor {name!r} has shape {tuple(stored)} in the checkpoint, but the model built from its "
                f"config expects {expected[::-1] if transpose else expected}"
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
