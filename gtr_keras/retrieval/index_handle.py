"""`IndexHandle`: what an `Index` is as a handle of its directories, apart from searching and writing them:
open until closed (`close`, `with`), its kind and search settings (`kind`, `set_search_settings`), its documents
by id (`get`, `in`, `ids`, `len`: a passages index's documents, not its window rows), and the check of its files
(`check`, as `gtr-keras check` verifies them: `integrity.index_checker.check_index`, which lies beneath
`retrieval`).
"""

import contextlib
import os
from types import TracebackType
from typing import Any, Self

import numpy as np

from gtr_keras.engines.push import PushSummary, push
from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.filters.expressions import id_list
from gtr_keras.integrity.check_report import CheckReport
from gtr_keras.integrity.index_checker import check_index
from gtr_keras.lexical.bm25_side import has_bm25_side
from gtr_keras.models.text_encoder import TextEncoder
from gtr_keras.retrieval.index_types import Document, IdsLike
from gtr_keras.retrieval.passages import Passages, shards_setting
from gtr_keras.retrieval.retriever import Retriever
from gtr_keras.storage.layout import INDEX_SUBDIR, LATE_CHUNKING_FIELD, MANIFEST_JSON, RETRIEVER_JSON
from gtr_keras.storage.segments import manifest_generation
from gtr_keras.utils import files
from gtr_keras.utils.text_files import text_problem

LOADS = 3  # loads of a version and its BM25 side, each undone by a commit between the two
COMMIT_POINTS = (RETRIEVER_JSON, os.path.join(INDEX_SUBDIR, MANIFEST_JSON))


class IndexHandle:
    """The base of `Index`: the version of its directories (`paths`) it loaded, until `close`.

    `_reopen` loads the newest version with its BM25 side (through the subclass's `bm25`), keeping the model
    (`_encoder`) and the search settings (`_search_params`); once closed, every use of them is a `UserError`
    naming the index.

    Example:
    >>> with gtr_keras.Index.open("indexes/scifact") as index:
    ...     "4983" in index, index.get(["4983"])[0]["title"], index.check().ok
    """

    paths: list[str]
    records: list[dict[str, Any]]
    _passages: Passages | None = None
    _loaded: Retriever | None = None
    _bm25: Any = None
    _encoder: TextEncoder | None = None
    _search_params: dict[str, int]
    _version: tuple[int | None, ...] | None = None
    bm25: Any

    @property
    def _retriever(self) -> Retriever:
        """The `Retriever` of the version loaded; a `UserError` once closed."""
        self._check_open()
        assert self._loaded is not None
        return self._loaded

    @_retriever.setter
    def _retriever(self, retriever: Retriever) -> None:
        self._loaded = retriever

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._loaded is None

    def _check_open(self) -> None:
        if self.closed:
            where = self.paths[0] if len(self.paths) == 1 else self.paths
            raise UserError(f"Index({where!r}) is closed: open it again (gtr_keras.Index.open) to use it")

    def _reopen(self) -> None:
        """Loads the directories' newest generation with its BM25 side, so that the three retrievers answer
        from that version whatever commits later, keeping the model and the search settings set. A commit
        between the dense part's load and the side's loads both again."""
        for _ in range(LOADS):
            self._version = self._commit_points()
            self._retriever = Retriever.load(self.paths[0] if len(self.paths) == 1 else self.paths, None)
            self._retriever.encoder = self._encoder
            if self.passages:
                self._passages = Passages(self._retriever.index.ids, self._retriever.corpus)
            if self._search_params:
                self._retriever.index.set_search_params(self._search_params)
            self._bm25 = None
            if len(self.paths) == 1 and has_bm25_side(self.paths[0]):
                with contextlib.suppress(DataError, MismatchError):  # a side being rebuilt or damaged: told if needed
                    self.bm25  # noqa: B018  (loaded with the version: a later commit replaces the side's files)
            if self._bm25 is not None or self._commit_points() == self._version:
                return

    def _commit_points(self) -> tuple[int | None, ...] | None:
        """When the index directory's model record (a rebuild) and manifest (an update) were written, and the
        manifest's generation (two commits within a coarse clock's tick); None for several directories (BM25
        searches one)."""
        if len(self.paths) > 1:
            return None
        times = tuple(files.modified_ns(os.path.join(self.paths[0], name)) for name in COMMIT_POINTS)
        return (*times, manifest_generation(os.path.join(self.paths[0], INDEX_SUBDIR)))

    def get(self, ids: IdsLike) -> list[Document | None]:
        """The documents of `ids`, in the order asked: each `{"id", "title", "text", "metadata"}` as its corpus
        gave it (`""` and `{}` where the index stores none: built from embeddings without documents), and None
        in the place of an id that is not in the index, as `dict.get` answers (`id in index` asks alone).

        Args:
            ids: a list (or any iterable) of ids, or one id (a string, or an integer as a corpus's `_id` may be).

        Raises:
            UserError: ids of another type.

        Example:
        >>> index.get(["4983", "no-such-id"])
        [{'id': '4983', 'title': 'Microstructural development ...', 'text': '...', 'metadata': {}}, None]
        """
        wanted = id_list(ids, "get")
        retriever = self._retriever
        if self._passages is not None:
            return [self._passages.document(i) if i in self._passages.rows else None for i in wanted]
        found = np.isin(np.array([i.encode("utf-8") for i in wanted], dtype="S"), retriever.index.ids.array)
        return [retriever.document(i) if live else None for i, live in zip(wanted, found)]

    def __contains__(self, doc_id: object) -> bool:
        """Whether the document `doc_id` (a string, or an integer as a corpus's `_id` may be) is in the index."""
        if isinstance(doc_id, bool) or not isinstance(doc_id, str | int) or text_problem(str(doc_id)):
            return False  # no such type of id, or a lone surrogate, which no id holds
        if self._passages is not None:
            return self._retriever is not None and str(doc_id) in self._passages.rows
        return bool(np.any(self._retriever.index.ids.array == str(doc_id).encode("utf-8")))

    @property
    def passages(self) -> dict[str, int] | None:
        """The `{"tokens", "stride"}` of a passages index (`--passages TOKENS:STRIDE`), or None."""
        return shards_setting(self.paths, self.records)

    @property
    def late_chunking(self) -> int | None:
        """The tokens of the forward pass a late-chunking passages index pools its windows from
        (`--late-chunking --document-length N`), or None."""
        return self.records[0].get(LATE_CHUNKING_FIELD)

    @property
    def ids(self) -> list[str]:
        """The ids of the documents, in the index's order (of their first windows, for a passages index)."""
        rows = self._retriever.index.ids
        return self._passages.ids if self._passages is not None else list(rows)

    def __len__(self) -> int:
        rows = self._retriever.index.ids
        return len(self._passages.rows) if self._passages is not None else len(rows)

    def set_search_settings(self, setting: dict[str, int]) -> None:
        """Sets search settings for this `Index`'s searches (overriding a tuned setting; `search_settings`
        says those in effect): ScaNN's `num_leaves_to_search`, `reorder_factor` and `rescore_factor` (float32
        rescoring), an int8 or binary index's `rescore`.

        Example:
        >>> index.set_search_settings({"num_leaves_to_search": 40})
        """
        self._retriever.index.set_search_params(setting)
        self._search_params = {**self._search_params, **setting}

    @property
    def kind(self) -> str:
        """`"exact"` or `"scann"` (`"mixed"` for shards of both)."""
        return self._retriever.index.kind

    def __repr__(self) -> str:
        where = self.paths[0] if len(self.paths) == 1 else self.paths
        if self.closed:
            return f"Index({where!r}: closed)"
        return f"Index({where!r}: {len(self)} documents, {self.kind})"

    def check(self) -> CheckReport:
        """Verifies the index's files as `gtr-keras check` does: every file's SHA-256, the records, every
        segment, the documents and the BM25 side, and what a job that did not end left; every shard's, for
        several directories (`check_index`).

        Returns:
            The `CheckReport` that `gtr-keras check` prints: `ok`, `problems` (each naming its file), `summary()`.

        Example:
        >>> report = index.check()
        >>> report.ok, report.summary()
        """
        self._check_open()
        return check_index([os.fspath(path) for path in self.paths])

    def push(self, target: str, collection: str | None = None, recreate: bool = False) -> PushSummary:
        """Pushes the index's live documents to an engine's collection, only what changed since the last push
        there (`gtr-keras push`; `engines.push.push`): the collection then holds exactly the index's documents.

        Args:
            target: `qdrant:PATH`, `qdrant+http://HOST:PORT`, `milvus:PATH.db`, `milvus+http://HOST:PORT` or
                `vertex-ai:DIR` (docs/past-one-machine.md).
            collection: the collection's name (default: the index directory's name).
            recreate: replace a collection of another dimension or model.

        Returns:
            The `PushSummary` (`upserted`, `deleted`).

        Raises:
            UserError: a bad target, a missing extra, an unreachable host, a collection of another dimension or
                model without `recreate`, several directories: before any write.

        Example:
        >>> index.push("qdrant:/data/qdrant", collection="papers").upserted
        """
        self._check_open()
        if len(self.paths) > 1:
            raise UserError("push sends one index directory to its own collection: open each shard")
        return push(self.paths[0], target, collection, recreate)

    def close(self) -> None:
        """Releases what the index holds (the version loaded, its BM25 side, the model it loaded); any use of
        it afterwards is a `UserError`. Closing it again does nothing; `with Index.open(path) as index:` closes
        it at the end of the block. The directories stay as they are: `Index.open` opens them again."""
        self._loaded = self._bm25 = self._encoder = None

    def __enter__(self) -> Self:
        self._check_open()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
