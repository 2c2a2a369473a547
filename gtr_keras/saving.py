"""Every way into and out of a model directory, as users call it: `load`, `save`,
`convert_sentence_transformers` and `convert_checkpoint` (which also reads cross-encoders: rerankers);
`encoder_of`, the model of the calls that take one given any way.

A model directory is a keras-hub preset (`GTRTextEmbedder.save_to_preset`), local or on any file
system TensorFlow knows; `load` also takes what `GTRTextEmbedder.from_preset` converts on the way
(sentence-transformers checkpoints, `hf://` ids). The files and their checks are
`model_directory`'s; the readers of other formats live in `gtr_keras.convert`.
"""

import os
from typing import Any, Literal

from gtr_keras.convert.cross_encoder import HUB_FILES as CROSS_ENCODER_FILES
from gtr_keras.convert.sentence_transformers import (
    HUB_FILES,
    load_sentence_transformers,
    resolve_source,
    save_sentence_transformers,
)
from gtr_keras.errors import CheckpointError, UserError
from gtr_keras.models.gtr.encoder import Encoder
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.models.gtr.gtr_tokenizer import QUERY_LENGTH
from gtr_keras.models.model_files.model_formats import (
    ARCHITECTURE,
    CROSS_ENCODER,
    RERANKER_FORMATS,
    SENTENCE_TRANSFORMERS,
)
from gtr_keras.models.model_files.model_source import HF_PREFIX, not_a_model_name, resolve_model_source
from gtr_keras.models.reranker.reranker import Reranker
from gtr_keras.models.text_encoder import TextPairScorer
from gtr_keras.utils import files
from gtr_keras.utils.checksums import verify_directory
from gtr_keras.utils.locks import locks_output


@locks_output("directory")
def save(
    model: GTRTextEmbedder | Reranker | Encoder,
    directory: str | os.PathLike[str],
    format: Literal["keras-hub", "sentence-transformers"] = "keras-hub",  # noqa: A002  (the name users know from Keras' `save`)
) -> None:
    """Writes a `GTRTextEmbedder` (or an `Encoder`'s) as a model directory, atomically.

    The directory replaces any previous one as a unit: a crash leaves no half
    directory. Only an empty directory or a model directory of the format
    written is replaced: one holding anything else is a `DataError` naming a
    file there, and nothing is written. A directory on another file system
    (`gs://...`) is written locally, then uploaded. A second run writing the
    same directory meanwhile is refused (`output_lock`).

    Args:
        model: a `GTRTextEmbedder`, or an `Encoder`.
        directory: where to write.
        format: `"keras-hub"`, a keras-hub preset (`GTRTextEmbedder.save_to_preset`),
            what every gtr-keras command reads; or `"sentence-transformers"`, the
            Hugging Face layout that `SentenceTransformer(directory)` loads and
            `convert` reads back (`convert.sentence_transformers.save_sentence_transformers`).

    Example:
    >>> gtr_keras.save(encoder, "models/my-gtr")
    >>> gtr_keras.save(encoder, "hf/my-gtr", format="sentence-transformers")
    """
    embedder: Any = getattr(model, "model", model)
    if format == "keras-hub":
        embedder.save_to_preset(directory)
    elif format == "sentence-transformers" and isinstance(embedder, Reranker):
        raise UserError(f"{directory}: a reranker is saved as a model directory only (format='keras-hub')")
    elif format == "sentence-transformers":
        save_sentence_transformers(embedder, directory)
    else:
        raise UserError(f"format must be 'keras-hub' or 'sentence-transformers', got {format!r}")


def load_model(
    directory: str | os.PathLike[str],
    jit_compile: bool = False,
    dtype: str | None = None,
    query_length: int | None = None,
    document_length: int | None = None,
    verify: bool = False,
) -> Encoder | TextPairScorer:
    """An `Encoder` (numpy batches in, numpy embeddings out) for a model directory or checkpoint
    (`gtr_keras.load` also takes export directories); for a reranker's, a `PairScorer`.

    A shortcut for `GTRTextEmbedder.from_preset(directory, dtype=dtype)` with
    other token budgets and XLA; the model is `encoder.model`. A reranker (a cross-encoder checkpoint, or
    the model directory `convert` wrote from one) gives `Reranker.from_preset(directory, dtype=dtype).scorer()`,
    whose `predict(pairs)` scores `(query, document)` pairs (token budgets do not apply: its pair budget is
    the checkpoint's).

    Args:
        directory: a model directory, or anything `GTRTextEmbedder.from_preset`
            takes (a sentence-transformers checkpoint, `hf://...`).
        jit_compile: compile the forward pass with XLA.
        dtype: optional dtype policy for the model: `"bfloat16"` for
            bfloat16 inference (float32 embeddings out), `"mixed_bfloat16"`
            to train in bfloat16.
        query_length: token budget for queries instead of the saved one.
        document_length: token budget for documents instead of the saved one.
        verify: first verify every file of the model directory against its record
            (`utils.checksums.verify_directory`: a directory gtr-keras wrote), and refuse a damaged one.

    Example:
    >>> encoder = gtr_keras.load("models/gtr-base")
    >>> fast = gtr_keras.load("models/gtr-base", dtype="bfloat16", document_length=256)
    """
    source = resolve_model_source(directory)
    if source.format == ARCHITECTURE:
        raise CheckpointError(
            f"{source.path}: an architecture without weights (`GTRTextEmbedder.from_architecture`), no model "
            f"directory{not_a_model_name()}"
        )
    if verify:
        verify_directory(source.path)
    if source.format in RERANKER_FORMATS:
        if query_length or document_length:
            raise UserError(f"{source}: a reranker takes no query_length or document_length (its pair budget is fixed)")
        return Reranker.from_preset(source, dtype=dtype).scorer(jit_compile)
    try:
        embedder = GTRTextEmbedder.from_preset(source, dtype=dtype)
    except CheckpointError:
        raise
    except (ValueError, OSError, KeyError, TypeError) as error:
        raise CheckpointError(f"{source.path}: cannot load the model ({type(error).__name__}: {error})") from error
    if query_length:
        embedder.preprocessor.query_length = query_length
    if document_length:
        embedder.preprocessor.sequence_length = document_length
    return embedder.batch_encoder(jit_compile)


def encoder_of(model):
    """The `Encoder` of a model given any way: a model directory or name (loaded by `load`), an `Encoder`,
    a `GTRTextEmbedder`, or a function of no arguments that returns one of these (called now).

    Raises:
        UserError: an export's encoder (an index, an export or an evaluation of the model's fingerprint
            needs the model's weights), or anything else.

    Example:
    >>> encoder_of("gtr_small_distilled_en").embedding_dim
    384
    """
    if isinstance(model, GTRTextEmbedder):
        return model.batch_encoder()
    if isinstance(getattr(model, "model", None), GTRTextEmbedder):
        return model
    if hasattr(model, "encode_queries"):
        raise UserError(
            f"{type(model).__name__}: an export's encoder, which holds no Keras model to fingerprint or export; "
            "give the model directory, its name or `gtr_keras.load(DIR)`"
        )
    if isinstance(model, (str, os.PathLike)):
        return load_model(model)
    if callable(model):
        return encoder_of(model())
    raise UserError(f"model: a model directory or name, or a loaded model, got {type(model).__name__}")


def convert_checkpoint(
    source: str, query_length: int = QUERY_LENGTH, cache_dir: str | None = None
) -> GTRTextEmbedder | Reranker:
    """A `GTRTextEmbedder` of a sentence-transformers GTR checkpoint, or a `Reranker` of a cross-encoder one
    (a `config.json` naming `BertForSequenceClassification` or `XLMRobertaForSequenceClassification`): a
    directory, or a Hugging Face id, downloaded when online.

    Example:
    >>> gtr_keras.save(convert_checkpoint("hf://cross-encoder/ms-marco-MiniLM-L6-v2"), "models/minilm-reranker")
    """
    source = _hub_id(os.fspath(source))
    if source.startswith(HF_PREFIX):  # the files of either kind of checkpoint: a pattern matching none is skipped
        source = resolve_source(source, cache_dir, sorted({*HUB_FILES, *CROSS_ENCODER_FILES}))
    if resolve_model_source(source).format == CROSS_ENCODER:
        return Reranker.from_preset(source)
    return convert_sentence_transformers(source, query_length, cache_dir)


def _hub_id(source):
    if files.is_local(source) and not files.exists(source) and source.count("/") == 1 and source[0] not in "./":
        return HF_PREFIX + source  # a Hugging Face repo id
    return source


def convert_sentence_transformers(
    source: str,
    query_length: int = QUERY_LENGTH,
    cache_dir: str | None = None,
    dtype: str | None = None,
    load_weights: bool = True,
) -> GTRTextEmbedder:
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
    source = _hub_id(os.fspath(source))
    with resolve_model_source(source, SENTENCE_TRANSFORMERS).local() as local:
        return load_sentence_transformers(GTRTextEmbedder, local, query_length, cache_dir, dtype, load_weights)
