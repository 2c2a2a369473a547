"""BM25 sparse baseline on `bm25s`, saved and loaded in bm25s' own format."""

import json
import os
from collections.abc import Iterable, Sequence
from typing import Any, Self

import numpy as np

from gtr_keras.errors import DataError, UserError
from gtr_keras.storage.exact_search import tie_ranks
from gtr_keras.storage.layout import IDS_TXT, read_ids
from gtr_keras.utils.checksums import verify_directory
from gtr_keras.utils.records import check_fields, read_json_object, strings_sha256

SETTINGS_JSON = "bm25.json"
# What `BM25Retriever.save` writes: its own two files and bm25s' (`bm25s.BM25.save`, no corpus).
SAVED_FILES = (SETTINGS_JSON, IDS_TXT, "params.index.json", "vocab.index.json", "*.index.npy")
_FORMAT = 1
_TOKENIZATION = {"stopwords": "en", "stemmer": "english"}
_SETTINGS_FIELDS = {
    "num_documents": "count",
    "k1": "number?",
    "b": "number?",
    "method": "str?",
    "texts_sha256": "sha256?",
    "has_terms": "bool?",
}


class BM25Retriever:
    """Lexical BM25 retrieval with English stopwords and Snowball stemming.

    Args:
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
        method: the `bm25s` scoring variant (`"lucene"`, `"robertson"`, ...).
        show_progress: show `bm25s` progress bars.

    Example:
    >>> retriever = BM25Retriever()
    >>> retriever.index(["cats purr", "dogs bark"], ["d1", "d2"])
    >>> retriever.search(["barking dog"], k=1)[0]
    [['d2']]
    """

    def __init__(self, k1: float = 1.5, b: float = 0.75, method: str = "lucene", show_progress: bool = False):
        import bm25s  # not at import: `search`, `index` and `export` import this module (retriever.py) for names
        import Stemmer

        self.k1, self.b, self.method, self.show_progress = k1, b, method, show_progress
        self._bm25 = bm25s.BM25(k1=k1, b=b, method=method)
        self._stemmer = Stemmer.Stemmer(_TOKENIZATION["stemmer"])
        self._doc_ids: np.ndarray | None = None
        self._id_ranks: np.ndarray | None = None
        self._has_terms = True  # False for a corpus none of whose texts has a term (bm25s cannot index it)
        self.texts_sha256 = None  # of the indexed texts, in order (`records.strings_sha256`)

    def get_config(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b, "method": self.method, "show_progress": self.show_progress}

    @property
    def ids(self) -> list[str] | None:
        """The indexed document ids, in row order (None before `index`)."""
        return None if self._doc_ids is None else self._doc_ids.tolist()

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Writes the index into the local directory `directory` (created if missing): bm25s' own files
        (`bm25s.BM25.save`, no corpus), `ids.txt` (one id a line, in row order) and `bm25.json` (the
        settings and tokenization, checked by `load`, and `texts_sha256`, the SHA-256 of the texts indexed)."""
        if self._doc_ids is None:
            raise RuntimeError("call index() before save()")
        os.makedirs(directory, exist_ok=True)
        if self._has_terms:
            self._bm25.save(directory, show_progress=False)
        with open(os.path.join(directory, IDS_TXT), "w", encoding="utf-8", newline="") as f:
            f.writelines(f"{doc_id}\n" for doc_id in self._doc_ids)
        settings = {
            "format": _FORMAT,
            "num_documents": len(self._doc_ids),
            "texts_sha256": self.texts_sha256,
            "has_terms": self._has_terms,
            **_TOKENIZATION,
            **self.get_config(),
        }
        with open(os.path.join(directory, SETTINGS_JSON), "w", encoding="utf-8") as f:
            json.dump(settings, f, indent=2)

    @classmethod
    def load(cls, directory: str | os.PathLike[str], verify: bool = False) -> Self:
        """A `BM25Retriever` saved by `save` in the local directory `directory`, its arrays memory-mapped: read
        as searches need them, and readable after the files' removal (an index's update replaces its BM25
        side's directory, never a file in it), so that a loaded side keeps its version.

        `verify`: first verify every file against the directory's records (`utils.checksums.verify_directory`;
        a directory gtr-keras committed: an index's BM25 side), and refuse a damaged one.

        Raises:
            DataError: a missing or malformed file, or an index of another format or tokenization.
        """
        if verify:
            verify_directory(directory)
        path = os.path.join(directory, SETTINGS_JSON)
        remedy = "rebuild the index"
        settings = read_json_object(path, remedy)
        if settings.get("format") != _FORMAT or any(settings.get(k) != v for k, v in _TOKENIZATION.items()):
            raise DataError(f"{path}: a BM25 index of another format or tokenization than this gtr-keras'; {remedy}")
        check_fields(path, settings, _SETTINGS_FIELDS, remedy)
        import bm25s

        retriever = cls(**{key: settings[key] for key in ("k1", "b", "method", "show_progress") if key in settings})
        retriever._has_terms = settings.get("has_terms", True)
        try:
            if retriever._has_terms:
                retriever._bm25 = bm25s.BM25.load(directory, mmap=True, show_progress=False)
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as error:
            raise DataError(f"{directory}: unreadable BM25 index ({error}); {remedy}") from error
        ids = read_ids(os.path.join(directory, IDS_TXT), settings["num_documents"])
        retriever._doc_ids = np.asarray(list(ids), dtype=object)
        retriever.texts_sha256 = settings.get("texts_sha256")
        return retriever

    def _tokenize(self, texts):
        import bm25s

        return bm25s.tokenize(
            list(texts),
            stopwords=_TOKENIZATION["stopwords"],
            stemmer=self._stemmer,
            return_ids=False,
            show_progress=self.show_progress,
        )

    def index(self, corpus_texts: Iterable[str], corpus_ids: Iterable[str]) -> None:
        """Builds the index.

        Args:
            corpus_texts: document texts.
            corpus_ids: document ids, aligned with `corpus_texts`.
        """
        corpus_ids = list(corpus_ids)
        corpus_texts = list(corpus_texts)
        if len(corpus_texts) != len(corpus_ids):
            raise UserError(f"got {len(corpus_texts)} texts but {len(corpus_ids)} ids")
        if not corpus_ids:
            raise UserError("cannot index an empty corpus")
        tokens = self._tokenize(corpus_texts)
        self._has_terms = any(tokens)
        if self._has_terms:
            self._bm25.index(tokens, show_progress=self.show_progress)
        self._doc_ids = np.asarray(corpus_ids, dtype=object)
        self._id_ranks = None
        self.texts_sha256 = strings_sha256(corpus_texts)

    def search(self, queries: Sequence[str], k: int, allowed: Any = None) -> tuple[list[list[str]], list[list[float]]]:
        """Retrieves the best documents for each query.

        Only documents sharing a term with the query are returned (as in
        Lucene or Elasticsearch), so a query can get fewer than `k` results;
        `k` larger than the corpus is allowed. Documents tied in score are
        ranked, and cut at `k`, by id in descending order (trec_eval's rule,
        `evaluation.rank_documents`), whatever the corpus' order.

        Args:
            queries: query texts.
            k: the most documents to return per query.
            allowed: bool `[N]` of the documents (in row order) that may be
                returned (a filter, `docs/filters.md`), or None: every one.
                The top `k` is that of the allowed documents.

        Returns:
            `(ids, scores)`: per query, a list of at most `k` document ids,
            best first, and the list of their scores.
        """
        if self._doc_ids is None:
            raise RuntimeError("call index() before search()")
        if not queries:
            return [], []
        if not self._has_terms:
            return [[] for _ in queries], [[] for _ in queries]
        if self._id_ranks is None:
            self._id_ranks = tie_ranks(np.char.encode(self._doc_ids.astype(str), "utf-8"))
        allowed_rows = None if allowed is None else np.asarray(allowed, bool)
        ids, kept_scores = [], []
        for tokens in self._tokenize(queries):
            scores = np.asarray(self._bm25.get_scores(tokens)) if tokens else np.zeros(len(self._doc_ids))
            matched = np.flatnonzero(scores > 0 if allowed_rows is None else (scores > 0) & allowed_rows)
            if len(matched) > k:
                matched = matched[scores[matched] >= np.partition(scores[matched], -k)[-k]]
            best = matched[np.lexsort((self._id_ranks[matched], -scores[matched]))][:k]
            ids.append(self._doc_ids[best].tolist())
            kept_scores.append(scores[best].tolist())
        return ids, kept_scores
