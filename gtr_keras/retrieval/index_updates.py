"""Updates of an index directory of `gtr-keras index`: documents added, replaced or deleted in place.

The checks are those of a build, and run before any encoding or index work:
new embedding files are checked by `EmbeddingFiles.open` (D, finite unit
rows, unique ids, id text) and must be of the model the index records
(`retriever.json`), as must an encoder given to encode new documents; the ids
to delete must be in the index. The vectors go into a new segment of the
search index (`segment_writer`), their documents beside them, so that
`search` shows the documents of the version it loaded. An index with a BM25
side gets it rebuilt from the updated documents once the update is committed
(`bm25_side.rebuild_bm25_side`), and a side a killed update left behind is
rebuilt by the next update before it starts; an update from embeddings,
which bring no texts, removes the side (with a `DataWarning`).
"""

import os
import warnings

import numpy as np

from gtr_keras.beir.readers import check_corpus, load_corpus, metadata_type
from gtr_keras.errors import DataError, DataWarning, MismatchError, UserError
from gtr_keras.filters.expressions import id_list
from gtr_keras.lexical.bm25_side import bm25_side_ids, corpus_in_index_order, has_bm25_side, rebuild_bm25_side
from gtr_keras.retrieval.index_building import (
    DIMENSIONS_FIELD,
    MODEL_FIELDS,
    embeddings_metadata,
    with_recorded_dimensions,
)
from gtr_keras.retrieval.index_types import IndexUpdate
from gtr_keras.retrieval.retriever import model_change
from gtr_keras.storage.embedding_files import EmbeddingFiles
from gtr_keras.storage.layout import BM25_SUBDIR, INDEX_SUBDIR, read_id_file, read_model_record
from gtr_keras.storage.search_index import ArrayRows, SearchIndex
from gtr_keras.storage.segment_writer import (
    check_not_added,
    compacted_if_asked,
    missing_ids,
    read_state,
    request_sha256,
    update_search_index,
)
from gtr_keras.storage.segments import documents_path, live_corpus, metadata_types
from gtr_keras.utils import files
from gtr_keras.utils.locks import locks_output
from gtr_keras.utils.records import describe_change
from gtr_keras.utils.text_files import id_field, iter_jsonl

REMEDY = "update it with the model it was built with, or rebuild the index"


def _check_deletions(index_dir, state, ids, where=None):
    """Raises `DataError` naming (by `where(i)`, default `delete[i]`) the first of `ids` that is not a live
    row of the index directory's index (its `IndexState`, `state`)."""
    missing = missing_ids(state, ids)
    if missing:
        where = where or (lambda i: f"delete[{i}]")
        raise DataError(f"{where(missing[0])}: id {ids[missing[0]]!r} is not in the index {index_dir}")


def deletion_ids(delete):
    """The ids of `delete` (`update_index`'s), and `where(i)`, which names id `i` (its file's line), or None."""
    if isinstance(delete, os.PathLike):
        return read_id_file(os.fspath(delete))
    return ([] if delete is None else id_list(delete, "delete")), None


@locks_output("index_dir", inside=(INDEX_SUBDIR,))
def update_index(
    index_dir,
    embeddings=None,
    corpus=None,
    encoder=None,
    model_dir=None,
    delete=None,
    missing_ok=False,
    compact="auto",
    batch_size=32,
    progress=None,
    documents=None,
    recorded=None,
    late=None,
):
    """Adds or replaces documents of an index directory and deletes others, in place.

    Documents whose id is in the index are replaced, the others added;
    `delete` names ids to delete. Readers that loaded the index keep their
    version; the update is committed whole or not at all (`segment_writer`).
    Every input is checked before the encoder is made or used: the update
    reads the index's model record and state (`segment_writer.read_state`)
    once, and the file of ids to delete once. The BM25 side is rebuilt only
    when documents changed: a compaction alone leaves it as it is. A rerun of
    the update last committed (one killed after its commit) changes nothing
    but a BM25 side the kill left stale (the manifest records what each
    update was asked: `segment_writer.request_sha256`).

    Args:
        index_dir: an index directory of `gtr-keras index` (or `build_index`).
        embeddings: a glob of precomputed embedding files, or an opened `EmbeddingFiles`, or None.
        corpus: a `Corpus`, or a corpus file (which errors then name with its line), to encode with
            `encoder` instead, or None.
        encoder: the `Encoder` of the index's model, or a function that makes it (called once the inputs
            are checked): required with `corpus`; with `embeddings`, declares or checks their model.
        model_dir: the encoder's model directory, for messages.
        delete: the ids to delete: one id (a string, or an integer), a list (or any iterable) of ids, a
            file of one id a line given as an `os.PathLike` (`pathlib.Path`, or `files.FilePath` for a path
            with a scheme: a `str` is always one id), or None.
        missing_ok: skip ids of `delete` that are not in the index.
        compact: `"auto"`, True or False (`segment_writer.update_search_index`).
        batch_size, progress: for encoding `corpus`.
        documents: with `embeddings`, their documents (titles, texts and metadata, stored as `corpus`'s
            are): a `Corpus` in the embeddings' order or a corpus file (any order, the same ids); None: the
            documents the embeddings replace lose theirs (a `DataWarning` when they had metadata).
        recorded: the index directory's model record, where the caller read it already (`read_model_record`);
            None: read here.
        late: a `passages.LateRows` of `corpus`'s documents, which encodes its rows (by their ids) instead of
            `encoder.encode_documents` (a late-chunking index, `LATE_CHUNKING_FIELD`), or None.

    Returns:
        An `IndexUpdate`: the ids added, replaced and deleted, and the generation, documents and segments
        the update left.

    Raises:
        MismatchError: embeddings or an encoder of another model than the
            index's, or of another D.
        DataError: not an index directory, an id to delete that is not in the
            index (named with its file and line), a bad embedding file or id file, or a
            value of a `Corpus` that a corpus file could not hold (`check_corpus`,
            naming its row and field).
        UserError: both `embeddings` and `corpus`, or `corpus` without `encoder`,
            or an id to delete that is not valid Unicode (a lone surrogate).

    Example:
    >>> update_index("indexes/msmarco", embeddings="new/*.npy", delete=pathlib.Path("withdrawn.txt")).generation
    1
    """
    corpus_path = None
    if isinstance(corpus, (str, os.PathLike)):
        corpus_path, corpus = os.fspath(corpus), load_corpus(corpus)
    elif corpus is not None:
        corpus = check_corpus(corpus)
    if embeddings is not None and corpus is not None:
        raise UserError("update an index from embeddings or from a corpus, not both")
    if documents is not None and embeddings is None:
        raise UserError("documents go with embeddings (a corpus brings its own)")
    if corpus is not None and encoder is None:
        raise UserError("a corpus is encoded by the index's model: pass its encoder")
    delete_ids, where = deletion_ids(delete)
    recorded = read_model_record(index_dir) if recorded is None else recorded
    search_index = os.path.join(index_dir, INDEX_SUBDIR)
    state = read_state(search_index)
    bm25 = _repair_bm25_side(index_dir, search_index, state)
    source = (
        embeddings if isinstance(embeddings, EmbeddingFiles) or embeddings is None else EmbeddingFiles.open(embeddings)
    )
    documents_path = None
    if isinstance(documents, (str, os.PathLike)):
        documents_path = os.fspath(documents)
        documents = corpus_in_index_order(load_corpus(documents_path), documents_path, source.ids)
    elif documents is not None:
        documents = check_corpus(documents)
    stored = corpus if corpus is not None else documents
    asked = source is not None or corpus is not None or bool(delete_ids)
    request = request_sha256(source, delete_ids, stored) if asked else None
    if request is not None and state.manifest.get("update_sha256") == request:
        # A rerun of the update last committed changes nothing: its BM25 side is repaired.
        return IndexUpdate.of(compacted_if_asked(state, compact))
    if not missing_ok:
        _check_deletions(index_dir, state, delete_ids, where)
    new = corpus if corpus is not None else source
    check_not_added(delete_ids, [] if new is None else new.ids, where)  # before any encoding
    if stored is not None:
        check_metadata_types(state, stored, delete_ids, corpus_path or documents_path)
    encoder = encoder() if callable(encoder) and not hasattr(encoder, "encode_documents") else encoder
    if source is not None:
        metadata = embeddings_metadata(source, encoder, model_dir)
        if metadata.get(DIMENSIONS_FIELD) != recorded.get(DIMENSIONS_FIELD):
            raise MismatchError(
                f"{source.paths[0]}: encoded with dimensions {metadata.get(DIMENSIONS_FIELD) or 'all'}, but the "
                f"index {index_dir} was built with dimensions {recorded.get(DIMENSIONS_FIELD) or 'all'}; encode "
                f"them with --dimensions {recorded.get(DIMENSIONS_FIELD) or 'none'}"
            )
        given = {field: metadata[field] for field in MODEL_FIELDS}
        change = describe_change(recorded, given, "the new embeddings have")
        if change:
            raise MismatchError(
                f"{source.paths[0]}: encoded by another model than the index {index_dir} ({change}; recorded "
                f"model_dir: {recorded.get('model_dir')}); {REMEDY}"
            )
    elif corpus is not None:
        encoder = with_recorded_dimensions(recorded, encoder, index_dir)
        change, _ = model_change(recorded, encoder, MODEL_FIELDS, model_dir)
        if change:
            raise MismatchError(
                f"{index_dir}: built with another model ({change}; recorded model_dir: "
                f"{recorded.get('model_dir')}); {REMEDY}"
            )
        if late is None:
            vectors = encoder.encode_documents(corpus.joined(), batch_size, progress)
        else:
            vectors = late.encode(corpus.ids, batch_size)
        source = ArrayRows(corpus.ids, vectors)
    if embeddings is not None and documents is None:
        _warn_of_lost_metadata(index_dir, state, source.ids)
    new_ids = [] if source is None else list(source.ids)
    replaced, deleted = state.find(new_ids)[0], state.find(delete_ids)[0]
    documents_change = source is not None or bool(deleted.any())
    manifest = update_search_index(search_index, source, delete_ids, where, missing_ok, compact, stored, state, request)
    if bm25 and embeddings is not None and documents is None:
        side = os.path.join(index_dir, BM25_SUBDIR)
        aside = os.path.join(index_dir, f".{BM25_SUBDIR}.tmp-removed")  # what `files.remove_staging` clears
        if files.is_local(side):
            files.rename(side, aside)  # a kill while removing it leaves a name that the next update clears
            side = aside
        files.remove(side)
        warnings.warn(
            f"{index_dir}: its BM25 side is removed: embeddings bring no texts to index (search --retriever "
            "bm25|hybrid is refused until the index is rebuilt from its corpus)",
            DataWarning,
            stacklevel=2,
        )
    elif bm25 and documents_change:
        rebuild_bm25_side(index_dir, SearchIndex.load(search_index))
    return IndexUpdate.of(
        manifest,
        added=[i for i, found in zip(new_ids, replaced) if not found],
        replaced=[i for i, found in zip(new_ids, replaced) if found],
        deleted=[i for i, found in zip(delete_ids, deleted) if found],
    )


def check_metadata_types(state, corpus, removed=(), path=None):
    """Raises `DataError` naming a document of `corpus` (by its line of `path`, where given) and a metadata
    field whose type is not the one the index's documents that stay give it: one type a field
    (docs/filters.md). The documents that stay are the live ones of `state` (`read_state`) that `corpus`
    does not replace and `removed` (ids) does not delete.

    Only the documents of segments that could disagree are read: those whose manifest entry records a
    field of `corpus` with another type (`metadata_types`), or records none (the base segment until an
    update with metadata commits); the types read for the latter are recorded in `state.segments`, which this
    update's manifest keeps, so that later updates read them no more.

    Example:
    >>> check_metadata_types(read_state("indexes/papers/index"), load_corpus("new.jsonl"), path="new.jsonl")
    """
    if corpus.metadata is None:
        return
    given = {(field, metadata_type(value)) for fields in corpus.metadata for field, value in fields.items()}
    gone = {i.encode("utf-8") for i in [*corpus.ids, *removed]}
    stored = {}
    for segment, live in zip(state.segments, state.live_ids):
        recorded = segment.get("metadata_types")
        if recorded is not None and all(recorded.get(field, kind) == kind for field, kind in given):
            continue
        documents = live_corpus([(documents_path(state.directory, segment["name"]), None)], keep_damaged=True)
        if recorded is None:
            segment["metadata_types"] = metadata_types(documents)
        kept = set(live.tolist()) - gone
        for doc_id, fields in zip(documents.ids, documents.metadata or []) if documents else ():
            if doc_id.encode("utf-8") in kept:
                for field, value in fields.items():
                    stored.setdefault(field, (metadata_type(value), doc_id))
    for row, (doc_id, fields) in enumerate(zip(corpus.ids, corpus.metadata)):
        for field, value in fields.items():
            kind, (other, first) = metadata_type(value), stored.get(field, (None, None))
            if other is not None and kind != other:
                if path is None:
                    where = f"Corpus row {row}"
                else:
                    line = next((n for n, record in iter_jsonl(path) if id_field(path, n, record) == doc_id), 0)
                    where = f"{path}:{line}"
                raise DataError(
                    f"{where}: document {doc_id!r} field `metadata.{field}` is a {kind}, but the index's document "
                    f"{first!r} has a {other}: a field holds one type (fix its value in {path or 'the corpus'}, or "
                    f"replace or delete every document of the index that has the field in the same update)"
                )


def _warn_of_lost_metadata(index_dir, state, ids):
    """Warns (`DataWarning`) when documents of the index that `ids`' embeddings replace have metadata:
    embeddings bring none, so filters no longer match them."""
    new = np.array([i.encode("utf-8") for i in ids], dtype="S")
    replaced = live_corpus(
        [
            (documents_path(state.directory, s["name"]), live[np.isin(live, new)])
            for s, live in zip(state.segments, state.live_ids)
        ]
    )
    count = sum(map(bool, replaced.metadata or [])) if replaced else 0
    if count:
        lose = "document loses its" if count == 1 else "documents lose their"
        warnings.warn(
            f"{index_dir}: {count} replaced {lose} metadata: embeddings bring none (search --filter no longer "
            "matches them; update them from --corpus to keep it)",
            DataWarning,
            stacklevel=3,
        )


def _repair_bm25_side(index_dir, search_index, state):
    """Whether the index has a BM25 side, once what a killed update left of it is put right: a side moved
    aside is put back or cleared, and a side of an earlier generation (a kill between the dense commit and
    the side's rebuild) is rebuilt from the documents of the current one."""
    files.remove_staging(os.path.join(index_dir, BM25_SUBDIR))
    if not has_bm25_side(index_dir):
        return False
    if bm25_side_ids(index_dir) != list(state.ids):
        rebuild_bm25_side(index_dir, SearchIndex.load(search_index))
    return True
