"""Precomputed embedding shards, read in bounded chunks: the input of `gtr-keras index --embeddings`.

Two shard formats are read, in file-name order:

- `gtr-keras encode`'s: `NAME.npy` (float32 `[n, D]`, C order) with
  `NAME.ids.txt` beside it (one id per line) and, when `encode` wrote them,
  `NAME.json` (the model that made the embeddings);
- the Beam pipeline's `embeddings-SSSSS-of-NNNNN.npz` (arrays `ids` and
  `embeddings`; `encode_corpus_with_beam`), read one shard at a time.

`EmbeddingFiles.open` checks every shard before any index work: rows against
ids, one D for all, finite rows of unit norm, ids unique within and across
shards. The checks read each shard once, a chunk at a time, so neither they
nor the chunks that follow ever hold more than `chunk_rows` vectors of a `.npy`
shard (or one `.npz` shard) in memory.
"""

import io
import json
import os

import numpy as np

from gtr_keras.errors import DataError
from gtr_keras.retrieval.index_format import check_ids
from gtr_keras.utils import files
from gtr_keras.utils.records import unreadable_reason

# Unit-norm tolerance: float32 normalisation leaves ~1e-6; un-normalised embeddings are far off.
NORM_TOLERANCE = 1e-3
_CHUNK_ROWS = 65_536
_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def ids_path_for(npy_path):
    """The ids file that `gtr-keras encode` writes beside `NAME.npy`: `NAME.ids.txt`."""
    return f"{os.path.splitext(os.fspath(npy_path))[0]}.ids.txt"


def model_path_for(npy_path):
    """The model record that `gtr-keras encode` writes beside `NAME.npy`: `NAME.json`."""
    return f"{os.path.splitext(os.fspath(npy_path))[0]}.json"


class _NpyShard:
    """A float32 `[n, D]` `.npy` file read by row ranges, without loading it whole."""

    def __init__(self, path):
        self.path = path
        try:
            with files.open(path) as f:
                read_header = _HEADER_READERS.get(np.lib.format.read_magic(f))
                if read_header is None:
                    raise ValueError("a .npy format version other than 1.0 and 2.0")
                shape, fortran, dtype = read_header(f)
                self._offset = f.tell()
        except (OSError, ValueError) as e:
            raise DataError(f"{path}: not a .npy array ({unreadable_reason(e, path)})") from e
        if len(shape) != 2 or fortran or dtype != np.dtype("<f4"):
            raise DataError(f"{path}: expected a float32 [n, D] array in C order (as `gtr-keras encode` writes), "
                            f"got {dtype} {'Fortran-order ' if fortran else ''}shape {shape}")
        self.num_rows, self.dims = shape

    def read(self, start, stop):
        with files.open(self.path) as f:
            f.seek(self._offset + start * self.dims * 4)
            data = f.read((stop - start) * self.dims * 4)
        if len(data) != (stop - start) * self.dims * 4:
            raise DataError(f"{self.path}: truncated (rows {start}-{stop - 1} missing)")
        return np.frombuffer(data, dtype="<f4").reshape(stop - start, self.dims)


class _NpzShard:
    """One shard of `encode_corpus_with_beam`: arrays `ids` and `embeddings`, read whole."""

    def __init__(self, path):
        self.path = path
        self._ids, self._embeddings = self._load()
        self.num_rows, self.dims = self._embeddings.shape if self._embeddings.ndim == 2 else (0, 0)
        if self._embeddings.ndim != 2 or self._embeddings.dtype != np.float32:
            raise DataError(f"{path}: field 'embeddings' must be float32 [n, D], got {self._embeddings.dtype} "
                            f"shape {self._embeddings.shape}")
        del self._embeddings  # read again chunk by chunk; held only while this shard is read

    def _load(self):
        try:
            with files.open(self.path) as f, np.load(io.BytesIO(f.read()), allow_pickle=False) as stored:
                return stored["ids"], stored["embeddings"]
        except (OSError, ValueError, KeyError) as e:
            raise DataError(f"{self.path}: not an embedding shard with arrays 'ids' and 'embeddings' "
                            f"({unreadable_reason(e, self.path)})") from e

    def ids(self):
        return [str(i) for i in self._ids]

    def read(self, start, stop):
        return self._load()[1][start:stop]


class EmbeddingFiles:
    """Checked embedding shards, in file-name order, read a chunk at a time.

    Args:
        paths: the shard files (`.npy` with `.ids.txt` beside, or Beam `.npz`).
        chunk_rows: most vectors of a `.npy` shard held in memory at once (default 65,536).

    Attributes:
        paths: the shard files, in row order.
        ids: every row's id, in row order.
        dims: D.
        model: the model record the shards share (`NAME.json` beside every
            `.npy`, as `gtr-keras encode` writes it, whose `kind` must be
            `"document"`: query embeddings are refused), or None when no
            shard has one.

    Example:
    >>> shards = EmbeddingFiles.open("embeddings/part-*.npy")
    >>> for chunk in shards.chunks():
    ...     print(chunk.shape)
    (65536, 768)
    """

    def __init__(self, paths, chunk_rows=None):
        self.paths = list(paths)
        self.chunk_rows = chunk_rows or _CHUNK_ROWS
        self._shards = [_NpzShard(p) if p.endswith(".npz") else _NpyShard(p) for p in self.paths]
        dims = {shard.dims for shard in self._shards if shard.num_rows}
        if len(dims) > 1:
            first = next(s for s in self._shards if s.num_rows)
            other = next(s for s in self._shards if s.num_rows and s.dims != first.dims)
            raise DataError(f"{other.path}: {other.dims} dims, but {first.path} has {first.dims}; "
                            f"every shard must come from the same model")
        self.dims = dims.pop() if dims else 0
        self.ids = self._read_ids()
        self.model = self._read_models()
        if not self.ids:
            raise DataError(f"{self.paths[0]}: the shards hold no embeddings")

    @classmethod
    def open(cls, pattern, chunk_rows=None):
        """Opens and checks the shards matching `pattern` (a glob, or one file).

        Raises:
            DataError: no file matches, or a shard fails a check (named with
                its file and, where it applies, its line or row).
        """
        pattern = os.fspath(pattern)
        paths = [p for p in files.glob(pattern) if p.endswith((".npy", ".npz"))]
        if not paths:
            raise DataError(f"{pattern}: matches no .npy or .npz embedding file")
        shards = cls(paths, chunk_rows)
        shards.check_vectors()
        return shards

    @property
    def num_rows(self):
        return len(self.ids)

    def _read_ids(self):
        ids, places = [], []  # places: (first row, where(i)) of each shard, to name a duplicate's line
        for shard in self._shards:
            if isinstance(shard, _NpzShard):
                shard_ids, where = shard.ids(), lambda i, s=shard: f"{s.path}: ids[{i}]"
            else:
                path = ids_path_for(shard.path)
                shard_ids, where = _read_ids_file(path), lambda i, p=path: f"{p}:{i + 1}"
                if len(shard_ids) != shard.num_rows:
                    raise DataError(f"{path}: {len(shard_ids)} ids for the {shard.num_rows} rows of {shard.path}")
            for i, id_ in enumerate(shard_ids):
                if id_ != id_.strip():
                    raise DataError(f"{where(i)}: id {id_!r} holds whitespace at an end")
            places.append((len(ids), where))
            ids += shard_ids
        return check_ids(ids, lambda row: _place(places, row), DataError)

    def _read_models(self):
        records = {}
        for shard in self._shards:
            path = model_path_for(shard.path)
            if isinstance(shard, _NpyShard) and files.exists(path):
                try:
                    with files.open(path) as f:
                        records[path] = json.loads(f.read().decode("utf-8"))
                except (OSError, ValueError) as e:
                    raise DataError(f"{path}: unreadable ({unreadable_reason(e, path)})") from e
        if not records:
            return None
        missing = [shard.path for shard in self._shards if model_path_for(shard.path) not in records]
        if missing:
            raise DataError(f"{missing[0]}: no model record ({model_path_for(missing[0])}) while other shards have "
                            f"one; encode every shard with `gtr-keras encode`, or give shards of one kind")
        for path, record in records.items():
            if not isinstance(record, dict):
                raise DataError(f"{path}: not a JSON object (the model record `gtr-keras encode` writes)")
            if record.get("kind", "document") != "document":
                raise DataError(f"{path}: field 'kind' is {record['kind']!r}, not 'document'; an index holds "
                                f"documents: encode the corpus with `gtr-keras encode --kind document`")
        (first, model), *rest = records.items()
        for path, other in rest:
            if other.get("model") != model.get("model"):
                raise DataError(f"{path}: embeddings of another model than {first} (field 'model' differs); "
                                f"an index must hold one model's embeddings")
        return model["model"]

    def _read(self, shard):
        step = max(1, shard.num_rows if isinstance(shard, _NpzShard) else self.chunk_rows)
        for start in range(0, shard.num_rows, step):
            yield start, shard.read(start, min(start + step, shard.num_rows))

    def check_vectors(self):
        """Reads every shard once: finite rows of unit norm, or a `DataError` naming the first bad row."""
        for shard in self._shards:
            for start, chunk in self._read(shard):
                norms = np.linalg.norm(chunk, axis=1)
                bad = np.flatnonzero(~np.isfinite(chunk).all(axis=1) | (np.abs(norms - 1) > NORM_TOLERANCE))
                if len(bad):
                    row = int(bad[0])
                    what = ("holds NaN or infinity" if not np.isfinite(chunk[row]).all()
                            else f"has norm {norms[row]:.6g}, not 1 (GTR embeddings are L2-normalised)")
                    raise DataError(f"{shard.path}: row {start + row} {what}")

    def chunks(self):
        """The float32 vectors in row order, `chunk_rows` (or one `.npz` shard) at a time."""
        for shard in self._shards:
            for _, chunk in self._read(shard):
                yield np.ascontiguousarray(chunk, dtype=np.float32)


def _place(places, row):
    start, where = next((start, where) for start, where in reversed(places) if start <= row)
    return where(row - start)


def _read_ids_file(path):
    try:
        with files.open(path) as f:
            text = f.read().decode("utf-8")
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: unreadable ids file ({unreadable_reason(e, path)}; "
                        f"`gtr-keras encode` writes NAME.ids.txt beside NAME.npy)") from e
    if text and not text.endswith("\n"):
        raise DataError(f"{path}:{text.count(chr(10)) + 1}: the last line is not terminated by a newline")
    return text.split("\n")[:-1]
