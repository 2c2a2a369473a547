"""`IndexHandle`: what an `Index` is as a handle of its directories, apart from searching and writing them:
open until closed (`close`, `with`), its documents by id (`get`, `in`), and the check of its files (`check`,
as `gtr-keras check` verifies them: `integrity.index_checker.check_index`, which lies beneath `retrieval`).
"""

import os
from types import TracebackType
from typing import Any, Self

import numpy as np

from gtr_keras.errors import UserError
from gtr_keras.filters.expressions import id_list
from gtr_keras.integrity.check_report import CheckReport
from gtr_keras.integrity.index_checker import check_index
from gtr_keras.models.text_encoder import TextEncoder
from gtr_keras.retrieval.index_types import Document, IdsLike
from gtr_keras.retrieval.retriever import Retriever


class IndexHandle:
    """The base of `Index`: the version of its directories (`paths`) it loaded, until `close`.

    A subclass loads the version (`_retriever = Retriever.load(...)`) and keeps its BM25 side (`_bm25`) and
    model (`_encoder`); once closed, every use of them is a `UserError` naming the index.

    Example:
    >>> with gtr_keras.Index.open("indexes/scifact") as index:
    ...     "4983" in index, index.get(["4983"])[0]["title"], index.check().ok
    """

    paths: list[str]
    _loaded: Retriever | None = None
    _bm25: Any = None
    _encoder: TextEncoder | None = None

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
        found = np.isin(np.array([i.encode("utf-8") for i in wanted], dtype="S"), retriever.index.ids.array)
        return [retriever.document(i) if live else None for i, live in zip(wanted, found)]

    def __contains__(self, doc_id: object) -> bool:
        """Whether the document `doc_id` (a string, or an integer as a corpus's `_id` may be) is in the index."""
        if isinstance(doc_id, bool) or not isinstance(doc_id, str | int):
            return False
        return bool(np.any(self._retriever.index.ids.array == str(doc_id).encode("utf-8")))

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
