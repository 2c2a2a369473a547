"""`SearchIndex`: nearest-neighbour search over L2-normalised embeddings, and `write_search_index`.

GTR scores a query against a passage by the dot product of their unit-norm
embeddings, i.e. their cosine similarity. `SearchIndex` returns the `k`
passages with the highest dot product, either exactly (`exact_search`:
batched matmul over the stored float32 vectors, read in blocks) or
approximately with ScaNN (`scann_builder`: k-means tree + anisotropic AH +
reordering on int8 vectors, whose best candidates are rescored with the
float32 vectors, read from their file: `quantized_vectors.FloatRows`). Building
never holds every vector in memory:
`write_search_index` reads its source a chunk at a time. The files of an
index are those of `index_format`.
"""

import functools
import os

import numpy as np

from gtr_keras.errors import DataError, UserError
from gtr_keras.storage import exact_search
from gtr_keras.storage.layout import (
    EMBEDDINGS_NPY,
    FLOAT32_REORDER,
    IDS_TXT,
    INT8_REORDER,
    NO_FLOAT32,
    SCANN_DIR,
    SEARCH_INDEX_DIRECTORY,
    TUNED_JSON,
    Ids,
    check_embeddings,
    check_ids,
    check_scann_rows,
    check_search_value,
    has_float32,
    read_description,
    read_ids,
    read_tuned,
    search_settings,
    write_description,
    write_embeddings,
)
from gtr_keras.storage.quantized_vectors import (
    FloatRows,
    check_vector_params,
    load_vectors,
    open_float_rows,
    quantize,
    write_vectors,
)
from gtr_keras.storage.scann_builder import build_scann, load_scann, scann_params
from gtr_keras.storage.scann_codes import pack_codes
from gtr_keras.storage.segmented_index import SegmentedIndex
from gtr_keras.storage.segments import (
    BASE,
    check_same_model,
    documents_path,
    read_deleted,
    read_manifest,
    segment_path,
)
from gtr_keras.utils import files
from gtr_keras.utils.checksums import verify_directory
from gtr_keras.utils.files import atomic_directory
from gtr_keras.utils.records import check_positive_int

KINDS = ("auto", "exact", "scann")
# ScaNN's own rule of thumb (scann/docs/algorithms.md): brute force below 20k
# points. At 20k x 768 float32 the corpus is 61 MB and one batched exact search
# is a single BLAS call, so an approximate index buys little there.
EXACT_MAX_N = 20_000
_BUILD_CHUNK_ROWS = 65_536
# The float32 rescoring pool of a ScaNN search for `k` results grows by `rescore_factor - 1` times at most this
# many candidates (`rescore_pool_size`): recall@k against float32 only needs the near-ties around the k-th place
# rescored, not `rescore_factor` times every result at depth 1000.
RESCORE_BAND = 100
# ScaNN's batched search holds about 10 bytes a query for each AH candidate it reorders on int8 (`reorder_factor *
# k`) while it runs (50,000 x 768, 5,000 queries: 240 MB more at reorder 500, 54 MB at 100): `search` gives it a
# caller's queries in chunks of at most this many such candidates (about 80 MiB; 8,192 queries at reorder 100 and
# k = 10), so that a batch of any size holds no more.
_SEARCH_CANDIDATES = 2**23


def rescore_pool_size(k, rescore_factor):
    """The int8-ordered candidates a ScaNN search for `k` results rescores with float32: `k` and `rescore_factor
    - 1` times `min(k, RESCORE_BAND)` more (docs/choosing-a-search.md says why), before the cap of the index's rows;
    none for `rescore_factor` 0 (ScaNN's int8 order is the answer).

    Example:
    >>> rescore_pool_size(10, 4), rescore_pool_size(1000, 4), rescore_pool_size(10, 0)
    (40, 1300, 0)
    """
    return k + (rescore_factor - 1) * min(k, RESCORE_BAND) if rescore_factor else 0


def _slices(rows, chunk_rows):
    for start in range(0, len(rows), chunk_rows):
        yield rows[start : start + chunk_rows]


class ArrayRows:
    """An in-memory `[N, D]` array as a source for `write_search_index`: `ids`, `dims`, `num_rows`, `chunks()`.

    Args:
        ids: sequence of str, one per row; non-empty, unique and without line breaks.
        embeddings: float array of shape `[N, D]`, finite.
        chunk_rows: rows a chunk (default 65,536).

    Example:
    >>> rows = ArrayRows(["d0", "d1", "d2"], np.eye(3, dtype="float32"), chunk_rows=2)
    >>> [len(chunk) for chunk in rows.chunks()]
    [2, 1]
    """

    def __init__(self, ids, embeddings, chunk_rows=None):
        self.ids = check_ids(ids)
        self.embeddings = check_embeddings(embeddings, "embeddings")
        if self.embeddings.shape[0] != len(self.ids):
            raise UserError(f"Got {len(self.ids)} ids for {self.embeddings.shape[0]} embedding rows.")
        if not self.ids:
            raise UserError("A SearchIndex needs at least one embedding.")
        self.num_rows, self.dims = self.embeddings.shape
        self.chunk_rows = chunk_rows or _BUILD_CHUNK_ROWS

    def chunks(self):
        return _slices(self.embeddings, self.chunk_rows)


def _resolve(kind, params, n):
    if kind not in KINDS:
        raise UserError(f"kind must be one of {KINDS}, got {kind!r}.")
    if kind == "auto":
        kind = "exact" if n < EXACT_MAX_N or (params and "vectors" in params) else "scann"
    if kind == "exact":
        return kind, check_vector_params(params)
    overrides = params or {}
    params = dict(scann_params(n), **overrides)
    if params["reorder"] == INT8_REORDER:
        if "rescore_factor" in overrides:
            raise UserError("rescore_factor needs the float32 vectors that reorder 'float32' keeps")
        del params["rescore_factor"]
    elif params["reorder"] == FLOAT32_REORDER:
        check_search_value("rescore_factor", params["rescore_factor"])
    else:
        raise UserError(
            f"reorder must be 'float32' (ScaNN's candidates rescored with the float32 vectors, kept on disk) "
            f"or 'int8' (ScaNN's int8 copy only), got {params['reorder']!r}"
        )
    return kind, params


def write_search_index(source, directory, kind="auto", params=None):
    """Builds a `SearchIndex` over `source` a chunk at a time and writes it to `directory`, atomically.

    No more than one chunk of float32 vectors (and ScaNN's training sample)
    is held in memory: exact indexes copy the chunks into `embeddings.npy`;
    ScaNN indexes are built as `scann_builder.build_scann` says, and copy
    them into `embeddings.npy` too with `reorder: "float32"`. The directory
    appears only when complete; a previous index there stays until then.

    Args:
        source: the vectors and their ids: `ids` (list of str), `dims`,
            `num_rows` and `chunks()` (float32 `[n_i, dims]` arrays in row
            order, readable more than once), such as an `EmbeddingFiles` or
            an `ArrayRows`.
        directory: the index directory to write.
        kind: `"auto"`, `"exact"` or `"scann"`, as for `SearchIndex`.
        params: overrides of `scann_params(N)`, for ScaNN; for an exact index, the vectors it keeps
            (`quantized_vectors.vector_params`: int8 or binary codes and float32 to rescore; None: float32).
            `"auto"` with `vectors` given is exact.

    Returns:
        The kind written, `"exact"` or `"scann"` (`SearchIndex.load` reads the index).

    Example:
    >>> write_search_index(EmbeddingFiles.open("embeddings/*.npy"), "indexes/msmarco")
    'scann'
    """
    kind, params = _resolve(kind, params, source.num_rows)
    ids = check_ids(source.ids)
    with atomic_directory(directory, [SEARCH_INDEX_DIRECTORY]) as tmp:
        if kind == "scann":
            os.mkdir(tmp / SCANN_DIR)
            build_scann(source, params, tmp / SCANN_DIR)
            if has_float32(kind, params):
                write_embeddings(tmp / EMBEDDINGS_NPY, source.chunks(), source.num_rows, source.dims)
        else:
            write_vectors(tmp, source.chunks, source.num_rows, source.dims, params)
        write_description(tmp, ids, kind, params, source.dims)
    return kind


class SearchIndex:
    """Top-k dot-product search over L2-normalised embeddings.

    With `kind="exact"`, queries are scored against every float32 embedding
    by batched matrix products, a block of rows at a time. With
    `kind="scann"`, a ScaNN searcher is built with `params` (default
    `scann_params(N)`): it reorders its `reorder_factor * k` best AH
    candidates on int8 vectors, and the best `rescore_pool_size(k,
    rescore_factor)` of those are rescored with the float32 vectors
    (`reorder: "float32"`; with `rescore_factor` 0 none are, and with
    `"int8"` no float32 vectors are kept: ScaNN's int8 order is the
    answer); a batch of queries is searched in chunks that bound ScaNN's
    working memory (`_SEARCH_CANDIDATES`); query rows whose first `k` places
    ScaNN cannot fill from the leaves searched (`k` close to `N`) are
    searched again over every leaf. `kind="auto"` is `"exact"` below
    `EXACT_MAX_N` embeddings and `"scann"` from there on.
    `num_leaves_to_search`, `reorder_factor` and `rescore_factor` are read
    from `index.params` at each search, so they can be tuned without a
    rebuild. For corpora too
    large for memory, `write_search_index` builds from embedding files and `load`
    memory-maps what it can.

    Args:
        ids: sequence of str, one per embedding row; non-empty, unique and
            without line breaks.
        embeddings: float array of shape `[N, D]`, rows L2-normalised. A
            float32 C-contiguous array is kept as it is, not copied, by an
            exact index and by a ScaNN index that rescores with it: changing
            it afterwards changes their scores.
        kind: `"auto"`, `"exact"` or `"scann"`.
        params: dict of overrides of `scann_params(N)` for `kind="scann"`
            (or `"auto"` resolving to it); for `"exact"`, the vectors kept
            (`quantized_vectors.vector_params`, e.g. `{"vectors": "int8"}`).

    `SearchIndex.load` gives a `SearchIndex` for a directory of one segment and a
    `SegmentedIndex` for an updated one or for shards: both answer the same
    interface (`ids`, `dims`, `kind`, `params`, `parts`, `search`,
    `search_ids`, `tie_ranks`, `live_embeddings`), so no caller asks which one
    it got; a `SearchIndex` is its own one part.

    Attributes:
        ids, kind, params, dims.
        parts: `[(self, None)]`: the one part, with no deleted rows (as `SegmentedIndex.parts`).
        path: the directory it was loaded from, or None.
        documents_path: the documents file of its rows in an index directory, or None.
        embeddings: the float32 `[N, D]` vectors of an exact index, or of a
            ScaNN index that rescores with them (a read-only memory map for
            one loaded from a local directory); None for a ScaNN index that
            keeps only its int8 copy (`reorder: "int8"`).
        vectors: how an exact index scores them (`quantized_vectors.FloatVectors`
            or `QuantizedVectors`); None for ScaNN.
        float_rows: the `quantized_vectors.FloatRows` a ScaNN index rescores
            its candidates with, or None.

    Example:
    >>> index = SearchIndex(["d0", "d1"], np.eye(2, dtype="float32"))
    >>> index.search_ids(np.array([[0.0, 1.0]], dtype="float32"), k=1)
    ([['d1']], array([[1.]], dtype=float32))
    """

    def __init__(self, ids, embeddings, kind="auto", params=None):
        source = ArrayRows(ids, embeddings)
        kind, params = _resolve(kind, params, source.num_rows)
        searcher = float_rows = None
        if kind == "scann":
            with files.temporary_directory("gtr-keras-scann-") as scratch:
                build_scann(source, params, scratch)
                searcher = load_scann(scratch)
            float_rows = FloatRows(source.embeddings) if has_float32(kind, params) else None
        vectors = quantize(source.embeddings, params) if kind == "exact" else None
        self._set(source.ids, kind, params, source.dims, vectors, searcher, float_rows=float_rows)

    def _set(self, ids, kind, params, dims, vectors, searcher, path=None, documents=None, float_rows=None):
        self.ids, self.kind, self.params, self.dims = Ids(ids), kind, params, dims
        self.vectors, self.float_rows = vectors, float_rows
        self.embeddings = vectors.floats if vectors is not None else float_rows and float_rows.floats
        self._searcher, self.path, self.documents_path = searcher, path, documents

    @classmethod
    def from_vectors(cls, ids, vectors):
        """An exact index over `vectors` as they are, uncopied (`quantized_vectors.FloatVectors` or
        `QuantizedVectors`; their float32 rows may be any `[N, D]` array-like read a slice at a time).

        Args:
            ids: `Ids`, one per row.
            vectors: the rows and their scoring.

        Example:
        >>> SearchIndex.from_vectors(Ids(["d0", "d1"]), FloatVectors(np.eye(2, dtype="float32"))).kind
        'exact'
        """
        index = cls.__new__(cls)
        index._set(ids.array, "exact", vectors.params, vectors.floats.shape[1], vectors, None)
        return index

    @functools.cached_property
    def tie_ranks(self):
        """Each row's place when the ids are sorted in descending order (`exact_search.tie_ranks`)."""
        return exact_search.tie_ranks(self.ids.array)

    @property
    def parts(self):
        return [(self, None)]

    def live_embeddings(self):
        """The float32 `[N, D]` vectors of an index that keeps them, in row order (`SegmentedIndex.live_embeddings`)."""
        if self.embeddings is None:
            raise UserError(NO_FLOAT32)
        return self.embeddings

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
            raise UserError(f"query_embeddings have {queries.shape[1]} dims, the index has {self.dims}.")
        k = min(check_positive_int(k, "k"), len(self.ids))
        if self.kind == "exact":
            return self.vectors.top_k(queries, k, self.tie_ranks)
        if not len(queries):
            return np.empty((0, k), np.int64), np.empty((0, k), np.float32)
        pool = self.rescore_pool(k)
        step = max(1, _SEARCH_CANDIDATES // max(pool, self.params["reorder_factor"] * k))
        found = [self.rescored(chunk, *self.candidates(chunk, pool, k), k) for chunk in _slices(queries, step)]
        return tuple(np.concatenate(parts) for parts in zip(*found))

    @property
    def rescores(self):
        """Whether ScaNN's candidates are rescored with float32: a ScaNN index that keeps its float32 vectors,
        searched with a `rescore_factor` above 0."""
        return self.float_rows is not None and self.params["rescore_factor"] > 0

    def rescore_pool(self, k):
        """How many candidates a ScaNN search for `k` results rescores with float32: `rescore_pool_size(k,
        rescore_factor)` (at most N), or `k` where none are (`rescores`): ScaNN's int8 order is the answer."""
        if not self.rescores:
            return k
        return min(len(self.ids), rescore_pool_size(k, self.params["rescore_factor"]))

    def candidates(self, queries, pool, k):
        """ScaNN's best `pool` rows for each of `queries` (float32 `[n, D]`) in its int8 order, of the
        `max(pool, reorder_factor * k)` AH candidates reordered on int8: `(indices, scores)`, `[n, pool]`,
        places that the leaves searched could not fill scored NaN. A query whose first `k` places are not all
        filled is searched again over every leaf.

        Example:
        >>> index.rescored(queries, *index.candidates(queries, index.rescore_pool(10), 10), 10)  # doctest: +SKIP
        """
        indices, scores = self._scann_search(queries, pool, k, self.params["num_leaves_to_search"])
        unfilled = np.isnan(scores[:, :k]).any(axis=1)
        if unfilled.any():
            indices[unfilled], scores[unfilled] = self._scann_search(
                queries[unfilled], pool, k, self.params["num_leaves"]
            )
        return indices, scores

    def rescored(self, queries, candidates, scores, k):
        """The best `k` of a ScaNN search's candidates (`candidates` and their int8 `scores`, `[n, c]`, best first,
        at least `k` of each row scored, NaN where none is) by float32 (`FloatRows.rescore`), or, where none are
        rescored (`rescores`), the first `k` as they are."""
        if not self.rescores:
            return candidates[:, :k], scores[:, :k]
        return self.float_rows.rescore(queries, np.where(np.isnan(scores), -1, candidates), k, self.tie_ranks)

    def _scann_search(self, queries, pool, k, leaves):
        indices, scores = self._searcher.search_batched(
            queries,
            pool,
            max(pool, self.params["reorder_factor"] * k),
            leaves,
            True,
            256,  # in parallel, 256 queries a task
        )
        return indices.astype(np.int64), scores.astype(np.float32, copy=False)

    def search_ids(self, query_embeddings, k):
        """Like `search`, but returns ids: `(list of lists of str, scores)`."""
        indices, scores = self.search(query_embeddings, k)
        return [[self.ids[i] for i in row] for row in indices], scores

    def set_search_params(self, setting):
        """Sets search-time parameters for the searches that follow, overriding a tuned setting (`tune`).

        Args:
            setting: a dict of ints among `layout.search_settings(kind, params)`, as `layout.check_search_value`
                takes them: for ScaNN `num_leaves_to_search` (at most `num_leaves`), `reorder_factor` and, with
                float32 vectors, `rescore_factor` (0: none rescored, ScaNN's int8 order); for an int8 or
                binary exact index `rescore`.

        Raises:
            UserError: a parameter the index has not, or a value `check_search_value` refuses.

        Example:
        >>> index.set_search_params({"num_leaves_to_search": 40, "reorder_factor": 50})  # doctest: +SKIP
        """
        names = search_settings(self.kind, self.params)
        for name, value in setting.items():
            if name not in names:
                vectors = self.params.get("vectors") or self.params.get("reorder") if self.params else None
                what = f"{self.kind} index" + (f" of {vectors} vectors" if vectors else "")
                raise UserError(f"a {what} has no search parameter {name!r} (it has: {', '.join(names) or 'none'})")
            check_search_value(name, value)
        if self.kind == "scann" and setting.get("num_leaves_to_search", 0) > self.params["num_leaves"]:
            raise UserError(f"num_leaves_to_search must be at most num_leaves, {self.params['num_leaves']}")
        self.params.update(setting)

    def save(self, directory):
        """Writes the index to `directory`, atomically replacing it.

        Files: `ids.txt` (one id per line), `index.json` (format version,
        kind, N, dims, ScaNN params) and either `embeddings.npy` (exact) or
        the ScaNN searcher in `scann/` (and `embeddings.npy`, with float32
        rescoring).
        """
        with atomic_directory(directory, [SEARCH_INDEX_DIRECTORY]) as tmp:
            if self.kind == "scann":
                os.mkdir(tmp / SCANN_DIR)
                self._searcher.serialize(str(tmp / SCANN_DIR), True)
                pack_codes(tmp / SCANN_DIR)
                if self.float_rows is not None:
                    write_embeddings(tmp / EMBEDDINGS_NPY, self._row_chunks(), len(self.ids), self.dims)
            else:
                write_vectors(tmp, self._row_chunks, len(self.ids), self.dims, self.params)
            write_description(tmp, self.ids, self.kind, self.params, self.dims)

    def _row_chunks(self):
        return _slices(self.embeddings, _BUILD_CHUNK_ROWS)

    @classmethod
    def load(cls, directory, verify=False):
        """Loads an index written by `save` or `write_search_index`, updated or not, or several as one.

        `directory` may also be an index directory of `gtr-keras index` (its
        `index/` subdirectory is loaded). A local exact index is memory-mapped
        (searches read it a block at a time); ScaNN reads its own files into
        memory (about 1 KB per 768-d vector) and memory-maps its float32
        vectors, reading only its candidates' rows. The setting `gtr-keras tune`
        recorded (`tuned.json`) applies to its searches (`set_search_params`
        overrides it). An updated index
        (`segment_writer.update_search_index`) is loaded at the generation its
        manifest names when the load starts, whole, as a `SegmentedIndex`;
        later updates do not change what it answers.

        Args:
            directory: an index directory, or a list of them (shards of one
                model, each id in one shard): a `SegmentedIndex` over all,
                whose top `k` is that of one index over the union.
            verify: first verify every file of each index against its records
                (`utils.checksums.verify_directory`: reads every byte; `gtr-keras
                check` does it and more), and refuse a damaged one.

        Raises:
            DataError: a missing, malformed or inconsistent file (with
                `verify`, a file that changed since it was written).
            MismatchError: an index written by another format version, or
                shards of different models (naming the shard).

        Example:
        >>> SearchIndex.load(["indexes/msmarco-a", "indexes/msmarco-b"]).search_ids(queries, 10)  # doctest: +SKIP
        """
        if not isinstance(directory, (str, os.PathLike)):
            shards = [os.fspath(d) for d in directory]
            if not shards:
                raise UserError("SearchIndex.load needs at least one index directory.")
            check_same_model([read_description(shard)[0] for shard in shards])
            parts, names = [], []
            for shard in shards:
                shard_parts = cls.load(shard, verify).parts
                parts += shard_parts
                names += [shard] * len(shard_parts)
            return SegmentedIndex(parts, names)
        if verify:
            verify_directory(read_description(directory)[0])
        for attempt in range(3):
            directory, config_path, config = read_description(directory)
            manifest = read_manifest(directory)
            tuned = read_tuned(directory)
            single = manifest is None or not manifest["generation"]  # never updated (or a first update began)
            try:
                index = (
                    cls._load_one(directory, config_path, config) if single else cls._load_segments(directory, manifest)
                )
            except DataError:
                if single or attempt == 2 or read_manifest(directory)["generation"] == manifest["generation"]:
                    raise  # not an update that removed the files of the generation loaded meanwhile
                continue
            if tuned is not None:
                try:
                    index.set_search_params(tuned["setting"])
                except UserError as e:
                    raise DataError(f"{os.path.join(directory, TUNED_JSON)}: {e}; run `gtr-keras tune` again") from e
            return index

    @classmethod
    def _load_segments(cls, directory, manifest):
        deleted = read_deleted(directory, manifest)
        parts, names = [], []
        for segment in manifest["segments"]:
            path = segment_path(directory, segment["name"])
            _, config_path, config = read_description(path)
            documents = documents_path(directory, segment["name"])
            parts.append((cls._load_one(path, config_path, config, documents), deleted.get(segment["name"])))
            names.append(path)
        return SegmentedIndex(parts, names)

    @classmethod
    def _load_one(cls, directory, config_path, config, documents=None):
        ids = read_ids(os.path.join(directory, IDS_TXT), config["num_embeddings"])
        index = cls.__new__(cls)
        documents = documents or documents_path(directory, BASE)
        if config["kind"] == "scann":
            with files.local_copy(os.path.join(directory, SCANN_DIR)) as scann_dir:
                check_scann_rows(scann_dir, config)
                searcher = load_scann(scann_dir)
            float_rows = (
                open_float_rows(directory, config, config_path) if has_float32("scann", config["params"]) else None
            )
            index._set(ids, "scann", config["params"], config["dims"], None, searcher, directory, documents, float_rows)
        else:
            vectors = load_vectors(directory, config, config_path)
            index._set(ids, "exact", vectors.params, config["dims"], vectors, None, directory, documents)
        return index
