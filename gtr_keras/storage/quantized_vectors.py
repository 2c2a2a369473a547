"""The vectors of an exact index and how they are scored: float32 (`FloatVectors`), or int8 or binary codes
searched first and their best candidates rescored with the float32 vectors (`QuantizedVectors`), and those
float32 vectors read at the candidates' rows only (`FloatRows`, which a ScaNN index with full-precision
reordering rescores its candidates with too).

The quantization is sentence-transformers' embedding quantization: int8 maps each dimension's range over the
indexed vectors (its calibration, `[min, step]`, stored beside the codes) to 256 levels; binary keeps the
sign of each dimension, 8 a byte. A query is scored against the codes as they decode (for int8 the query
is multiplied by each dimension's step, which ranks as the decoded dot product does; for binary the float
query meets +-1 vectors), and the best `rescore` of those are scored again, exactly, against the float32
vectors, which a loaded local index reads from `embeddings.npy` through a memory map, a few rows a query.
The codes are what a search holds in memory: a quarter (int8) or a thirty-second (binary) of float32's.
"""

import mmap
import os
import threading
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
# `FloatRows.rescore` scores this many candidates' rows at a time (3 MiB at D=768), read from a memory map
# _FAULTED_ROWS at a time, and the process lets go of the pages of every float32 file it maps (`_MAPS`: each
# segment's and shard's) once the pages of files mapped in the process have grown by more than _MAPPED_BYTES since
# it last did: one budget for the process, not one a map. A row read maps the whole page-cache folio around it
# (2-4 MiB on Linux 6.18 and ext4), so the budget is checked every _FAULTED_ROWS rows, not once a block: 40 blocks
# of 1,000 random rows of a 1 GB file raised the peak RSS by 886 MiB checked once a block, by 151 MiB every 16 rows,
# in as little time. The RSS that memory-mapped float32 files add to a search stays below _MAPPED_BYTES and
# _FAULTED_ROWS folios, whatever the batch and however many segments or shards.
_RESCORE_ROWS = 1024
_FAULTED_ROWS = 16
_MAPPED_BYTES = 128 * 2**20
_CODES = {"int8": INT8_NPY, "binary": BINARY_NPY}
_MAPS = weakref.WeakSet()  # the live `FloatRows` with a memory map
_RELEASED = {"pages": None}  # the process's mapped file pages when they were last let go
_RELEASE_LOCK = threading.Lock()


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
    """The vectors of the exact index in `directory` whose `index.json` fields are `config`: a
    `FloatVectors`, or a `QuantizedVectors` with its codes in memory and its float32 rows memory-mapped."""
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
    """The float32 rows of `embeddings.npy` in `directory` as `FloatRows` to rescore candidates with, memory-mapped
    for random reads (`MADV_RANDOM`) and checked for shape and dtype only (a scan would make every page resident).
    Another file system's file is copied to a local temporary file first (`files.local_copy`, under `TMPDIR`),
    which the map keeps on disk, unnamed, until it is let go: never read whole into memory."""
    with files.local_copy(os.path.join(directory, EMBEDDINGS_NPY)) as path:
        floats = read_embeddings(path, config, config_path, scan=False)
        with open(floats.filename, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    mapped.madvise(mmap.MADV_RANDOM)
    return FloatRows(np.frombuffer(mapped, np.float32, floats.size, floats.offset).reshape(floats.shape), mapped)


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
        floats: float32 `[N, D]` array, or a view of `mapped`.
        mapped: the `mmap.mmap` that `floats` views (`open_float_rows`), or None. The pages of every such map
            in the process are let go together (`MADV_DONTNEED`; they stay in the page cache) once the process's
            mapped file pages have grown by `_MAPPED_BYTES`: the kernel maps whole page-cache folios (up to
            megabytes) around each row read, which would otherwise stay counted in the RSS until the whole file is.

    Example:
    >>> rows = FloatRows(np.eye(3, dtype="float32"))
    >>> rows.rescore(np.eye(1, 3, 2, dtype="float32"), np.array([[0, 2]]), 1, np.arange(3))
    (array([[2]]), array([[1.]], dtype=float32))
    """

    def __init__(self, floats, mapped=None):
        self.floats, self._mapped = floats, mapped
        if mapped is not None:
            _MAPS.add(self)

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
            rows, inverse = np.unique(block, return_inverse=True)  # in file order: the memory map reads forward
            vectors = self._read(rows)
            block_scores = np.einsum("qcd,qd->qc", vectors[inverse.reshape(block.shape)], queries[start : start + step])
            block_scores[none] = -np.inf
            order = np.lexsort((ranks[block], -block_scores), axis=-1)[:, :k]
            indices[start : start + step] = np.take_along_axis(block, order, axis=1)
            scores[start : start + step] = np.take_along_axis(block_scores, order, axis=1)
        return indices, scores

    def _read(self, rows):
        """The float32 rows at the sorted row numbers `rows`; from a memory map, `_FAULTED_ROWS` at a time, the
        budget of mapped pages checked after each (`_let_go_past_the_budget`)."""
        if self._mapped is None:
            return np.asarray(self.floats[rows], dtype=np.float32)
        vectors = np.empty((len(rows), self.floats.shape[1]), np.float32)
        for start in range(0, len(rows), _FAULTED_ROWS):
            vectors[start : start + _FAULTED_ROWS] = self.floats[rows[start : start + _FAULTED_ROWS]]
            _let_go_past_the_budget()
        return vectors


def _let_go_past_the_budget():
    """Lets go of the pages of every live float32 memory map (`_MAPS`) when the process's mapped file pages have
    grown by more than `_MAPPED_BYTES` since they last were, or since they last fell (other files unmapped, pages
    reclaimed); always where `/proc/self/statm` cannot tell."""
    with _RELEASE_LOCK:
        pages, last = _file_pages(), _RELEASED["pages"]
        if pages is not None and last is not None and (pages - last) * mmap.PAGESIZE <= _MAPPED_BYTES:
            _RELEASED["pages"] = min(pages, last)
            return
        for rows in list(_MAPS):
            rows._mapped.madvise(mmap.MADV_DONTNEED)
        _RELEASED["pages"] = _file_pages()


def _file_pages():
    """The resident pages of files mapped by this process (`/proc/self/statm`'s third field), or None."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[2])
    except (OSError, ValueError, IndexError):
        return None


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
        float_rows: the float32 rows (`FloatRows`; memory-mapped for a loaded index), read only at the
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
