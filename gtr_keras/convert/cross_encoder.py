"""sentence-transformers cross-encoder checkpoints in: the Hugging Face layout that `CrossEncoder` loads and the
Hub serves for `cross-encoder/ms-marco-MiniLM-L*` (BERT) and `BAAI/bge-reranker-*` (XLM-RoBERTa): `config.json`
(a `*ForSequenceClassification` architecture), `model.safetensors` and the tokenizer's files (`tokenizer.json`
or `vocab.txt` with `tokenizer_config.json`; `sentencepiece.bpe.model`). The backbones are keras-hub's, their
weights read by keras-hub's own converters (`keras_hub/src/utils/transformers/convert_bert.py`,
`convert_xlm_roberta.py`); the scoring head, the tokenizer, the token budget and the activation are read here.
Hub ids (`hf://ORG/NAME`) are downloaded with `huggingface_hub` when online.
"""

import os

import numpy as np

from gtr_keras.convert.sentence_transformers import resolve_source
from gtr_keras.errors import CheckpointError
from gtr_keras.models.model_files.model_directory import (
    SAFETENSORS_FILE,
    check_finite,
    check_safetensors,
    read_json,
)
from gtr_keras.utils import files

BERT = "BertForSequenceClassification"
XLM_ROBERTA = "XLMRobertaForSequenceClassification"
ARCHITECTURES = (BERT, XLM_ROBERTA)
SPIECE_FILE = "sentencepiece.bpe.model"
HUB_FILES = [
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    SPIECE_FILE,
    "sentence_bert_config.json",
]
# What `CrossEncoder` applies to the logit, by the dotted path a config names (`sentence_transformers.activation_fn`,
# or before sentence-transformers 4 `sbert_ce_default_activation_function`).
ACTIVATIONS = {"torch.nn.modules.activation.Sigmoid": "sigmoid", "torch.nn.modules.linear.Identity": "identity"}
MAX_WORD_CHARACTERS = 100  # what BERT's tokenizers (and `RerankerBertTokenizer`) cut words at
_MAX_LENGTH = 100_000  # past this a tokenizer's `model_max_length` means "no limit" (Hugging Face's 1e30)


def cross_encoder_architecture(config, path):
    """The checkpoint's `*ForSequenceClassification` architecture, if gtr-keras reads it; else `CheckpointError`."""
    architectures = config.get("architectures") or [config.get("model_type")]
    if architectures[0] not in ARCHITECTURES:
        raise CheckpointError(
            f"{path}: architecture {architectures[0]!r} is not supported; gtr-keras reads cross-encoders of "
            f"{' and '.join(ARCHITECTURES)} (keras-hub's BERT and XLM-RoBERTa backbones)"
        )
    return architectures[0]


def _activation(config, path):
    """The activation `CrossEncoder` applies by default (sentence-transformers 6's `get_default_activation_fn`)."""
    named = (config.get("sentence_transformers") or {}).get("activation_fn") or config.get(
        "sbert_ce_default_activation_function"
    )
    if named and named.startswith("torch."):  # others are ignored by CrossEncoder without trust_remote_code
        if named not in ACTIVATIONS:
            raise CheckpointError(f"{path}: activation {named!r} is not supported ({', '.join(ACTIVATIONS)})")
        return ACTIVATIONS[named]
    return "sigmoid"


def _check_settings(config, path, architecture):
    """Refuses the settings keras-hub's backbones do not have, naming the first."""
    labels = config.get("id2label")
    count = len(labels) if isinstance(labels, dict) else config.get("num_labels", 2)
    if count != 1:
        raise CheckpointError(
            f"{path}: {count} labels; a reranker gives one relevance score (gtr-keras reads one-label cross-encoders)"
        )
    expected = {
        "position_embedding_type": ("absolute",),
        "hidden_act": ("gelu", "gelu_new", "gelu_pytorch_tanh") if architecture == BERT else ("gelu",),
        "layer_norm_eps": (1e-12,) if architecture == BERT else (1e-5,),
    }
    if architecture == XLM_ROBERTA:
        expected["type_vocab_size"] = (1,)
    for key, allowed in expected.items():
        if key in config and config[key] not in allowed:
            has = ", ".join(map(repr, allowed))
            raise CheckpointError(f"{path}: {key} {config[key]!r} is not supported (keras-hub's backbone has {has})")


def _sequence_length(directory, config, architecture):
    """The pair budget: the tokenizer's `model_max_length` (or sentence-transformers' `max_seq_length`), at most
    what the position embeddings hold."""
    positions = config["max_position_embeddings"] - (2 if architecture == XLM_ROBERTA else 0)
    lengths = []
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length")):
        path = os.path.join(directory, name)
        value = read_json(path).get(key) if files.isfile(path) else None
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= _MAX_LENGTH:
            lengths.append(value)
    return min([*lengths[:1], positions])


def _bert_tokenizer(tokenizer_cls, directory):
    """A `tokenizer_cls` (`RerankerBertTokenizer`) from `tokenizer.json` (what Hugging Face's fast tokenizer
    reads), else from `vocab.txt` and `tokenizer_config.json`."""
    path = os.path.join(directory, "tokenizer.json")
    if files.isfile(path):
        record = read_json(path)
        normalizer, model = record.get("normalizer") or {}, record.get("model") or {}
        if normalizer.get("type") != "BertNormalizer" or model.get("type") != "WordPiece":
            raise CheckpointError(
                f"{path}: a {normalizer.get('type')} normalizer and a {model.get('type')} model; a BERT cross-encoder "
                "has a BertNormalizer and a WordPiece model"
            )
        if model.get("max_input_chars_per_word", MAX_WORD_CHARACTERS) != MAX_WORD_CHARACTERS:
            raise CheckpointError(f"{path}: max_input_chars_per_word must be {MAX_WORD_CHARACTERS}")
        vocabulary = [piece for piece, _ in sorted(model["vocab"].items(), key=lambda item: item[1])]
        lowercase, strip_accents = normalizer.get("lowercase", True), normalizer.get("strip_accents")
    else:
        vocabulary_path = os.path.join(directory, "vocab.txt")
        if not files.isfile(vocabulary_path):
            raise CheckpointError(
                f"{vocabulary_path}: missing (a BERT cross-encoder needs tokenizer.json or vocab.txt)"
            )
        vocabulary = files.read_bytes(vocabulary_path).decode("utf-8").splitlines()
        config_path = os.path.join(directory, "tokenizer_config.json")
        settings = read_json(config_path) if files.isfile(config_path) else {}
        lowercase, strip_accents = settings.get("do_lower_case", True), settings.get("strip_accents")
    return tokenizer_cls(vocabulary, lowercase=lowercase, strip_accents=strip_accents)


def _xlm_roberta_tokenizer(tokenizer_cls, directory):
    path = os.path.join(directory, SPIECE_FILE)
    if not files.isfile(path):
        raise CheckpointError(f"{path}: missing (an XLM-RoBERTa cross-encoder's SentencePiece model)")
    proto = files.read_bytes(path)
    try:
        return tokenizer_cls(proto)
    except Exception as error:  # sentencepiece and TF Text raise their own errors
        raise CheckpointError(f"{path}: not a SentencePiece model ({error})") from None


def load_cross_encoder(reranker_cls, source, load_weights=True, dtype=None, cache_dir=None):
    """Builds a `reranker_cls` (a `Reranker` class) from a sentence-transformers cross-encoder checkpoint.

    Every file is checked before the weights are read: the architecture, the settings keras-hub's backbones
    do not have (more than one label, another position embedding, activation or layer norm), the tokenizer's
    files and `model.safetensors`; each is `CheckpointError` naming the file.

    Args:
        reranker_cls: the class to build, whose `bert_backbone_cls`, `xlm_roberta_backbone_cls`,
            `bert_tokenizer_cls` and `xlm_roberta_tokenizer_cls` are built here (as keras-hub's converters take
            the backbone class).
        source: a local checkpoint directory, or a Hugging Face id (`hf://` optional).
        load_weights: read the weights (else randomly initialised).
        dtype: the dtype policy of the model.
        cache_dir: Hugging Face's cache directory for downloads.

    Example:
    >>> reranker = load_cross_encoder(Reranker, "tests/fixtures/tiny-bert-cross-encoder")
    """
    from keras_hub.src.utils.transformers import convert_bert, convert_xlm_roberta
    from keras_hub.src.utils.transformers.safetensor_utils import SafetensorLoader

    directory = resolve_source(os.fspath(source), cache_dir, HUB_FILES)
    config_path = os.path.join(directory, "config.json")
    config = read_json(config_path)
    architecture = cross_encoder_architecture(config, config_path)
    _check_settings(config, config_path, architecture)
    activation = _activation(config, config_path)
    weights_path = os.path.join(directory, SAFETENSORS_FILE)
    if load_weights:
        check_safetensors(weights_path)
    bert = architecture == BERT
    if bert:
        tokenizer = _bert_tokenizer(reranker_cls.bert_tokenizer_cls, directory)
    else:
        tokenizer = _xlm_roberta_tokenizer(reranker_cls.xlm_roberta_tokenizer_cls, directory)
    if tokenizer.vocabulary_size() > config["vocab_size"]:
        raise CheckpointError(
            f"{directory}: the tokenizer has {tokenizer.vocabulary_size()} tokens, the model "
            f"{config['vocab_size']} embedding rows (config.json vocab_size): the tokenizer is another model's"
        )
    converter = convert_bert if bert else convert_xlm_roberta
    arguments = converter.convert_backbone_config(config)
    if bert:
        backbone = reranker_cls.bert_backbone_cls(
            **arguments,
            hidden_act=config.get("hidden_act", "gelu"),
            num_segments=config.get("type_vocab_size", 2),
            dropout=config.get("hidden_dropout_prob", 0.1),
            dtype=dtype,
        )
    else:
        backbone = reranker_cls.xlm_roberta_backbone_cls(
            **arguments, dropout=config.get("hidden_dropout_prob", 0.1), dtype=dtype
        )
    dropout = config.get("classifier_dropout") or config.get("hidden_dropout_prob", 0.1)
    reranker = reranker_cls.from_parts(
        backbone, tokenizer, _sequence_length(directory, config, architecture), activation, dropout
    )
    if not load_weights:
        return reranker
    try:
        with SafetensorLoader(directory) as loader:
            converter.convert_weights(backbone, loader, config)
            if bert:
                head = {"output_dense": "classifier"}
            else:
                head = {"pooled_dense": "classifier.dense", "output_dense": "classifier.out_proj"}
            for layer, name in head.items():
                dense = getattr(reranker, layer)
                dense.kernel.assign(np.transpose(loader.get_tensor(f"{name}.weight")))
                dense.bias.assign(loader.get_tensor(f"{name}.bias"))
    except (KeyError, ValueError, OSError) as error:
        raise CheckpointError(
            f"{weights_path}: not this checkpoint's weights ({type(error).__name__}: {error})"
        ) from None
    check_finite({weight.path: weight for weight in reranker.weights}, weights_path)
    return reranker
