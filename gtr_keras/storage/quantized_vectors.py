"""The vectors of an exact index and how they are scored: float32 (`FloatVectors`), or int8 or binary codes
searched first and their best candidates rescored with the float32 vectors (`QuantizedVectors`), and those
float32 vectors read at the candidates' rows only (`FloatRows`, which a ScaNN index with full-precision
reordering rescores its candidates with too).

The quantization is sentence-transformers' embedding quantization: int8 maps each dimension's range over the
indexed vectors (its calibration, `[min, step]`, stored beside the codes) to 256 levels; binary keeps the
sign of each dimension, 8 a byte. A query is scored against the codes as they decode (for int8 the query
is multiplied by each dimension's step, which ranks as the decoded dot product does; for binary the float
query meets +-1 vectors), and the best `rescore` of those are scored again, exactly, against the float32
vectors, which a loaded index reads from `embeddings.npy` with positional reads, a few rows a query.
The codes are what a search holds in memory: a quarter (int8) or a thirty-second (binary) of float32's.
"""

import os
import weakref

import numpy as np

from gtr_keras.errors import DataError, UserError
from gtr_keras.storage import exact_search
from gtr_keras.storage.layout import (
    BINARY_NPY,
    EMBEDDINGS_NPY,
    INT8_CALIBRATION_NPY,
    INT8_NPY,
    REMEDY,
    read_embeddings,
    write_embeddings,
)
from gtr_keras.utils import files
from gtr_keras.utils.records import check_positive_int, unreadable_reason

VECTOR_TYPES = ("float32", "int8", "binary")
# The candidates rescored with float32 vectors per query, at least `k`. On SciFact, NFCorpus and Cranfield
# with the bundled model (benchmarks/quantized.py, RESULTS.md), int8 keeps float32's NDCG@10 from 10 on
# (20 leaves a margin), binary keeps it within 0.4% from 100 on (0.7% at 40, 2.3% at 20).
DEFAULT_RESCORE = {"int8": 20, "binary": 100}
# `FloatRows.rescore` scores this many candidates' rows at a time (3 MiB at D=768). From a file, the rows are read
# with `os.preadv` into that block, one call a run of consecutive rows: nothing of the file is mapped, so a search's
# RSS holds no page of it whatever the batch, segments or shards. Through a memory map instead, each row read
# mapped the page-cache folio around it (megabytes), which had to be let go with `madvise` under a budget; at
# 1,000,000 x 768, rescoring 1,000 queries' 20 candidates each took 122 ms that way, 62-65 ms with `preadv`
# (benchmarks/rescoring_reads.py).
_RESCORE_ROWS = 1024
_CODES = {"int8": INT8_NPY, "binary": BINARY_NPY}


def vector_params(vectors="float32", rescore=None):
    """The `params` of an exact index that keeps `vectors`: None for float32, else `{"vectors", "rescore"}`.

    Args:
        vectors: `"float32"`, `"int8"` or `"binary"`.
        rescore: candidates rescored per query (default `DEFAULT_RESCORE[vectors]`); not for float32.

    Example:
    >>> vector_params("int8", rescore=50)
    {'vectors': 'int8', 'rescore': 50}
    """
    if vectors not in VECTOR_TYPES:
        raise UserError(f"vectors must be one of {VECTOR_TYPES}, got {vectors!r}")
    if vectors == "float32":
        if rescore is not None:
            raise UserError("rescore applies to int8 or binary vectors only")
        return None
    rescore = DEFAULT_RESCORE[vectors] if rescore is None else check_positive_int(rescore, "rescore")
    return {"vectors": vectors, "rescore": rescore}


def check_vector_params(params):
    """`params` of an exact index (`vector_params`' dict, or None), checked; a `UserError` names what is wrong."""
    if params is None:
        return None
    if not isinstance(params, dict) or set(params) - {"vectors", "rescore"}:
        raise UserError(f"an exact index takes params 'vectors' and 'rescore' only, got {params!r}")
    return vector_params(params.get("vectors", "float32"), params.get("rescore"))


def int8_calibration(chunks):
    """Each dimension's `[min, step]` over every row of `chunks` (float32 `[2, D]`): 256 levels span the range."""
    low = high = None
    for chunk in chunks:
        low = chunk.min(axis=0) if low is None else np.minimum(low, chunk.min(axis=0))
        high = chunk.max(axis=0) if high is None else np.maximum(high, chunk.max(axis=0))
    step = (high - low) / 255.0
    return np.stack([low, np.where(step > 0, step, 1.0)]).astype(np.float32)


def int8_codes(chunk, calibration):
    """The int8 codes of float rows `chunk` under `calibration` (`int8_calibration`).

    Example:
    >>> int8_codes(np.array([[0.0, 1.0], [1.0, -1.0]]), np.array([[0.0, -1.0], [1 / 255, 2 / 255]])).tolist()
    [[-128, 127], [127, -128]]
    """
    levels = np.rint((chunk - calibration[0]) / calibration[1])
    return (np.clip(levels, 0, 255) - 128).astype(np.int8)


def binary_codes(chunk):
    """The sign bits of float rows `chunk`, 8 dimensions a byte (`np.packbits`; 1 for a positive value)."""
    return np.packbits(np.asarray(chunk) > 0, axis=1)


def write_vectors(directory, chunks, num_rows, dims, params):
    """Writes the vectors of an exact index into `directory` (a `pathlib.Path`): `embeddings.npy`, and the
    codes (and int8 calibration) that `params` (`vector_params`) asks for.

    Args:
        chunks: a function giving the float32 `[n_i, dims]` rows in order, each call anew (int8 reads them
            twice: calibration, then codes).
    """
    write_embeddings(directory / EMBEDDINGS_NPY, chunks(), num_rows, dims)
    if params is None:
        return
    if params["vectors"] == "int8":
        calibration = int8_calibration(chunks())
        np.save(directory / INT8_CALIBRATION_NPY, calibration)
        encode, width, dtype = (lambda chunk: int8_codes(chunk, calibration)), dims, np.int8
    else:
        encode, width, dtype = binary_codes, (dims + 7) // 8, np.uint8
    codes = np.lib.format.open_memmap(directory / _CODES[params["vectors"]], "w+", dtype, (num_rows, width))
    start = 0
    for chunk in chunks():
        codes[start : start + len(chunk)] = encode(chunk)
        start += len(chunk)
    codes.flush()
    del codes


def load_vectors(directory, config, config_path):
    """The vectors of the exact index in `directory` whose `index.json` fields are `config`: a `FloatVectors`, or
    a `QuantizedVectors` with its codes in memory and its float32 rows read from their file (`open_float_rows`)."""
    params = config["params"]
    if params is None:
        return FloatVectors(read_embeddings(os.path.join(directory, EMBEDDINGS_NPY), config, config_path))
    rows, dims = config["num_embeddings"], config["dims"]
    codes = _load(os.path.join(directory, _CODES[params["vectors"]]))
    width = dims if params["vectors"] == "int8" else (dims + 7) // 8
    calibration = _load(os.path.join(directory, INT8_CALIBRATION_NPY)) if params["vectors"] == "int8" else None
    if codes.shape != (rows, width) or (calibration is not None and calibration.shape != (2, dims)):
        raise DataError(f"{directory}: {params['vectors']} codes of shape {codes.shape}, not {(rows, width)}; {REMEDY}")
    return QuantizedVectors(open_float_rows(directory, config, config_path), codes, params, calibration)


def open_float_rows(directory, config, config_path):
    """The float32 rows of `embeddings.npy` in `directory` as `FloatRows` to rescore candidates with, read from
    the open file with positional reads and checked for shape and dtype only (a scan would read all of it).
    Another file system's file is copied to a local temporary file first (`files.local_copy`, under `TMPDIR`),
    which the open file keeps on disk, unnamed, until it is closed: never read whole into memory."""
    with files.local_copy(os.path.join(directory, EMBEDDINGS_NPY)) as path:
        floats = read_embeddings(path, config, config_path, scan=False)
        return FloatRows(floats, floats.filename)


def _load(path):
    try:
        with files.open(path) as f:
            return np.load(f)
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: unreadable ({unreadable_reason(e, path)}); {REMEDY}") from e


def quantize(floats, params):
    """The vectors of an in-memory exact index over float32 `[N, D]` `floats` with `params` (`vector_params`)."""
    if params is None:
        return FloatVectors(floats)
    if params["vectors"] == "int8":
        calibration = int8_calibration([floats])
        return QuantizedVectors(FloatRows(floats), int8_codes(floats, calibration), params, calibration)
    return QuantizedVectors(FloatRows(floats), binary_codes(floats), params)


class FloatRows:
    """float32 rows read only where candidates are, to rescore them (`rescore`): what an int8 or binary exact
    index and a ScaNN index with full-precision reordering keep on disk.

    Args:
        floats: float32 `[N, D]` array, or a `np.memmap` of the `.npy` file at `path` (what bulk readers, such
            as compaction, read).
        path: the file `floats` maps (C order, little-endian), or None. Where given, it is opened (and closed
            with this object), and the rows a rescoring needs are read from it with `os.preadv`: no page of it
            is mapped into the process by a search.

    Example:
    >>> rows = FloatRows(np.eye(3, dtype="float32"))
    >>> rows.rescore(np.eye(1, 3, 2, dtype="float32"), np.array([[0, 2]]), 1, np.arange(3))
    (array([[2]]), array([[1.]], dtype=float32))
    """

    def __init__(self, floats, path=None):
        self.floats, self._path, self._descriptor = floats, path, None
        if path is not None:
            if not (floats.flags.c_contiguous and floats.dtype == np.dtype("<f4")):
                raise DataError(f"{path}: float32 rows not in C order, little-endian; {REMEDY}")
            self._offset = floats.offset
            self._descriptor = os.open(path, os.O_RDONLY)
            weakref.finalize(self, os.close, self._descriptor)

    def rescore(self, queries, candidates, k, ranks):
        """The best `k` of each query's `candidates` by float32 dot product, equal scores in `ranks`' order
        (lower first, as `exact_search.exact_top_k` orders them).

        Args:
            queries: float32 `[n, D]`.
            candidates: int64 `[n, c]` distinct rows per query, `c >= k`, or -1 for none (scored -inf; at
                least `k` of each row are rows).
            k: results per query.
            ranks: int64 `[N]`, the order of equal scores.

        Returns:
            `(indices, scores)`: int64 and float32 `[n, k]`, best first.
        """
        indices = np.empty((len(queries), k), np.int64)
        scores = np.empty((len(queries), k), np.float32)
        step = max(1, _RESCORE_ROWS // max(1, candidates.shape[1]))
        for start in range(0, len(queries), step):
            block = candidates[start : start + step]
            none = block < 0
            block = np.where(none, 0, block)
            rows, inverse = np.unique(block, return_inverse=True)  # in file order: reads go forward
            vectors = self._read(rows)
            block_scores = np.einsum("qcd,qd->qc", vectors[inverse.reshape(block.shape)], queries[start : start + step])
            block_scores[none] = -np.inf
            order = np.lexsort((ranks[block], -block_scores), axis=-1)[:, :k]
            indices[start : start + step] = np.take_along_axis(block, order, axis=1)
            scores[start : start + step] = np.take_along_axis(block_scores, order, axis=1)
        return indices, scores

    def _read(self, rows):
        """The float32 rows at the sorted, distinct row numbers `rows`: from the file, one `os.preadv` a run of
        consecutive rows."""
        if self._descriptor is None:
            return np.asarray(self.floats[rows], dtype=np.float32)
        vectors = np.empty((len(rows), self.floats.shape[1]), np.float32)
        buffer, width = memoryview(vectors).cast("B"), vectors.shape[1] * 4
        starts = np.flatnonzero(np.diff(rows, prepend=-2) != 1)
        for first, stop in zip(starts.tolist(), [*starts[1:].tolist(), len(rows)]):
            wanted = (stop - first) * width
            place = self._offset + int(rows[first]) * width
            read = os.preadv(self._descriptor, [buffer[first * width : stop * width]], place)
            if read != wanted:
                raise DataError(f"{self._path}: ended before row {rows[first] + read // width}; {REMEDY}")
        return vectors


class FloatVectors:
    """float32 vectors scored exactly (`exact_search.exact_top_k`).

    Args:
        floats: float32 `[N, D]` array, or a memory map of one.

    Example:
    >>> FloatVectors(np.eye(3, dtype="float32")).top_k(np.eye(1, 3, 2, dtype="float32"), 1, np.arange(3))[0]
    array([[2]])
    """

    params = None

    def __init__(self, floats):
        self.floats = floats

    def top_k(self, queries, k, ranks, excluded=None):
        """`exact_top_k` of the float32 vectors: `(indices, scores)`, int64 and float32 `[n, k]`."""
        return exact_search.exact_top_k(self.floats, queries, k, ranks, excluded)


class SignRows:
    """Packed sign bits `[N, ceil(D / 8)]` read as float32 `+-1` rows `[N, D]`, a slice at a time.

    Example:
    >>> SignRows(binary_codes(np.array([[0.5, -2.0]])), 2)[0:1].tolist()
    [[1.0, -1.0]]
    """

    def __init__(self, bits, dims):
        self.bits, self.shape = bits, (len(bits), dims)

    def __getitem__(self, rows):
        return np.unpackbits(self.bits[rows], axis=-1, count=self.shape[1]).astype(np.float32) * 2 - 1


class QuantizedVectors:
    """int8 or binary codes searched first, the best `params["rescore"]` candidates rescored with float32.

    Args:
        float_rows: the float32 rows (`FloatRows`; read from the file for a loaded index), read only at the
            candidates' rows.
        codes: int8 `[N, D]` or packed sign bits uint8 `[N, ceil(D / 8)]`.
        params: `vector_params`' dict.
        calibration: the int8 codes' `[min, step]` per dimension (`int8_calibration`); None for binary.

    Example:
    >>> vectors = quantize(np.eye(4, dtype="float32"), vector_params("binary", rescore=2))
    >>> vectors.top_k(np.eye(1, 4, 3, dtype="float32"), 1, np.arange(4))
    (array([[3]]), array([[1.]], dtype=float32))
    """

    def __init__(self, float_rows, codes, params, calibration=None):
        self.float_rows, self.floats = float_rows, float_rows.floats
        self.codes, self.params, self.calibration = codes, params, calibration
        self._rows = codes if params["vectors"] == "int8" else SignRows(codes, self.floats.shape[1])

    def top_k(self, queries, k, ranks, excluded=None):
        """The top `k` by float32 dot product among the best `params["rescore"]` (at least `k`) by the
        codes: `(indices, scores)` as `exact_top_k` gives, ties in its order."""
        live = len(self.codes) - (0 if excluded is None else int(excluded.sum()))
        pool = min(live, max(k, self.params["rescore"]))
        scored = queries * self.calibration[1] if self.calibration is not None else queries
        candidates, _ = exact_search.exact_top_k(self._rows, scored, pool, ranks, excluded)
        return self.float_rows.rescore(queries, candidates, k, ranks)
