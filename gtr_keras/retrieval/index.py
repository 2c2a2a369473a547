"""Nearest-neighbour search over L2-normalised embeddings, and its storage.

GTR scores a query against a passage by the dot product of their unit-norm
embeddings, i.e. their cosine similarity. `SearchIndex` returns the `k`
passages with the highest dot product, either exactly (batched matmul over
the stored float32 vectors, read in chunks) or approximately with ScaNN
(k-means tree + anisotropic AH + reordering on int8 vectors).

Building never holds every vector in memory: `write_search_index` reads its
source a chunk at a time. ScaNN's tree and quantisers are trained on a random
sample, then each chunk is added to the trained searcher, its ScaNN arrays
(leaf of each point, AH codes, int8 vectors) are appended to the index's
files, and it is removed again (adding 30k points in 5 chunks or at once to
one trained searcher gave identical arrays when this was written). An index
keeps one copy of the vectors: float32 (`embeddings.npy`, memory-mapped when
local) for exact search, ScaNN's int8 copy (1 byte per dimension, plus AH
codes of 1/4 byte per dimension on disk, 1/8 in memory) for approximate search. It lives on any file system TensorFlow knows
(local, `gs://`, `ram://`).
"""

import collections.abc
import functools
import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np

from gtr_keras.errors import DataError, MismatchError
from gtr_keras.utils import files
from gtr_keras.utils.files import atomic_directory
from gtr_keras.utils.records import (
    check_positive_int,
    read_json_object,
    unreadable_reason,
)

FORMAT_VERSION = 2
KINDS = ("auto", "exact", "scann")
# ScaNN's own rule of thumb (scann/docs/algorithms.md): brute force below 20k
# points. At 20k x 768 float32 the corpus is 61 MB and one batched exact search
# is a single BLAS call, so an approximate index buys little there.
EXACT_MAX_N = 20_000
# Exact search scores at most this many (query, passage) pairs at a time:
# 2**25 float32 scores is 128 MiB, whatever the corpus size.
_EXACT_CHUNK_SCORES = 2**25
# ... and reads at most this many stored vectors at a time (24 MiB at D=768).
_EXACT_ROW_BLOCK = 8192
_INDEX_JSON = "index.json"
_IDS_TXT = "ids.txt"
_EMBEDDINGS_NPY = "embeddings.npy"
_SCANN_DIR = "scann"
# ScaNN's arrays with a row per indexed point (the others are the same whatever the points).
_SCANN_PER_POINT = ("datapoint_to_token.npy", "hashed_dataset.npy", "int8_dataset.npy")
# ScaNN searchers are built for this many neighbours; `search` passes its own
# `k`, so this only sizes the default reordering pool.
_DEFAULT_K = 10
_BUILD_CHUNK_ROWS = 65_536


def scann_params(n):
    """ScaNN build parameters for a corpus of `n` embeddings.

    The tree has about `sqrt(n)` leaves (ScaNN's rule of thumb), but never
    fewer than 100 points per leaf on average, so small corpora still get
    well-populated leaves. The leaves are trained by spherical k-means, which
    suits unit-norm embeddings scored by dot product, on a random sample of
    100 points per leaf (at least 100k, at most `n`). A query searches 10% of
    the leaves, and at least 64 (or all of them when there are fewer): on real
    GTR embeddings of the shared BEIR collections (16,676 documents, 129
    leaves, queries of those collections) 13 leaves gave recall@10 0.62, 32
    gave 0.85 and 64 gave 0.97, because queries fall between the document
    partitions far more than in clustered synthetic data. Scoring uses
    anisotropic AH with threshold 0.2, as ScaNN recommends, on blocks of 4
    dimensions (ScaNN suggests 2; at 4 the codes take half the memory, and
    the larger reorder pool below makes up the recall), and the best
    `reorder_factor * k` AH candidates are rescored on int8 vectors
    (`reorder: "int8"`), with `reorder_factor` 100 per million points (at
    least 100): the true top 10 must be among those candidates, and the
    denser the corpus the more points AH cannot tell from them. On clustered
    768-d data (`benchmarks/reorder_pool.py` over `benchmarks/large_index.py`
    indexes, 300 queries) recall@10 was 0.81 with `40 * k`, 0.974 with
    `100 * k` and 0.975 with `200 * k` at N=1M; 0.49 with `100 * k`, 0.89
    with `400 * k` and 0.968 with `800 * k` at N=8.8M, whether 5% or 10% of
    the leaves were searched (the full runs are in `benchmarks/RESULTS.md`).
    `num_leaves_to_search` and `reorder_factor`
    apply at search time, so they can be changed on a built index.

    Args:
        n: int. Number of embeddings in the corpus.

    Returns:
        A JSON-serialisable dict: `num_leaves`, `num_leaves_to_search`,
        `spherical`, `training_sample_size`, `dimensions_per_block`,
        `anisotropic_quantization_threshold`, `reorder_factor`, `reorder`.

    Example:
    >>> scann_params(1_000_000)["num_leaves"], scann_params(8_841_823)["reorder_factor"]
    (1000, 885)
    """
    if n < 1:
        raise ValueError(f"A ScaNN index needs at least one embedding, got n={n}.")
    num_leaves = max(1, min(round(math.sqrt(n)), n // 100))
    return {
        "num_leaves": num_leaves,
        "num_leaves_to_search": min(num_leaves, max(64, math.ceil(0.1 * num_leaves))),
        "spherical": True,
        "training_sample_size": min(n, max(100_000, 100 * num_leaves)),
        "dimensions_per_block": 4,
        "anisotropic_quantization_threshold": 0.2,
        "reorder_factor": max(100, math.ceil(100 * n / 1_000_000)),
        "reorder": "int8",
    }


@functools.cache
def _scann():
    """ScaNN's pybind extension and its config builder, loaded without the `scann` package, whose import
    loads TensorFlow for ScaNN's TF ops: only exports need those (`serving.export` imports them)."""
    spec = importlib.util.find_spec("scann")
    if spec is None:
        raise ImportError("ScaNN is not installed: pip install scann==1.4.2")
    loaded = []
    for name, relative in (("scann_pybind", "scann_ops/cc/python/scann_pybind.so"),  # the name `scann` gives it
                           ("_gtr_keras_scann_builder", "scann_ops/py/scann_builder.py")):
        if name not in sys.modules:
            module_spec = importlib.util.spec_from_file_location(
                name, os.path.join(spec.submodule_search_locations[0], relative))
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
            sys.modules[name] = module
        loaded.append(sys.modules[name])
    return loaded


def _scann_config(sample, params):
    _, scann_builder = _scann()
    builder = scann_builder.ScannBuilder(sample, _DEFAULT_K, "dot_product").tree(
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
    reorder = {"int8": scann_builder.ReorderType.INT8, "bfloat16": scann_builder.ReorderType.BFLOAT16}[params["reorder"]]
    return builder.reorder(params["reorder_factor"] * _DEFAULT_K, quantize=reorder).create_config()


def _take_rows(chunks, rows, dims):
    """The vectors at the sorted row numbers `rows` of a stream of `[n_i, dims]` chunks, as one array."""
    out, done, first = np.empty((len(rows), dims), np.float32), 0, 0
    for chunk in chunks:
        picked = rows[done:][rows[done:] < first + len(chunk)] - first
        out[done : done + len(picked)] = chunk[picked]
        done, first = done + len(picked), first + len(chunk)
    return out


def _build_scann(source, params, scann_dir):
    """Writes a ScaNN searcher over `source`'s vectors to `scann_dir`, a chunk at a time.

    The searcher is trained on a random sample of `params["training_sample_size"]`
    rows, emptied, and then given each chunk in turn: its per-point arrays are
    appended to `scann_dir`'s files, and the chunk is deleted again, so ScaNN
    holds one chunk at a time. The arrays that do not depend on the points
    (config, tree, codebooks, int8 multipliers) must be the same after every
    chunk; they are checked, so a ScaNN that retrained on its own would be an
    error rather than an index of mixed codes.
    """
    scann_pybind, _ = _scann()
    rng = np.random.default_rng(0)
    rows = np.sort(rng.choice(source.num_rows, params["training_sample_size"], replace=False))
    sample = _take_rows(source.chunks(), rows, source.dims)
    config = _scann_config(sample, params)
    searcher = scann_pybind.ScannNumpy(sample, config, 0)
    searcher.delete(list(range(len(sample) - 1, -1, -1)))
    del sample
    outputs, fixed, written = {}, {}, 0
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
                for name in sorted(os.listdir(part)):
                    path = os.path.join(part, name)
                    if name in _SCANN_PER_POINT:
                        array = np.load(path)
                        if name not in outputs:
                            outputs[name] = open(os.path.join(scann_dir, name), "wb")  # noqa: SIM115
                            header = np.lib.format.header_data_from_array_1_0(array)
                            np.lib.format.write_array_header_2_0(
                                outputs[name], {**header, "shape": (source.num_rows, *array.shape[1:])})
                        outputs[name].write(np.ascontiguousarray(array).tobytes())
                        continue
                    with open(path, "rb") as f:
                        content = f.read()
                    if fixed.setdefault(name, content) != content:
                        raise RuntimeError(f"ScaNN changed {name} while points were added; the index is not written")
                written += len(chunk)
        finally:
            for output in outputs.values():
                output.close()
    if written != source.num_rows or sorted(outputs) != sorted(_SCANN_PER_POINT):
        raise RuntimeError(f"ScaNN wrote {written} of {source.num_rows} points ({sorted(outputs)})")
    for name, content in fixed.items():
        with open(os.path.join(scann_dir, name), "wb") as f:
            f.write(content)


def _load_scann(directory):
    scann_pybind, _ = _scann()
    with open(os.path.join(directory, "scann_assets.pbtxt"), encoding="utf-8") as f:
        return scann_pybind.ScannNumpy(os.fspath(directory), f.read())


def _merge_top_k(best, candidates, scores, tie_ranks, k):
    """The best `k` of two candidate lists, by score and then `tie_ranks` (lower first)."""
    if best is not None:
        candidates, scores = np.concatenate([best[0], candidates]), np.concatenate([best[1], scores])
    order = np.lexsort((tie_ranks[candidates], -scores))[:k]
    return candidates[order], scores[order]


def _exact_top_k(vectors, queries, k, tie_ranks):
    """Top-`k` rows of `vectors` by dot product, best first.

    `vectors` is read a block of rows at a time (it may be memory-mapped),
    and the scores held at once stay under `_EXACT_CHUNK_SCORES`. Equal scores
    are ordered by `tie_ranks` (lower first), also at the cut: with
    `tie_ranks` from the ids in descending order this is trec_eval's order, so
    which of several tied rows make the top `k` depends on their ids, never on
    their position in the corpus.
    """
    n = vectors.shape[0]
    indices = np.empty((len(queries), k), dtype=np.int64)
    scores = np.empty((len(queries), k), dtype=np.float32)
    row_chunk = max(k, min(n, _EXACT_ROW_BLOCK))
    query_chunk = max(1, min(len(queries), _EXACT_CHUNK_SCORES // row_chunk))
    for q_start in range(0, len(queries), query_chunk):
        block_queries = queries[q_start : q_start + query_chunk]
        best = [None] * len(block_queries)
        for r_start in range(0, n, row_chunk):
            block = block_queries @ np.asarray(vectors[r_start : r_start + row_chunk], dtype=np.float32).T
            width = block.shape[1]
            cut = np.partition(block, width - k, axis=1)[:, width - k] if width > k else block.min(axis=1)
            for row, (row_scores, lowest) in enumerate(zip(block, cut)):
                candidates = np.flatnonzero(row_scores >= lowest)  # ties at the cut included
                best[row] = _merge_top_k(best[row], candidates + r_start, row_scores[candidates], tie_ranks, k)
        for row, (row_indices, row_scores) in enumerate(best):
            indices[q_start + row], scores[q_start + row] = row_indices, row_scores
    return indices, scores


class Ids(collections.abc.Sequence):
    """A sequence of str ids kept as UTF-8 in one numpy bytes array: about their length in bytes each (a
    Python str costs ~60 more), which matters at millions of ids. Sorting the bytes sorts the ids.

    Example:
    >>> Ids(["d1", "d0"])[1]
    'd0'
    """

    def __init__(self, ids):
        self.array = ids if isinstance(ids, np.ndarray) else np.array([i.encode("utf-8") for i in ids], dtype="S")

    def __len__(self):
        return len(self.array)

    def __getitem__(self, i):
        return self.array[i].decode("utf-8")

    def __iter__(self):
        return (raw.decode("utf-8") for raw in self.array)

    def __eq__(self, other):
        return list(self) == list(other)

    def __repr__(self):
        return f"Ids({list(self)!r})"


def check_ids(ids, where=lambda i: f"ids[{i}]", error=ValueError):
    """Returns `ids` as a list after checking them; `where(i)` names id `i` in an `error`."""
    ids = list(ids)
    for i, id_ in enumerate(ids):
        if not isinstance(id_, str) or not id_:
            raise error(f"{where(i)}: ids must be non-empty strings, got {id_!r}.")
        if "\n" in id_ or "\r" in id_ or "\0" in id_:
            raise error(f"{where(i)}: id {id_!r} contains a line break or a NUL character.")
    if len(set(ids)) != len(ids):  # a set of the ids only: a million ids need no dict of positions
        seen = {}
        for i, id_ in enumerate(ids):
            if id_ in seen:
                raise error(f"{where(i)}: id {id_!r} duplicates {where(seen[id_])}.")
            seen[id_] = i
    return ids


def check_embeddings(embeddings, where):
    embeddings = np.asarray(embeddings)
    if embeddings.ndim != 2:
        raise ValueError(f"{where} must have shape [N, D], got shape {embeddings.shape}.")
    if not np.issubdtype(embeddings.dtype, np.floating):
        raise ValueError(f"{where} must be floating point, got dtype {embeddings.dtype}.")
    if not np.isfinite(embeddings).all():
        raise ValueError(f"{where} hold NaN or infinity in {int((~np.isfinite(embeddings).all(axis=1)).sum())} rows.")
    return np.ascontiguousarray(embeddings, dtype=np.float32)


class ArrayRows:
    """An in-memory `[N, D]` array as a source for `write_search_index`: `ids`, `dims`, `num_rows`, `chunks()`."""

    def __init__(self, ids, embeddings, chunk_rows=None):
        self.ids = check_ids(ids)
        self.embeddings = check_embeddings(embeddings, "embeddings")
        if self.embeddings.shape[0] != len(self.ids):
            raise ValueError(f"Got {len(self.ids)} ids for {self.embeddings.shape[0]} embedding rows.")
        if not self.ids:
            raise ValueError("A SearchIndex needs at least one embedding.")
        self.num_rows, self.dims = self.embeddings.shape
        self.chunk_rows = chunk_rows or _BUILD_CHUNK_ROWS

    def chunks(self):
        for start in range(0, self.num_rows, self.chunk_rows):
            yield self.embeddings[start : start + self.chunk_rows]


def _resolve(kind, params, n):
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
    if kind == "auto":
        kind = "exact" if n < EXACT_MAX_N else "scann"
    if kind == "exact" and params is not None:
        raise ValueError("`params` only apply to kind='scann'.")
    return kind, (dict(scann_params(n), **(params or {})) if kind == "scann" else None)


def write_search_index(source, directory, kind="auto", params=None):
    """Builds a `SearchIndex` over `source` a chunk at a time and writes it to `directory`, atomically.

    No more than one chunk of float32 vectors (and ScaNN's training sample)
    is held in memory: exact indexes copy the chunks into `embeddings.npy`;
    ScaNN indexes are built as the module docstring says. The directory
    appears only when complete; a previous index there stays until then.

    Args:
        source: the vectors and their ids: `ids` (list of str), `dims`,
            `num_rows` and `chunks()` (float32 `[n_i, dims]` arrays in row
            order, readable more than once), such as an `EmbeddingFiles` or
            an `ArrayRows`.
        directory: the index directory to write.
        kind: `"auto"`, `"exact"` or `"scann"`, as for `SearchIndex`.
        params: overrides of `scann_params(N)`, for ScaNN.

    Returns:
        The kind written, `"exact"` or `"scann"` (`SearchIndex.load` reads the index).

    Example:
    >>> write_search_index(EmbeddingFiles.open("embeddings/*.npy"), "indexes/msmarco")
    'scann'
    """
    kind, params = _resolve(kind, params, source.num_rows)
    ids = check_ids(source.ids)
    with atomic_directory(directory) as tmp:
        if kind == "scann":
            os.mkdir(tmp / _SCANN_DIR)
            _build_scann(source, params, tmp / _SCANN_DIR)
        else:
            with open(tmp / _EMBEDDINGS_NPY, "wb") as f:
                np.lib.format.write_array_header_2_0(
                    f, {"descr": "<f4", "fortran_order": False, "shape": (source.num_rows, source.dims)})
                for chunk in source.chunks():
                    f.write(np.ascontiguousarray(chunk, dtype="<f4").tobytes())
        _write_description(tmp, ids, kind, params, source.dims)
    return kind


def _write_description(directory, ids, kind, params, dims):
    with open(directory / _IDS_TXT, "w", encoding="utf-8", newline="") as f:
        f.writelines(f"{id_}\n" for id_ in ids)
    config = {"format_version": FORMAT_VERSION, "kind": kind, "num_embeddings": len(ids), "dims": dims,
              "params": params}
    with open(directory / _INDEX_JSON, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


class SearchIndex:
    """Top-k dot-product search over L2-normalised embeddings.

    With `kind="exact"`, queries are scored against every float32 embedding
    by batched matrix products, a block of rows at a time. With
    `kind="scann"`, a ScaNN searcher is built with `params` (default
    `scann_params(N)`), reordering on int8 vectors; query rows that ScaNN
    cannot fill with `k` results from the leaves searched (`k` close to `N`)
    are searched again over every leaf. `kind="auto"` is `"exact"` below
    `EXACT_MAX_N` embeddings and `"scann"` from there on.
    `num_leaves_to_search` and `reorder_factor` are read from `index.params`
    at each search, so they can be tuned without a rebuild. For corpora too
    large for memory, `write_search_index` builds from shards and `load`
    memory-maps what it can.

    Args:
        ids: sequence of str, one per embedding row; non-empty, unique and
            without line breaks.
        embeddings: float array of shape `[N, D]`, rows L2-normalised.
        kind: `"auto"`, `"exact"` or `"scann"`.
        params: dict of overrides of `scann_params(N)`; only for
            `kind="scann"` (or `"auto"` resolving to it).

    Attributes:
        ids, kind, params, dims.
        embeddings: the float32 `[N, D]` vectors of an exact index (a
            read-only memory map for one loaded from a local directory);
            None for ScaNN, which keeps its own int8 copy.

    Example:
    >>> index = SearchIndex(["d0", "d1"], np.eye(2, dtype="float32"))
    >>> index.search_ids(np.array([[0.0, 1.0]], dtype="float32"), k=1)
    ([['d1']], array([[1.]], dtype=float32))
    """

    def __init__(self, ids, embeddings, kind="auto", params=None):
        source = ArrayRows(ids, embeddings)
        kind, params = _resolve(kind, params, source.num_rows)
        searcher = None
        if kind == "scann":
            with tempfile.TemporaryDirectory(prefix="gtr-keras-scann-") as scratch:
                _build_scann(source, params, scratch)
                searcher = _load_scann(scratch)
        self._set(source.ids, kind, params, source.dims, source.embeddings if kind == "exact" else None, searcher)

    def _set(self, ids, kind, params, dims, embeddings, searcher):
        self.ids, self.kind, self.params, self.dims = Ids(ids), kind, params, dims
        self.embeddings, self._searcher = embeddings, searcher

    @functools.cached_property
    def tie_ranks(self):
        """Each row's place when the ids are sorted in descending order: exact search orders equal scores
        by it, as trec_eval (and `pytrec_eval`) rank tied documents."""
        ranks = np.empty(len(self.ids), dtype=np.int64)
        ranks[np.argsort(self.ids.array, kind="stable")[::-1]] = np.arange(len(self.ids))
        return ranks

    def search(self, query_embeddings, k):
        """Finds the `k` best-scoring embedding rows for each query.

        Exact search orders equal scores by id, descending, as trec_eval
        does, also where ties straddle the `k`-th place; ScaNN's order among
        equal scores is its own.

        Args:
            query_embeddings: float array of shape `[n, D]`.
            k: int >= 1. Results per query; `min(k, N)` are returned.

        Returns:
            `(indices, scores)`: int64 `[n, min(k, N)]` row indices into
            `ids` and their float32 dot products, best first.
        """
        queries = check_embeddings(query_embeddings, "query_embeddings")
        if queries.shape[1] != self.dims:
            raise ValueError(f"query_embeddings have {queries.shape[1]} dims, the index has {self.dims}.")
        k = min(check_positive_int(k, "k"), len(self.ids))
        if self.kind == "exact":
            return _exact_top_k(self.embeddings, queries, k, self.tie_ranks)
        if not len(queries):
            return np.empty((0, k), np.int64), np.empty((0, k), np.float32)
        indices, scores = self._scann_search(queries, k, self.params["num_leaves_to_search"])
        unfilled = np.isnan(scores).any(axis=1)
        if unfilled.any():
            indices[unfilled], scores[unfilled] = self._scann_search(queries[unfilled], k, self.params["num_leaves"])
        return indices, scores

    def _scann_search(self, queries, k, leaves):
        indices, scores = self._searcher.search_batched(
            queries, k, self.params["reorder_factor"] * k, leaves, True, 256  # in parallel, 256 queries a task
        )
        return indices.astype(np.int64), scores.astype(np.float32, copy=False)

    def search_ids(self, query_embeddings, k):
        """Like `search`, but returns ids: `(list of lists of str, scores)`."""
        indices, scores = self.search(query_embeddings, k)
        return [[self.ids[i] for i in row] for row in indices], scores

    def save(self, directory):
        """Writes the index to `directory`, atomically replacing it.

        Files: `ids.txt` (one id per line), `index.json` (format version,
        kind, N, dims, ScaNN params) and either `embeddings.npy` (exact) or
        the ScaNN searcher in `scann/`.
        """
        with atomic_directory(directory) as tmp:
            if self.kind == "scann":
                os.mkdir(tmp / _SCANN_DIR)
                self._searcher.serialize(str(tmp / _SCANN_DIR), True)
            else:
                np.save(tmp / _EMBEDDINGS_NPY, self.embeddings)
            _write_description(tmp, self.ids, self.kind, self.params, self.dims)

    @classmethod
    def load(cls, directory):
        """Loads an index written by `save` or `write_search_index`.

        `directory` may also be an index directory of `gtr-keras index` (its
        `index/` subdirectory is loaded). A local exact index is memory-mapped
        (searches read it a block at a time); ScaNN reads its own files into
        memory (about 1 KB per 768-d vector).

        Raises:
            DataError: a missing, malformed or inconsistent file.
            MismatchError: an index written by another format version.
        """
        remedy = "rebuild the index"
        directory = os.fspath(directory)
        config_path = os.path.join(directory, _INDEX_JSON)
        if not files.isfile(config_path) and files.isfile(os.path.join(directory, "index", _INDEX_JSON)):
            directory, config_path = os.path.join(directory, "index"), os.path.join(directory, "index", _INDEX_JSON)
        if not files.isfile(config_path):
            raise DataError(f"{directory}: not a search index (no {_INDEX_JSON}); {remedy}")
        config = read_json_object(config_path, remedy)
        for field in ("format_version", "kind", "num_embeddings", "dims", "params"):
            if field not in config:
                raise DataError(f"{config_path}: missing field {field!r}; {remedy}")
        if config["format_version"] != FORMAT_VERSION:
            raise MismatchError(
                f"{config_path}: field 'format_version' is {config['format_version']!r}, "
                f"this version of gtr_keras reads {FORMAT_VERSION} (one int8 copy of the vectors for ScaNN); "
                f"{remedy}"
            )
        if config["kind"] not in ("exact", "scann"):
            raise DataError(f"{config_path}: field 'kind' is {config['kind']!r}, not 'exact' or 'scann'; {remedy}")
        ids = _read_ids(os.path.join(directory, _IDS_TXT), config["num_embeddings"])
        index = cls.__new__(cls)
        if config["kind"] == "scann":
            with files.local_copy(os.path.join(directory, _SCANN_DIR)) as scann_dir:
                _check_scann_rows(scann_dir, config, remedy)
                searcher = _load_scann(scann_dir)
            index._set(ids, "scann", config["params"], config["dims"], None, searcher)
        else:
            embeddings = _load_embeddings(os.path.join(directory, _EMBEDDINGS_NPY), config, config_path, remedy)
            index._set(ids, "exact", None, config["dims"], embeddings, None)
        return index


def _load_embeddings(path, config, config_path, remedy):
    """The float32 vectors of an exact index: memory-mapped when local, checked a block at a time."""
    try:
        if files.is_local(path):
            embeddings = np.load(path.removeprefix("file://"), mmap_mode="r")
        else:
            with files.open(path) as f:
                embeddings = np.load(f)
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: unreadable ({unreadable_reason(e, path)}); {remedy}") from e
    expected = (config["num_embeddings"], config["dims"])
    if embeddings.shape != expected or embeddings.dtype != np.float32:
        raise DataError(
            f"{path} has shape {embeddings.shape} ({embeddings.dtype}), but {config_path} "
            f"fields 'num_embeddings' and 'dims' say float32 {expected}; {remedy}"
        )
    step = max(1, _EXACT_CHUNK_SCORES // max(1, expected[1]))
    broken = sum(int((~np.isfinite(embeddings[i : i + step]).all(axis=1)).sum()) for i in range(0, expected[0], step))
    if broken:
        raise DataError(f"{path}: {broken} rows hold NaN or infinity; {remedy}")
    return embeddings


def _check_scann_rows(scann_dir, config, remedy):
    for name in _SCANN_PER_POINT:
        path = os.path.join(scann_dir, name)
        try:
            rows = np.load(path, mmap_mode="r").shape[0]
        except (OSError, ValueError) as e:
            raise DataError(f"{path}: unreadable ({unreadable_reason(e, path)}); {remedy}") from e
        if rows != config["num_embeddings"]:
            raise DataError(f"{path}: {rows} rows, but 'num_embeddings' is {config['num_embeddings']}; {remedy}")


def _read_ids(path, expected_count):
    """The ids of `ids.txt` as `Ids`, without a Python str per id unless one is bad (then named by line)."""
    try:
        data = files.read_bytes(path)
        data.decode("utf-8")
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: unreadable ({unreadable_reason(e, path)}); rebuild the index") from e
    if data and not data.endswith(b"\n"):
        line = data.count(b"\n") + 1
        raise DataError(f"{path}: line {line} is not terminated by a newline.")
    lines = data.split(b"\n")[:-1]
    array = np.array(lines, dtype="S") if lines else np.array([], dtype="S1")
    if b"\r" in data or b"\0" in data or (np.char.str_len(array) == 0).any() or len(np.unique(array)) != len(array):
        check_ids([line.decode("utf-8") for line in lines], lambda i: f"{path}: line {i + 1}", DataError)
    if len(array) != expected_count:
        raise DataError(
            f"{path} has {len(array)} ids, expected {expected_count} (one per embedding row)."
        )
    return Ids(array)
