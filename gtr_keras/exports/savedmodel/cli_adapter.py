"""The SavedModel format's writer and checker in the formats' table (`export_formats.FORMATS`), which
`gtr-keras export --format savedmodel` runs: its flags to `export_all`'s arguments, checked before any model loads.
"""

import logging

from gtr_keras.exports.savedmodel.export import export_all
from gtr_keras.exports.savedmodel.searcher_graph import check_float32, searcher_float32_bytes
from gtr_keras.exports.versions import check_export_outputs, next_version

logger = logging.getLogger(__name__)


def write_export(
    encoder, export_dir, index=None, searcher="scann", k=10, version=None, search_param=None, allow_large_float32=False
):
    """`export --format savedmodel`: the encoder (and, given index directories, the searcher) SavedModels
    as the next version of `export_dir` (or `version`), after checking the version directories; returns
    the directories written. `search_param`: `(name, value)` pairs of the ScaNN searcher's setting
    (`export_searcher`'s `search_params`). Logs one line (INFO) with the bytes of float32 vectors a `scann`
    searcher holds, where it holds any.

    Example:
    >>> write_export(encoder, "exports/scifact", ["indexes/scifact"])
    ['exports/scifact/encoder/1', 'exports/scifact/searcher/1']
    """
    version = check_export_versions(
        export_dir, index, version, searcher=searcher, allow_large_float32=allow_large_float32
    )
    index_dir = index[0] if index and len(index) == 1 else index
    held = searcher_float32_bytes(index_dir, searcher) if index_dir else None
    if held:
        logger.info(
            "the scann searcher holds %s bytes (%.2f GiB) of float32 vectors (%s rows x %d dims) to rescore with, in "
            "the memory of what serves it; --searcher scann-int8 leaves them out",
            f"{held[0]:,}",
            held[0] / 2**30,
            f"{held[1]:,}",
            held[2],
        )
    search_params = dict(search_param or [])
    return list(
        export_all(encoder, export_dir, index_dir, searcher, version, k, search_params, allow_large_float32).values()
    )


def check_export_versions(export_dir, index=None, version=None, searcher="scann", allow_large_float32=False, **options):
    """The version `write_export` writes, its directories checked first (`check_export_outputs`), and the float32
    vectors of a `scann` searcher of `index` (`check_float32`), before the model loads."""
    names = ["encoder", "searcher"] if index else ["encoder"]
    version = version or next_version(export_dir, names)
    check_export_outputs(export_dir, version, names)
    if index:
        check_float32(index[0] if len(index) == 1 else index, searcher, allow_large_float32)
    return version
