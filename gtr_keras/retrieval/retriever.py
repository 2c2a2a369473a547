"""Index directories: building one from a corpus with a GTR encoder (resumable), and the
`Retriever` that searches it.

An index directory (written by `build_index`, atomically) holds:

- `retriever.json`: the model it was built with (directory, settings and
  `fingerprint.fingerprint`), the index kind and the number of documents;
- `documents.jsonl.gz`: the indexed documents (`_id`, `title`, `text`) for display;
- `index/`: the `SearchIndex` (embeddings, ids, ScaNN searcher when approximate).

Index directories, and the work directories beside them, may be local or on
any file system TensorFlow knows (`gs://...`, `ram://...`).
"""

import gzip
import json
import os

from tqdm.auto import tqdm

from gtr_keras.errors import DataError, MismatchError
from gtr_keras.models.gtr.fingerprint import fingerprint
from gtr_keras.retrieval.index import KINDS, SearchIndex
from gtr_keras.retrieval.readers import load_corpus
from gtr_keras.retrieval.shards import ShardWriter
from gtr_keras.utils import files
from gtr_keras.utils.files import atomic_directory
from gtr_keras.utils.locks import locks_output
from gtr_keras.utils.records import (
    check_positive_int,
    describe_change,
    read_json_object,
)

RETRIEVER_JSON = "retriever.json"
DOCUMENTS_FILE = "documents.jsonl.gz"
INDEX_SUBDIR = "index"
# What determines document embeddings, in the order a mismatch is reported: settings first, as
# they name the cause, then the fingerprint that also covers the weights and the vocabulary.
MODEL_FIELDS = ("embedding_dim", "document_length", "query_length", "compute_dtype", "model_sha256")
# What queries must share with the indexed documents (the token budget of queries is the searcher's choice).
SEARCH_FIELDS = ("embedding_dim", "compute_dtype", "model_sha256")


def work_dir_for(index_dir):
    """Where `build_index` keeps finished shards until the index is complete: `<index_dir>.partial`
    (an absolute path for a local `index_dir`; a URL such as `gs://...` stays one)."""
    path = os.fspath(index_dir)
    if files.is_local(path):
        return os.path.abspath(path.removeprefix("file://")).rstrip(os.sep) + ".partial"
    return path.rstrip("/") + ".partial"


@locks_output("index_dir")
def build_index(encoder, corpus, index_dir, model_dir=None, kind="auto", batch_size=32, shard_size=2048,
                progress=None):
    """Encodes `corpus` and writes a searchable index directory.

    Embeddings are written shard by shard to `work_dir_for(index_dir)`; a run
    that is killed resumes from the last finished shard when started again.
    Resuming checks that the model (`fingerprint.fingerprint`: weights,
    vocabulary, architecture, precision, token budgets), the ids, the shard
    size and the texts of every finished shard are the same as before. The
    index directory appears only when complete (a previous index stays in
    place until then).

    Args:
        encoder: the `Encoder` for documents.
        corpus: a `Corpus`.
        index_dir: directory to write.
        model_dir: the model directory, recorded in `retriever.json` for the
            user (the fingerprint is what `Retriever.load` checks).
        kind: `"auto"` (exact below 20k documents, ScaNN above), `"exact"`, `"scann"`.
        batch_size: documents per forward pass.
        shard_size: documents per resumable shard.
        progress: show a progress bar (default: for corpora of 5000 or more).

    Returns:
        The `SearchIndex` written to `index_dir/index`.

    Raises:
        MismatchError: the work directory holds shards of another model,
            other ids, another shard size or other texts.
        ValueError: an empty corpus, an unknown `kind`, a `batch_size` or
            `shard_size` that is not a positive int.

    Example:
    >>> build_index(gtr_keras.load("models/gtr-base"), load_corpus("scifact"), "indexes/scifact")
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
    check_positive_int(batch_size, "batch_size")
    check_positive_int(shard_size, "shard_size")
    if not len(corpus):
        raise ValueError("the corpus is empty: nothing to index")
    texts = corpus.joined()
    metadata = index_metadata(encoder, model_dir)
    model = {field: metadata[field] for field in MODEL_FIELDS}
    writer = ShardWriter(work_dir_for(index_dir), corpus.ids, texts, shard_size, model)
    pending = writer.pending_shards()
    show = progress if progress is not None else len(corpus) >= 5000
    done = len(corpus) - sum(s.end - s.start for s in pending)
    with tqdm(total=len(corpus), initial=done, disable=not show, desc="indexing", unit="doc") as bar:
        for shard in pending:
            writer.write(shard.number, encoder.encode_documents(texts[shard.start:shard.end], batch_size, False))
            bar.update(shard.end - shard.start)
    index = SearchIndex(corpus.ids, writer.assemble(), kind=kind)
    write_index(index_dir, index, corpus, metadata)
    files.remove(writer.work_dir)
    return index


def write_index(index_dir, index, corpus, metadata):
    """Writes an index directory for a `SearchIndex` over `corpus`, atomically.

    Every file is written into a temporary sibling directory that replaces
    `index_dir` only once complete: a failure or a kill leaves the previous
    `index_dir` (or none) as it was.

    Args:
        index_dir: the directory to create or replace.
        index: a `SearchIndex` whose ids are `corpus.ids`, in order.
        corpus: the indexed `Corpus`, stored for titles and snippets.
        metadata: `index_metadata` of the encoder that made the embeddings.

    Raises:
        ValueError: the index and the corpus hold other ids, or `metadata`
            lacks a field of `MODEL_FIELDS`.

    Example:
    >>> write_index("indexes/scifact", index, corpus, index_metadata(encoder, "models/gtr-base"))
    """
    if index.ids != list(corpus.ids):
        raise ValueError("the index rows must hold the corpus documents, in corpus order")
    missing = [field for field in MODEL_FIELDS if field not in metadata]
    if missing:
        raise ValueError(f"metadata lacks {missing}: pass index_metadata(encoder, model_dir)")
    with atomic_directory(index_dir) as staging:  # a local directory, uploaded after for a remote index_dir
        index.save(os.path.join(staging, INDEX_SUBDIR))
        with gzip.open(os.path.join(staging, DOCUMENTS_FILE), "wt", encoding="utf-8") as f:
            for doc_id, title, text in zip(corpus.ids, corpus.titles, corpus.texts):
                f.write(json.dumps({"_id": doc_id, "title": title, "text": text}, ensure_ascii=False) + "\n")
        with open(os.path.join(staging, RETRIEVER_JSON), "w", encoding="utf-8") as f:
            json.dump({**metadata, "kind": index.kind, "num_documents": len(corpus)}, f, indent=2)


def index_metadata(encoder, model_dir):
    """What an index records about the model that built it.

    Args:
        encoder: the `Encoder` that encodes the documents.
        model_dir: its model directory (recorded as an absolute path, or as
            given for one on another file system such as `gs://...`), or None.

    Returns:
        A JSON-serialisable dict: `model_dir` and the `MODEL_FIELDS`, among
        them `model_sha256`, the model's `fingerprint.fingerprint`.

    Example:
    >>> index_metadata(gtr_keras.load("models/gtr-base"), "models/gtr-base")["embedding_dim"]
    768
    """
    if model_dir and files.is_local(model_dir):
        model_dir = os.path.abspath(os.fspath(model_dir).removeprefix("file://"))
    return {"model_dir": os.fspath(model_dir) if model_dir else None,
            "embedding_dim": encoder.embedding_dim, "document_length": encoder.document_length,
            "query_length": encoder.query_length, "compute_dtype": encoder.model.compute_dtype,
            "model_sha256": fingerprint(encoder)}


class Retriever:
    """Answers text queries from an index directory.

    Args:
        encoder: the `Encoder` the index was built with.
        index: the `SearchIndex`.
        corpus: the indexed `Corpus` (for titles and snippets), optional.

    Example:
    >>> retriever = Retriever.load("indexes/scifact", gtr_keras.load("models/gtr-base"))
    >>> retriever.search(["does vitamin D prevent fractures?"], k=5)[0][0]["id"]
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
        query token budget may differ. Indexes written before the fingerprint
        was recorded are refused too.

        Args:
            index_dir: an index directory written by `build_index`.
            encoder: the `Encoder` to search with.

        Returns:
            The recorded metadata (`retriever.json`).

        Raises:
            DataError: `index_dir` is not an index directory, or its
                `retriever.json` is unreadable.
            MismatchError: the index was built with another model, or by a
                gtr-keras that did not record the model's fingerprint.

        Example:
        >>> Retriever.check_model("indexes/scifact", gtr_keras.load("models/gtr-base"))["kind"]
        'exact'
        """
        path = os.path.join(index_dir, RETRIEVER_JSON)
        if not files.isfile(path):
            raise DataError(f"{index_dir}: not an index directory (no {RETRIEVER_JSON}); "
                            f"build one with `gtr-keras index`")
        recorded = read_json_object(path, "rebuild the index with `gtr-keras index`")
        if "model_sha256" not in recorded:
            raise MismatchError(f"{index_dir}: built by an older gtr-keras that did not record the model's "
                                f"fingerprint; rebuild the index with `gtr-keras index`")
        given = index_metadata(encoder, None)
        change = describe_change(recorded, {field: given[field] for field in SEARCH_FIELDS}, "the model given has")
        if change:
            raise MismatchError(f"{index_dir}: built with another model ({change}); search with the model the "
                                f"index was built with (recorded model_dir: {recorded.get('model_dir')}) "
                                f"or rebuild the index")
        return recorded

    @classmethod
    def load(cls, index_dir, encoder):
        """A `Retriever` for an index directory, once `check_model` passes.

        Raises:
            DataError: a missing or malformed index directory.
            MismatchError: the index was built with another model.
        """
        cls.check_model(index_dir, encoder)
        index = SearchIndex.load(os.path.join(index_dir, INDEX_SUBDIR))
        return cls(encoder, index, load_corpus(os.path.join(index_dir, DOCUMENTS_FILE)))

    def search(self, queries, k=10):
        """Top-`k` hits per query: lists of `{"id", "score", "title", "text"}`."""
        ids, scores = self.index.search_ids(self.encoder.encode_queries(list(queries)), k)
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
