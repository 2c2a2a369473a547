"""Nearest-neighbour search over L2-normalised embeddings, and its storage.

GTR scores a query against a passage by the dot product of their unit-norm
embeddings, i.e. their cosine similarity. `SearchIndex` returns the `k`
passages with the highest dot product, either exactly (batched matmul) or
approximately with ScaNN (k-means tree + anisotropic AH + exact reordering).

The module also holds `ShardWriter`, the resumable, sharded embedding output of
the indexing command, which refuses to resume from embeddings of other texts,
ids, settings or another model.

Both live on any file system TensorFlow knows (local, `gs://`, `ram://`):
files are read through `gtr_keras.files`, and written locally and uploaded.
"""

import fnmatch
import hashlib
import json
import math
import os
import zipfile
from typing import NamedTuple

import numpy as np

from gtr_keras import files
from gtr_keras.errors import DataError, MismatchError
from gtr_keras.files import atomic_directory, atomic_file

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
_MANIFEST_JSON = "manifest.json"
_SHARD_FORMAT = 2
# What a killed shard write leaves: staging files (`atomic_file`'s names, and earlier versions')
# and, on another file system, an upload not yet moved into place.
_STALE_SHARDS = ("shard-*.tmp-*", ".shard-*.tmp-*", ".shard-*.upload-*")
_MANIFEST_FIELDS = ("shard_format", "num_rows", "shard_size", "ids_sha256")

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


def check_positive_int(value, name):
    """Returns `value` as an int if it is a positive integer; else raises `ValueError` naming it.

    Example:
    >>> check_positive_int(32, "batch_size")
    32
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")
    return int(value)


def read_json_object(path, remedy):
    """The JSON object stored in `path`.

    Args:
        path: str or path-like.
        remedy: what the user should do about a bad file, ending the error.

    Returns:
        A dict.

    Raises:
        DataError: the file cannot be read, is not JSON or not a JSON object.

    Example:
    >>> read_json_object("indexes/scifact/retriever.json", "rebuild the index")["embedding_dim"]
    768
    """
    try:
        value = json.loads(files.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: unreadable ({_reason(e, path)}); {remedy}") from e
    if not isinstance(value, dict):
        raise DataError(f"{path}: holds a JSON {type(value).__name__}, not an object; {remedy}")
    return value


def _reason(error, path):
    """An error's message without the path it starts with (`gtr_keras.files`' errors name it)."""
    return str(error).removeprefix(f"{path}: ")


def _shown(value):
    if isinstance(value, str) and len(value) == 64:  # a SHA-256 hex digest
        return f"{value[:12]}…"
    return str(value)


def describe_change(recorded, current, current_label="now"):
    """Names the first field of `current` that `recorded` lacks or holds another value for.

    Args:
        recorded: dict of what was recorded (a manifest, `retriever.json`).
        current: dict of the values that must match, in the order to check.
        current_label: words that introduce the current value.

    Returns:
        A phrase such as `"document_length 512 recorded, now 256"` (SHA-256
        digests shortened to 12 digits), or None when all fields match.

    Example:
    >>> describe_change({"shard_size": 2048}, {"shard_size": 40}, "this run has")
    'shard_size 2048 recorded, this run has 40'
    """
    for field, value in current.items():
        if field not in recorded:
            return f"no {field} recorded"
        if recorded[field] != value:
            return f"{field} {_shown(recorded[field])} recorded, {current_label} {_shown(value)}"
    return None


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


def _exact_top_k(embeddings, queries, k):
    """Top-`k` rows of `embeddings` by dot product, best first.

    Ties are broken by the lower row index, as a stable argsort would.
    """
    n = embeddings.shape[0]
    indices = np.empty((len(queries), k), dtype=np.int64)
    scores = np.empty((len(queries), k), dtype=np.float32)
    chunk = max(1, _EXACT_CHUNK_SCORES // n)
    for start in range(0, len(queries), chunk):
        block = queries[start : start + chunk] @ embeddings.T
        if k < n:
            candidates = np.argpartition(-block, k - 1, axis=1)[:, :k]
        else:
            candidates = np.broadcast_to(np.arange(n), block.shape)
        candidate_scores = np.take_along_axis(block, candidates, axis=1)
        order = np.lexsort((candidates, -candidate_scores), axis=-1)
        indices[start : start + chunk] = np.take_along_axis(candidates, order, axis=1)
        scores[start : start + chunk] = np.take_along_axis(candidate_scores, order, axis=1)
    return indices, scores


def _check_ids(ids, where=lambda i: f"ids[{i}]", error=ValueError):
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


def _check_embeddings(embeddings, where):
    embeddings = np.asarray(embeddings)
    if embeddings.ndim != 2:
        raise ValueError(f"{where} must have shape [N, D], got shape {embeddings.shape}.")
    if not np.issubdtype(embeddings.dtype, np.floating):
        raise ValueError(f"{where} must be floating point, got dtype {embeddings.dtype}.")
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
        self.ids = _check_ids(ids)
        self.embeddings = _check_embeddings(embeddings, "embeddings")
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

    def search(self, query_embeddings, k):
        """Finds the `k` best-scoring embedding rows for each query.

        Args:
            query_embeddings: float array of shape `[n, D]`.
            k: int >= 1. Results per query; `min(k, N)` are returned.

        Returns:
            `(indices, scores)`: int64 `[n, min(k, N)]` row indices into
            `embeddings` and their float32 dot products, best first.
        """
        queries = _check_embeddings(query_embeddings, "query_embeddings")
        if queries.shape[1] != self.embeddings.shape[1]:
            raise ValueError(
                f"query_embeddings have {queries.shape[1]} dims, "
                f"the index has {self.embeddings.shape[1]}."
            )
        k = min(check_positive_int(k, "k"), self.embeddings.shape[0])
        if self.kind == "exact" or len(queries) == 0:
            return _exact_top_k(self.embeddings, queries, k)
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
            exact = _exact_top_k(self.embeddings, queries[unfilled], k)
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
            raise DataError(f"{embeddings_path}: unreadable ({_reason(e, embeddings_path)}); {remedy}") from e
        expected = (config["num_embeddings"], config["dims"])
        if embeddings.shape != expected:
            raise DataError(
                f"{embeddings_path} has shape {embeddings.shape}, but {config_path} "
                f"fields 'num_embeddings' and 'dims' say {expected}; {remedy}"
            )
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
        raise DataError(f"{path}: unreadable ({_reason(e, path)}); rebuild the index") from e
    if text and not text.endswith("\n"):
        raise DataError(f"{path}: line {text.count(chr(10)) + 1} is not terminated by a newline.")
    ids = _check_ids(text.split("\n")[:-1], lambda i: f"{path}: line {i + 1}", DataError)
    if len(ids) != expected_count:
        raise DataError(
            f"{path} has {len(ids)} ids, expected {expected_count} (one per embedding row)."
        )
    return ids


def strings_sha256(strings):
    """SHA-256 (hex) of a sequence of str or bytes, each prefixed by its length."""
    digest = hashlib.sha256()
    for string in strings:
        data = string if isinstance(string, bytes) else string.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


class Shard(NamedTuple):
    """Shard `number` holds embedding rows `[start, end)`."""

    number: int
    start: int
    end: int


class ShardWriter:
    """Resumable storage for the embeddings of a corpus, one file per shard.

    Shard `i` holds rows `[i * shard_size, min((i + 1) * shard_size, N))` in
    `work_dir/shard-0000i.npz`, together with the SHA-256 of the texts those
    rows were encoded from. Each shard file is written through a temporary file
    and an atomic rename, so a shard file on disk is always complete. The
    first `ShardWriter` on a directory writes `manifest.json` with N,
    `shard_size`, the SHA-256 of the id list and `metadata`. A later
    `ShardWriter` on the same directory resumes from the shards already there,
    but only if all of these match and the texts of every finished shard are
    the ones it was encoded from; otherwise it raises a `MismatchError` that
    names what changed, rather than silently mixing embeddings of different
    texts or models: delete `work_dir` to start over.

    Args:
        work_dir: str or path-like. Created if missing.
        ids: sequence of str, the corpus ids in row order.
        texts: sequence of str (or bytes), the exact texts encoded, one per id;
            shard `i` must be encoded from `texts[shard.start:shard.end]`.
        shard_size: int, rows per shard.
        metadata: JSON-serialisable dict of whatever else determines the
            embeddings (the model's fingerprint and settings), checked on
            resume in its order; keys must differ from the manifest's own
            (`shard_format`, `num_rows`, `shard_size`, `ids_sha256`).

    Raises:
        MismatchError: `work_dir` holds shards of other ids, texts, shard size
            or metadata.
        DataError: a manifest or shard file there cannot be read.

    Example:
    >>> model = {"model_sha256": fingerprint(encoder)}
    >>> writer = ShardWriter("work_dirs/scifact", ids, texts, 4096, model)
    >>> for shard in writer.pending_shards():
    ...     writer.write(shard.number, encoder.encode_documents(texts[shard.start:shard.end]))
    >>> embeddings = writer.assemble()
    """

    def __init__(self, work_dir, ids, texts, shard_size, metadata=None):
        self.shard_size = check_positive_int(shard_size, "shard_size")
        ids = _check_ids(ids)
        if not ids:
            raise ValueError("ShardWriter needs at least one id.")
        if len(texts) != len(ids):
            raise ValueError(f"Got {len(texts)} texts for {len(ids)} ids.")
        metadata = json.loads(json.dumps(metadata or {}))
        reserved = sorted(set(metadata) & set(_MANIFEST_FIELDS))
        if reserved:
            raise ValueError(f"metadata must not hold the manifest's own fields {reserved}.")
        self.work_dir = os.fspath(work_dir)
        self.num_rows = len(ids)
        self._texts = texts
        manifest = {
            "shard_format": _SHARD_FORMAT,
            "num_rows": self.num_rows,
            "shard_size": self.shard_size,
            "ids_sha256": strings_sha256(ids),
            **metadata,
        }
        files.makedirs(self.work_dir)
        names = files.listdir(self.work_dir)
        for stale in names:
            if any(fnmatch.fnmatchcase(stale, pattern) for pattern in _STALE_SHARDS):
                files.remove(os.path.join(self.work_dir, stale))
        manifest_path = os.path.join(self.work_dir, _MANIFEST_JSON)
        if files.exists(manifest_path):
            recorded = read_json_object(manifest_path, self._start_over)
            if recorded.get("shard_format") != _SHARD_FORMAT:
                raise MismatchError(
                    f"{self.work_dir}: shards of another version of gtr-keras; {self._start_over}"
                )
            change = describe_change(recorded, dict.fromkeys(recorded) | manifest, "this run has")
            if change:
                raise MismatchError(
                    f"{self.work_dir}: these shards were encoded from other inputs or settings "
                    f"({change}); {self._start_over}"
                )
            self._check_finished_shards(set(names))
        elif any(fnmatch.fnmatchcase(name, "shard-*.npz") for name in names):
            raise MismatchError(
                f"{self.work_dir}: shard files but no {_MANIFEST_JSON} saying what they were encoded "
                f"from; {self._start_over}"
            )
        else:
            payload = json.dumps(manifest, indent=2).encode("utf-8")
            with atomic_file(manifest_path) as f:
                f.write(payload)

    @property
    def _start_over(self):
        return f"delete {self.work_dir} to start over"

    @property
    def num_shards(self):
        return math.ceil(self.num_rows / self.shard_size)

    def shard(self, number):
        """The `Shard` with this number."""
        if not 0 <= number < self.num_shards:
            raise ValueError(f"Shard number must be in [0, {self.num_shards}), got {number}.")
        start = number * self.shard_size
        return Shard(number, start, min(start + self.shard_size, self.num_rows))

    def _path(self, number):
        return os.path.join(self.work_dir, f"shard-{number:05d}.npz")

    def _texts_sha256(self, shard):
        return strings_sha256(self._texts[shard.start : shard.end])

    def _read(self, number, key):
        path = self._path(number)
        try:
            with files.open(path) as f, np.load(f) as stored:
                return stored[key]
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
            raise DataError(f"{path}: unreadable shard ({_reason(e, path)}); {self._start_over}") from e

    def _check_finished_shards(self, names):
        """Checks the texts of every finished shard; `names` lists the work directory."""
        for number in range(self.num_shards):
            shard = self.shard(number)
            if os.path.basename(self._path(number)) not in names:
                continue
            if str(self._read(number, "texts_sha256")) != self._texts_sha256(shard):
                raise MismatchError(
                    f"{self.work_dir}: shard {number} was encoded from other texts (documents "
                    f"{shard.start}-{shard.end - 1}: one or more changed since); {self._start_over}"
                )

    def pending_shards(self):
        """The `Shard`s not yet written, in order."""
        done = set(files.listdir(self.work_dir))
        return [self.shard(i) for i in range(self.num_shards) if os.path.basename(self._path(i)) not in done]

    def write(self, number, embeddings):
        """Stores the `[end - start, D]` embeddings of shard `number`, encoded from its texts."""
        shard = self.shard(number)
        embeddings = _check_embeddings(embeddings, f"embeddings for shard {number}")
        if embeddings.shape[0] != shard.end - shard.start:
            raise ValueError(
                f"Shard {number} holds rows [{shard.start}, {shard.end}), "
                f"got {embeddings.shape[0]} embedding rows."
            )
        with atomic_file(self._path(number)) as f:
            np.savez(f, embeddings=embeddings, texts_sha256=np.array(self._texts_sha256(shard)))

    def assemble(self):
        """Returns all shards concatenated: float32 `[N, D]`."""
        pending = self.pending_shards()
        if pending:
            raise ValueError(
                f"{len(pending)} of {self.num_shards} shards in {self.work_dir} are not "
                f"written yet, the first is shard {pending[0].number}."
            )
        embeddings = None
        for number in range(self.num_shards):
            shard, rows = self.shard(number), self._read(number, "embeddings")
            if embeddings is None:
                embeddings = np.empty((self.num_rows, rows.shape[-1]), np.float32)
            expected = (shard.end - shard.start, embeddings.shape[1])
            if rows.shape != expected:
                raise DataError(
                    f"{self._path(number)} has shape {rows.shape}, expected {expected}; "
                    f"{self._start_over}"
                )
            embeddings[shard.start : shard.end] = rows
        return embeddings
