"""`Retriever`: an index directory (`index_building` writes one) loaded with its model and searched."""

import functools
import os

from gtr_keras.errors import MismatchError
from gtr_keras.filters.expressions import Filter
from gtr_keras.filters.filtered_search import filtered_search
from gtr_keras.filters.metadata_columns import MetadataColumns
from gtr_keras.retrieval.index_building import model_change, with_recorded_dimensions
from gtr_keras.storage.layout import (
    INDEX_SUBDIR,
    SEARCH_FIELDS,
    read_model_record,
)
from gtr_keras.storage.search_index import SearchIndex
from gtr_keras.storage.segments import index_documents


def search_results(queries, hits):
    """What `gtr-keras search --json` prints and `/v1/search` answers: per query, `{"query", "hits"}` with
    its hits as `Retriever.search` gives them (`id`, `score`, `title`, `text`).

    Example:
    >>> search_results(["lift"], [[{"id": "d1", "score": 0.8, "title": "", "text": "lift on a wing"}]])[0]["query"]
    'lift'
    """
    return [{"query": query, "hits": row} for query, row in zip(queries, hits)]


class Retriever:
    """Answers text queries from an index directory.

    Args:
        encoder: the `Encoder` the index was built with.
        index: the `SearchIndex`.
        corpus: the indexed `Corpus` (for titles and snippets, and the metadata filters search), optional.

    Example:
    >>> retriever = Retriever.load("indexes/scifact", gtr_keras.load("models/gtr-base"))
    >>> retriever.search(["does vitamin D prevent fractures?"], k=5)[0][0]["id"]
    >>> retriever.search(["vitamin D"], k=5, filter=["year >= 2019", "lang in (en, de)"])
    """

    def __init__(self, encoder, index, corpus=None):
        self.encoder = encoder
        self.index = index
        self.corpus = corpus
        self._positions = {doc_id: i for i, doc_id in enumerate(corpus.ids)} if corpus else {}

    @staticmethod
    def check_model(index_dir, encoder):
        """Checks that `encoder` is the model `index_dir` was built with.

        The embedding size, the precision and the fingerprint recorded in
        `retriever.json` (`SEARCH_FIELDS`) must be the encoder's: queries
        encoded by another model, even one of the same embedding size, would
        be compared with document embeddings they do not belong with. The
        query token budget may differ. An index built with `dimensions` is
        checked with the encoder truncated to them (`encoder_for`).

        Args:
            index_dir: an index directory written by `build_index`.
            encoder: the `Encoder` to search with.

        Returns:
            The recorded metadata (`retriever.json`).

        Raises:
            DataError: `index_dir` is not an index directory, or its
                `retriever.json` is unreadable.
            MismatchError: the index was built with another model, or from embeddings of no recorded model, or
                with other `dimensions` than an encoder truncated already keeps.

        Example:
        >>> Retriever.check_model("indexes/scifact", gtr_keras.load("models/gtr-base"))["kind"]
        'exact'
        """
        recorded = read_model_record(index_dir)
        if recorded.get("model_sha256") is None:
            raise MismatchError(
                f"{index_dir}: built from embeddings with no record of their model (no NAME.json "
                f"from `gtr-keras encode` beside them); rebuild it with `gtr-keras index --embeddings "
                f"... --model MODEL` to declare the model that encoded them"
            )
        change, _ = model_change(recorded, with_recorded_dimensions(recorded, encoder, index_dir), SEARCH_FIELDS)
        if change:
            raise MismatchError(
                f"{index_dir}: built with another model ({change}); search with the model the "
                f"index was built with (recorded model_dir: {recorded.get('model_dir')}) "
                f"or rebuild the index"
            )
        return recorded

    @classmethod
    def encoder_for(cls, index_dir, encoder):
        """`encoder` as it searches `index_dir`: checked (`check_model`), and truncated to the index's
        `dimensions` where it was built with them (`index_building.with_recorded_dimensions`).

        Example:
        >>> Retriever.encoder_for("indexes/scifact-128", gtr_keras.load("models/gtr-base")).embedding_dim
        128
        """
        return with_recorded_dimensions(cls.check_model(index_dir, encoder), encoder, index_dir)

    @classmethod
    def load(cls, index_dir, encoder):
        """A `Retriever` for an index directory (updated or not), or several searched as one (shards), once
        `check_model` passes for each.

        With `encoder` None, the model is not checked and `search` cannot be called: the index's ids and
        documents serve its BM25 side alone (`HybridRetriever`).

        Raises:
            DataError: a missing or malformed index directory.
            MismatchError: the index was built with another model.
        """
        index_dirs = [index_dir] if isinstance(index_dir, (str, os.PathLike)) else list(index_dir)
        if encoder is not None:
            for directory in index_dirs:
                encoder = cls.encoder_for(directory, encoder)
        paths = [os.path.join(directory, INDEX_SUBDIR) for directory in index_dirs]
        index = SearchIndex.load(paths[0] if len(paths) == 1 else paths)
        return cls(encoder, index, index_documents(index))

    @functools.cached_property
    def metadata(self):
        """The `MetadataColumns` of the index's rows (from the documents it stores; none without them)."""
        fields = None
        if self.corpus is not None and self.corpus.metadata is not None:
            fields = [
                self.corpus.metadata[self._positions[doc_id]] if doc_id in self._positions else {}
                for doc_id in self.index.ids
            ]
        return MetadataColumns(self.index.ids, fields)

    def allowed(self, filter):
        """The bool mask of the index's rows that `filter` allows (`Filter.of`: a `Filter`, a clause, a list
        of clauses), or None for no filter.

        Raises:
            UserError: a clause on an unknown field or of the wrong type, or one that does not parse.
        """
        filter = Filter.of(filter)
        return None if filter is None else self.metadata.allowed(filter)

    def search(self, queries, k=10, filter=None):
        """Top-`k` hits per query: lists of `{"id", "score", "title", "text"}`.

        With `filter` (a `Filter`, a clause such as `"year >= 2019"`, or a list of clauses, ANDed), only the
        documents it allows are searched (`filtered_search`): `min(k, allowed)` hits per query.
        """
        return self.hits(*self.search_ids(self.encoder.encode_queries(list(queries)), k, self.allowed(filter)))

    def search_ids(self, query_embeddings, k, allowed=None):
        """`(ids, scores)` of the top `k` rows per query embedding among those `allowed` (a mask, `allowed`;
        None: every row), as `SearchIndex.search_ids` gives them."""
        if allowed is None:
            return self.index.search_ids(query_embeddings, k)
        rows, scores = filtered_search(self.index, query_embeddings, k, allowed)
        return [[self.index.ids[i] for i in row] for row in rows], scores

    def document(self, doc_id):
        """The stored `Document` of `doc_id` (`{"id", "title", "text", "metadata"}`), its fields empty (`""`,
        `{}`) where the index stores none for it: whether `doc_id` is in the index is `index.ids`' to say."""
        i = self._positions.get(doc_id)
        if i is None:
            return {"id": doc_id, "title": "", "text": "", "metadata": {}}
        metadata = dict(self.corpus.metadata[i]) if self.corpus.metadata is not None else {}
        return {"id": doc_id, "title": self.corpus.titles[i], "text": self.corpus.texts[i], "metadata": metadata}

    def hits(self, ids, scores):
        """Per query, `{"id", "score"}` of each of its `ids` and `scores`, with the document's `title` and
        `text` where the index stores documents."""
        hits = []
        for row_ids, row_scores in zip(ids, scores):
            row = []
            for doc_id, score in zip(row_ids, row_scores):
                hit = {"id": doc_id, "score": float(score)}
                if doc_id in self._positions:
                    i = self._positions[doc_id]
                    hit.update(title=self.corpus.titles[i], text=self.corpus.texts[i])
                row.append(hit)
            hits.append(row)
        return hits
