"""The ScaNN searcher of an approximate index: its parameters, its build a chunk at a time, and its load.

ScaNN's tree and quantisers are trained on a random sample, then each chunk
of vectors is added to the trained searcher, its ScaNN arrays (leaf of each
point, AH codes, int8 vectors) are appended to the index's files, and it is
removed again: ScaNN never holds more than one chunk. The AH codes are then
packed two a byte (`scann_codes`). ScaNN is loaded without the `scann`
package, so that a process that searches loads no TensorFlow.
"""

import ctypes
import ctypes.util
import functools
import importlib.util
import math
import os
import shutil
import sys
import tempfile

import numpy as np

from gtr_keras.errors import UserError
from gtr_keras.storage.layout import (
    FLOAT32_REORDER,
    SCANN_CODES,
    SCANN_PACKED_CODES,
    SCANN_PER_POINT,
    SCANN_POINT_FILES,
)
from gtr_keras.storage.scann_codes import CodeRows, pack_codes, scann_assets, write_packed_record, write_rows

# ScaNN searchers are built for this many neighbours; `search` passes its own
# `k`, so this only sizes the default reordering pool.
_DEFAULT_K = 10
# The int8-reordered candidates rescored with float32, per result (`search_index.rescore_pool_size`): on issue
# 52's 40,000 x 64 clustered vectors, whose neighbours lie closer than int8 rounding (benchmarks/rescoring_recall.py,
# RESULTS.md "Float32 rescoring"), 2 reaches recall@10 0.998-0.999 (reorder 20) to 0.9997 (reorder 50) against
# float32 search where int8 order alone stops at 0.928, and 3 reaches 0.998 to 1.0; 4 leaves a margin for denser corpora
# (tests/storage/test_scann_builder.py checks 5 >= 0.995 on 20,000 such rows). `tune` measures it.
DEFAULT_RESCORE_FACTOR = 4


def scann_params(n):
    """ScaNN build parameters for a corpus of `n` embeddings.

    The tree has about `sqrt(n)` leaves (ScaNN's rule of thumb), but never
    fewer than 100 points per leaf on average, so small corpora still get
    well-populated leaves. The leaves are trained by spherical k-means, which
    suits unit-norm embeddings scored by dot product, on a random sample of
    100 points per leaf (at least 100k, at most `n`). A query searches 10% of
    the leaves, and at least 64 (or all of them when there are fewer): queries
    of real GTR embeddings fall between the document partitions far more than
    in clustered synthetic data, and fewer leaves lose recall there (the "real
    embeddings" runs of `benchmarks/RESULTS.md`). Scoring uses anisotropic AH
    with threshold 0.2, as ScaNN recommends, on blocks of 4 dimensions (ScaNN
    suggests 2; at 4 the codes take half the memory, and the larger reorder
    pool below makes up the recall), and the best `reorder_factor * k` AH
    candidates are rescored on int8 vectors, with
    `reorder_factor` 100 per million points (at least 100): the true top 10
    must be among those candidates, and the denser the corpus the more points
    AH cannot tell from them (`benchmarks/reorder_pool.py` measures recall per
    pool size; its runs are in `benchmarks/RESULTS.md`). Then the best
    `rescore_factor * k` of those (`DEFAULT_RESCORE_FACTOR`; past k = 100,
    `search_index.rescore_pool_size`) are rescored with the float32
    vectors, read from the index's file (`reorder: "float32"`):
    int8 scores cannot order neighbours whose scores lie closer than their
    rounding, which held recall@10 against float32 search at about 0.97.
    `num_leaves_to_search`, `reorder_factor` and `rescore_factor` apply at
    search time, so they can be changed on a built index.

    Args:
        n: int. Number of embeddings in the corpus.

    Returns:
        A JSON-serialisable dict: `num_leaves`, `num_leaves_to_search`,
        `spherical`, `training_sample_size`, `dimensions_per_block`,
        `anisotropic_quantization_threshold`, `reorder_factor`, `reorder`
        (`"float32"`) and `rescore_factor`.

    Raises:
        UserError: `n` is below 1.

    Example:
    >>> scann_params(1_000_000)["num_leaves"], scann_params(8_841_823)["reorder_factor"]
    (1000, 885)
    """
    if n < 1:
        raise UserError(f"A ScaNN index needs at least one embedding, got n={n}.")
    num_leaves = max(1, min(round(math.sqrt(n)), n // 100))
    return {
        "num_leaves": num_leaves,
        "num_leaves_to_search": min(num_leaves, max(64, math.ceil(0.1 * num_leaves))),
        "spherical": True,
        "training_sample_size": min(n, max(100_000, 100 * num_leaves)),
        "dimensions_per_block": 4,
        "anisotropic_quantization_threshold": 0.2,
        "reorder_factor": max(100, math.ceil(100 * n / 1_000_000)),
        "reorder": FLOAT32_REORDER,
        "rescore_factor": DEFAULT_RESCORE_FACTOR,
    }


@functools.cache
def _scann():
    """ScaNN's pybind extension and its config builder, loaded without the `scann` package, whose import
    loads TensorFlow for ScaNN's TF ops: only exports need those (`exports.savedmodel` imports them)."""
    spec = importlib.util.find_spec("scann")
    if spec is None:
        raise ImportError("ScaNN is not installed: pip install scann==1.4.2")
    loaded = []
    for name, relative in (
        ("scann_pybind", "scann_ops/cc/python/scann_pybind.so"),  # the name `scann` gives it
        ("_gtr_keras_scann_builder", "scann_ops/py/scann_builder.py"),
    ):
        if name not in sys.modules:
            module_spec = importlib.util.spec_from_file_location(
                name, os.path.join(spec.submodule_search_locations[0], relative)
            )
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
            sys.modules[name] = module
        loaded.append(sys.modules[name])
    return loaded


def _scann_config(sample, params):
    _, builder_module = _scann()
    builder = builder_module.ScannBuilder(sample, _DEFAULT_K, "dot_product").tree(
        num_leaves=params["num_leaves"],
        num_leaves_to_search=params["num_leaves_to_search"],
        spherical=params["spherical"],
        training_sample_size=len(sample),
    )
    builder = builder.score_ah(
        params["dimensions_per_block"],
        anisotropic_quantization_threshold=params["anisotropic_quantization_threshold"],
        training_sample_size=len(sample),
    )
    # ScaNN reorders on int8, the copy `add_points` keeps (`SCANN_PER_POINT`); float32 rescoring is `SearchIndex`'s.
    reorder = builder_module.ReorderType.INT8
    return builder.reorder(params["reorder_factor"] * _DEFAULT_K, quantize=reorder).create_config()


def _take_rows(chunks, rows, dims):
    """The vectors at the sorted row numbers `rows` of a stream of `[n_i, dims]` chunks, as one array."""
    out, done, first = np.empty((len(rows), dims), np.float32), 0, 0
    for chunk in chunks:
        picked = rows[done:][rows[done:] < first + len(chunk)] - first
        out[done : done + len(picked)] = chunk[picked]
        done, first = done + len(picked), first + len(chunk)
    return out


def build_scann(source, params, scann_dir):
    """Writes a ScaNN searcher over `source`'s vectors to `scann_dir`, a chunk at a time.

    The searcher is trained on a random sample of `params["training_sample_size"]`
    rows, emptied, and then given each chunk in turn (`add_points`).

    Args:
        source: `ids`, `dims`, `num_rows` and `chunks()`, as `write_search_index` takes.
        params: the ScaNN parameters (`scann_params(N)` and overrides).
        scann_dir: an empty directory, written in place.

    Example:
    >>> build_scann(ArrayRows(ids, vectors), scann_params(len(ids)), "staging/scann")  # doctest: +SKIP
    """
    scann_pybind, _ = _scann()
    rng = np.random.default_rng(0)
    rows = np.sort(rng.choice(source.num_rows, params["training_sample_size"], replace=False))
    sample = _take_rows(source.chunks(), rows, source.dims)
    config = _scann_config(sample, params)
    searcher = scann_pybind.ScannNumpy(sample, config, 0)
    searcher.delete(list(range(len(sample) - 1, -1, -1)))
    del sample
    _return_freed_memory()
    add_points(searcher, source, scann_dir)


@functools.cache
def _malloc_trim():
    libc = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(libc), "malloc_trim", None) if libc else None
    return trim


def _return_freed_memory():
    """Hands the memory ScaNN freed (its training, a chunk's serialisation) back to the OS where the C library
    can (glibc's `malloc_trim`), so that the next stage's allocations do not stack on pages the process still counts."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def build_scann_segment(codec_dir, source, scann_dir):
    """Writes a ScaNN searcher over `source`'s vectors with the tree, codebooks and int8 multipliers of the
    searcher in `codec_dir` (no training: the points are scored exactly as `codec_dir`'s are, so the two
    searchers' results merge, and `merge_scann` can join them).

    Only `codec_dir`'s point-independent files and one row of its per-point arrays are read.

    Example:
    >>> build_scann_segment("indexes/msmarco/index/scann", ArrayRows(ids, vectors), "staging/scann")  # doctest: +SKIP
    """
    with tempfile.TemporaryDirectory(prefix=".codec-", dir=os.path.dirname(os.fspath(scann_dir))) as seed:
        for name in os.listdir(codec_dir):
            if name in (*SCANN_PER_POINT, SCANN_PACKED_CODES):
                np.save(os.path.join(seed, name), np.load(os.path.join(codec_dir, name), mmap_mode="r")[:1])
            else:
                shutil.copyfile(os.path.join(codec_dir, name), os.path.join(seed, name))
        searcher = load_scann(seed)
    searcher.delete([0])
    add_points(searcher, source, scann_dir, codec=codec_files(codec_dir))


def codec_files(scann_dir):
    """The contents of a ScaNN searcher's files that do not depend on its points (nor on how their codes are
    stored), by name."""
    codec = {}
    for name in sorted(os.listdir(scann_dir)):
        if name not in SCANN_POINT_FILES:
            with open(os.path.join(scann_dir, name), "rb") as f:
                codec[name] = f.read()
    return codec


def add_points(searcher, source, scann_dir, codec=None):
    """Gives an empty trained `searcher` each chunk of `source` in turn and writes the searcher to `scann_dir`.

    Each chunk's per-point arrays are appended to `scann_dir`'s files, and the
    chunk is deleted again, so ScaNN holds one chunk at a time. The arrays that
    do not depend on the points (config, tree, codebooks, int8 multipliers)
    must be the same after every chunk (and, given, `codec`'s); they are
    checked, so a ScaNN that retrained on its own would be an error rather
    than an index of mixed codes. The AH codes are packed at the end (`pack_codes`).
    """
    outputs, fixed, written = {}, dict(codec or {}), 0
    # Beside `scann_dir` (in the output's staging), so a killed build leaves nothing elsewhere.
    with tempfile.TemporaryDirectory(prefix=".chunk-", dir=os.path.dirname(os.fspath(scann_dir))) as scratch:
        try:
            for chunk in source.chunks():
                searcher.upsert([None] * len(chunk), chunk, 256)
                part = os.path.join(scratch, "part")
                shutil.rmtree(part, ignore_errors=True)
                os.mkdir(part)
                searcher.serialize(part, True)
                searcher.delete(list(range(len(chunk) - 1, -1, -1)))
                _return_freed_memory()
                for name in sorted(os.listdir(part)):
                    path = os.path.join(part, name)
                    if name in SCANN_PER_POINT:
                        array = np.load(path)
                        if name not in outputs:
                            outputs[name] = open(os.path.join(scann_dir, name), "wb")  # noqa: SIM115
                            _write_header(outputs[name], array, source.num_rows)
                        outputs[name].write(np.ascontiguousarray(array))
                        continue
                    with open(path, "rb") as f:
                        content = f.read()
                    if fixed.setdefault(name, content) != content:
                        raise RuntimeError(f"ScaNN changed {name} while points were added; the index is not written")
                written += len(chunk)
        finally:
            for output in outputs.values():
                output.close()
    if written != source.num_rows or sorted(outputs) != sorted(SCANN_PER_POINT):
        raise RuntimeError(f"ScaNN wrote {written} of {source.num_rows} points ({sorted(outputs)})")
    _write_codec(fixed, scann_dir)
    pack_codes(scann_dir)


def _write_header(f, array, num_rows):
    header = np.lib.format.header_data_from_array_1_0(array)
    np.lib.format.write_array_header_2_0(f, {**header, "shape": (num_rows, *array.shape[1:])})


def _write_codec(codec, scann_dir):
    for name, content in codec.items():
        with open(os.path.join(scann_dir, name), "wb") as f:
            f.write(content)


def merge_scann(parts, scann_dir, block_rows=65_536):
    """Writes to `scann_dir` one ScaNN searcher holding the kept points of several searchers of one codec
    (`build_scann_segment`'s), in order: their per-point arrays are concatenated, a block at a time (their AH
    codes as stored where every searcher's are packed, else unpacked and then packed: `pack_codes`).

    Args:
        parts: `(scann_dir, keep)` pairs: a searcher's directory and the bool
            mask of its points to keep (None: all).
        scann_dir: an empty local directory.
        block_rows: most rows of an array held in memory at once.

    Raises:
        ValueError: the searchers do not share one codec (`codec_files`).

    Example:
    >>> merge_scann([("a/scann", None), ("b/scann", keep)], "staging/scann")  # doctest: +SKIP
    """
    codec = codec_files(parts[0][0])
    for directory, _ in parts[1:]:
        if codec_files(directory) != codec:
            raise ValueError(f"{directory}: a ScaNN searcher of another tree or codebooks than {parts[0][0]}")
    codes = [CodeRows(directory) for directory, _ in parts]
    packed = all(rows.num_codes for rows in codes)
    for name in SCANN_PER_POINT:
        if name == SCANN_CODES:
            arrays = [rows.stored for rows in codes] if packed else codes
        else:
            arrays = [np.load(os.path.join(directory, name), mmap_mode="r") for directory, _ in parts]
        rows = [np.flatnonzero(keep) if keep is not None else None for _, keep in parts]
        total = sum(len(array) if keep is None else len(keep) for array, keep in zip(arrays, rows))
        blocks = (
            array[keep[start : start + block_rows]] if keep is not None else array[start : start + block_rows]
            for array, keep in zip(arrays, rows)
            for start in range(0, len(array) if keep is None else len(keep), block_rows)
        )
        output = SCANN_PACKED_CODES if name == SCANN_CODES and packed else name
        write_rows(os.path.join(scann_dir, output), blocks, (total, *arrays[0].shape[1:]), arrays[0].dtype)
    _write_codec(codec, scann_dir)
    if packed:
        write_packed_record(scann_dir, codes[0].num_codes)
    pack_codes(scann_dir)


def load_scann(directory):
    """The ScaNN searcher that `build_scann` (or a searcher's `serialize`) wrote to a local `directory`."""
    scann_pybind, _ = _scann()
    with scann_assets(directory) as assets:
        return scann_pybind.ScannNumpy(os.fspath(directory), assets)
