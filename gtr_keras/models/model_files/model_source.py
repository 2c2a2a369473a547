"""Where a model comes from, decided once: `resolve_model_source` and the `ModelSource` it returns.

A model source is what a user names: a trained model's name (`presets.PRESET_SOURCES`), an
architecture's (`gtr-tiny`, `gtr-base`, ...: randomly initialised), a Hugging Face id (`hf://ORG/NAME`), a keras-hub
download handle (`kaggle://...`), or a directory, local or on any file system TensorFlow knows (`gs://`,
`ram://`). `resolve_model_source` turns it into a `ModelSource`: the path to read, the format found there
and whether the directory must be copied locally first (`ModelSource.local`, through
`utils.files.local_copy`, which every remote read of a model directory uses).
The loader of its format takes that value (`load_source`); nothing resolves the source again. The model
family reads its own format (keras-hub presets) and architectures' names; the loaders of other formats are
registered in `model_formats` (`register_loader`) by `gtr_keras.convert`, which sits above the model family,
when `gtr_keras` is imported.
"""

import contextlib
import dataclasses
import os

from gtr_keras.errors import CheckpointError, UserError
from gtr_keras.models.model_files.model_directory import CONFIG_FILE, TASK_FILE, read_json
from gtr_keras.models.model_files.model_directory import RERANKER as RERANKER_TASK
from gtr_keras.models.model_files.model_formats import (
    ARCHITECTURE,
    CROSS_ENCODER,
    KERAS_HUB,
    RERANKER,
    SENTENCE_TRANSFORMERS,
    registered_loader,
)
from gtr_keras.utils import files

HF_PREFIX = "hf://"
# Schemes whose sources are not file systems: keras-hub's or `huggingface_hub`'s downloads.
DOWNLOAD_PREFIXES = (HF_PREFIX, "kaggle://", "modelscope://")
SENTENCE_TRANSFORMERS_MODULES = "modules.json"
SEQUENCE_CLASSIFICATION = "ForSequenceClassification"


@dataclasses.dataclass(frozen=True)
class ModelSource:
    """A resolved model source.

    Args:
        name: the source as the user gave it (for messages).
        path: what is read: a directory (local, or remote when `remote`), a download id (`hf://...`,
            `kaggle://...`), or an architecture's name.
        format: `KERAS_HUB`, `SENTENCE_TRANSFORMERS`, `ARCHITECTURE`, or a reranker's `CROSS_ENCODER` (a
            Hugging Face checkpoint) or `RERANKER` (a model directory); None for a directory
            whose format is not read yet (`resolve_model_source(..., read_format=False)`).
        remote: `path` is a directory on a file system other than the local one.

    `os.fspath(source)` is its `path`, so a resolved source stands wherever a path does, and `str(source)`
    its `name`, for messages.

    Example:
    >>> source = resolve_model_source("gtr_small_distilled_en")
    >>> source.format, os.path.basename(source.path)
    ('keras-hub', 'gtr-small-distilled')
    """

    name: str
    path: str
    format: str | None
    remote: bool = False

    def __fspath__(self):
        return self.path

    def __str__(self):
        return self.name

    @contextlib.contextmanager
    def local(self):
        """The source's path with a remote directory copied to a temporary local one for the block.

        Errors about the copy's files raised in the block name them under the remote path.

        Example:
        >>> with resolve_model_source("gs://bucket/models/gtr-base").local() as path:  # doctest: +SKIP
        ...     print(path)
        /tmp/gtr-keras-.../gtr-base
        """
        if not self.remote:
            yield self.path
            return
        with files.local_copy(self.path) as local:
            yield local


def resolve_model_source(source, expected_format=None, read_format=True):
    """The `ModelSource` of a model name, id or directory; a `ModelSource` is returned as it is, its format
    read first if it has none yet.

    Reads at most a directory's `config.json` and looks for `modules.json`: no weights, no download.

    Args:
        source: a trained model's name or alias, an architecture's name, `hf://ORG/NAME`, a keras-hub
            download handle, or a model directory (a `str` or path-like, `file://` allowed).
        expected_format: the format a directory must be read in (its loader then names what is
            missing), instead of the one `directory_format` finds.
        read_format: read a directory's format now; else only check that the directory exists (the command
            line does so before it reads its inputs, whose errors then come first), the format read when the
            model loads.

    Raises:
        CheckpointError: no such directory, or a directory of no format gtr-keras reads, naming it.
        DataError: a file system TensorFlow does not know.

    Example:
    >>> source = resolve_model_source("gtr_t5_base_en")
    >>> source.path, source.format
    ('hf://sentence-transformers/gtr-t5-base', 'sentence-transformers')
    """
    if isinstance(source, ModelSource):
        if source.format is None and read_format:
            return dataclasses.replace(source, format=expected_format or directory_format(source.path))
        return source
    from gtr_keras.models.gtr.presets import PRESET_SOURCES, PRESETS  # the family, which imports this module

    name = os.fspath(source)
    path = PRESET_SOURCES.get(name, name).removeprefix("file://")
    if path.startswith(HF_PREFIX):
        return ModelSource(name, path, expected_format or SENTENCE_TRANSFORMERS)
    if path.startswith(DOWNLOAD_PREFIXES):
        return ModelSource(name, path, KERAS_HUB)
    remote = not files.is_local(path)
    if not remote and path in PRESETS and not os.path.exists(path):
        return ModelSource(name, path, ARCHITECTURE)
    if remote:
        path = path.rstrip("/")
    if not files.isdir(path):
        if files.exists(path):
            raise CheckpointError(f"{path}: expected a model directory, got a file")
        raise CheckpointError(f"{path}: no such model directory{'' if '/' in name else not_a_model_name()}")
    detected = expected_format or (directory_format(path) if read_format else None)
    return ModelSource(name, path, detected, remote)


def not_a_model_name():
    """What an error about a name that is no trained model's adds: the names there are.

    Example:
    >>> not_a_model_name()
    ' nor a model name (gtr_t5_base_en, gtr_t5_large_en, gtr_t5_xl_en, gtr_t5_xxl_en, gtr_small_distilled_en)'
    """
    from gtr_keras.models.gtr.presets import PRESET_SOURCES  # the family, which imports this module

    return f" nor a model name ({', '.join(PRESET_SOURCES)})"


def directory_format(directory):
    """The format of a model directory (`KERAS_HUB`, `SENTENCE_TRANSFORMERS`, `CROSS_ENCODER` or `RERANKER`).

    Raises:
        CheckpointError: `config.json` missing or unreadable, or a directory of no format gtr-keras reads.
    """
    found = _format_of(directory, _config(directory))
    if found is None:
        raise CheckpointError(
            f"{os.path.join(directory, CONFIG_FILE)}: not a gtr-keras model directory (a keras-hub preset). For a "
            "Hugging Face T5 checkpoint, use its sentence-transformers repository with `gtr-keras convert SRC OUT_DIR`."
        )
    return found


def gtr_model_source(source):
    """The `ModelSource` of a source that holds a GTR model, or None for one that holds another model or
    nothing (a keras-hub name of another model, a missing path).

    GTR sources: a name of `PRESET_SOURCES`, an `hf://` id of a GTR checkpoint, or a directory of a
    gtr-keras preset or of a sentence-transformers T5 checkpoint. Reads a directory's `config.json` once.

    Raises:
        CheckpointError: a directory whose `config.json` is unreadable, naming it.

    Example:
    >>> gtr_model_source("gtr_t5_base_en").path, gtr_model_source("bert_base_en")
    ('hf://sentence-transformers/gtr-t5-base', None)
    """
    from gtr_keras.models.gtr.presets import PRESET_SOURCES

    name = os.fspath(source)
    path = name.removeprefix("file://")
    if name in PRESET_SOURCES or (path.startswith(HF_PREFIX) and "gtr-t5" in path):
        return resolve_model_source(name)
    if path.startswith(DOWNLOAD_PREFIXES):
        return None
    try:
        if not files.isfile(os.path.join(path, CONFIG_FILE)):
            return None
    except UserError:  # a file system TensorFlow does not know: not a source of gtr-keras either
        return None
    config = _config(path)
    found = _format_of(path, config)
    gtr = str(config.get("registered_name", "")).startswith("gtr_keras>") or (
        found == SENTENCE_TRANSFORMERS and config.get("model_type") == "t5"
    )
    return resolve_model_source(name, found) if gtr else None


def _config(directory):
    config_path = os.path.join(directory, CONFIG_FILE)
    config = read_json(config_path)
    if not isinstance(config, dict):
        raise CheckpointError(f"{config_path}: expected a JSON object, got {type(config).__name__}")
    return config


def _format_of(directory, config):
    if "registered_name" in config:
        task = os.path.join(directory, TASK_FILE)
        reranker = files.isfile(task) and read_json(task).get("registered_name") == RERANKER_TASK
        return RERANKER if reranker else KERAS_HUB
    architectures = config.get("architectures")
    if isinstance(architectures, list) and any(str(a).endswith(SEQUENCE_CLASSIFICATION) for a in architectures):
        return CROSS_ENCODER
    if files.isfile(os.path.join(directory, SENTENCE_TRANSFORMERS_MODULES)):
        return SENTENCE_TRANSFORMERS
    return None


def load_source(embedder_cls, source, load_weights=True, **kwargs):
    """An `embedder_cls` read from a resolved `ModelSource` by the loader registered for its format.

    A remote directory is copied locally for the load (`ModelSource.local`).

    Raises:
        UserError: no loader of the source's format is registered (`import gtr_keras` registers them).

    Example:
    >>> embedder = load_source(GTRTextEmbedder, resolve_model_source(TINY_ST))  # doctest: +SKIP
    """
    loader = registered_loader(source.format)
    if loader is None:
        raise UserError(f"{source}: no loader of {source.format} models is registered (`import gtr_keras` does it)")
    with source.local() as path:
        return loader(embedder_cls, path, load_weights, **kwargs)
