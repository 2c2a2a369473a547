"""`EngineIndex`: a collection that `push` wrote, searched and updated as an `Index` is
(`gtr_keras.Index.open("qdrant:PATH", model=M, collection=NAME)`).

Its queries go through the model's query encoder (checked against the model fingerprint the collection
records, and cut to its dimensions), its filters through the engine's own filter with gtr-keras' semantics
(`Engine.search`), and its hits are the dicts a local `Index.search` answers. `add`, `delete` and `update` write
through to the engine, encoding with the model; what an engine cannot do (`compact`, `tune`, BM25 and hybrid
search, reranking) is refused in one line.
"""

import dataclasses
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Self

import numpy as np

from gtr_keras.beir.readers import Corpus, check_corpus, load_corpus, metadata_type
from gtr_keras.engines.engine import CollectionInfo, Record
from gtr_keras.engines.metadata_terms import terms
from gtr_keras.engines.registry import open_engine
from gtr_keras.engines.targets import parse_target
from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.filters.expressions import Filter, id_list
from gtr_keras.models.text_encoder import TextEncoder
from gtr_keras.utils.records import check_positive_int
from gtr_keras.utils.text_files import query_inputs


@dataclasses.dataclass(frozen=True)
class EngineUpdate:
    """What a write through an `EngineIndex` changed: the ids `added`, `replaced` and `deleted`, in the order
    given."""

    added: tuple[str, ...]
    replaced: tuple[str, ...]
    deleted: tuple[str, ...]


def _refused(what: str) -> UserError:
    return UserError(f"{what}: not on an engine's collection (a local index directory does it)")


class EngineIndex:
    """A collection of Qdrant or Milvus as an `Index`: `search`, `get`, `in`, `len`, `add`, `delete`, `update`.

    Args:
        target: `qdrant:PATH`, `qdrant+http://HOST:PORT`, `milvus:PATH.db` or `milvus+http://HOST:PORT`.
        collection: the collection `push` wrote.
        encoder: a function of no arguments that loads the model (called when a text first needs encoding),
            or None (vectors only).
        timeout: seconds a request may wait.

    Raises:
        UserError: a bad target, a vertex-ai one (Vertex searches its own deployed index), no collection name,
            no such collection, a missing extra, an unreachable host.

    Example:
    >>> with gtr_keras.Index.open("qdrant:/data/qdrant", model="gtr_t5_base_en", collection="papers") as index:
    ...     index.search(["vitamin D"], k=10, filter="year >= 2019")[0][0]["id"]
    """

    def __init__(
        self,
        target: str,
        collection: str | None,
        encoder: Callable[[], TextEncoder] | None = None,
        timeout: float = 10.0,
    ):
        parsed = parse_target(target)
        if parsed.engine == "vertex-ai":
            raise UserError(
                f"{target}: holds batch-update files for Vertex AI Vector Search; search the index deployed from "
                "them with Vertex (docs/past-one-machine.md)"
            )
        if not collection:
            raise UserError(f"{target}: name the collection to search (collection=, --collection NAME)")
        self.target, self.collection = target, collection
        self._load_encoder = encoder
        self._encoder: TextEncoder | None = None
        self._engine: Any = open_engine(parsed, collection, timeout=timeout)
        info = self._engine.info()
        if info is None:
            self._engine.close()
            raise UserError(f"{target}: no collection {collection!r}: push an index there first (gtr-keras push)")
        self.info: CollectionInfo = info

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._engine is None

    def _open_engine(self) -> Any:
        if self._engine is None:
            raise UserError(f"Index({self.target!r}, collection {self.collection!r}) is closed: open it again")
        return self._engine

    @property
    def encoder(self) -> TextEncoder:
        """The model's encoder, loaded when first needed, checked against the collection's model fingerprint
        and cut to its dimensions.

        Raises:
            UserError: no model given; `MismatchError`: another model, or a collection of no recorded model.
        """
        self._open_engine()
        if self._encoder is None:
            from gtr_keras.models.model_files.fingerprint import fingerprint

            if self._load_encoder is None:
                raise UserError(f"{self.target}: text queries need the index's model: Index.open(..., model=...)")
            encoder = self._load_encoder()
            if not self.info.model:
                raise MismatchError(
                    f"{self.target}: collection {self.collection!r} records no model (pushed from embeddings of no "
                    "recorded model): search it with query vectors"
                )
            if fingerprint(encoder) != self.info.model:
                raise MismatchError(
                    f"{self.target}: collection {self.collection!r} holds vectors of another model (fingerprint "
                    f"{self.info.model[:12]}): search with the model the index was built with"
                )
            cut = self.info.dimensions if self.info.dimensions < encoder.embedding_dim else None
            self._encoder = encoder if cut is None else encoder.truncated(cut)
        return self._encoder

    def search(
        self,
        queries: Iterable[str] | np.ndarray,
        k: int = 10,
        filter: str | Sequence[str] | Filter | None = None,
        retriever: str = "gtr",
        fusion: Any = None,
        rerank: Any = None,
        rerank_depth: int | None = None,
    ) -> list[list[dict[str, Any]]]:
        """The top `k` hits of each query, `{"id", "score", "title", "text"}` best first, as a local exact
        `Index.search` answers them.

        Args:
            queries: a list of texts (encoded by the model) or float32 query vectors `[n, D]`.
            k: hits per query.
            filter: a clause, a list of clauses (ANDed) or a `gtr_keras.Filter` (docs/filters.md), translated
                to the engine's own filter.
            retriever, fusion, rerank: `Index.search`'s; only GTR search without reranking is the engine's.
            rerank_depth: ignored without `rerank`, as `Index.search` ignores it.

        Raises:
            UserError: one line, before any query is encoded: a bad query, `k` or clause, an unknown field, a
                clause the engine cannot express exactly, `retriever` other than `"gtr"`, `fusion` or `rerank`.

        Example:
        >>> index.search(["lift on a wing"], k=3, filter=["lang = en", "year >= 2019"])
        """
        engine = self._open_engine()
        if retriever != "gtr" or fusion is not None:
            raise _refused(f"retriever {retriever!r} (BM25 and hybrid search)")
        if rerank is not None:
            raise _refused("rerank")
        k = check_positive_int(k, "k")
        vectors, texts = query_inputs(queries)
        if vectors is not None and vectors.shape[1] != self.info.dimensions:
            raise UserError(f"query vectors: a [queries, {self.info.dimensions}] array, got shape {vectors.shape}")
        filter = Filter.of(filter)
        terms(filter, self.info.metadata_types)  # an unknown field or a wrong type, before the model loads
        if texts is not None:
            vectors = self.encoder.encode_queries(texts)
        found = self._ranked(vectors, k, filter)
        shown = engine.documents(sorted({doc_id for row in found for doc_id, _ in row}))
        return [  # a hit deleted by another writer since the search is left out
            [
                {"id": i, "score": score, "title": shown[i]["title"], "text": shown[i]["text"]}
                for i, score in row
                if i in shown
            ]
            for row in found
        ]

    def _ranked(self, vectors: np.ndarray, k: int, filter: Filter | None) -> list[list[tuple[str, float]]]:
        """Each query's best `k` as exact search ranks them, equal scores by id descending: a query whose `k`-th
        score ties with the last one fetched is asked again for twice as many, until none does or the engine's
        `max_k` is reached (ties past it are ranked as the engine returned them)."""
        cap, types = self._engine.max_k or sys.maxsize, self.info.metadata_types
        limit = min(k + 1, cap)
        found = self._engine.search(vectors, limit, filter, types)
        while limit < cap and (
            tied := [i for i, row in enumerate(found) if len(row) == limit and row[-1][1] == row[k - 1][1]]
        ):
            limit = min(2 * limit, cap)
            for i, row in zip(tied, self._engine.search(vectors[tied], limit, filter, types)):
                found[i] = row
        by_id = [sorted(row, key=lambda hit: hit[0].encode("utf-8"), reverse=True) for row in found]
        return [sorted(row, key=lambda hit: -hit[1])[:k] for row in by_id]

    def get(self, ids: str | int | Iterable[str | int]) -> list[dict[str, Any] | None]:
        """The documents of `ids` (`{"id", "title", "text", "metadata"}`), None for an id the collection does
        not hold, as `Index.get` answers."""
        wanted = id_list(ids, "get")
        found = self._open_engine().documents(wanted)
        return [found.get(doc_id) for doc_id in wanted]

    def __contains__(self, doc_id: object) -> bool:
        if isinstance(doc_id, bool) or not isinstance(doc_id, str | int):
            return False
        return str(doc_id) in self._open_engine().documents([str(doc_id)])

    def __len__(self) -> int:
        return len(self._open_engine().ids())

    def update(
        self,
        add: str | os.PathLike[str] | Corpus | None = None,
        delete: str | int | Iterable[str | int] | None = None,
        *,
        missing_ok: bool = False,
        batch_size: int = 32,
    ) -> EngineUpdate:
        """Adds (or replaces) and deletes documents in the collection: `add` encoded by the model, each a
        record upserted by id; `delete`'s ids removed.

        Raises:
            UserError: nothing to do, an id both added and deleted, a metadata field of another type than the
                collection's; `DataError`: a bad corpus, or an id to delete that the collection does not hold
                (unless `missing_ok`).
        """
        engine = self._open_engine()
        if add is None and delete is None:
            raise UserError("update: nothing to do: pass add= or delete=")
        corpus = None
        if add is not None:
            corpus = load_corpus(add) if isinstance(add, (str, os.PathLike)) else check_corpus(add)
        gone = [] if delete is None else id_list(delete, "delete")
        if corpus is not None and set(corpus.ids) & set(gone):
            raise UserError(f"update: {sorted(set(corpus.ids) & set(gone))[0]!r} is both added and deleted")
        held = engine.documents([*gone, *(corpus.ids if corpus is not None else [])])
        missing = [doc_id for doc_id in gone if doc_id not in held]
        if missing and not missing_ok:
            raise DataError(f"delete: id {missing[0]!r} is not in the collection {self.collection!r}")
        if corpus is not None:
            self._add(corpus, batch_size)  # its `create` clears the last push's marker
        else:
            self.info = dataclasses.replace(self.info, marker="")
            engine.create(self.info)  # clears the last push's marker: that index's next push reconciles
        deleted = tuple(doc_id for doc_id in gone if doc_id in held)
        engine.delete(list(deleted))
        if corpus is None:
            return EngineUpdate((), (), deleted)
        added = tuple(doc_id for doc_id in corpus.ids if doc_id not in held)
        return EngineUpdate(added, tuple(doc_id for doc_id in corpus.ids if doc_id in held), deleted)

    def _add(self, corpus: Corpus, batch_size: int) -> None:
        metadata = corpus.metadata or [{} for _ in corpus.ids]
        types = dict(self.info.metadata_types)
        for doc_id, fields in zip(corpus.ids, metadata):
            for field, value in fields.items():
                kind = metadata_type(value)
                if kind is not None and types.setdefault(field, kind) != kind:
                    raise UserError(
                        f"document {doc_id!r} field `metadata.{field}` is a {kind}, but the collection "
                        f"{self.collection!r} holds {types[field]} values: a field holds one type"
                    )
        vectors = self.encoder.encode_documents(corpus.joined(), batch_size)
        records = [
            Record(doc_id, vector, title, text, dict(fields))
            for doc_id, vector, title, text, fields in zip(corpus.ids, vectors, corpus.titles, corpus.texts, metadata)
        ]
        for record in records:
            self._engine.check_record(record, self.info.dimensions)
        info = CollectionInfo(self.info.dimensions, self.info.model, dict(sorted(types.items())))
        self._engine.create(info)
        self.info = info
        for start in range(0, len(records), batch_size):
            self._engine.upsert(records[start : start + batch_size])

    def add(self, corpus: str | os.PathLike[str] | Corpus, *, batch_size: int = 32) -> EngineUpdate:
        """Adds documents (replacing those of their ids): `update(add=corpus)`."""
        return self.update(corpus, batch_size=batch_size)

    def delete(self, ids: str | int | Iterable[str | int], missing_ok: bool = False) -> EngineUpdate:
        """Deletes documents by id: `update(delete=ids)`."""
        return self.update(delete=ids, missing_ok=missing_ok)

    def compact(self) -> None:
        """Refused: the engine compacts its own storage."""
        raise _refused("compact")

    def tune(self, *args: Any, **kwargs: Any) -> None:
        """Refused: the engine's search is exact (docs/past-one-machine.md)."""
        raise _refused("tune")

    def close(self) -> None:
        """Releases the engine's connection (or its local files); closing again does nothing."""
        if self._engine is not None:
            self._engine.close()
        self._engine = None
        self._encoder = None

    def __enter__(self) -> Self:
        self._open_engine()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.info.dimensions} dims"
        return f"EngineIndex({self.target!r}, collection {self.collection!r}: {state})"
