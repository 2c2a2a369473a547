"""`push`: an index directory's live documents sent to an engine's collection, and only what changed since the
last push to that collection after an update.

Each live row becomes a `Record` (its id, its float32 vector as the index holds it, title, text, metadata). The
index keeps a ledger per target and collection (`pushed-HASH.json.gz`, beside `retriever.json`, recorded in its
`checksums.json`): each id pushed with a digest of its record. A push reads the index a segment at a time
(bounded memory: one segment's documents, `batch_size` vectors), diffs the digests against the ledger, deletes
the ids no longer live, upserts the rows added or changed, and writes the new ledger only once the engine
acknowledged them all and `Engine.flush` made them durable (Vertex AI's batch folder is written then, before the
ledger). A push killed anywhere leaves the ledger of the push before, so running it again sends that diff again
(upserts and deletions are idempotent by id) and converges. Where the collection exists but the index has no ledger
of it (a rebuilt index, another index's collection), the engine's own ids are the ledger.

Each push ends by recording a fresh token in the collection's `CollectionInfo.marker` and in its ledger; every
other writer (another index's push, `EngineIndex.add` / `delete` / `update`, `encode --to`) records another one or
clears it. A push whose ledger's marker is not the collection's trusts no ledger: it reconciles the collection whole
(upserts every live record, deletes every id the engine holds that is not live). The collection records the index's
own metadata types (not widened by a field no live document has any more).

Example:
>>> push("indexes/papers", "qdrant:/data/qdrant", "papers")
PushSummary(collection='papers', upserted=1000, deleted=0)
"""

import dataclasses
import gzip
import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np

from gtr_keras.beir.readers import metadata_type
from gtr_keras.engines.engine import RECREATE, CollectionInfo, Engine, Record
from gtr_keras.engines.registry import open_engine
from gtr_keras.engines.targets import Target, parse_target
from gtr_keras.errors import UserError
from gtr_keras.storage.layout import (
    INDEX_SUBDIR,
    NO_FLOAT32,
    PASSAGES_FIELD,
    PUSH_LEDGER_FORMAT,
    PUSH_LEDGER_PREFIX,
    read_model_record,
    read_push_ledger,
)
from gtr_keras.storage.search_index import SearchIndex
from gtr_keras.storage.segments import live_corpus
from gtr_keras.utils import files
from gtr_keras.utils.locks import output_lock


@dataclasses.dataclass(frozen=True)
class PushSummary:
    """What a push sent: the `collection`, the ids `upserted` (added or changed) and `deleted`, as counts."""

    collection: str
    upserted: int
    deleted: int

    def __str__(self) -> str:
        return f"pushed to {self.collection!r}: {self.upserted} upserted, {self.deleted} deleted"


def default_collection(index_path: str | os.PathLike[str]) -> str:
    """The collection a push writes by default: the index directory's name (`indexes/papers` -> `papers`)."""
    return files.parent_and_name(os.fspath(index_path).rstrip("/"))[1]


def _target_key(target: Target, collection: str) -> str:
    location = target.location
    if not target.remote and files.is_local(location):
        location = os.path.abspath(location.removeprefix("file://"))
    return json.dumps([target.engine, location, collection])


def ledger_path(index_path: str | os.PathLike[str], target: Target, collection: str) -> str:
    """The ledger of pushes of `index_path` to `target`'s `collection`: `pushed-HASH.json.gz` in the index
    directory, HASH of the engine, its location (a local one absolute) and the collection."""
    digest = hashlib.sha256(_target_key(target, collection).encode("utf-8")).hexdigest()[:16]
    return os.path.join(os.fspath(index_path), f"{PUSH_LEDGER_PREFIX}{digest}.json.gz")


def _write_ledger(path: str, key: str, records: dict[str, str], marker: str) -> None:
    ledger = {"format": PUSH_LEDGER_FORMAT, "target": key, "marker": marker, "records": records}
    files.replace_file(path, gzip.compress(json.dumps(ledger, ensure_ascii=False).encode("utf-8"), mtime=0))


def record_digest(record: Record) -> str:
    """The SHA-256 (hex, 32 digits) of everything `record` holds: what tells a changed document from a pushed one."""
    digest = hashlib.sha256(np.ascontiguousarray(record.vector, "<f4").tobytes())
    fields = [record.id, record.title, record.text, record.metadata]
    digest.update(json.dumps(fields, ensure_ascii=False, sort_keys=True).encode("utf-8"))
    return digest.hexdigest()[:32]


def _segments(index: Any) -> Iterator[tuple[Any, np.ndarray, Any]]:
    """Per part of `index`: the part, its live rows and their documents (a `Corpus`, or None)."""
    for part, deleted in index.parts:
        if part.embeddings is None:
            raise UserError(NO_FLOAT32)
        rows = np.arange(len(part.ids)) if deleted is None else np.flatnonzero(~deleted)
        yield part, rows, live_corpus([(part.documents_path, part.ids.array[rows])])


def index_records(index: Any, batch_size: int = 256, wanted: set[str] | None = None) -> Iterator[list[Record]]:
    """The `Record`s of the live rows of a loaded search index (`SearchIndex.load`), `batch_size` at a time, a
    segment's documents in memory at once; only those of `wanted` ids where given."""
    for part, rows, corpus in _segments(index):
        positions = {doc_id: i for i, doc_id in enumerate(corpus.ids)} if corpus is not None else {}
        ids = [doc_id.decode("utf-8") for doc_id in part.ids.array[rows]]
        keep = [i for i, doc_id in enumerate(ids) if wanted is None or doc_id in wanted]
        for start in range(0, len(keep), batch_size):
            chosen = keep[start : start + batch_size]
            vectors = np.asarray(part.embeddings[rows[chosen]], np.float32)
            batch = []
            for i, vector in zip(chosen, vectors):
                j = positions.get(ids[i])
                if j is None:
                    batch.append(Record(ids[i], vector, "", "", {}))
                    continue
                metadata = dict(corpus.metadata[j]) if corpus.metadata is not None else {}
                batch.append(Record(ids[i], vector, corpus.titles[j], corpus.texts[j], metadata))
            yield batch


def scan(
    index_path: str | os.PathLike[str], index: Any, batch_size: int, engine: Engine
) -> tuple[CollectionInfo, dict[str, str]]:
    """The `CollectionInfo` of an index directory (its vectors' dimensions, its model's fingerprint, `""` for
    embeddings of no recorded model, its live documents' metadata types) and the digest of each live record,
    each record checked by `engine.check_record` (a record the engine refuses is refused before any write)."""
    digests: dict[str, str] = {}
    types: dict[str, str] = {}
    for batch in index_records(index, batch_size):
        for record in batch:
            engine.check_record(record, int(index.dims))
            digests[record.id] = record_digest(record)
            for field, value in record.metadata.items():
                if (kind := metadata_type(value)) is not None:
                    types.setdefault(field, kind)
    model = read_model_record(os.fspath(index_path)).get("model_sha256") or ""
    return CollectionInfo(int(index.dims), model, dict(sorted(types.items()))), digests


def _diff(engine: Engine, ledger: dict[str, Any] | None, current: dict[str, str]) -> tuple[set[str], list[str]]:
    """`(ids to upsert, ids to delete)` from the last push's digests (the engine's ids where no ledger)."""
    pushed: dict[str, str | None] = dict(ledger["records"]) if ledger else dict.fromkeys(engine.ids())
    upserts = {doc_id for doc_id, digest in current.items() if pushed.get(doc_id) != digest}
    return upserts, [doc_id for doc_id in pushed if doc_id not in current]


def push(
    index_path: str | os.PathLike[str],
    target: str | Target,
    collection: str | None = None,
    recreate: bool = False,
    batch_size: int = 256,
    timeout: float = 10.0,
) -> PushSummary:
    """Pushes the live documents of the index directory `index_path` to `collection` at `target`, sending only
    what changed since the last push there.

    Args:
        index_path: an index directory (`gtr-keras index`).
        target: `qdrant:PATH`, `qdrant+http://HOST:PORT`, `milvus:PATH.db`, `milvus+http://HOST:PORT` or
            `vertex-ai:DIR` (`targets.parse_target`).
        collection: the collection's name (default: the index directory's name, `default_collection`).
        recreate: replace a collection of another dimension or model (dropped, then written whole).
        batch_size: records per request.
        timeout: seconds a request may wait.

    Returns:
        The `PushSummary`.

    Raises:
        UserError: a bad target, a missing extra, an unreachable host, an index without float32 vectors, or a
            collection of another dimension or model without `recreate`: all before any write.
    """
    target = parse_target(target) if isinstance(target, str) else target
    collection = default_collection(index_path) if collection is None else collection
    index_path = os.fspath(index_path)
    if read_model_record(index_path).get(PASSAGES_FIELD):  # not an index directory: one line
        raise UserError(f"{index_path}: a passages index (--passages): its windows are not pushed to an engine yet")
    engine = open_engine(target, collection, timeout=timeout)  # a missing extra, an unreachable host
    try:
        with output_lock(index_path):
            index = SearchIndex.load(os.path.join(index_path, INDEX_SUBDIR))
            info, current = scan(index_path, index, batch_size, engine)
            existing = None if recreate else engine.info()
            if existing is not None:
                engine.updated(existing, info, RECREATE, widen=False)  # refuses it in one line, before any write
            path, key = ledger_path(index_path, target, collection), _target_key(target, collection)
            ledger = read_push_ledger(path) if existing is not None else None
            if ledger is not None and ledger.get("marker") != existing.marker:
                ledger = None  # another writer changed the collection since: reconcile it whole
            if recreate and files.isfile(path):
                files.remove(path)
            upserts, deletes = _diff(engine, ledger, current) if existing is not None else (set(current), [])
            if (
                upserts
                or deletes
                or existing is None
                or ledger is None
                or existing.metadata_types != info.metadata_types
            ):
                marker = ledger["marker"] if ledger is not None else ""
                engine.create(dataclasses.replace(info, marker=marker), recreate=recreate, widen=False)
                engine.delete(deletes)
                for batch in index_records(index, batch_size, upserts):
                    engine.upsert(batch)
                engine.flush()
                marker = uuid.uuid4().hex
                engine.create(dataclasses.replace(info, marker=marker), widen=False)
                _write_ledger(path, key, current, marker)
    finally:
        engine.close()
    return PushSummary(collection, len(upserts), len(deletes))
