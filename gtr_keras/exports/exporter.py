"""`export`: one call from a model (and an index), or a reranker, to a directory in an export format, what
`gtr-keras export` runs: the format's entry of `export_formats.FORMATS` checks the output, then writes it."""

import os
from typing import Any, Literal

from gtr_keras.errors import UserError
from gtr_keras.exports.export_formats import FORMATS
from gtr_keras.models.text_encoder import TextPairScorer
from gtr_keras.retrieval.index import Index
from gtr_keras.retrieval.index_types import IndexPaths
from gtr_keras.utils.dimensions import check_dimensions
from gtr_keras.utils.locks import locks_output

# The options of `export`, their defaults and the writers' names for them (`ExportFormat.options`).
_OPTIONS = {
    "index": (None, "index"),
    "searcher": ("scann", "searcher"),
    "k": (10, "k"),
    "version": (None, "version"),
    "search_params": (None, "search_param"),
    "quantize": (None, "quantize"),
    "allow_large_float32": (False, "allow_large_float32"),
}


def _index_dirs(index):
    """The index directories of `index`: a directory, a list of them, or an `Index`."""
    if index is None:
        return None
    paths = getattr(index, "paths", index)
    return [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) else [os.fspath(p) for p in paths]


def _loaded_reranker(model):
    return isinstance(model, TextPairScorer) or type(model).__name__ == "Reranker"


def _is_reranker(model):
    """True when `model` is a reranker: its scorer or Keras model, or a reranker's model directory,
    cross-encoder checkpoint or resolved `ModelSource` (read without loading its weights)."""
    if _loaded_reranker(model):
        return True
    from gtr_keras.models.model_files.model_formats import RERANKER_FORMATS
    from gtr_keras.models.model_files.model_source import ModelSource, resolve_model_source

    if isinstance(model, ModelSource):
        return model.format in RERANKER_FORMATS
    if not isinstance(model, (str, os.PathLike)):
        return False
    try:
        return resolve_model_source(os.fspath(model)).format in RERANKER_FORMATS
    except UserError:
        return False  # not a directory of any model: `encoder_of` names what is wrong


@locks_output("directory")
def export(
    model: Any,
    directory: str | os.PathLike[str],
    format: Literal["savedmodel", "litert", "onnx", "openvino"] = "savedmodel",  # noqa: A002  (`export --format`)
    *,
    index: IndexPaths | Index | None = None,
    searcher: Literal["scann", "scann-int8", "brute-force"] = "scann",
    k: int = 10,
    version: int | None = None,
    search_params: dict[str, int] | None = None,
    quantize: Literal["int8"] | None = None,
    allow_large_float32: bool = False,
    dimensions: int | None = None,
) -> list[str]:
    """Writes a model's export, and with an index its searcher, to `directory` (`gtr-keras export`).

    Args:
        model: a model directory or name, a loaded model (`gtr_keras.load(DIR)`, with its precision and
            token budgets) or a `GTRTextEmbedder`; loaded once the output is checked. Or a reranker (its
            model directory, cross-encoder checkpoint or `gtr_keras.load(DIR)`): `"savedmodel"` writes
            `reranker/VERSION` (queries and documents in, scores out), `"onnx"` its ONNX export
            (docs/reranking.md); a reranker takes `version` only.
        directory: the export directory: TF Serving's base path for `"savedmodel"` (its `encoder/VERSION`
            and `searcher/VERSION`), the directory of the files for the others.
        format: `"savedmodel"` (raw strings in; TF Hub, TF Serving, Keras 3), `"litert"`, `"onnx"` or
            `"openvino"` (`gtr_keras.exports.FORMATS`: what each needs and takes, docs/serving.md).
        index: `"savedmodel"` only: an index directory built with the model, a list of them (shards) or a
            `gtr_keras.Index`: also a searcher SavedModel, queries in, ids and scores out.
        searcher: `"scann"` (rescored with the index's float32 vectors), `"scann-int8"` (ScaNN's int8 order,
            a quarter of the memory) or `"brute-force"` (stock TensorFlow ops; an index with float32 vectors).
        k: results per query of the searcher's `serving_default`.
        version: the TF Serving version to write (default: the next).
        search_params: the ScaNN searcher's `num_leaves_to_search` and `reorder_factor` (default: the index's).
        quantize: `"onnx"` only: `"int8"` weights.
        allow_large_float32: a `"scann"` searcher may hold more than `savedmodel.searcher_graph.FLOAT32_LIMIT`
            (1 GiB) of float32 vectors (refused otherwise, `"scann-int8"` suggested).
        dimensions: N, to export an encoder whose embeddings are the model's first N coordinates,
            renormalised, in its graph (`[batch, N]`: `gtr_keras.load` of the export reports N); any format.
            A searcher searches with the dimensions its index was built with.

    Returns:
        The paths written.

    Raises:
        UserError: an unknown format, an option the format does not take, a missing package (its install
            hint), an output that holds something else than an export (before the model loads), an index of
            another model.

    Example:
    >>> gtr_keras.export("gtr_small_distilled_en", "exports/gtr", index="indexes/scifact")
    ['exports/gtr/encoder/1', 'exports/gtr/searcher/1']
    >>> gtr_keras.export(gtr_keras.load("models/gtr-base"), "exports/gtr-onnx", "onnx", quantize="int8")
    >>> gtr_keras.export("models/minilm-reranker", "exports/minilm")
    ['exports/minilm/reranker/1']
    """
    from gtr_keras.saving import encoder_of, load_model

    if format not in FORMATS:
        raise UserError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    export_format = FORMATS[format]
    reranker = _is_reranker(model)
    if reranker and not export_format.exports_rerankers():
        raise UserError(f"format {format!r} exports no rerankers (savedmodel or onnx do)")
    given = {
        "index": _index_dirs(index),
        "searcher": searcher,
        "k": k,
        "version": version,
        "search_params": sorted(search_params.items()) if search_params else None,
        "quantize": quantize,
        "allow_large_float32": allow_large_float32,
    }
    options = {}
    for name, (default, option) in _OPTIONS.items():
        if option in export_format.options and (not reranker or name == "version"):
            options[option] = given[name]
        elif given[name] != default:
            raise UserError(f"{name}: {'a reranker' if reranker else f'format {format!r}'} takes no {name}")
    if dimensions is not None:
        check_dimensions(dimensions)
        if reranker:
            raise UserError("dimensions: a reranker gives scores, not embeddings to truncate")
    export_format.check_output(directory, reranker=reranker, **options)
    if reranker:
        scorer = model if _loaded_reranker(model) else load_model(model)
        return export_format.write(scorer, directory, reranker=True, **options)
    return export_format.write(encoder_of(model).truncated(dimensions), directory, **options)
