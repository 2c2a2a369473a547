"""`VertexEngine`: Vertex AI Vector Search batch-update folders under `vertex-ai:DIR` (a local folder or `gs://`),
and `find_neighbors_request`, the body of a `findNeighbors` call with gtr-keras' filters as Vertex restricts.

Each push is one batch folder `DIR/<8-digit sequence>-<UTC time>/`, names sorting in push order, written when the
engine is flushed (`flush`, before the push records its ledger; `close` discards what was not flushed):
`upserts-00000.json`, ... (JSON lines in Vertex's input format: `id`, `embedding`, `restricts`, `numeric_restricts`,
`embedding_metadata`) and `delete/ids.txt` (one id a line). A folder never holds both an upsert
and a delete of one id (the later call wins); a push that changes nothing writes no folder. The collection's
record (`CollectionInfo` and its name) is `DIR/gtr-keras-collection.json`.

A record's metadata becomes restricts: a string field a token restrict `{namespace: FIELD, allow: [VALUE]}`, a
list one with its elements, a boolean one `"true"` / `"false"`, a number a numeric restrict with `value_double`
(its float64, exactly); each field present also gets the token `"1"` in namespace `gtr_keras.has.FIELD` (a
datapoint lacking a namespace does not match an allow-list there, but matches a deny-list: `!=` needs presence),
and the id the token ID in `gtr_keras.id` (the ids allow-list). Fields named `gtr_keras.*` are refused.

Vertex ANDs restricts across namespaces and ORs the tokens of one allow-list; it does not document two restricts
on one namespace in a query, nor an OR of numeric restricts: a filter with two clauses on one field, a number
`in` of several values and an empty ids allow-list are refused (`UserError`), never approximated.
"""

import contextlib
import dataclasses
import json
import math
import os
import re
import time
from collections.abc import Sequence

import numpy as np

from gtr_keras.engines.engine import CollectionInfo, Engine, Record
from gtr_keras.engines.metadata_terms import filterable, terms
from gtr_keras.errors import DataError, UserError
from gtr_keras.filters.expressions import Filter
from gtr_keras.utils import files
from gtr_keras.utils.locks import output_lock

RECORD = "gtr-keras-collection.json"
RECREATE_VERTEX = "push with --recreate to start a new Vertex AI index"
RESERVED = "gtr_keras."
HAS = "gtr_keras.has."
ID_NAMESPACE = "gtr_keras.id"
LINES_A_FILE = 50_000
BATCH = re.compile(r"(?P<sequence>[0-9]{8})-[0-9]{8}T[0-9]{6}Z\Z")
_OPS = {
    "<": "LESS",
    "<=": "LESS_EQUAL",
    "=": "EQUAL",
    "in": "EQUAL",
    ">=": "GREATER_EQUAL",
    ">": "GREATER",
    "!=": "NOT_EQUAL",
}


def _token(value):
    return ("true" if value else "false") if isinstance(value, bool) else value


def datapoint(record: Record) -> dict:
    """`record` as one JSON line of a Vertex batch-update file (the input format Vertex documents).

    Example:
    >>> line = datapoint(Record("d1", np.array([0.5, 0.25], np.float32), "T", "", {"lang": "en", "year": 2019}))
    >>> line["restricts"][0], line["numeric_restricts"]
    ({'namespace': 'lang', 'allow': ['en']}, [{'namespace': 'year', 'value_double': 2019.0}])
    """
    restricts, numeric = [], []
    for field, value in filterable(record.metadata).items():
        if isinstance(value, float):
            numeric.append({"namespace": field, "value_double": value})
        elif value != []:
            restricts.append({"namespace": field, "allow": list(value) if isinstance(value, list) else [_token(value)]})
        restricts.append({"namespace": HAS + field, "allow": ["1"]})
    restricts.append({"namespace": ID_NAMESPACE, "allow": [record.id]})
    line = {"id": record.id, "embedding": np.asarray(record.vector, np.float64).tolist(), "restricts": restricts}
    if numeric:
        line["numeric_restricts"] = numeric
    line["embedding_metadata"] = {"title": record.title, "text": record.text, "metadata": record.metadata or {}}
    return line


def _query_restricts(filter, metadata_types):
    restricts, numeric, fields = [], [], set()
    for term in terms(filter, metadata_types):
        clause = term.clause
        if clause.field in fields:
            raise UserError(
                f"filter {clause.text!r}: a second clause on {clause.field!r}: Vertex AI does not document how two "
                "restricts on one namespace combine"
            )
        fields.add(clause.field)
        presence = {"namespace": HAS + clause.field, "allow_list": ["1"]}
        if term.kind == "number":
            if len(term.values) > 1:
                raise UserError(f"filter {clause.text!r}: Vertex AI's numeric restricts cannot express an `in` (no OR)")
            if not math.isfinite(term.values[0]):
                raise UserError(f"filter {clause.text!r}: Vertex AI cannot express a number past float64's range")
            numeric.append({"namespace": clause.field, "value_double": term.values[0], "op": _OPS[clause.op]})
            restricts.append(presence)
            continue
        tokens = [_token(value) for value in term.values]
        if clause.op == "!=":
            restricts += [{"namespace": clause.field, "deny_list": tokens}, presence]
        else:
            restricts.append({"namespace": clause.field, "allow_list": tokens})
    if filter is not None and filter.ids is not None:
        if not filter.ids:
            raise UserError("filter: an empty ids allow-list: Vertex AI reads an empty allow-list as no restriction")
        restricts.append({"namespace": ID_NAMESPACE, "allow_list": list(filter.ids)})
    return restricts, numeric


def find_neighbors_request(
    vectors: np.ndarray,
    k: int,
    filter: Filter | None,
    metadata_types: dict[str, str],
    deployed_index_id: str,
) -> dict:
    """The JSON body of a Vertex AI `findNeighbors` call (`POST https://ENDPOINT/v1/projects/P/locations/L/
    indexEndpoints/E:findNeighbors`) for the `k` nearest datapoints to each row of `vectors` that `filter`
    allows, with gtr-keras' filter semantics exactly (the module's docstring says how).

    Args:
        vectors: float32 `[Q, D]` query vectors (the model's query encoder's).
        k: neighbors a query (`neighbor_count`).
        filter: a `Filter`, or None.
        metadata_types: the collection's `{field: type}` (`VertexEngine.info().metadata_types`).
        deployed_index_id: the deployed index's id on the endpoint.

    Raises:
        UserError: a clause on an unknown field or of the wrong type, or one Vertex AI cannot express exactly,
            naming it.

    Example:
    >>> body = find_neighbors_request(queries, 10, Filter("year >= 2000"), {"year": "number"}, "gtr_docs")
    >>> body["queries"][0]["datapoint"]["numeric_restricts"]
    [{'namespace': 'year', 'value_double': 2000.0, 'op': 'GREATER_EQUAL'}]
    """
    restricts, numeric = _query_restricts(filter, metadata_types)
    vectors = np.asarray(vectors, np.float32)
    if vectors.ndim != 2 or not np.isfinite(vectors).all():
        raise UserError(f"find_neighbors_request: expected finite [Q, D] query vectors, got shape {vectors.shape}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise UserError(f"find_neighbors_request: k must be a positive integer, got {k!r}")
    queries = []
    for row, vector in enumerate(vectors):
        point = {"datapoint_id": f"query-{row}", "feature_vector": vector.astype(np.float64).tolist()}
        if restricts:
            point["restricts"] = restricts
        if numeric:
            point["numeric_restricts"] = numeric
        queries.append({"datapoint": point, "neighbor_count": k})
    return {"deployed_index_id": deployed_index_id, "queries": queries}


class VertexEngine(Engine):
    """Batch-update folders of one Vertex AI Vector Search index under a local folder or `gs://` prefix.

    Upserts and deletions are staged locally and written as one batch folder by `flush()` (nothing for none;
    `close()` discards what was not flushed);
    `ids()` replays the folders in order. Vertex is searched through its index endpoint:
    `find_neighbors_request` builds the body, `search` is refused.

    Args:
        target: `vertex-ai:DIR`.
        collection: the name recorded with the folders (one Vertex index a DIR).
        timeout: unused (file writes wait as long as the file system does).

    Example:
    >>> engine = VertexEngine(parse_target("vertex-ai:gs://bucket/gtr-docs"), "docs")
    >>> engine.create(CollectionInfo(768, "gtr-t5-base@1a2b", {"lang": "string"}))
    >>> engine.upsert(records)
    >>> engine.delete(["d5"])
    >>> engine.flush()  # writes gs://bucket/gtr-docs/00000001-20260101T120000Z/
    >>> engine.close()
    """

    def __init__(self, target, collection, timeout=10.0):
        super().__init__(target, collection, timeout)
        if not isinstance(collection, str) or not collection or "\n" in collection:
            raise UserError(f"collection {collection!r}: expected a name of one line")
        self.directory = target.location.rstrip("/") or target.location
        self._stack, self._staging, self._dimensions = contextlib.ExitStack(), None, None

    def _record(self):
        path = f"{self.directory}/{RECORD}"
        if not files.isfile(path):
            return None
        with files.open(path, "rb") as f:
            try:
                record = json.loads(f.read().decode("utf-8"))
                return record["collection"], CollectionInfo(
                    int(record["dimensions"]),
                    str(record["model"]),
                    dict(record["metadata_types"]),
                    str(record.get("marker", "")),
                )
            except (ValueError, KeyError, TypeError) as error:
                raise DataError(f"{path}: not a gtr-keras collection record ({error})") from None

    def info(self):
        record = self._record()
        if record is None:
            return None
        if record[0] != self.collection:
            raise UserError(
                f"{self.target.text} holds collection {record[0]!r}, not {self.collection!r} (one Vertex AI index a "
                "folder): push to another folder, or with --recreate"
            )
        return record[1]

    def create(self, info, recreate=False, remedy=RECREATE_VERTEX, widen=True):
        if not recreate and self._record() is not None:
            existing = self.info()
            info = self.updated(existing, info, remedy, widen)
            if info == existing:
                return
        elif recreate:
            for name in self._batches():
                files.remove(f"{self.directory}/{name}")
        payload = {"collection": self.collection, **dataclasses.asdict(info)}
        with files.atomic_file(f"{self.directory}/{RECORD}") as f:
            f.write(json.dumps(payload, indent=1, sort_keys=True).encode("utf-8"))

    def _batches(self):
        if not files.isdir(self.directory):
            return []
        return sorted(name for name in files.listdir(self.directory) if BATCH.match(name))

    def _stage(self):
        if self._staging is None:
            info = self.info()
            if info is None:
                raise UserError(f"{self.target.text} has no collection {self.collection!r} (push to it first)")
            self._dimensions = info.dimensions
            self._staging = self._stack.enter_context(files.temporary_directory("gtr-keras-vertex-"))
        return self._staging

    def check_record(self, record, dimensions):
        """The shared checks (`Engine.check_record`), and no metadata field named `gtr_keras.*` (reserved)."""
        super().check_record(record, dimensions)
        reserved = next((field for field in record.metadata or {} if field.startswith(RESERVED)), None)
        if reserved is not None:
            raise UserError(f"record {record.id!r}: field {reserved!r}: Vertex AI restricts reserve {RESERVED}*")

    def upsert(self, records: Sequence[Record]):
        staging = self._stage()
        lines = []
        for record in records:
            self.check_record(record, self._dimensions)
            try:
                lines.append(json.dumps(datapoint(record), allow_nan=False))
            except (TypeError, ValueError) as error:
                raise UserError(f"record {record.id!r}: its metadata is not JSON ({error})") from None
        with open(os.path.join(staging, "operations.txt"), "a", encoding="utf-8") as f:
            f.writelines(f"u{line}\n" for line in lines)

    def delete(self, ids: Sequence[str]):
        ids = list(ids)
        if ids:
            with open(os.path.join(self._stage(), "operations.txt"), "a", encoding="utf-8") as f:
                f.writelines(f"d{json.dumps(i)}\n" for i in ids)

    def search(self, vectors, k, filter, metadata_types):
        raise UserError(
            f"{self.target.text}: Vertex AI Vector Search is searched through its index endpoint "
            "(find_neighbors_request builds the findNeighbors body), not from the batch folders"
        )

    def ids(self):
        live = {}
        for name in self._batches():
            upserts, deletes = _batch_files(f"{self.directory}/{name}")
            for path in upserts:
                live.update((json.loads(line)["id"], True) for line in _lines(path))
            for path in deletes:
                for line in _lines(path):
                    live.pop(line, None)
        return list(live)

    def flush(self):
        """Writes the staged upserts and deletions as the next batch folder (none when nothing is staged), holding
        `DIR`'s `output_lock` so that two pushes never take one sequence number (on `gs://` the lock is the
        object lock `locks` describes: two pushes starting within the same moment could both pass)."""
        with self._stack:
            if self._staging is not None and os.path.exists(os.path.join(self._staging, "operations.txt")):
                with output_lock(self.directory):
                    self._commit(os.path.join(self._staging, "operations.txt"))
            self._staging = None

    def close(self):
        """Discards whatever was staged and not flushed (a push that failed writes no folder)."""
        self._stack.close()
        self._staging = None

    def _commit(self, operations):
        last = {}
        with open(operations, encoding="utf-8") as f:
            for number, line in enumerate(f):
                operand = json.loads(line[1:])
                last[operand["id"] if line[0] == "u" else operand] = number
        kept, upserts, deletes = set(last.values()), [], []
        with open(operations, encoding="utf-8") as f:
            for number, line in enumerate(f):
                if number in kept:
                    (upserts if line[0] == "u" else deletes).append(line[1:])
        batches = self._batches()
        sequence = int(BATCH.match(batches[-1]).group("sequence")) + 1 if batches else 1
        folder = f"{self.directory}/{sequence:08d}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        for start in range(0, len(upserts), LINES_A_FILE):
            with files.atomic_file(f"{folder}/upserts-{start // LINES_A_FILE:05d}.json") as f:
                f.write("".join(upserts[start : start + LINES_A_FILE]).encode("utf-8"))
        if deletes:
            with files.atomic_file(f"{folder}/delete/ids.txt") as f:
                f.write("".join(f"{json.loads(line)}\n" for line in deletes).encode("utf-8"))


def _batch_files(folder):
    """The upsert files of batch `folder`, and its delete files."""
    names = files.listdir(folder)
    upserts = [f"{folder}/{name}" for name in names if name.endswith(".json")]
    deletes = [f"{folder}/delete/{name}" for name in files.listdir(f"{folder}/delete")] if "delete" in names else []
    return upserts, deletes


def _lines(path):
    with files.open(path, "rb") as f:
        return [line for line in f.read().decode("utf-8").split("\n") if line]
