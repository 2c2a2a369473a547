"""`Engine`: one collection of one search engine, as `push` writes it and an engine-backed `Index` searches it;
with `Record`, what each of an index's live documents becomes there, and `CollectionInfo`, what a collection
records of the index it came from (dimensions, model, metadata types), so that a push of another model or
dimension is refused and a search knows each field's type.

Every engine keeps the record contract (docs/past-one-machine.md): the document id in a field named `id`, the
float32 vector (never int8 or binary codes), every metadata field (each filterable), and title and text where
the index has them; upserts and deletions are idempotent by id, so that a push killed at any point and run
again converges.
"""

import abc
import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from gtr_keras.engines.targets import Target
from gtr_keras.errors import UserError
from gtr_keras.filters.expressions import Filter

RECREATE = "push with --recreate to replace it, or name another collection"


@dataclasses.dataclass(frozen=True)
class Record:
    """One document as an engine holds it: `id`, `vector` (float32 `[D]`, unit length), `title`, `text` and
    `metadata` (`{field: value}`, the corpus's own values)."""

    id: str
    vector: np.ndarray
    title: str
    text: str
    metadata: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class CollectionInfo:
    """What a collection records of its index: `dimensions` (D, or the index's `dimensions=N`), `model` (the
    model's fingerprint, as the index records it) and `metadata_types` (`{field: "string" | "number" |
    "boolean" | "list"}`, `MetadataColumns.types`) and `marker`, the token of the push that wrote the collection
    last (`""` once any other writer changed it: `push` then reconciles the whole collection)."""

    dimensions: int
    model: str
    metadata_types: dict[str, str]
    marker: str = ""


class Engine(abc.ABC):
    """One collection of an engine: created, written by id, searched with a `Filter`.

    Args:
        target: the parsed target (`parse_target`).
        collection: the collection's name.
        timeout: seconds any one request may wait (an unreachable host is a `UserError` after it).

    Raises:
        UserError: a missing extra (the pip line to run), an unreachable host, a collection name the engine
            refuses.
    """

    max_k: int | None = None
    """The most hits a query the engine returns (None: no limit)."""

    def __init__(self, target: Target, collection: str, timeout: float = 10.0):
        self.target, self.collection, self.timeout = target, collection, timeout

    @abc.abstractmethod
    def info(self) -> CollectionInfo | None:
        """The collection's record of its index, or None when there is no such collection."""

    @abc.abstractmethod
    def create(self, info: CollectionInfo, recreate: bool = False, remedy: str = RECREATE, widen: bool = True) -> None:
        """Creates the collection (inner product on unit vectors) recording `info`. An existing one of the same
        dimension and model is kept, recording `updated(existing, info, ...)`; one of another dimension or model
        is a `UserError` ending in `remedy` (what the command that asked can do about it) unless `recreate`,
        which drops whatever collection of that name there is first."""

    def updated(self, existing: CollectionInfo, info: CollectionInfo, remedy: str, widen: bool) -> CollectionInfo:
        """What a collection recording `existing` records once `info` is written to it: `info`, its metadata types
        widened by `existing`'s where `widen` (a push records the index's own types: `widen=False`).

        Raises:
            UserError: `existing` of another dimension or model, ending in `remedy`.
        """
        if (existing.dimensions, existing.model) != (info.dimensions, info.model):
            raise UserError(
                f"{self.target.text}: collection {self.collection!r} holds {existing.dimensions}-dimensional vectors "
                f"of model {existing.model[:12] or 'unknown'}, not {info.dimensions} of model "
                f"{info.model[:12] or 'unknown'}: {remedy}"
            )
        types = {**existing.metadata_types, **info.metadata_types} if widen else info.metadata_types
        return dataclasses.replace(info, metadata_types=types)

    @abc.abstractmethod
    def upsert(self, records: Sequence[Record]) -> None:
        """Writes `records`, each replacing any record of its id."""

    @abc.abstractmethod
    def delete(self, ids: Sequence[str]) -> None:
        """Removes the records of `ids`; ids it does not hold are ignored."""

    @abc.abstractmethod
    def search(
        self, vectors: np.ndarray, k: int, filter: Filter | None, metadata_types: dict[str, str]
    ) -> list[list[tuple[str, float]]]:
        """The `k` best (id, inner product) of each row of `vectors` among the records `filter` allows, best
        first, as gtr-keras' exact search ranks them.

        Raises:
            UserError: a clause the engine cannot express exactly (never approximated), naming it and the engine.
        """

    def documents(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The documents of those of `ids` the collection holds, by id: each `{"id", "title", "text",
        "metadata"}` as its record gave them (what search hits show, and `Index.get` answers).

        Raises:
            UserError: an engine whose collection is not read back (Vertex AI's batch folders).
        """
        raise UserError(f"{self.target.text}: {self.target.engine} keeps no documents gtr-keras reads back")

    @abc.abstractmethod
    def ids(self) -> list[str]:
        """Every id the collection holds."""

    def check_record(self, record: Record, dimensions: int) -> None:
        """Refuses `record` before anything is written: a vector that is not finite float32 `[dimensions]`.
        An engine adds its own limits.

        Raises:
            UserError: naming the record.
        """
        vector = np.asarray(record.vector)
        if vector.shape != (dimensions,) or vector.dtype != np.float32 or not np.isfinite(vector).all():
            raise UserError(
                f"record {record.id!r}: expected a finite float32 vector of {dimensions} dimensions, got "
                f"{vector.dtype} {vector.shape}"
            )

    def flush(self) -> None:
        """Makes every write so far durable in the engine: `push` calls it before it records its ledger. The
        default does nothing (an engine that acknowledged a write holds it)."""
        return None

    @abc.abstractmethod
    def close(self) -> None:
        """Releases the connection or the embedded engine's files; writes not yet flushed may be discarded."""
