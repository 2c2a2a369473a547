"""The BM25 side of an index directory: `INDEX/bm25/`, a `BM25Retriever` of the index's documents in
bm25s' own format, with the ids of the dense part in its order.

`gtr-keras index` writes it beside the dense part, inside the same atomic
directory (`index_building.write_index`): the two appear, and are replaced, together.
Loading checks that its ids are the dense part's, in order, and that it indexed
the texts of the documents the index stores. An index of
precomputed embeddings has no texts: it gets a BM25 side from a corpus given
for it (`corpus_in_index_order` checks its ids), or none (`load_bm25_side`
refuses hybrid search on it).
"""

import os

from gtr_keras.beir.readers import Corpus
from gtr_keras.errors import DataError, MismatchError
from gtr_keras.lexical.bm25 import SAVED_FILES, SETTINGS_JSON, BM25Retriever
from gtr_keras.storage.layout import BM25_SUBDIR, IDS_TXT, INDEX_SUBDIR
from gtr_keras.storage.segments import index_documents
from gtr_keras.utils import files
from gtr_keras.utils.records import strings_sha256

BM25_DIRECTORY = files.DirectoryKind("the BM25 side of an index", (SETTINGS_JSON,), SAVED_FILES)


def _bm25_of(corpus):
    retriever = BM25Retriever()
    retriever.index(corpus.joined(), corpus.ids)
    return retriever


def write_bm25_side(staging, corpus):
    """Indexes `corpus` with BM25 into `staging/bm25`, a local directory (an index's staging directory), a
    unit with its own record (`files.write_checksums`), as the side an update rebuilds is.

    Example:
    >>> write_bm25_side(pathlib.Path("/tmp/.scifact.tmp-1"), load_corpus("scifact"))
    """
    _bm25_of(corpus).save(os.path.join(staging, BM25_SUBDIR))
    files.write_checksums(os.path.join(staging, BM25_SUBDIR))


def rebuild_bm25_side(index_dir, index):
    """Replaces the BM25 side of an updated index directory, atomically, by one of the documents of the
    live rows of `index` (its dense part as loaded after the update), in their order.

    The whole side is rebuilt (bm25s indexes have no updates, and every document's weights depend on the
    corpus' statistics): about 0.2-0.35 ms a document on 2 CPU cores (docs/hybrid.md), whatever the update.

    Raises:
        DataError: a live row without its document (an update from embeddings, which bring no texts).

    Example:
    >>> rebuild_bm25_side("indexes/scifact", SearchIndex.load("indexes/scifact/index"))
    """
    corpus = index_documents(index, keep_damaged=True)  # an update may be the one that deletes them
    if corpus is None:
        raise DataError(f"{index_dir}: stores no documents, so no BM25 side can be built")
    corpus = corpus_in_index_order(corpus, os.path.join(index_dir, INDEX_SUBDIR), index.ids)
    with files.atomic_directory(os.path.join(index_dir, BM25_SUBDIR), [BM25_DIRECTORY]) as staging:
        _bm25_of(corpus).save(staging)


def bm25_side_ids(index_dir):
    """The ids of an index directory's BM25 side, in row order (its `ids.txt`, without loading the side)."""
    with files.open(os.path.join(index_dir, BM25_SUBDIR, IDS_TXT), "rb") as f:
        return f.read().decode("utf-8").splitlines()


def has_bm25_side(index_dir):
    """Whether the index directory `index_dir` holds a BM25 side."""
    return files.isfile(os.path.join(index_dir, BM25_SUBDIR, SETTINGS_JSON))


def load_bm25_side(index_dir, ids=None, corpus=None, verify=False):
    """The `BM25Retriever` of an index directory, once its ids are checked to be `ids` (the dense part's)
    and its texts those of `corpus`.

    Args:
        index_dir: an index directory (local or on any file system TensorFlow knows).
        ids: the ids of the index's dense part, in row order, or None: not checked.
        corpus: the documents the index stores (`Retriever.corpus`), or None: texts not checked.
        verify: first verify the side's files against its record (`BM25Retriever.load`).

    Raises:
        DataError: the index has no BM25 side (one line saying how to give it one), or a malformed one.
        MismatchError: its ids are not `ids` in that order, or it indexed other texts than `corpus`'s.

    Example:
    >>> bm25 = load_bm25_side("indexes/scifact", SearchIndex.load("indexes/scifact/index").ids)
    """
    path = os.path.join(index_dir, BM25_SUBDIR)
    if not has_bm25_side(index_dir):
        raise DataError(
            f"{index_dir}: no BM25 side ({path} is missing), so no BM25 or hybrid search; rebuild the index "
            "without --no-bm25, or, for one of --embeddings, with --bm25-corpus CORPUS"
        )
    with files.local_copy(path) as local:
        retriever = BM25Retriever.load(local, verify)
    mismatch = side_mismatch(retriever, ids, corpus)
    if mismatch:
        raise MismatchError(
            f"{path}: {mismatch}: an update is rebuilding it (retry when it ends) or was killed first (the next "
            f"update, or `gtr-keras update {index_dir} --compact`, rebuilds it)"
        )
    return retriever


def side_mismatch(retriever, ids, corpus=None):
    """How a loaded BM25 side differs from the index whose dense part holds `ids` (None: not compared) and
    stores `corpus` (None: not compared), or None where it does not.

    Example:
    >>> side_mismatch(load_bm25_side("indexes/scifact"), ["d0"])  # doctest: +SKIP
    "not the documents of the index (5183 ids for 1; row 0 holds '4983', the dense part 'd0')"
    """
    side, dense = retriever.ids, None if ids is None else list(ids)
    if dense is not None and side != dense:
        first = next((i for i, (a, b) in enumerate(zip(side, dense)) if a != b), min(len(side), len(dense)))
        found = repr(side[first]) if first < len(side) else "nothing"
        wanted = repr(dense[first]) if first < len(dense) else "nothing"
        return (
            f"not the documents of the index ({len(side)} ids for {len(dense)}; row {first} holds {found}, the "
            f"dense part {wanted})"
        )
    if corpus is not None and retriever.texts_sha256 != strings_sha256(corpus.joined()):
        return "indexed other texts than the documents the index stores"
    return None


def corpus_in_index_order(corpus, path, ids):
    """`corpus` (read from `path`) in the order of the index ids `ids`, once it holds exactly those documents.

    Raises:
        DataError: `corpus` lacks a document of the index, or holds one the index does not, naming `path`
            and the id.

    Example:
    >>> corpus_in_index_order(load_corpus("scifact"), "scifact", EmbeddingFiles.open("emb/*.npy").ids)
    """
    ids = list(ids)
    positions = {doc_id: i for i, doc_id in enumerate(corpus.ids)}
    missing = next((doc_id for doc_id in ids if doc_id not in positions), None)
    if missing is not None:
        raise DataError(f"{path}: lacks document {missing!r} of the index (the BM25 side needs every document)")
    if len(corpus) != len(ids):
        indexed = set(ids)
        extra = next(doc_id for doc_id in corpus.ids if doc_id not in indexed)
        raise DataError(f"{path}: document {extra!r} is not in the index (its embeddings hold other documents)")
    order = [positions[doc_id] for doc_id in ids]
    metadata = None if corpus.metadata is None else [corpus.metadata[i] for i in order]
    return Corpus(
        [corpus.ids[i] for i in order], [corpus.titles[i] for i in order], [corpus.texts[i] for i in order], metadata
    )
