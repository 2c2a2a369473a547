"""`export`: one call from a model (and an index) to a directory in an export format, what `gtr-keras export`
runs: the format's entry of `export_formats.FORMATS` checks the output, then writes it."""

import os

from gtr_keras.errors import UserError
from gtr_keras.serving.export_formats import FORMATS
from gtr_keras.utils.locks import locks_output

# The options of `export`, their defaults and the writers' names for them (`ExportFormat.options`).
_OPTIONS = {
    "index": (None, "index"),
    "searcher": ("scann", "searcher"),
    "k": (10, "k"),
    "version": (None, "version"),
    "search_params": (None, "search_param"),
    "quantize": (None, "quantize"),
}


def _index_dirs(index):
    """The index directories of `index`: a directory, a list of them, or an `Index`."""
    if index is None:
        return None
    paths = getattr(index, "paths", index)
    return [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) else [os.fspath(p) for p in paths]


@locks_output("directory")
def export(
    model,
    directory,
    format="savedmodel",  # noqa: A002  (the name of `gtr-keras export --format`)
    *,
    index=None,
    searcher="scann",
    k=10,
    version=None,
    search_params=None,
    quantize=None,
):
    """Writes a model's export, and with an index its searcher, to `directory` (`gtr-keras export`).

    Args:
        model: a model directory or name, a loaded model (`gtr_keras.load(DIR)`, with its precision and
            token budgets) or a `GTRTextEmbedder`; loaded once the output is checked.
        directory: the export directory: TF Serving's base path for `"savedmodel"` (its `encoder/VERSION`
            and `searcher/VERSION`), the directory of the files for the others.
        format: `"savedmodel"` (raw strings in; TF Hub, TF Serving, Keras 3), `"litert"`, `"onnx"` or
            `"openvino"` (`gtr_keras.serving.FORMATS`: what each needs and takes, docs/serving.md).
        index: `"savedmodel"` only: an index directory built with the model, a list of them (shards) or a
            `gtr_keras.Index`: also a searcher SavedModel, queries in, ids and scores out.
        searcher: `"scann"` (rescored with the index's float32 vectors), `"scann-int8"` (ScaNN's int8 order,
            a quarter of the memory) or `"brute-force"` (stock TensorFlow ops; an index with float32 vectors).
        k: results per query of the searcher's `serving_default`.
        version: the TF Serving version to write (default: the next).
        search_params: the ScaNN searcher's `num_leaves_to_search` and `reorder_factor` (default: the index's).
        quantize: `"onnx"` only: `"int8"` weights.

    Returns:
        The paths written.

    Raises:
        UserError: an unknown format, an option the format does not take, a missing package (its install
            hint), an output that holds something else than an export (before the model loads), an index of
            another model.

    Example:
    >>> gtr_keras.export("gtr-small-distilled", "exports/gtr", index="indexes/scifact")
    ['exports/gtr/encoder/1', 'exports/gtr/searcher/1']
    >>> gtr_keras.export(gtr_keras.load("models/gtr-base"), "exports/gtr-onnx", "onnx", quantize="int8")
    """
    from gtr_keras.saving import encoder_of

    if format not in FORMATS:
        raise UserError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    export_format = FORMATS[format]
    given = {
        "index": _index_dirs(index),
        "searcher": searcher,
        "k": k,
        "version": version,
        "search_params": sorted(search_params.items()) if search_params else None,
        "quantize": quantize,
    }
    options = {}
    for name, (default, option) in _OPTIONS.items():
        if option in export_format.options:
            options[option] = given[name]
        elif given[name] != default:
            raise UserError(f"{name}: format {format!r} takes no {name}")
    export_format.check_output(directory, **options)
    return export_format.write(encoder_of(model), directory, **options)
