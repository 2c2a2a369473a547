"""Every file and folder name of an index, the one reader of an index directory's model record, the one
message for what is not an index, and the checks of the ids and vectors that go into one.

An index directory (`gtr-keras index`, `retrieval.retriever`) holds its model record (`retriever.json`,
`read_model_record`), its search index (`index/`), its documents (`documents.jsonl.gz`) and its BM25 side
(`bm25/`, with its own `ids.txt`).

An index directory holds `index.json` (format version, kind, N, dims, ScaNN
params), `ids.txt` (one id a line, in row order) and one copy of the
vectors: float32 `embeddings.npy` (memory-mapped when local) for exact
search, or ScaNN's searcher in `scann/` (its int8 copy, 1 byte per
dimension, plus AH codes of 1/8 byte per dimension, packed on disk as in
memory: `scann_codes`) for approximate search, with `embeddings.npy` beside it too where ScaNN's
candidates are rescored with float32 (`reorder: "float32"`, the default;
`reorder: "int8"` keeps the int8 copy only). It lives on any file system
TensorFlow knows (local, `gs://`, `ram://`).
"""

import collections.abc
import gzip
import json
import os

import numpy as np

from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.utils import files
from gtr_keras.utils.records import check_fields, read_json_object, unreadable_reason
from gtr_keras.utils.text_files import check_id_text, iter_lines

FORMAT_VERSION = 2
INDEX_JSON = "index.json"
IDS_TXT = "ids.txt"
EMBEDDINGS_NPY = "embeddings.npy"
SCANN_DIR = "scann"
# An exact index built with `vectors="int8"` or `"binary"` (`quantized_vectors`) also holds the codes searched
# first (and, for int8, the per-dimension calibration applied to queries); `embeddings.npy` rescores.
INT8_NPY = "vectors-int8.npy"
INT8_CALIBRATION_NPY = "int8-calibration.npy"
BINARY_NPY = "vectors-binary.npy"
VECTOR_FILES = (EMBEDDINGS_NPY, INT8_NPY, INT8_CALIBRATION_NPY, BINARY_NPY)
# A ScaNN index's `reorder` param: ScaNN reorders its candidates on its int8 copy, then the best are rescored
# with the float32 vectors of `embeddings.npy` (FLOAT32_REORDER), or not (INT8_REORDER: no `embeddings.npy`).
INT8_REORDER, FLOAT32_REORDER = "int8", "float32"
NO_FLOAT32 = (
    "this index keeps no float32 vectors (a ScaNN index built with reorder 'int8' keeps only ScaNN's int8 copy); "
    "rebuild it with `gtr-keras index` (or `--exact`)"
)
# `gtr-keras tune` (`tuning`): the search setting chosen, applied when the index is loaded, and its curve.
TUNED_JSON = "tuned.json"
TUNE_PLOT = "tune-recall-qps.png"
# `tune --build`'s scratch, `.tune-NAME-*` beside the search index directory NAME: the builds it measures. A
# killed run leaves it; the next `tune` of that index removes it (`is_tune_scratch`).
TUNE_SCRATCH_PREFIX = ".tune-"
# An updated index also holds its manifest, its segments and their deletion lists (`segments`).
MANIFEST_JSON = "segments.json"
SEARCH_INDEX_DIRECTORY = files.DirectoryKind(
    "a search index",
    (INDEX_JSON,),
    (INDEX_JSON, IDS_TXT, *VECTOR_FILES, SCANN_DIR, MANIFEST_JSON, TUNED_JSON, TUNE_PLOT, "segment-*", "deleted-*.npz"),
)
# An index directory (`retriever`): its model record, search index, documents and BM25 side.
RETRIEVER_JSON = "retriever.json"
INDEX_SUBDIR = "index"
DOCUMENTS_FILE = "documents.jsonl.gz"
BM25_SUBDIR = "bm25"
# `gtr-keras push` (`engines.push`): one ledger per engine target and collection, each id pushed with its digest.
PUSH_LEDGER_PREFIX = "pushed-"
PUSH_LEDGER_GLOB = f"{PUSH_LEDGER_PREFIX}*.json.gz"
PUSH_LEDGER_FORMAT = 1
# The fields of `retriever.json` (`read_model_record`); those of the model are null for embeddings indexed
# without a record of their model.
# A passages index's `{"tokens", "stride"}` (`gtr-keras index --passages TOKENS:STRIDE`, `retrieval.passages`).
PASSAGES_FIELD = "passages"
# The tokens of the forward pass each window of a passages index is late-chunked from (`gtr-keras index --passages
# TOKENS:STRIDE --late-chunking --document-length N`, `retrieval.passages.LateRows`); absent without late chunking.
LATE_CHUNKING_FIELD = "late_chunking"
RETRIEVER_FIELDS = {
    "model_dir": "str?",
    "embedding_dim": "positive",
    "document_length": "positive?",
    "query_length": "positive?",
    "compute_dtype": "str?",
    "model_sha256": "sha256?",
    "dimensions": "positive?",
    PASSAGES_FIELD: "object?",
    LATE_CHUNKING_FIELD: "positive?",
    "kind": ("exact", "scann"),
    "num_documents": "count",
}
# What queries must share with the indexed documents, and every shard searched together with the others
# (the token budget of queries is the searcher's choice).
SEARCH_FIELDS = ("embedding_dim", "compute_dtype", "model_sha256")
# ScaNN's arrays with a row per indexed point (the others are the same whatever the points).
SCANN_DATAPOINT_TO_TOKEN = "datapoint_to_token.npy"
SCANN_INT8_DATASET = "int8_dataset.npy"  # ScaNN's int8 copy, decoded by dividing by SCANN_INT8_MULTIPLIERS
SCANN_INT8_MULTIPLIERS = "int8_multipliers.npy"
SCANN_CODES = "hashed_dataset.npy"  # ScaNN's AH codes as it writes them, a byte a code
SCANN_PER_POINT = (SCANN_DATAPOINT_TO_TOKEN, SCANN_CODES, SCANN_INT8_DATASET)
# An index keeps AH codes of 4 bits packed two a byte (`scann_codes`), their number a point in a record beside them.
SCANN_PACKED_CODES = "hashed_dataset.packed.npy"
SCANN_PACKED_RECORD = "hashed_dataset.packed.json"
# The files of a searcher that depend on its points or on how they are stored (`codec_files` holds the others).
SCANN_POINT_FILES = (*SCANN_PER_POINT, SCANN_PACKED_CODES, SCANN_PACKED_RECORD)
# ScaNN's serialized searcher (`scann/`): its protos, and its arrays.
SCANN_TENSOR_FILES = ("scann_config.pb", "serialized_partitioner.pb", "ah_codebook.pb")
SCANN_ARRAY_FILES = (*SCANN_PER_POINT, SCANN_INT8_MULTIPLIERS)
REMEDY = "rebuild the index"
# Stored vectors are checked for NaN this many values at a time (128 MiB of float32).
_CHECK_VALUES = 2**25


def not_an_index(path):
    """The one message for a directory that is not an index directory (it holds no `retriever.json`).

    Example:
    >>> not_an_index("indexes/nope")
    'indexes/nope: not an index directory (no retriever.json); build one with `gtr-keras index`'
    """
    return f"{path}: not an index directory (no {RETRIEVER_JSON}); build one with `gtr-keras index`"


def read_model_record(index_dir):
    """The model record (`retriever.json`) of an index directory: the model it was built with.

    Raises:
        DataError: `index_dir` is not an index directory (`not_an_index`), or its record is unreadable, or a
            field of `RETRIEVER_FIELDS` is missing or of a wrong type (naming the file and the field).

    Example:
    >>> read_model_record("indexes/scifact")["kind"]
    'exact'
    """
    path = os.path.join(index_dir, RETRIEVER_JSON)
    if not files.isfile(path):
        raise DataError(not_an_index(index_dir))
    remedy = "rebuild the index with `gtr-keras index`"
    return check_fields(path, read_json_object(path, remedy), RETRIEVER_FIELDS, remedy)


class Ids(collections.abc.Sequence):
    """A sequence of str ids kept as UTF-8 in one numpy bytes array: about their length in bytes each (a
    Python str costs ~60 more), which matters at millions of ids. Sorting the bytes sorts the ids.

    Args:
        ids: a sequence of str, or a numpy bytes array of their UTF-8.

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


def check_ids(ids, where=lambda i: f"ids[{i}]", error=UserError):
    """Returns `ids` as a list after checking that they can be stored one a line, each once.

    Args:
        ids: the ids, in row order.
        where: `where(i)` names id `i` in a message.
        error: the exception class raised.

    Example:
    >>> check_ids(["d0", "d0"])
    Traceback (most recent call last):
    ...
    gtr_keras.errors.UserError: ids[1]: id 'd0' duplicates ids[0].
    """
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
    """Returns `embeddings` as a contiguous float32 `[N, D]` array; raises `UserError` naming `where` if it
    is not a finite floating-point matrix.

    Example:
    >>> check_embeddings([[1, 0]], "queries")
    Traceback (most recent call last):
    ...
    gtr_keras.errors.UserError: queries must be floating point, got dtype int64.
    """
    embeddings = np.asarray(embeddings)
    if embeddings.ndim != 2:
        raise UserError(f"{where} must have shape [N, D], got shape {embeddings.shape}.")
    if not np.issubdtype(embeddings.dtype, np.floating):
        raise UserError(f"{where} must be floating point, got dtype {embeddings.dtype}.")
    if not np.isfinite(embeddings).all():
        raise UserError(f"{where} hold NaN or infinity in {int((~np.isfinite(embeddings).all(axis=1)).sum())} rows.")
    return np.ascontiguousarray(embeddings, dtype=np.float32)


def write_embeddings(path, chunks, num_rows, dims):
    """Writes the float32 `[num_rows, dims]` vectors of an exact index to `path` (`.npy`), a chunk at a time."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_2_0(f, {"descr": "<f4", "fortran_order": False, "shape": (num_rows, dims)})
        for chunk in chunks:
            f.write(np.ascontiguousarray(chunk, dtype="<f4"))  # its buffer: no copy of the chunk


def write_description(directory, ids, kind, params, dims):
    """Writes `ids.txt` and `index.json` of an index of `kind` into `directory` (a `pathlib.Path`)."""
    with open(directory / IDS_TXT, "w", encoding="utf-8", newline="") as f:
        f.writelines(f"{id_}\n" for id_ in ids)
    config = {
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "num_embeddings": len(ids),
        "dims": dims,
        "params": params,
    }
    with open(directory / INDEX_JSON, "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


def read_description(directory):
    """Finds and checks an index's `index.json`.

    Args:
        directory: an index directory, or an index directory of `gtr-keras
            index` (whose `index/` subdirectory holds the index).

    Returns:
        `(directory, config_path, config)`: the directory that holds the
        index, its `index.json` and that file's fields.

    Raises:
        DataError: no `index.json`, or one that is malformed.
        MismatchError: an index written by another format version.
    """
    directory = os.fspath(directory)
    config_path = os.path.join(directory, INDEX_JSON)
    if not files.isfile(config_path) and files.isfile(os.path.join(directory, INDEX_SUBDIR, INDEX_JSON)):
        directory = os.path.join(directory, INDEX_SUBDIR)
        config_path = os.path.join(directory, INDEX_JSON)
    if not files.isfile(config_path):
        raise DataError(f"{directory}: not a search index (no {INDEX_JSON}); {REMEDY}")
    config = read_json_object(config_path, REMEDY)
    check_fields(config_path, config, {"format_version": "count", "kind": "str", "num_embeddings": "count"}, REMEDY)
    check_fields(config_path, config, {"dims": "positive", "params": "object?"}, REMEDY)
    if "params" not in config:
        raise DataError(f"{config_path}: field 'params' is missing; {REMEDY}")
    if config["format_version"] != FORMAT_VERSION:
        raise MismatchError(
            f"{config_path}: field 'format_version' is {config['format_version']!r}, "
            f"this version of gtr_keras reads {FORMAT_VERSION}; {REMEDY}"
        )
    if config["kind"] not in ("exact", "scann"):
        raise DataError(f"{config_path}: field 'kind' is {config['kind']!r}, not 'exact' or 'scann'; {REMEDY}")
    return directory, config_path, config


def read_ids(path, expected_count):
    """The ids of `ids.txt` as `Ids`, without a Python str per id unless one is bad (then named by line).

    Raises:
        DataError: an unreadable file, a bad or duplicate id, or not `expected_count` of them.
    """
    try:
        data = files.read_bytes(path)
        data.decode("utf-8")
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: unreadable ({unreadable_reason(e, path)}); {REMEDY}") from e
    if data and not data.endswith(b"\n"):
        line = data.count(b"\n") + 1
        raise DataError(f"{path}: line {line} is not terminated by a newline.")
    lines = data.split(b"\n")[:-1]
    array = np.array(lines, dtype="S") if lines else np.array([], dtype="S1")
    if b"\r" in data or b"\0" in data or (np.char.str_len(array) == 0).any() or len(np.unique(array)) != len(array):
        check_ids([line.decode("utf-8") for line in lines], lambda i: f"{path}: line {i + 1}", DataError)
    if len(array) != expected_count:
        raise DataError(f"{path} has {len(array)} ids, expected {expected_count} (one per embedding row).")
    return Ids(array)


def read_embeddings(path, config, config_path, scan=True):
    """The float32 vectors of an exact index: memory-mapped when local, checked a block at a time (with
    `scan`; without, only their shape and dtype: a quantized index reads a few rows a query for rescoring,
    and a scan would make every page of them resident).

    Raises:
        DataError: an unreadable file, one of another shape or dtype than
            `config` says, or rows that hold NaN or infinity.
    """
    try:
        if files.is_local(path):
            embeddings = np.load(path.removeprefix("file://"), mmap_mode="r")
        else:
            with files.open(path) as f:
                embeddings = np.load(f)
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: unreadable ({unreadable_reason(e, path)}); {REMEDY}") from e
    expected = (config["num_embeddings"], config["dims"])
    if embeddings.shape != expected or embeddings.dtype != np.float32:
        raise DataError(
            f"{path} has shape {embeddings.shape} ({embeddings.dtype}), but {config_path} "
            f"fields 'num_embeddings' and 'dims' say float32 {expected}; {REMEDY}"
        )
    step = max(1, _CHECK_VALUES // max(1, expected[1]))
    broken = scan and sum(
        int((~np.isfinite(embeddings[i : i + step]).all(axis=1)).sum()) for i in range(0, expected[0], step)
    )
    if broken:
        raise DataError(f"{path}: {broken} rows hold NaN or infinity; {REMEDY}")
    return embeddings


def scann_codes_file(scann_dir):
    """`(path, num_codes)`: the file of the AH codes of the ScaNN searcher in local `scann_dir`, and the number of
    codes a point holds where they are packed (`scann_codes`; None: a byte a code, as ScaNN writes them).

    Raises:
        DataError: packed codes whose record (`SCANN_PACKED_RECORD`) is missing or malformed.
    """
    packed = os.path.join(scann_dir, SCANN_PACKED_CODES)
    if not os.path.exists(packed):
        return os.path.join(scann_dir, SCANN_CODES), None
    path = os.path.join(scann_dir, SCANN_PACKED_RECORD)
    return packed, check_fields(path, read_json_object(path, REMEDY), {"num_codes": "positive"}, REMEDY)["num_codes"]


def check_scann_rows(scann_dir, config):
    """Raises `DataError` unless each per-point array of ScaNN in `scann_dir` has a row per indexed vector, and
    packed AH codes a byte per two of the codes their record counts."""
    codes, num_codes = scann_codes_file(scann_dir)
    for path in (os.path.join(scann_dir, SCANN_DATAPOINT_TO_TOKEN), codes, os.path.join(scann_dir, SCANN_INT8_DATASET)):
        try:
            array = np.load(path, mmap_mode="r")
        except (OSError, ValueError) as e:
            raise DataError(f"{path}: unreadable ({unreadable_reason(e, path)}); {REMEDY}") from e
        if array.shape[0] != config["num_embeddings"]:
            raise DataError(
                f"{path}: {array.shape[0]} rows, but 'num_embeddings' is {config['num_embeddings']}; {REMEDY}"
            )
        packed = (len(array), (num_codes + 1) // 2) if path == codes and num_codes else None
        if packed and (array.shape != packed or array.dtype != np.uint8):
            raise DataError(
                f"{path}: shape {array.shape} ({array.dtype}), but {SCANN_PACKED_RECORD} counts {num_codes} codes "
                f"a point: uint8 {packed}; {REMEDY}"
            )


def has_float32(kind, params):
    """Whether a search index of `kind` with `params` keeps its float32 vectors (`embeddings.npy`): every
    exact index, and a ScaNN index whose candidates are rescored with them (`reorder: "float32"`, the default;
    one built with `reorder: "int8"` keeps only ScaNN's int8 copy)."""
    return kind == "exact" or (kind == "scann" and (params or {}).get("reorder") == FLOAT32_REORDER)


def is_tune_scratch(entry, name):
    """Whether `entry`, a name beside the search index directory `name`, is the scratch of a `tune --build` of it:
    `.tune-NAME-` and the 8 characters `tempfile.mkdtemp` adds (`[a-z0-9_]`, never `-`), so that the scratch of a
    sibling index `NAME-OTHER` (`.tune-NAME-OTHER-*`) is not.

    Example:
    >>> is_tune_scratch(".tune-foo-ab_c1234", "foo"), is_tune_scratch(".tune-foo-bar-x9y8z7w6", "foo")
    (True, False)
    """
    suffix = entry.removeprefix(f"{TUNE_SCRATCH_PREFIX}{name}-")
    return suffix != entry and len(suffix) == 8 and all(c in "abcdefghijklmnopqrstuvwxyz0123456789_" for c in suffix)


def search_settings(kind, params):
    """The names of the search-time parameters of an index of `kind` with `params` (what `tune` sets):
    ScaNN's leaves searched, reordering pool and (with float32 vectors) float32 rescoring pool, a quantized
    exact index's rescored candidates, else none."""
    if kind == "scann":
        return ("num_leaves_to_search", "reorder_factor") + (("rescore_factor",) if has_float32(kind, params) else ())
    return ("rescore",) if params else ()


def check_search_value(name, value):
    """`value` of the search setting `name` as an int: a positive int, or for ScaNN's `rescore_factor` 0 too (no
    float32 rescoring: ScaNN's int8 order is the answer); a `UserError` naming it otherwise. The one rule of
    builds, `set_search_params`, `tuned.json` and the `--search-param` flags.

    Example:
    >>> check_search_value("rescore_factor", 0), check_search_value("reorder_factor", 20)
    (0, 20)
    """
    least = 0 if name == "rescore_factor" else 1
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        what = "an int >= 0 (0: no float32 rescoring)" if least == 0 else "a positive int"
        raise UserError(f"{name} must be {what}, got {value!r}.")
    return int(value)


def write_tuned(directory, record):
    """Writes `record` (the setting `gtr-keras tune` chose, and what it measured) as the index's `tuned.json`,
    by one rename: a search that loads the index meanwhile reads the old setting or the new."""
    files.replace_file(os.path.join(directory, TUNED_JSON), json.dumps(record, indent=2).encode("utf-8"))


def read_tuned(directory):
    """The `tuned.json` record of the index in `directory` (which holds its `index.json` or manifest), or None.

    Raises:
        DataError: a malformed file, or one without a `setting` of values `check_search_value` takes.
    """
    path = os.path.join(directory, TUNED_JSON)
    if not files.isfile(path):
        return None
    record = read_json_object(path, "run `gtr-keras tune` again")
    setting = record.get("setting")
    if not isinstance(setting, dict):
        raise DataError(f"{path}: field 'setting' must map parameter names to ints; run `gtr-keras tune` again")
    for name, value in setting.items():
        try:
            check_search_value(name, value)
        except UserError as e:
            raise DataError(f"{path}: field 'setting': {e} Run `gtr-keras tune` again.") from e
    return record


def read_id_file(path):
    """The ids of a file of one id a line (blank lines skipped), and `where(i)`, which names id `i`'s line.

    An id names a document already stored (`text_files.check_id_text(reference=True)`): it may hold
    whitespace other than line breaks, so that a document an older version stored with such an id can be
    deleted.

    Raises:
        DataError: an unreadable file, or an id that is not valid Unicode (a lone surrogate), holds a NUL
            or is there twice, named with its file and line.

    Example:
    >>> ids, where = read_id_file("withdrawn.txt")  # doctest: +SKIP
    >>> where(0)  # doctest: +SKIP
    'withdrawn.txt:1'
    """
    ids, lines = [], []
    for line_no, line in iter_lines(path):
        value = line.rstrip("\r\n")
        if value.strip():
            ids.append(check_id_text(f"{path}:{line_no}", value, "id", reference=True))
            lines.append(line_no)

    def where(i):
        return f"{path}:{lines[i]}"

    return check_ids(ids, where, DataError), where


def read_push_ledger(path):
    """The push ledger at `path` (`engines.push`: `{"format", "target", "records": {id: digest}}`), or None
    where there is none.

    Raises:
        DataError: an unreadable ledger, naming it.
    """
    if not files.isfile(path):
        return None
    try:
        ledger = json.loads(gzip.decompress(files.read_bytes(path)).decode("utf-8"))
    except (OSError, EOFError, ValueError) as error:
        raise DataError(f"{path}: not a push ledger ({error}); remove it, and push again") from None
    records = ledger.get("records") if isinstance(ledger, dict) else None
    if (
        records is None
        or ledger.get("format") != PUSH_LEDGER_FORMAT
        or not isinstance(ledger.get("target"), str)
        or not isinstance(records, dict)
        or not all(isinstance(value, str) for value in records.values())
    ):
        raise DataError(f"{path}: not a push ledger of format {PUSH_LEDGER_FORMAT}; remove it, and push again")
    return ledger
