"""sentence-transformers GTR checkpoints in: the layout that `sentence-transformers` writes and the
Hugging Face Hub serves for `sentence-transformers/gtr-t5-{base,large,xl,xxl}`: `modules.json`,
`config.json` + `model.safetensors` (T5 encoder), `1_Pooling/config.json`, `2_Dense/config.json` +
`2_Dense/model.safetensors`, `sentence_bert_config.json` and `spiece.model`. Hub ids are downloaded with
`huggingface_hub` when online; PyTorch files are read only where PyTorch is installed. And out:
`save_sentence_transformers` writes that layout back, for sentence-transformers and the Hugging Face Hub.
"""

import json
import os

import numpy as np

from gtr_keras.errors import CheckpointError
from gtr_keras.models.gtr.gtr_tokenizer import DOCUMENT_LENGTH, EOS_ID, PAD_ID, QUERY_LENGTH
from gtr_keras.models.model_files.model_directory import (
    SAFETENSORS_FILE,
    SPIECE_FILE,
    assign_weights,
    check_safetensors,
    read_json,
    read_spiece,
    weights_by_path,
)
from gtr_keras.models.model_files.model_source import HF_PREFIX
from gtr_keras.utils import files
from gtr_keras.utils.files import atomic_directory

# What a directory that `save_sentence_transformers` replaces may be: its own output, or a sentence-transformers
# checkpoint as the Hugging Face Hub serves one.
SENTENCE_TRANSFORMERS_DIRECTORY = files.DirectoryKind(
    "a sentence-transformers checkpoint",
    ("modules.json",),
    (
        "modules.json",
        "config.json",
        "config_sentence_transformers.json",
        "sentence_bert_config.json",
        "model.safetensors",
        "pytorch_model.bin",
        "spiece.model",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "[0-9]_*",
        "README.md",
        ".gitattributes",
    ),
)
HUB_FILES = [
    "modules.json",
    "config.json",
    "model.safetensors",
    "sentence_bert_config.json",
    "spiece.model",
    "1_Pooling/config.json",
    "2_Dense/config.json",
    "2_Dense/model.safetensors",
]


def resolve_source(source, cache_dir=None, hub_files=None):
    """A local checkpoint directory for `source`: a path, or a Hugging Face Hub repo id.

    Hub ids (e.g. `sentence-transformers/gtr-t5-base`) are downloaded with
    `huggingface_hub` (the files `hub_files` names; by default a GTR checkpoint's); without network access (or
    the files in its cache) this fails with a message saying that the checkpoint must be downloaded, and how.
    """
    if source.startswith(HF_PREFIX):
        source = source[len(HF_PREFIX) :]
    elif files.isdir(source):
        return source
    if files.exists(source):
        raise CheckpointError(f"{source}: expected a checkpoint directory, got a file")
    if source.count("/") != 1 or source.startswith((".", "/")):
        raise CheckpointError(f"{source}: no such directory (and not a Hugging Face repo id like org/name)")
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(
            source,
            cache_dir=cache_dir,
            allow_patterns=hub_files or HUB_FILES + ["pytorch_model.bin", "2_Dense/pytorch_model.bin"],
        )
    except Exception as error:
        raise CheckpointError(
            f"could not download {source!r} from the Hugging Face Hub ({type(error).__name__}: {error}). The "
            f"checkpoint must be downloaded first: if this machine is offline, run `hf download {source} --local-dir "
            "DIR` on one that is online (`huggingface-cli download` before huggingface_hub 0.34), bring DIR here "
            "and pass DIR instead"
        ) from error


def load_sentence_transformers(
    embedder_cls, source, query_length=QUERY_LENGTH, cache_dir=None, dtype=None, load_weights=True
):
    """Builds an `embedder_cls` (a `GTRTextEmbedder` class) from a sentence-transformers GTR checkpoint.

    Args:
        embedder_cls: the class to build (as keras-hub's converters take the backbone class).
        source: a local checkpoint directory, or a Hugging Face repo id (`hf://` optional).
        query_length, cache_dir, dtype, load_weights: as for
            `gtr_keras.saving.convert_sentence_transformers`, which calls this with `GTRTextEmbedder`.

    Example:
    >>> embedder = load_sentence_transformers(GTRTextEmbedder, "sentence-transformers/gtr-t5-base")
    """
    root = resolve_source(os.fspath(source), cache_dir)
    modules = read_json(os.path.join(root, "modules.json"))
    paths = {m.get("type", "").rsplit(".", 1)[-1]: m.get("path", "") for m in modules}
    for required in ("Transformer", "Pooling", "Dense"):
        if required not in paths:
            raise CheckpointError(
                f"{os.path.join(root, 'modules.json')}: no {required} module; a GTR checkpoint has "
                "Transformer, Pooling (mean), Dense (no bias) and Normalize"
            )
    transformer_dir = os.path.join(root, paths["Transformer"])
    hf_config_path = os.path.join(transformer_dir, "config.json")
    model_args = _model_args(read_json(hf_config_path), hf_config_path)
    _check_pooling(os.path.join(root, paths["Pooling"], "config.json"))
    dense_dir = os.path.join(root, paths["Dense"])
    dense_config_path = os.path.join(dense_dir, "config.json")
    dense_config = read_json(dense_config_path)
    if dense_config.get("bias", True) or "Identity" not in dense_config.get("activation_function", ""):
        raise CheckpointError(f"{dense_config_path}: GTR's projection has no bias and no activation")

    st_config_path = os.path.join(transformer_dir, "sentence_bert_config.json")
    st_config = read_json(st_config_path) if files.exists(st_config_path) else {}
    document_length = st_config.get("max_seq_length") or _tokenizer_max_length(transformer_dir)
    embedder = embedder_cls.from_parts(
        model_args,
        read_spiece(transformer_dir),
        document_length,
        min(query_length, document_length),
        dense_config["out_features"],
        lowercase=st_config.get("do_lower_case", False),
        dtype=dtype,
    )
    if load_weights:
        tensors = _read_tensors(transformer_dir)
        tensors.update({f"dense.{k}": v for k, v in _read_tensors(dense_dir).items()})
        assign_weights(embedder, _hf_tensors_by_path(embedder, tensors, model_args["feedforward"]), root)
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
    length = read_json(path).get("model_max_length") if files.exists(path) else None
    return length if isinstance(length, int) and length <= 100_000 else DOCUMENT_LENGTH


def _check_pooling(path):
    if not files.exists(path):
        return
    pooling = read_json(path)
    if "pooling_mode" in pooling:  # sentence-transformers >= 6
        modes = [pooling["pooling_mode"]]
    else:
        modes = [k[len("pooling_mode_") :] for k, v in pooling.items() if k.startswith("pooling_mode_") and v]
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
    for path, variable in weights_by_path(model).items():
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


def _read_tensors(directory):
    safetensors_path = os.path.join(directory, SAFETENSORS_FILE)
    if files.exists(safetensors_path):
        from safetensors.numpy import load_file

        check_safetensors(safetensors_path)
        return load_file(safetensors_path)
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


def save_sentence_transformers(embedder, directory):
    """Writes a `GTRTextEmbedder` in the layout `load_sentence_transformers` reads and sentence-transformers
    loads (`SentenceTransformer(directory)`), replacing `directory` as a unit.

    The T5 encoder goes to `config.json` + `model.safetensors` (Hugging Face's `T5EncoderModel` names,
    `[out, in]` kernels), the projection to `2_Dense/` (no bias, identity activation), mean pooling to
    `1_Pooling/`, then `3_Normalize/`; the SentencePiece model (case folding, if trained with it, is
    inside it) to `spiece.model` with a `tokenizer_config.json` for `T5Tokenizer`. sentence-transformers
    has one token budget: the document budget (`max_seq_length`); queries there are truncated at it
    too, where GTR truncates them at `query_length` (`convert` reads it back with `--query-length`).
    An existing `directory` must be empty or a sentence-transformers checkpoint
    (`SENTENCE_TRANSFORMERS_DIRECTORY`), else nothing is written (`DataError` naming a file there).

    Example:
    >>> save_sentence_transformers(gtr_keras.load("models/gtr").model, "hf/my-gtr")  # doctest: +SKIP
    """
    from safetensors.numpy import save_file

    backbone = embedder.backbone
    if embedder.preprocessor is None:
        raise CheckpointError("the model has no preprocessor (no SentencePiece model) to save with it")
    tokenizer = embedder.preprocessor.tokenizer
    tensors, dense = {}, {}
    for path, variable in weights_by_path(embedder).items():
        name, transpose = _hf_name(path, backbone.feedforward)
        value = np.asarray(variable.numpy(), np.float32)
        value = np.ascontiguousarray(value.T if transpose else value)
        if name.startswith("dense."):
            dense[name.removeprefix("dense.")] = value
        else:
            tensors[name] = value
    pieces = tokenizer.vocabulary_size()
    config = {
        "architectures": ["T5EncoderModel"],
        "model_type": "t5",
        "d_model": backbone.hidden_dim,
        "d_kv": backbone.key_value_dim,
        "d_ff": backbone.intermediate_dim,
        "num_layers": backbone.num_layers,
        "num_decoder_layers": backbone.num_layers,
        "num_heads": backbone.num_heads,
        "vocab_size": backbone.vocabulary_size,
        "relative_attention_num_buckets": backbone.num_buckets,
        "relative_attention_max_distance": backbone.max_distance,
        "layer_norm_epsilon": backbone.layer_norm_epsilon,
        "feed_forward_proj": backbone.feedforward,
        "dropout_rate": backbone.dropout,
        "initializer_factor": 1.0,
        "is_encoder_decoder": False,
        "use_cache": False,
        "pad_token_id": PAD_ID,
        "eos_token_id": EOS_ID,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }
    tokenizer_config = {
        "tokenizer_class": "T5Tokenizer",
        "model_max_length": embedder.document_length,
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "extra_ids": max(0, min(100, backbone.vocabulary_size - pieces)),
        "legacy": True,
    }
    documents = {
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
            {"idx": 3, "name": "3", "path": "3_Normalize", "type": "sentence_transformers.models.Normalize"},
        ],
        "config.json": config,
        "sentence_bert_config.json": {"max_seq_length": embedder.document_length, "do_lower_case": tokenizer.lowercase},
        "config_sentence_transformers.json": {
            "prompts": {},
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
        "tokenizer_config.json": tokenizer_config,
        "special_tokens_map.json": {"eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"},
        "1_Pooling/config.json": {
            "word_embedding_dimension": backbone.hidden_dim,
            "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True,
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
        },
        "2_Dense/config.json": {
            "in_features": backbone.hidden_dim,
            "out_features": embedder.embedding_dim,
            "bias": False,
            "activation_function": "torch.nn.modules.linear.Identity",
        },
        "3_Normalize/config.json": {},
    }
    with atomic_directory(directory, [SENTENCE_TRANSFORMERS_DIRECTORY]) as staging:
        for name, document in documents.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        save_file(tensors, str(staging / "model.safetensors"), metadata={"format": "pt"})
        save_file(dense, str(staging / "2_Dense" / "model.safetensors"), metadata={"format": "pt"})
        (staging / SPIECE_FILE).write_bytes(tokenizer.proto)
