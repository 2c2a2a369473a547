"""Every way into and out of a model directory, as users call it: `load`, `save`, `migrate` and
`convert_sentence_transformers`.

A model directory is a keras-hub preset (`GTRTextEmbedder.save_to_preset`), local or on any file
system TensorFlow knows; `load` also takes what `GTRTextEmbedder.from_preset` converts on the way
(sentence-transformers checkpoints, `hf://` ids, the first format). The files and their checks are
`model_directory`'s; the readers of other formats live in `gtr_keras.convert`.
"""

import os

from gtr_keras.convert.legacy_format import first_format_config, load_first_format
from gtr_keras.convert.sentence_transformers import load_sentence_transformers, save_sentence_transformers
from gtr_keras.errors import CheckpointError, UserError
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.models.gtr.gtr_tokenizer import QUERY_LENGTH
from gtr_keras.models.model_files.model_directory import CONFIG_FILE
from gtr_keras.models.model_files.model_source import (
    ARCHITECTURE,
    FIRST_FORMAT,
    HF_PREFIX,
    SENTENCE_TRANSFORMERS,
    resolve_model_source,
)
from gtr_keras.utils import files
from gtr_keras.utils.checksums import verify_directory
from gtr_keras.utils.locks import locks_output


@locks_output("directory")
def save(model, directory, format="keras-hub"):  # noqa: A002  (the name users know from Keras' `save`)
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
    embedder = getattr(model, "model", model)
    if format == "keras-hub":
        embedder.save_to_preset(directory)
    elif format == "sentence-transformers":
        save_sentence_transformers(embedder, directory)
    else:
        raise UserError(f"format must be 'keras-hub' or 'sentence-transformers', got {format!r}")


def load(directory, jit_compile=False, dtype=None, query_length=None, document_length=None, verify=False):
    """An `Encoder` (numpy batches in, numpy embeddings out) for a model directory or checkpoint
    (`gtr_keras.load` also takes export directories).

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
        verify: first verify every file of the model directory against its record
            (`utils.checksums.verify_directory`: a directory gtr-keras wrote), and refuse a damaged one.

    Example:
    >>> encoder = gtr_keras.load("models/gtr-base")
    >>> fast = gtr_keras.load("models/gtr-base", dtype="bfloat16", document_length=256)
    """
    source = resolve_model_source(directory)
    if source.format == ARCHITECTURE:
        raise CheckpointError(
            f"{source.path}: no such model directory (the name of an architecture without "
            "weights: `GTRTextEmbedder.from_architecture`)"
        )
    if verify:
        verify_directory(source.path)
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


def migrate(source, directory):
    """Rewrites a model directory of gtr-keras' first format as a keras-hub preset directory.

    Example:
    >>> migrate("models/old-gtr", "models/gtr")
    """
    with resolve_model_source(source, FIRST_FORMAT).local() as local:
        config = first_format_config(local)
        if config is None:
            raise CheckpointError(f"{os.path.join(local, CONFIG_FILE)}: not a model directory of the first format")
        embedder = load_first_format(GTRTextEmbedder, local, config)
    save(embedder, directory)


def convert_sentence_transformers(source, query_length=QUERY_LENGTH, cache_dir=None, dtype=None, load_weights=True):
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
    source = os.fspath(source)
    if files.is_local(source) and not files.exists(source) and source.count("/") == 1 and source[0] not in "./":
        source = HF_PREFIX + source  # a Hugging Face repo id
    with resolve_model_source(source, SENTENCE_TRANSFORMERS).local() as local:
        return load_sentence_transformers(GTRTextEmbedder, local, query_length, cache_dir, dtype, load_weights)
