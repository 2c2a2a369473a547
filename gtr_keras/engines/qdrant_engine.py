"""`QdrantEngine`: a collection of Qdrant, in its embedded local mode (`qdrant:PATH`, a directory) or on a server
or cluster (`qdrant+http(s)://HOST:PORT`, its key from `QDRANT_API_KEY`), and `qdrant_filter`, a gtr-keras
`Filter` as Qdrant's own `models.Filter` with gtr-keras' semantics exactly.

A record is one point: the named dense vector `"dense"` (distance `Dot`: the inner product of unit vectors
gtr-keras scores with), the id `uuid5(GTR_NAMESPACE, doc_id)` (Qdrant's point ids are integers or UUIDs) and the
payload `{"id", "title", "text", "metadata", "fields"}`: `fields` lists the metadata fields the document has,
which Qdrant's conditions cannot tell from a missing one where the value is an empty list. The collection's
`CollectionInfo` is kept in its own `metadata`, under `"gtr_keras"`. The local mode searches by brute force;
a server is asked for exact search (`SearchParams(exact=True)`), so that its hits are exact search's.

Example:
>>> engine = QdrantEngine(parse_target("qdrant:/data/qdrant"), "papers")
>>> engine.search(query_vectors, k=10, filter=Filter("lang != en"), metadata_types={"lang": "string"})
"""

import dataclasses
import os
import re
import uuid
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from gtr_keras.beir.readers import metadata_type
from gtr_keras.engines.engine import RECREATE, CollectionInfo, Engine, Record
from gtr_keras.engines.metadata_terms import Term, terms
from gtr_keras.engines.targets import Target
from gtr_keras.errors import UserError
from gtr_keras.filters.expressions import Clause, Filter

GTR_NAMESPACE = uuid.UUID("5b0c7d8e-3f4a-5e21-9c6b-67a1d2e4f803")
VECTOR = "dense"
INFO_KEY = "gtr_keras"
API_KEY_VARIABLE = "QDRANT_API_KEY"
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+\Z")
_SCROLL = 1024
# Integers beyond 2**53 are kept as the float64 gtr-keras compares them as (Qdrant's local mode compares a
# payload integer with a range's bound exactly, the server as a float64).
_EXACT_INTEGERS = 2**53


def point_id(doc_id: str) -> str:
    """The Qdrant point id of the document `doc_id`: `uuid5(GTR_NAMESPACE, doc_id)`, as a string."""
    return str(uuid.uuid5(GTR_NAMESPACE, doc_id))


def _number(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _EXACT_INTEGERS:
        return float(value)
    return value


def payload(record: Record) -> dict[str, Any]:
    """The payload of `record`'s point: `id`, `title`, `text`, `metadata` (its values of a filter type: a null,
    an object or a list of other than strings is no value, as `MetadataColumns` has it) and `fields`."""
    metadata = {field: _number(value) for field, value in record.metadata.items() if metadata_type(value)}
    fields = sorted(metadata)
    return {"id": record.id, "title": record.title, "text": record.text, "metadata": metadata, "fields": fields}


def _key(clause: Clause) -> str:
    """The key path of the clause's field: `metadata.FIELD`, quoted where FIELD is not a plain key."""
    if _PLAIN_KEY.match(clause.field):
        return f"metadata.{clause.field}"
    if '"' in clause.field or "\\" in clause.field:
        raise UserError(
            f"filter {clause.text!r}: Qdrant's key paths cannot address the field {clause.field!r} (a quote or "
            "backslash in its name)"
        )
    return f'metadata."{clause.field}"'


def _equal(key: str, kind: str, value: Any) -> Any:
    """The condition `key = value` on a field of `kind` (a number as a float64 range, which matches integer and
    float payloads alike, as gtr-keras compares them)."""
    if kind == "number":
        return models.FieldCondition(key=key, range=models.Range(gte=value, lte=value))
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _condition(term: Term) -> Any:
    clause, kind, values = cast(Clause, term.clause), term.kind, term.values
    key = _key(clause)
    if clause.op in ("<", "<=", ">", ">="):
        bound = {"<": "lt", "<=": "lte", ">": "gt", ">=": "gte"}[clause.op]
        return models.FieldCondition(key=key, range=models.Range(**{bound: values[0]}))
    matches: models.FieldCondition | models.Filter
    if kind in ("string", "list") and clause.op != "=":
        matches = models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))
    elif len(values) == 1:
        matches = _equal(key, kind, values[0])
    else:
        matches = models.Filter(should=[_equal(key, kind, value) for value in values])
    if clause.op != "!=":
        return matches
    present = models.FieldCondition(key="fields", match=models.MatchValue(value=clause.field))
    return models.Filter(must=[present], must_not=[matches])


def qdrant_filter(filter: Filter | None, metadata_types: dict[str, str]) -> models.Filter | None:
    """`filter` as Qdrant's `models.Filter` (None for None): its clauses and its allow-list of ids ANDed.

    A document without the field matches no clause on it, `!=` included (its `fields` must name it); a list
    matches `=` and `in` when an element does, `!=` when none does; numbers compare as float64 ranges; a string
    field compares with the value as written.

    Raises:
        UserError: an unknown field or a value of the wrong type (as `MetadataColumns.check` says), or a field
            whose name Qdrant's key paths cannot address.
    """
    if filter is None:
        return None
    must = [_condition(term) for term in terms(filter, metadata_types)]
    if filter.ids is not None:
        must.append(models.HasIdCondition(has_id=[point_id(doc_id) for doc_id in filter.ids]))
    return models.Filter(must=must)


class QdrantEngine(Engine):
    """A Qdrant collection (`Engine`): embedded (`qdrant:PATH`) or on a server (`qdrant+http://HOST:PORT`).

    Args:
        target: a parsed `qdrant` target.
        collection: the collection's name.
        timeout: seconds a request to a server may take (an unreachable one is a `UserError` after it).

    Raises:
        UserError: a missing `qdrant-client`, a local directory another process holds, an unreachable server.

    Example:
    >>> with_engine = QdrantEngine(parse_target("qdrant+http://localhost:6333"), "papers", timeout=5)
    >>> with_engine.info().dimensions
    768
    """

    def __init__(self, target: Target, collection: str, timeout: float = 10.0):
        super().__init__(target, collection, timeout)
        if collection in (".", "..") or any(character in collection for character in "/\\\0"):
            raise UserError(f"{target.text}: {collection!r} cannot name a Qdrant collection (a path, or a NUL in it)")
        if target.remote:
            self._client = QdrantClient(
                url=target.location,
                api_key=os.environ.get(API_KEY_VARIABLE) or None,
                timeout=max(1, int(np.ceil(timeout))),
                check_compatibility=False,
            )
        else:
            try:
                self._client = QdrantClient(path=target.location, force_disable_check_same_thread=True)
            except (RuntimeError, ValueError, OSError) as error:
                raise UserError(f"{target.text}: cannot open Qdrant's local directory: {error}") from None
        self._exists = self._call(lambda: self._client.collection_exists(collection))

    def _call(self, request: Any) -> Any:
        """`request()`, a failure to reach a server (or one it answers with an error) as a `UserError`."""
        try:
            return request()
        except UnexpectedResponse as error:
            reason = " ".join(str(error).split())
            raise UserError(
                f"{self.target.text}: Qdrant refused the request on {self.collection!r}: {reason}"
            ) from None
        except (ResponseHandlingException, ConnectionError, TimeoutError) as error:
            reason = " ".join(str(error).split()) or type(error).__name__
            raise UserError(f"{self.target.text}: Qdrant did not answer within {self.timeout:g} s: {reason}") from None

    def info(self) -> CollectionInfo | None:
        if not self._exists:
            return None
        metadata = self._call(lambda: self._client.get_collection(self.collection)).config.metadata or {}
        recorded = metadata.get(INFO_KEY)
        if not isinstance(recorded, dict):
            raise UserError(
                f"{self.target.text}: collection {self.collection!r} was not written by gtr-keras push (its metadata "
                f"holds no {INFO_KEY!r} record); push with --recreate to replace it, or name another collection"
            )
        return CollectionInfo(
            int(recorded["dimensions"]),
            str(recorded["model"]),
            dict(recorded["metadata_types"]),
            str(recorded.get("marker", "")),
        )

    def create(self, info: CollectionInfo, recreate: bool = False, remedy: str = RECREATE, widen: bool = True) -> None:
        existing = None if recreate else self.info()
        if existing is not None:
            updated = self.updated(existing, info, remedy, widen)
            if updated != existing:
                self._call(lambda: self._client.update_collection(self.collection, metadata=self._record(updated)))
            return
        if self._exists:
            self._call(lambda: self._client.delete_collection(self.collection))
        vectors = {VECTOR: models.VectorParams(size=info.dimensions, distance=models.Distance.DOT)}
        record = self._record(info)
        self._call(lambda: self._client.create_collection(self.collection, vectors_config=vectors, metadata=record))
        self._exists = True

    @staticmethod
    def _record(info: CollectionInfo) -> dict[str, Any]:
        return {INFO_KEY: dataclasses.asdict(info)}

    def upsert(self, records: Sequence[Record]) -> None:
        points = [
            models.PointStruct(
                id=point_id(record.id),
                vector={VECTOR: np.asarray(record.vector, np.float32).tolist()},
                payload=payload(record),
            )
            for record in records
        ]
        if points:
            self._call(lambda: self._client.upsert(self.collection, points=points, wait=True))

    def delete(self, ids: Sequence[str]) -> None:
        if ids:
            selector = models.PointIdsList(points=[point_id(doc_id) for doc_id in ids])
            self._call(lambda: self._client.delete(self.collection, points_selector=selector, wait=True))

    def search(
        self, vectors: np.ndarray, k: int, filter: Filter | None, metadata_types: dict[str, str]
    ) -> list[list[tuple[str, float]]]:
        condition = qdrant_filter(filter, metadata_types)
        params = models.SearchParams(exact=True) if self.target.remote else None
        requests = [
            models.QueryRequest(
                query=np.asarray(vector, np.float32).tolist(),
                using=VECTOR,
                filter=condition,
                params=params,
                limit=k,
                with_payload=["id"],
            )
            for vector in vectors
        ]
        if not requests or not self._exists or (filter is not None and filter.ids == []):
            return [[] for _ in requests]  # an empty allow-list allows nothing
        answers = self._call(lambda: self._client.query_batch_points(self.collection, requests=requests))
        return [[(point.payload["id"], float(point.score)) for point in answer.points] for answer in answers]

    def documents(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        if not ids or not self._exists:
            return {}
        points = self._call(lambda: self._client.retrieve(self.collection, ids=[point_id(i) for i in ids]))
        fields = ("id", "title", "text", "metadata")
        return {point.payload["id"]: {field: point.payload.get(field) for field in fields} for point in points}

    def ids(self) -> list[str]:
        if not self._exists:
            return []
        found: list[str] = []
        offset = None
        while True:
            points, offset = self._call(
                lambda: self._client.scroll(self.collection, limit=_SCROLL, offset=offset, with_payload=["id"])
            )
            found += [point.payload["id"] for point in points]
            if offset is None:
                return found

    def close(self) -> None:
        self._client.close()
