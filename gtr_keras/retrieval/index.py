"""Nearest-neighbour search over L2-normalised embeddings, and its storage.

GTR scores a query against a passage by the dot product of their unit-norm
embeddings, i.e. their cosine similarity. `SearchIndex` returns the `k`
passages with the highest dot product, either exactly (batched matmul) or
approximately with ScaNN (k-means tree + anisotropic AH + exact reordering).
It lives on any file system TensorFlow knows (local, `gs://`, `ram://`).
"""

import functools
import json
import math
import os

import numpy as np

from gtr_keras.errors import DataError, MismatchError
from gtr_keras.utils import files
from gtr_keras.utils.files import atomic_directory
from gtr_keras.utils.records import (
    check_positive_int,
    read_json_object,
    unreadable_reason,
)

FORMAT_VERSION = 1
KINDS = ("auto", "exact", "scann")
# ScaNN's own rule of thumb (scann/docs/algorithms.md): brute force below 20k
# points. At 20k x 768 float32 the corpus is 61 MB and one batched exact search
# is a single BLAS call, so an approximate index buys little there.
EXACT_MAX_N = 20_000
# Exact search scores at most this many (query, passage) pairs at a time:
# 2**25 float32 scores is 128 MiB, whatever the corpus size.
_EXACT_CHUNK_SCORES = 2**25
_INDEX_JSON = "index.json"
_IDS_TXT = "ids.txt"
_EMBEDDINGS_NPY = "embeddings.npy"
_SCANN_DIR = "scann"
# ScaNN searchers are built for this many neighbours; `search` passes its own
# `k`, so this only sizes the default reordering pool.
_DEFAULT_K = 10


def scann_params(n):
    """ScaNN build parameters for a corpus of `n` embeddings.

    The tree has about `sqrt(n)` leaves (ScaNN's rule of thumb), but never
    fewer than 100 points per leaf on average, so small corpora still get
    well-populated leaves. The leaves are trained by spherical k-means, which
    suits unit-norm embeddings scored by dot product, on at most 100k points.
    A query searches 10% of the leaves, and at least 64 (or all of them when
    there are fewer): on real GTR embeddings of the shared BEIR collections
    (16,676 documents, 129 leaves, queries of those collections) 13 leaves
    gave recall@10 0.62, 32 gave 0.85 and 64 gave 0.97, because queries fall
    between the document partitions far more than in clustered synthetic data. Scoring uses anisotropic AH with 2 dimensions per block
    and threshold 0.2, as ScaNN recommends, and the best `40 * k` AH
    candidates are rescored exactly: on clustered 768-d data at N=1M,
    `10 * k` lost recall@10 in reordering, not in the tree.
    `benchmarks/RESULTS.md` records these measurements, including plain
    k-means and fewer leaves searched. `num_leaves_to_search` and
    `reorder_factor` apply at search time, so they can be changed on a built
    index.

    Args:
        n: int. Number of embeddings in the corpus.

    Returns:
        A JSON-serialisable dict: `num_leaves`, `num_leaves_to_search`,
        `spherical`, `training_sample_size`, `dimensions_per_block`,
        `anisotropic_quantization_threshold`, `reorder_factor`.

    Example:
    >>> scann_params(1_000_000)["num_leaves"]
    1000
    """
    if n < 1:
        raise ValueError(f"A ScaNN index needs at least one embedding, got n={n}.")
    num_leaves = max(1, min(round(math.sqrt(n)), n // 100))
    return {
        "num_leaves": num_leaves,
        "num_leaves_to_search": min(num_leaves, max(64, math.ceil(0.1 * num_leaves))),
        "spherical": True,
        "training_sample_size": min(n, 100_000),
        "dimensions_per_block": 2,
        "anisotropic_quantization_threshold": 0.2,
        "reorder_factor": 40,
    }


def _build_scann(embeddings, params):
    import scann  # Imports TensorFlow: only paid for when ScaNN is used.

    builder = scann.scann_ops_pybind.builder(embeddings, _DEFAULT_K, "dot_product")
    builder = builder.tree(
        num_leaves=params["num_leaves"],
        num_leaves_to_search=params["num_leaves_to_search"],
        spherical=params["spherical"],
        training_sample_size=params["training_sample_size"],
    )
    builder = builder.score_ah(
        params["dimensions_per_block"],
        anisotropic_quantization_threshold=params["anisotropic_quantization_threshold"],
        training_sample_size=params["training_sample_size"],
    )
    return builder.reorder(params["reorder_factor"] * _DEFAULT_K).build()


def _load_scann(directory):
    import scann

    return scann.scann_ops_pybind.load_searcher(directory)


def _exact_top_k(embeddings, queries, k, tie_ranks):
    """Top-`k` rows of `embeddings` by dot product, best first.

    Equal scores are ordered by `tie_ranks` (lower first), also at the cut:
    with `tie_ranks` from the ids in descending order this is trec_eval's
    order, so which of several tied rows make the top `k` depends on their
    ids, never on their position in the corpus.
    """
    n = embeddings.shape[0]
    indices = np.empty((len(queries), k), dtype=np.int64)
    scores = np.empty((len(queries), k), dtype=np.float32)
    chunk = max(1, _EXACT_CHUNK_SCORES // n)
    for start in range(0, len(queries), chunk):
        block = queries[start : start + chunk] @ embeddings.T
        cut = np.partition(block, n - k, axis=1)[:, n - k]  # each row's k-th best score
        for row, (row_scores, lowest) in enumerate(zip(block, cut)):
            candidates = np.flatnonzero(row_scores >= lowest)  # ties at the cut included
            order = np.lexsort((tie_ranks[candidates], -row_scores[candidates]))[:k]
            indices[start + row] = candidates[order]
            scores[start + row] = row_scores[candidates[order]]
    return indices, scores


def check_ids(ids, where=lambda i: f"ids[{i}]", error=ValueError):
    """Returns `ids` as a list after checking them; `where(i)` names id `i` in an `error`."""
    ids = list(ids)
    seen = {}
    for i, id_ in enumerate(ids):
        if not isinstance(id_, str) or not id_:
            raise error(f"{where(i)}: ids must be non-empty strings, got {id_!r}.")
        if "\n" in id_ or "\r" in id_:
            raise error(f"{where(i)}: id {id_!r} contains a line break.")
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


class SearchIndex:
    """Top-k dot-product search over L2-normalised float32 embeddings.

    With `kind="exact"`, queries are scored against every embedding by a
    batched matrix product. With `kind="scann"`, a ScaNN searcher is built
    with `params` (default `scann_params(N)`); query rows that ScaNN cannot
    fill with `k` results (`k` close to `N`) are answered exactly.
    `kind="auto"` is `"exact"` below `EXACT_MAX_N` embeddings and `"scann"`
    from there on. `num_leaves_to_search` and `reorder_factor` are read from
    `index.params` at each search, so they can be tuned without a rebuild.

    Args:
        ids: sequence of str, one per embedding row; non-empty, unique and
            without line breaks.
        embeddings: float array of shape `[N, D]`, rows L2-normalised.
        kind: `"auto"`, `"exact"` or `"scann"`.
        params: dict of ScaNN parameters (see `scann_params`); only for
            `kind="scann"` (or `"auto"` resolving to it).
        searcher: a ScaNN searcher already built over `embeddings` with
            `params`, as `load` restores it; built when None.

    Example:
    >>> index = SearchIndex(["d0", "d1"], np.eye(2, dtype="float32"))
    >>> index.search_ids(np.array([[0.0, 1.0]], dtype="float32"), k=1)
    ([['d1']], array([[1.]], dtype=float32))
    """

    def __init__(self, ids, embeddings, kind="auto", params=None, searcher=None):
        self.ids = check_ids(ids)
        self.embeddings = check_embeddings(embeddings, "embeddings")
        n = self.embeddings.shape[0]
        if n != len(self.ids):
            raise ValueError(f"Got {len(self.ids)} ids for {n} embedding rows.")
        if n == 0:
            raise ValueError("A SearchIndex needs at least one embedding.")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
        if kind == "auto":
            kind = "exact" if n < EXACT_MAX_N else "scann"
        if kind == "exact":
            if params is not None or searcher is not None:
                raise ValueError("`params` and `searcher` only apply to kind='scann'.")
            self.params = None
            self._searcher = None
        else:
            self.params = dict(scann_params(n) if params is None else params)
            if searcher is None:
                searcher = _build_scann(self.embeddings, self.params)
            self._searcher = searcher
        self.kind = kind

    @functools.cached_property
    def tie_ranks(self):
        """Each row's place when the ids are sorted in descending order: exact search orders equal scores
        by it, as trec_eval (and `pytrec_eval`) rank tied documents."""
        ranks = np.empty(len(self.ids), dtype=np.int64)
        ranks[sorted(range(len(self.ids)), key=self.ids.__getitem__, reverse=True)] = np.arange(len(self.ids))
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
            `embeddings` and their float32 dot products, best first.
        """
        queries = check_embeddings(query_embeddings, "query_embeddings")
        if queries.shape[1] != self.embeddings.shape[1]:
            raise ValueError(
                f"query_embeddings have {queries.shape[1]} dims, "
                f"the index has {self.embeddings.shape[1]}."
            )
        k = min(check_positive_int(k, "k"), self.embeddings.shape[0])
        if self.kind == "exact" or len(queries) == 0:
            return _exact_top_k(self.embeddings, queries, k, self.tie_ranks)
        indices, scores = self._searcher.search_batched_parallel(
            queries,
            final_num_neighbors=k,
            pre_reorder_num_neighbors=self.params["reorder_factor"] * k,
            leaves_to_search=self.params["num_leaves_to_search"],
        )
        indices = indices.astype(np.int64)
        scores = scores.astype(np.float32, copy=False)
        unfilled = np.isnan(scores).any(axis=1)
        if unfilled.any():
            exact = _exact_top_k(self.embeddings, queries[unfilled], k, self.tie_ranks)
            indices[unfilled], scores[unfilled] = exact
        return indices, scores

    def search_ids(self, query_embeddings, k):
        """Like `search`, but returns ids: `(list of lists of str, scores)`."""
        indices, scores = self.search(query_embeddings, k)
        return [[self.ids[i] for i in row] for row in indices], scores

    def save(self, directory):
        """Writes the index to `directory`, atomically replacing it.

        Files: `embeddings.npy`, `ids.txt` (one id per line), `index.json`
        (format version, kind, N, dims, ScaNN params) and, for ScaNN, the
        serialized searcher in `scann/`.
        """
        with atomic_directory(directory) as tmp:
            np.save(tmp / _EMBEDDINGS_NPY, self.embeddings)
            with open(tmp / _IDS_TXT, "w", encoding="utf-8", newline="") as f:
                f.writelines(f"{id_}\n" for id_ in self.ids)
            if self.kind == "scann":
                os.mkdir(tmp / _SCANN_DIR)
                self._searcher.serialize(str(tmp / _SCANN_DIR), relative_path=True)
            config = {
                "format_version": FORMAT_VERSION,
                "kind": self.kind,
                "num_embeddings": self.embeddings.shape[0],
                "dims": self.embeddings.shape[1],
                "params": self.params,
            }
            with open(tmp / _INDEX_JSON, "w", encoding="utf-8") as f:
                json.dump(config, f, indent=2)

    @classmethod
    def load(cls, directory):
        """Loads an index written by `save`.

        Raises:
            DataError: a missing, malformed or inconsistent file.
            MismatchError: an index written by another format version.
        """
        remedy = "rebuild the index"
        directory = os.fspath(directory)
        config_path = os.path.join(directory, _INDEX_JSON)
        if not files.isfile(config_path):
            raise DataError(f"{directory}: not a search index (no {_INDEX_JSON}); {remedy}")
        config = read_json_object(config_path, remedy)
        for field in ("format_version", "kind", "num_embeddings", "dims", "params"):
            if field not in config:
                raise DataError(f"{config_path}: missing field {field!r}; {remedy}")
        if config["format_version"] != FORMAT_VERSION:
            raise MismatchError(
                f"{config_path}: field 'format_version' is {config['format_version']!r}, "
                f"this version of gtr_keras reads {FORMAT_VERSION}; {remedy}"
            )
        embeddings_path = os.path.join(directory, _EMBEDDINGS_NPY)
        try:
            with files.open(embeddings_path) as f:
                embeddings = np.load(f)
        except (OSError, ValueError) as e:
            raise DataError(f"{embeddings_path}: unreadable ({unreadable_reason(e, embeddings_path)}); {remedy}") from e
        expected = (config["num_embeddings"], config["dims"])
        if embeddings.shape != expected:
            raise DataError(
                f"{embeddings_path} has shape {embeddings.shape}, but {config_path} "
                f"fields 'num_embeddings' and 'dims' say {expected}; {remedy}"
            )
        broken = int((~np.isfinite(embeddings).all(axis=1)).sum()) if np.issubdtype(embeddings.dtype, np.floating) else 0
        if broken:
            raise DataError(f"{embeddings_path}: {broken} rows hold NaN or infinity; {remedy}")
        ids = _read_ids(os.path.join(directory, _IDS_TXT), config["num_embeddings"])
        searcher = None
        if config["kind"] == "scann":
            with files.local_copy(os.path.join(directory, _SCANN_DIR)) as scann_dir:
                searcher = _load_scann(scann_dir)
        return cls(ids, embeddings, kind=config["kind"], params=config["params"], searcher=searcher)


def _read_ids(path, expected_count):
    try:
        text = files.read_bytes(path).decode("utf-8")
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: unreadable ({unreadable_reason(e, path)}); rebuild the index") from e
    if text and not text.endswith("\n"):
        raise DataError(f"{path}: line {text.count(chr(10)) + 1} is not terminated by a newline.")
    ids = check_ids(text.split("\n")[:-1], lambda i: f"{path}: line {i + 1}", DataError)
    if len(ids) != expected_count:
        raise DataError(
            f"{path} has {len(ids)} ids, expected {expected_count} (one per embedding row)."
        )
    return ids
