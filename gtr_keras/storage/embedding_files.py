"""Precomputed embedding files, read in bounded chunks: the input of `gtr-keras index --embeddings`.

Two formats of embedding file are read, in file-name order:

- `gtr-keras encode`'s: `NAME.npy` (float32 `[n, D]`, C order) with
  `NAME.ids.txt` beside it (one id per line) and, when `encode` wrote them,
  `NAME.json` (the model that made the embeddings);
- the Beam pipeline's `embeddings-SSSSS-of-NNNNN.npz` (arrays `ids` and
  `embeddings`; `encode_corpus_with_beam`), read one file at a time.

`EmbeddingFiles.open` checks every embedding file, whatever its format, the same way
before any index work: as many ids as rows, ids that are strings a TREC run
line can keep (no whitespace; a UTF-8 byte-order mark at the start of
`NAME.ids.txt` is dropped, as the corpus readers drop it), one D for all,
finite rows of unit norm, ids unique within and across files, and model
records that agree. The checks read each file once, a chunk at a time, so
neither they nor the chunks that follow ever hold more than `chunk_rows`
vectors of a `.npy` file (or one `.npz` file) in memory. Each chunk's
SHA-256 is kept from that first reading, and a chunk read again later (an
index build reads the files once more, ScaNN twice) must match it: a file
replaced or rewritten after its check is refused, naming it, rather than
indexed under the ids and model record that were checked.
"""

import hashlib
import io
import json
import os
import re

import numpy as np

from gtr_keras.errors import DataError
from gtr_keras.storage.layout import check_ids
from gtr_keras.utils import files
from gtr_keras.utils.records import unreadable_reason
from gtr_keras.utils.text_files import check_id_text, text_problem

# Unit-norm tolerance: float32 normalisation leaves ~1e-6; un-normalised embeddings are far off.
NORM_TOLERANCE = 1e-3
_CHUNK_ROWS = 65_536
_WHITESPACE = re.compile(r"\s")  # what `str.isspace` calls whitespace
_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def ids_path_for(npy_path):
    """The ids file that `gtr-keras encode` writes beside `NAME.npy`: `NAME.ids.txt`."""
    return f"{os.path.splitext(os.fspath(npy_path))[0]}.ids.txt"


def model_path_for(npy_path):
    """The model record that `gtr-keras encode` writes beside `NAME.npy`: `NAME.json`."""
    return f"{os.path.splitext(os.fspath(npy_path))[0]}.json"


class _NpyFile:
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
            raise DataError(
                f"{path}: expected a float32 [n, D] array in C order (as `gtr-keras encode` writes), "
                f"got {dtype} {'Fortran-order ' if fortran else ''}shape {shape}"
            )
        self.num_rows, self.dims = shape
        self.ids_name = ids_path_for(path)

    def ids(self):
        return _read_ids_file(self.ids_name)

    def place(self, i):
        return self.ids_name, i + 1

    def read(self, start, stop):
        with files.open(self.path) as f:
            f.seek(self._offset + start * self.dims * 4)
            data = f.read((stop - start) * self.dims * 4)
        if len(data) != (stop - start) * self.dims * 4:
            raise DataError(f"{self.path}: truncated (rows {start}-{stop - 1} missing)")
        return np.frombuffer(data, dtype="<f4").reshape(stop - start, self.dims)


class _NpzFile:
    """One embedding file of `encode_corpus_with_beam`: arrays `ids` and `embeddings`, read whole."""

    def __init__(self, path):
        self.path = path
        self._ids, self._embeddings = self._load()
        self.num_rows, self.dims = self._embeddings.shape if self._embeddings.ndim == 2 else (0, 0)
        if self._embeddings.ndim != 2 or self._embeddings.dtype != np.float32:
            raise DataError(
                f"{path}: field 'embeddings' must be float32 [n, D], got {self._embeddings.dtype} "
                f"shape {self._embeddings.shape}"
            )
        self.digest = hashlib.sha256(np.ascontiguousarray(self._embeddings)).digest()  # the vectors of its ids
        del self._embeddings  # read again chunk by chunk; held only while this file is read

    def _load(self):
        try:
            with files.open(self.path) as f, np.load(io.BytesIO(f.read()), allow_pickle=False) as stored:
                return stored["ids"], stored["embeddings"]
        except (OSError, ValueError, KeyError) as e:
            raise DataError(
                f"{self.path}: not an embedding file with arrays 'ids' and 'embeddings' "
                f"({unreadable_reason(e, self.path)})"
            ) from e

    @property
    def ids_name(self):
        return f"{self.path} (field 'ids')"

    def ids(self):
        if self._ids.ndim != 1 or self._ids.dtype.kind != "U":
            raise DataError(
                f"{self.ids_name} must be a 1-D array of strings (as encode_corpus_with_beam writes), "
                f"got {self._ids.dtype} shape {self._ids.shape}"
            )
        return self._ids.tolist()

    def place(self, i):
        return self.path, f"ids[{i}]"

    def read(self, start, stop):
        return self._load()[1][start:stop]


class EmbeddingFiles:
    """Checked embedding files, in file-name order, read a chunk at a time.

    Args:
        paths: the embedding files (`.npy` with `.ids.txt` beside, or Beam `.npz`).
        chunk_rows: most vectors of a `.npy` file held in memory at once (default 65,536).

    Attributes:
        paths: the embedding files, in row order.
        ids: every row's id, in row order.
        dims: D.
        model: the model record the files share (`NAME.json` beside every
            `.npy`, as `gtr-keras encode` writes it, whose `kind` must be
            `"document"`: query embeddings are refused), or None when no
            file has one.
        model_path: the record `model` is read from (the first file's), or None.

    Example:
    >>> embeddings = EmbeddingFiles.open("embeddings/part-*.npy")
    >>> for chunk in embeddings.chunks():
    ...     print(chunk.shape)
    (65536, 768)
    """

    def __init__(self, paths, chunk_rows=None):
        self.paths = list(paths)
        self.chunk_rows = chunk_rows or _CHUNK_ROWS
        self._files = [_NpzFile(p) if p.endswith(".npz") else _NpyFile(p) for p in self.paths]
        dims = {file.dims for file in self._files if file.num_rows}
        if len(dims) > 1:
            first = next(s for s in self._files if s.num_rows)
            other = next(s for s in self._files if s.num_rows and s.dims != first.dims)
            raise DataError(
                f"{other.path}: {other.dims} dims, but {first.path} has {first.dims}; "
                f"every embedding file must come from the same model"
            )
        self.dims = dims.pop() if dims else 0
        # (path, first row) -> SHA-256 of each chunk at its first reading (a .npz file's, with its ids)
        self._digests = {(s.path, 0): s.digest for s in self._files if isinstance(s, _NpzFile)}
        self.ids = self._read_ids()
        self.model_path, self.model = self._read_models()
        if not self.ids:
            raise DataError(f"{self.paths[0]}: the embedding files hold no embeddings")

    @classmethod
    def open(cls, pattern, chunk_rows=None):
        """Opens and checks the embedding files matching `pattern` (a glob, or one file).

        Raises:
            DataError: no file matches, or a file fails a check (named with
                its file and, where it applies, its line or row).
        """
        pattern = os.fspath(pattern)
        paths = [p for p in files.glob(pattern) if p.endswith((".npy", ".npz"))]
        if not paths:
            raise DataError(f"{pattern}: matches no .npy or .npz embedding file")
        embeddings = cls(paths, chunk_rows)
        embeddings.check_vectors()
        return embeddings

    @property
    def num_rows(self):
        return len(self.ids)

    def _read_ids(self):
        ids, places = [], []  # places: (first row, file) of each file, to name a duplicate's line
        for file in self._files:
            file_ids = file.ids()
            if len(file_ids) != file.num_rows:
                raise DataError(f"{file.ids_name}: {len(file_ids)} ids for the {file.num_rows} rows of {file.path}")
            joined = "".join(file_ids)
            if _WHITESPACE.search(joined) or text_problem(joined):
                for i, id_ in enumerate(file_ids):
                    check_id_text(":".join(map(str, file.place(i))), id_, "id")
            places.append((len(ids), file))
            ids += file_ids
        return check_ids(ids, lambda row: _place(places, row), DataError)

    def _read_models(self):
        records = {}
        for file in self._files:
            path = model_path_for(file.path)
            if isinstance(file, _NpyFile) and files.exists(path):
                try:
                    with files.open(path) as f:
                        records[path] = json.loads(f.read().decode("utf-8"))
                except (OSError, ValueError, RecursionError) as e:
                    raise DataError(f"{path}: unreadable ({unreadable_reason(e, path)})") from e
                _check_model_record(path, records[path], file)
        if not records:
            return None, None
        missing = [file.path for file in self._files if model_path_for(file.path) not in records]
        if missing:
            raise DataError(
                f"{missing[0]}: no model record ({model_path_for(missing[0])}) while other embedding files have "
                f"one; encode every file with `gtr-keras encode`, or give files of one kind"
            )
        (first, model), *rest = records.items()
        for path, other in rest:
            if _identity(other["model"]) != _identity(model["model"]):
                raise DataError(
                    f"{path}: embeddings of another model than {first} (field 'model' differs); "
                    f"an index must hold one model's embeddings"
                )
        return first, model["model"]

    def _read(self, file):
        step = max(1, file.num_rows if isinstance(file, _NpzFile) else self.chunk_rows)
        for start in range(0, file.num_rows, step):
            stop = min(start + step, file.num_rows)
            chunk = file.read(start, stop)
            digest = hashlib.sha256(np.ascontiguousarray(chunk)).digest()
            if self._digests.setdefault((file.path, start), digest) != digest:
                raise DataError(
                    f"{file.path}: changed since it was checked (rows {start}-{stop - 1} differ); "
                    f"rerun once the embedding files stay as they are"
                )
            yield start, chunk

    def check_vectors(self):
        """Reads every file once: finite rows of unit norm, or a `DataError` naming the first bad row."""
        for file in self._files:
            for start, chunk in self._read(file):
                norms = np.linalg.norm(chunk, axis=1)
                bad = np.flatnonzero(~np.isfinite(chunk).all(axis=1) | (np.abs(norms - 1) > NORM_TOLERANCE))
                if len(bad):
                    row = int(bad[0])
                    what = (
                        "holds NaN or infinity"
                        if not np.isfinite(chunk[row]).all()
                        else f"has norm {norms[row]:.6g}, not 1 (GTR embeddings are L2-normalised)"
                    )
                    raise DataError(f"{file.path}: row {start + row} {what}")

    def chunks(self):
        """The float32 vectors in row order, `chunk_rows` (or one `.npz` file) at a time."""
        for file in self._files:
            for _, chunk in self._read(file):
                yield np.ascontiguousarray(chunk, dtype=np.float32)


def _place(places, row):
    start, file = next((start, file) for start, file in reversed(places) if start <= row)
    name, line = file.place(row - start)
    return f"{name}:{line}"


def _identity(model):
    """A model record's fields less `model_dir`, which names where the model was, not which it is."""
    return {field: value for field, value in model.items() if field != "model_dir"}


def _check_model_record(path, record, file):
    """Raises `DataError` naming `path` and the field unless `record` is a model record `gtr-keras encode`
    writes beside `file`: an object whose `model` is an object, of `kind` "document", for as many rows."""
    if not isinstance(record, dict):
        raise DataError(f"{path}: not a JSON object (the model record `gtr-keras encode` writes)")
    if not isinstance(record.get("model"), dict):
        found = f"is {type(record['model']).__name__}" if "model" in record else "is missing"
        raise DataError(
            f"{path}: field 'model' {found}, not an object (the model record `gtr-keras encode` "
            f"writes); encode the file again"
        )
    if record.get("kind", "document") != "document":
        raise DataError(
            f"{path}: field 'kind' is {record['kind']!r}, not 'document'; an index holds "
            f"documents: encode the corpus with `gtr-keras encode --kind document`"
        )
    if record.get("num_rows", file.num_rows) != file.num_rows:
        raise DataError(
            f"{path}: field 'num_rows' is {record['num_rows']!r}, but {file.path} has "
            f"{file.num_rows} rows; the record is of another embedding file: encode the file again"
        )


def _read_ids_file(path):
    try:
        with files.open(path) as f:
            text = f.read().decode("utf-8-sig")
    except (OSError, ValueError) as e:
        raise DataError(
            f"{path}: unreadable ids file ({unreadable_reason(e, path)}; "
            f"`gtr-keras encode` writes NAME.ids.txt beside NAME.npy)"
        ) from e
    if text and not text.endswith("\n"):
        raise DataError(f"{path}:{text.count(chr(10)) + 1}: the last line is not terminated by a newline")
    return text.split("\n")[:-1]
