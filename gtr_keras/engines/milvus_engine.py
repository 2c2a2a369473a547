"""`MilvusEngine`: a collection of Milvus Lite (`milvus:PATH.db`) or of a Milvus server or cluster
(`milvus+http://HOST:PORT`, its token from `MILVUS_TOKEN`), with gtr-keras filters as Milvus boolean expressions.

A collection has the fields `id` (VARCHAR primary key), `embedding` (FLOAT_VECTOR, Beam's default name), `title`,
`text` and `metadata` (JSON: the record's filterable values, `metadata_terms.filterable`, numbers as float64s),
an exact (FLAT) inner-product index, strong consistency (a search sees every write before it), and its
`CollectionInfo` as JSON in the collection property `gtr_keras`.

A clause becomes (docs/past-one-machine.md has the table):

| gtr-keras | Milvus |
|---|---|
| `lang = en` | `metadata["lang"] == "en"` |
| `lang != en` | `(exists metadata["lang"] and metadata["lang"] != "en")` |
| `lang in (en, de)` | `(metadata["lang"] == "en" or metadata["lang"] == "de")` |
| `year >= 2000` | `metadata["year"] >= 2000.0` |
| `tags in (a, b)` | `json_contains_any(metadata["tags"], ["a", "b"])` |
| `tags != a` | `(exists metadata["tags"] and not json_contains_any(metadata["tags"], ["a"]))` |
| ids allow-list | `id in ["d1", "d7"]` |

Milvus matches `!=` and `not json_contains_any` on a document lacking the field (or a list under `!=` on any
other element), hence the `exists`. String literals escape only `\\`, `"`, and line feed, carriage return and
tab (Milvus knows no other escape and takes every other character as written), which keeps every string exact.
A number past float64's range (`year < 1e400`) is refused.
"""

import dataclasses
import json
import math
import os
import re
from collections.abc import Sequence

import numpy as np

from gtr_keras.engines.engine import RECREATE, CollectionInfo, Engine, Record
from gtr_keras.engines.metadata_terms import filterable, terms
from gtr_keras.errors import UserError
from gtr_keras.filters.expressions import Filter
from gtr_keras.utils import files

PROPERTY = "gtr_keras"
MAX_TEXT_BYTES = 1_048_576
MAX_K = 16_384
_BATCH_BYTES = 16 << 20
_QUERY_IDS = 10_000
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}\Z")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ORDER = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "=": "==", "!=": "!="}


def _literal(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return '"' + "".join(_ESCAPES.get(c, c) for c in value) + '"'


def _or(parts):
    return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"


def expression(filter: Filter | None, metadata_types: dict[str, str]) -> str:
    """`filter` as a Milvus boolean expression over the collection's `metadata` JSON and `id` ("" for none).

    Raises:
        UserError: a clause on an unknown field or of the wrong type (as a local index says), or one Milvus
            cannot express exactly (a number past float64's range), naming the clause and Milvus.

    Example:
    >>> expression(Filter(["lang != en", "year >= 2000"]), {"lang": "string", "year": "number"})
    '(exists metadata["lang"] and metadata["lang"] != "en") and metadata["year"] >= 2000.0'
    """
    parts = []
    for term in terms(filter, metadata_types):
        clause, field = term.clause, f"metadata[{_literal(term.clause.field)}]"
        if term.kind == "number" and not all(math.isfinite(v) for v in term.values):
            raise UserError(f"filter {clause.text!r}: Milvus cannot express a number past float64's range exactly")
        values = [_literal(value) for value in term.values]
        if term.kind == "list":
            contains = f"json_contains_any({field}, [{', '.join(values)}])"
            parts.append(f"(exists {field} and not {contains})" if clause.op == "!=" else contains)
        elif clause.op == "!=":
            parts.append(f"(exists {field} and {field} != {values[0]})")
        elif clause.op == "in":
            parts.append(_or([f"{field} == {value}" for value in values]))
        else:
            parts.append(f"{field} {_ORDER[clause.op]} {values[0]}")
    if filter is not None and filter.ids is not None:
        parts.append(f"id in [{', '.join(_literal(i) for i in filter.ids)}]")
    return " and ".join(parts)


class MilvusEngine(Engine):
    """One collection of Milvus Lite or of a Milvus server.

    Args:
        target: `milvus:PATH.db` (Milvus Lite, a local file; its folder is created) or `milvus+http(s)://HOST:PORT`
            (the token from the `MILVUS_TOKEN` environment variable).
        collection: the collection's name (ASCII letters, digits and `_`, not starting with a digit).
        timeout: seconds a request waits for the server (an unreachable host is a `UserError` after it).

    Example:
    >>> engine = MilvusEngine(parse_target("milvus:/tmp/m.db"), "docs")
    >>> engine.create(CollectionInfo(768, "gtr-t5-base@1a2b", {"lang": "string"}))
    >>> engine.upsert(records)
    >>> engine.search(queries, 10, Filter("lang = en"), {"lang": "string"})
    """

    max_k = MAX_K

    def __init__(self, target, collection, timeout=10.0):
        super().__init__(target, collection, timeout)
        if not isinstance(collection, str) or not _NAME.match(collection):
            raise UserError(
                f"collection {collection!r}: Milvus names are ASCII letters, digits and _ (not starting with a digit)"
            )
        if not target.remote and "://" in target.location:
            raise UserError(f"target {target.text!r}: Milvus Lite writes a local file (milvus:PATH.db)")
        from pymilvus import MilvusClient

        if target.remote:
            uri, token = target.location, os.environ.get("MILVUS_TOKEN", "")
        else:
            uri, token = os.path.abspath(target.location), ""
            files.makedirs(os.path.dirname(uri))
        try:
            self._client = MilvusClient(uri=uri, token=token, timeout=timeout)
        except Exception as error:  # pymilvus' own errors and the gRPC channel's
            problem = (
                "cannot reach Milvus" if target.remote else "cannot open Milvus Lite's file (one process at a time)"
            )
            raise UserError(f"target {target.text!r}: {problem} ({_first_line(error)})") from None
        self._loaded = False

    def _call(self, what, function, *args, **kwargs):
        from pymilvus.exceptions import MilvusException

        try:
            return function(*args, timeout=self.timeout, **kwargs)
        except MilvusException as error:
            raise UserError(
                f"Milvus {self.target.text} collection {self.collection!r}: {what}: {_first_line(error)}"
            ) from None

    def _exists(self):
        return self._call("has_collection", self._client.has_collection, self.collection)

    def _load(self):
        if not self._loaded:
            self._call("load", self._client.load_collection, self.collection)
            self._loaded = True

    def info(self):
        if not self._exists():
            return None
        described = self._call("describe", self._client.describe_collection, self.collection)
        recorded = (described.get("properties") or {}).get(PROPERTY)
        if recorded is None:
            raise UserError(
                f"Milvus {self.target.text} collection {self.collection!r} was not written by gtr-keras "
                f"(no {PROPERTY!r} property): push to another collection"
            )
        return CollectionInfo(**json.loads(recorded))

    def create(self, info, recreate=False, remedy=RECREATE, widen=True):
        existing = None if recreate else self.info()
        if existing is not None:
            updated = self.updated(existing, info, remedy, widen)
            if updated != existing:
                self._call("alter", self._client.alter_collection_properties, self.collection, _properties(updated))
            return
        if self._exists():
            self._call("drop", self._client.drop_collection, self.collection)
            self._loaded = False
        from pymilvus import DataType, MilvusClient

        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=65535)
        schema.add_field("embedding", DataType.FLOAT_VECTOR, dim=info.dimensions)
        schema.add_field("title", DataType.VARCHAR, max_length=MAX_TEXT_BYTES)
        schema.add_field("text", DataType.VARCHAR, max_length=MAX_TEXT_BYTES)
        schema.add_field("metadata", DataType.JSON)
        index = self._client.prepare_index_params()
        index.add_index(field_name="embedding", index_type="FLAT", metric_type="IP")
        self._call(
            "create",
            self._client.create_collection,
            self.collection,
            schema=schema,
            index_params=index,
            consistency_level="Strong",
            properties=_properties(info),
        )

    def _dimensions(self):
        info = self.info()
        if info is None:
            raise UserError(f"Milvus {self.target.text} has no collection {self.collection!r} (push to it first)")
        return info.dimensions

    def check_record(self, record, dimensions):
        """The shared checks (`Engine.check_record`), and a title and a text of at most Milvus' VARCHAR bytes."""
        super().check_record(record, dimensions)
        for name in ("title", "text"):
            if len(getattr(record, name).encode("utf-8")) > MAX_TEXT_BYTES:
                raise UserError(f"record {record.id!r}: its {name} is past Milvus' {MAX_TEXT_BYTES} bytes a VARCHAR")

    def upsert(self, records: Sequence[Record]):
        dimensions = self._dimensions()
        for record in records:
            self.check_record(record, dimensions)
        rows = [_row(record) for record in records]
        batch, size = [], 0
        for row in rows:
            batch.append(row)
            size += 4 * dimensions + len(row["title"]) + len(row["text"]) + len(json.dumps(row["metadata"]))
            if size >= _BATCH_BYTES:
                self._call("upsert", self._client.upsert, self.collection, batch)
                batch, size = [], 0
        if batch:
            self._call("upsert", self._client.upsert, self.collection, batch)

    def delete(self, ids: Sequence[str]):
        ids = list(ids)
        if ids and self._exists():
            for start in range(0, len(ids), _QUERY_IDS):
                self._call("delete", self._client.delete, self.collection, ids=ids[start : start + _QUERY_IDS])

    def search(self, vectors, k, filter, metadata_types):
        vectors = np.asarray(vectors, np.float32)
        where = expression(filter, metadata_types)
        if not 0 <= k <= self.max_k:
            raise UserError(f"k={k}: Milvus returns at most {self.max_k} hits a query")
        dimensions = self._dimensions()
        if vectors.ndim != 2 or vectors.shape[1] != dimensions:
            raise UserError(f"search: expected [Q, {dimensions}] query vectors, got shape {vectors.shape}")
        if k == 0 or len(vectors) == 0:
            return [[] for _ in vectors]
        self._load()
        found = self._call(
            "search",
            self._client.search,
            self.collection,
            data=vectors.tolist(),
            limit=k,
            filter=where,
            anns_field="embedding",
            search_params={"metric_type": "IP"},
            output_fields=["id"],
            consistency_level="Strong",
        )
        return [[(hit["id"], float(hit["distance"])) for hit in hits] for hits in found]

    def documents(self, ids):
        ids = list(dict.fromkeys(ids))
        if not ids or not self._exists():
            return {}
        self._load()
        fields = ["id", "title", "text", "metadata"]
        found = {}
        for start in range(0, len(ids), _QUERY_IDS):
            rows = self._call(
                "query",
                self._client.query,
                self.collection,
                filter=f"id in [{', '.join(_literal(i) for i in ids[start : start + _QUERY_IDS])}]",
                output_fields=fields,
                consistency_level="Strong",
            )
            found.update({row["id"]: {field: row[field] for field in fields} for row in rows})
        return found

    def ids(self):
        if not self._exists():
            return []
        self._load()
        iterator = self._call(
            "query", self._client.query_iterator, self.collection, batch_size=4096, output_fields=["id"]
        )
        found = []
        while batch := iterator.next():
            found += [row["id"] for row in batch]
        iterator.close()
        return found

    def close(self):
        self._client.close()


def _properties(info):
    return {PROPERTY: json.dumps(dataclasses.asdict(info))}


def _first_line(error):
    message = getattr(error, "message", None) or str(error)
    return message.strip().splitlines()[0] if message.strip() else type(error).__name__


def _row(record):
    return {
        "id": record.id,
        "embedding": np.asarray(record.vector).tolist(),
        "title": record.title,
        "text": record.text,
        "metadata": filterable(record.metadata),
    }
