"""Index directories built from a corpus with a GTR encoder (resumable) or from embeddings; `retriever`
searches them.

An index directory (written by `build_index`, atomically) holds:

- `retriever.json`: the model it was built with (directory, settings and
  `fingerprint.fingerprint`; null fields for embeddings of an unknown model;
  for documents encoded in bfloat16 also `bfloat16_sha256`, which lets the
  model in float32 search them: `model_change`), the index kind and the number of documents;
- `documents.jsonl.gz`: the indexed documents (`_id`, `title`, `text`) for
  display; absent for an index of precomputed embeddings (`index_embeddings`);
- `index/`: the `SearchIndex` (ids, and float32 vectors or a ScaNN searcher);
- `bm25/`: the BM25 side (`bm25_side`: the same documents, ids and order, in bm25s'
  format), unless built without one or from embeddings without their corpus.

Index directories, and the work directories beside them, may be local or on
any file system TensorFlow knows (`gs://...`, `ram://...`).
"""

import json
import os

from tqdm.auto import tqdm

from gtr_keras.beir.readers import check_corpus
from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.lexical.bm25_side import write_bm25_side
from gtr_keras.models.text_encoder import TruncatedEncoder
from gtr_keras.storage.embedding_files import EmbeddingFiles
from gtr_keras.storage.layout import (
    BM25_SUBDIR,
    DOCUMENTS_FILE,
    INDEX_SUBDIR,
    LATE_CHUNKING_FIELD,
    PASSAGES_FIELD,
    PUSH_LEDGER_GLOB,
    RETRIEVER_JSON,
)
from gtr_keras.storage.resumable_encoding import RESUMABLE_ENCODING_DIRECTORY, ResumableEncoding
from gtr_keras.storage.search_index import KINDS, SearchIndex, write_search_index
from gtr_keras.storage.segments import write_documents
from gtr_keras.utils import files
from gtr_keras.utils.dimensions import check_dimensions, truncate
from gtr_keras.utils.files import atomic_directory
from gtr_keras.utils.locks import locks_output
from gtr_keras.utils.records import (
    check_positive_int,
    describe_change,
)

INDEX_DIRECTORY = files.DirectoryKind(
    "an index directory",
    (RETRIEVER_JSON,),
    (RETRIEVER_JSON, INDEX_SUBDIR, DOCUMENTS_FILE, BM25_SUBDIR, f".{INDEX_SUBDIR}.lock", PUSH_LEDGER_GLOB),
)


# What determines document embeddings, in the order a mismatch is reported: settings first, as
# they name the cause, then the fingerprint that also covers the weights and the vocabulary.
MODEL_FIELDS = ("embedding_dim", "document_length", "query_length", "compute_dtype", "model_sha256")


# Recorded for a model in bfloat16: its fingerprint with every weight in bfloat16, which the model in float32
# also has, rounded so (`fingerprint.fingerprint(..., in_bfloat16=True)`).
BFLOAT16_SHA256 = "bfloat16_sha256"
# The field of a model record whose embeddings are cut to their first N coordinates (`gtr-keras index|encode
# --dimensions N`); absent for all D of them.
DIMENSIONS_FIELD = "dimensions"


def check_index_outputs(index_dir, work_dir=True):
    """Refuses (`DataError` naming a file there) an `index_dir`, or (`work_dir`) a `work_dir_for(index_dir)`,
    holding something else than an index or its pieces: writing an index replaces the first, and
    `build_index` deletes the second once done.

    Example:
    >>> check_index_outputs("indexes/scifact")
    """
    files.check_replaceable(index_dir, [INDEX_DIRECTORY])
    if work_dir:
        files.check_replaceable(work_dir_for(index_dir), [RESUMABLE_ENCODING_DIRECTORY])


def work_dir_for(index_dir):
    """Where `build_index` keeps finished pieces until the index is complete: `<index_dir>.partial`
    (an absolute path for a local `index_dir`; a URL such as `gs://...` stays one)."""
    path = os.fspath(index_dir)
    if files.is_local(path):
        return os.path.abspath(path.removeprefix("file://")).rstrip(os.sep) + ".partial"
    return path.rstrip("/") + ".partial"


@locks_output("index_dir")
def build_index(
    encoder,
    corpus,
    index_dir,
    model_dir=None,
    kind="auto",
    batch_size=32,
    piece_size=2048,
    progress=None,
    bm25=True,
    params=None,
    passages=None,
    late=None,
):
    """Encodes `corpus` and writes a searchable index directory.

    Embeddings are written piece by piece to `work_dir_for(index_dir)`; a run
    that is killed resumes from the last finished piece when started again.
    Resuming checks that the model (`fingerprint.fingerprint`: weights,
    vocabulary, architecture, precision, token budgets), the ids, the piece
    size and the texts of every finished piece are the same as before. The
    index directory appears only when complete, with its BM25 side (a
    previous index stays in place until then): a run killed after the last
    piece builds both when started again.

    Args:
        encoder: the `Encoder` for documents.
        corpus: a `Corpus` (`readers.check_corpus` holds it to the rule of a corpus file before any work).
        index_dir: directory to write.
        model_dir: the model directory, recorded in `retriever.json` for the
            user (the fingerprint is what `Retriever.load` checks).
        kind: `"auto"` (exact below 20k documents, ScaNN above), `"exact"`, `"scann"`.
        batch_size: documents per forward pass.
        piece_size: documents per resumable piece.
        progress: show a progress bar (default: for corpora of 5000 or more).
        bm25: also write the BM25 side (`bm25_side`) of the documents.
        params: the index's `params` (`write_search_index`: ScaNN overrides, or an exact index's vectors).
        passages: the `{"tokens", "stride"}` of a passages index (`retrieval.passages`), recorded; `corpus`
            then holds its window rows.
        late: with `passages`, a `passages.LateRows` that encodes each piece's rows (by their ids) instead of
            `encoder.encode_documents`; its `document_length` is recorded as `late_chunking`, and in the model
            record of the pieces (a killed build resumes only with the same setting).

    Returns:
        The `SearchIndex` written to `index_dir/index`.

    Raises:
        MismatchError: the work directory holds pieces of another model,
            other ids, another piece size or other texts.
        UserError: an empty corpus, a value a corpus file could not hold (naming
            its row and field), an unknown `kind`, a `batch_size` or
            `piece_size` that is not a positive int.
        DataError: `index_dir` or the work directory holds files of something
            else (`check_index_outputs`), before any encoding.

    Example:
    >>> build_index(gtr_keras.load("models/gtr-base"), load_corpus("scifact"), "indexes/scifact")
    """
    if kind not in KINDS:
        raise UserError(f"kind must be one of {KINDS}, got {kind!r}.")
    check_positive_int(batch_size, "batch_size")
    check_positive_int(piece_size, "piece_size")
    corpus = check_corpus(corpus)
    if not len(corpus):
        raise UserError("the corpus is empty: nothing to index")
    check_index_outputs(index_dir)
    texts = corpus.joined()
    metadata = {**index_metadata(encoder, model_dir), **({PASSAGES_FIELD: passages} if passages else {})}
    late_chunking = {} if late is None else {LATE_CHUNKING_FIELD: late.document_length}
    metadata = {**metadata, **late_chunking}
    model = {**{field: metadata[field] for field in MODEL_FIELDS}, **late_chunking}
    writer = ResumableEncoding(work_dir_for(index_dir), corpus.ids, texts, piece_size, model)
    pending = writer.pending_pieces()
    show = progress if progress is not None else len(corpus) >= 5000
    done = len(corpus) - sum(s.end - s.start for s in pending)
    with tqdm(total=len(corpus), initial=done, disable=not show, desc="indexing", unit="doc") as bar:
        for piece in pending:
            if late is None:
                vectors = encoder.encode_documents(texts[piece.start : piece.end], batch_size, False)
            else:
                vectors = late.encode(corpus.ids[piece.start : piece.end], batch_size)
            writer.write(piece.number, vectors)
            bar.update(piece.end - piece.start)
    write_index(index_dir, writer, corpus, metadata, kind, bm25, params)  # the pieces are read back one at a time
    files.remove(writer.work_dir)
    return SearchIndex.load(os.path.join(index_dir, INDEX_SUBDIR))


@locks_output("index_dir")
def index_embeddings(
    source, index_dir, encoder=None, model_dir=None, kind="auto", corpus=None, params=None, bm25=True, dimensions=None
):
    """Writes an index directory from precomputed embedding files, a chunk at a time.

    The model is the one `gtr-keras encode` recorded beside the embedding files
    (`NAME.json`); with `encoder` given it must be that one (embedding files without
    a record take it as declared). Without either, the index searches query
    vectors (`SearchIndex.load`), but `search` and `export` refuse it: they
    cannot check that queries are encoded by the model of the documents.

    Args:
        source: a glob of embedding files or an opened `EmbeddingFiles`.
        index_dir: the index directory to write (atomically).
        encoder: the `Encoder` of the embeddings, or None.
        model_dir: its model directory, recorded for the user.
        kind: `"auto"`, `"exact"` or `"scann"`.
        corpus: the `Corpus` of the embedded documents, in the embedding files' order
            (`bm25_side.corpus_in_index_order`), or None: stored as an index of
            `build_index` stores its documents, with a BM25 side.
        params: the index's `params`, as `write_search_index` takes them.
        bm25: with a `corpus`, also write its BM25 side (False: its documents and metadata only).
        dimensions: N, to index the first N coordinates of each embedding, renormalised (recorded: the
            index's queries are cut the same); None: the embeddings as they are.

    Returns:
        `(number of embeddings, kind)`.

    Raises:
        DataError: a bad embedding file, named with its file (before any index work).
        MismatchError: `encoder` is not the model the embedding files record (at
            another precision, `model_change` says when it is).

    Example:
    >>> index_embeddings("embeddings/part-*.npy", "indexes/msmarco", gtr_keras.load("gtr_t5_base_en"), "gtr_t5_base_en")
    (8841823, 'scann')
    """
    corpus = None if corpus is None else check_corpus(corpus)
    embedding_files = source if isinstance(source, EmbeddingFiles) else EmbeddingFiles.open(source)
    metadata = embeddings_metadata(embedding_files, encoder, model_dir)
    rows = embedding_files
    if dimensions is not None:
        rows = TruncatedRows(embedding_files, check_dimensions(dimensions, embedding_files.dims))
        if metadata.get(DIMENSIONS_FIELD) not in (None, dimensions):
            raise MismatchError(
                f"{embedding_files.paths[0]}: encoded with --dimensions {metadata[DIMENSIONS_FIELD]}, not {dimensions}"
            )
        metadata = {**metadata, "embedding_dim": dimensions, DIMENSIONS_FIELD: dimensions}
    return embedding_files.num_rows, write_index(index_dir, rows, corpus, metadata, kind, bm25, params)


class TruncatedRows:
    """A source of `write_search_index` (`ids`, `dims`, `num_rows`, `chunks()`) whose rows are `source`'s cut
    to their first `dimensions` coordinates, renormalised (`utils.dimensions.truncate`).

    Example:
    >>> TruncatedRows(EmbeddingFiles.open("emb/*.npy"), 128).dims
    128
    """

    def __init__(self, source, dimensions):
        self.source, self.dims = source, dimensions
        self.ids, self.num_rows = source.ids, source.num_rows

    def chunks(self):
        return (truncate(chunk, self.dims) for chunk in self.source.chunks())


def embeddings_metadata(embedding_files, encoder=None, model_dir=None):
    """The model record (`index_metadata`'s fields) of the documents in an opened `EmbeddingFiles`: the one
    `gtr-keras encode` recorded beside them, checked against `encoder` when given; or, for embedding files without a
    record, `encoder`'s (null fields without it).

    Raises:
        DataError, MismatchError: as for `index_embeddings`.

    Example:
    >>> embeddings_metadata(EmbeddingFiles.open("new/*.npy"))["model_sha256"]  # doctest: +SKIP
    """
    recorded = embedding_files.model
    if recorded is not None:
        missing = [field for field in MODEL_FIELDS if field not in recorded]
        if missing:
            raise DataError(
                f"{embedding_files.model_path}: field 'model' lacks {missing} (the model record `gtr-keras "
                f"encode` writes); encode the embedding file again"
            )
        if recorded["embedding_dim"] != embedding_files.dims:
            raise DataError(
                f"{embedding_files.paths[0]}: {embedding_files.dims} dims, but its model record "
                f"{embedding_files.model_path} "
                f"says {recorded['embedding_dim']!r}"
            )
    metadata = recorded or {"model_dir": None, **dict.fromkeys(MODEL_FIELDS), "embedding_dim": embedding_files.dims}
    if encoder is not None:
        encoder = with_recorded_dimensions(metadata, encoder, embedding_files.paths[0])
        change, given = model_change(metadata, encoder, MODEL_FIELDS, model_dir)
        if recorded is not None and change:
            raise MismatchError(
                f"{embedding_files.paths[0]}: encoded by another model than --model ({change}; recorded "
                f"model_dir: {recorded.get('model_dir')})"
            )
        if given["embedding_dim"] != embedding_files.dims:
            raise MismatchError(
                f"{embedding_files.paths[0]}: {embedding_files.dims} dims, "
                f"the model given makes {given['embedding_dim']}"
            )
        metadata = given if recorded is None else {**recorded, "model_dir": given["model_dir"]}
    return metadata


def write_index(index_dir, source, corpus, metadata, kind="auto", bm25=True, params=None):
    """Writes an index directory over `source`'s vectors (and `corpus`'s documents), atomically.

    Every file is written into a temporary sibling directory that replaces
    `index_dir` only once complete: a failure or a kill leaves the previous
    `index_dir` (or none) as it was. The vectors are read a chunk at a time
    (`write_search_index`).

    Args:
        index_dir: the directory to create or replace.
        source: the vectors: an `EmbeddingFiles`, `ArrayRows`, `ResumableEncoding`
            or anything with `ids`, `dims`, `num_rows` and `chunks()`.
        corpus: the indexed `Corpus` (its ids those of `source`, in order),
            stored for titles and snippets; or None.
        metadata: `index_metadata` of the encoder that made the embeddings.
        kind: `"auto"`, `"exact"` or `"scann"`.
        bm25: with a `corpus`, also write its BM25 side (`bm25_side.write_bm25_side`).
        params: the index's `params`, as `write_search_index` takes them.

    Returns:
        The index kind written (`"exact"` or `"scann"`).

    Raises:
        UserError: the source and the corpus hold other ids, or `metadata`
            lacks a field of `MODEL_FIELDS`.
        DataError: `index_dir` is a directory of something else than an index
            (`INDEX_DIRECTORY`), naming a file there; nothing is written.

    Example:
    >>> write_index("indexes/scifact", ArrayRows(corpus.ids, embeddings), corpus,
    ...             index_metadata(encoder, "models/gtr-base"))
    'exact'
    """
    if corpus is not None and list(source.ids) != list(corpus.ids):
        raise UserError("the index rows must hold the corpus documents, in corpus order")
    missing = [field for field in MODEL_FIELDS if field not in metadata]
    if missing:
        raise UserError(f"metadata lacks {missing}: pass index_metadata(encoder, model_dir)")
    # A local directory, uploaded after for a remote index_dir.
    with atomic_directory(index_dir, [INDEX_DIRECTORY]) as staging:
        kind = write_search_index(source, os.path.join(staging, INDEX_SUBDIR), kind, params)
        if corpus is not None and bm25:
            write_bm25_side(staging, corpus)
        if corpus is not None:
            write_documents(os.path.join(staging, DOCUMENTS_FILE), corpus)
        with open(os.path.join(staging, RETRIEVER_JSON), "w", encoding="utf-8") as f:
            json.dump({**metadata, "kind": kind, "num_documents": source.num_rows}, f, indent=2)
    return kind


def index_metadata(encoder, model_dir):
    """What an index records about the model that built it.

    Args:
        encoder: the `Encoder` that encodes the documents.
        model_dir: its model directory (recorded as an absolute path, or as
            given for one on another file system such as `gs://...`), a
            `ModelSource` or a model's name (recorded as the directory or id
            it stands for: `gtr_small_distilled_en` as the bundled directory), or None.

    Returns:
        A JSON-serialisable dict: `model_dir`, the `MODEL_FIELDS`, among
        them `model_sha256`, the model's `fingerprint.fingerprint`.

    Example:
    >>> index_metadata(gtr_keras.load("models/gtr-base"), "models/gtr-base")["embedding_dim"]
    768
    """
    from gtr_keras.models.gtr.presets import PRESET_SOURCES, PRESETS
    from gtr_keras.models.model_files.fingerprint import fingerprint  # Keras: not needed to index embeddings alone
    from gtr_keras.models.model_files.model_source import ARCHITECTURE, resolve_model_source

    if model_dir and os.fspath(model_dir) in PRESET_SOURCES.keys() | PRESETS.keys():
        model_dir = resolve_model_source(model_dir)
    if model_dir and getattr(model_dir, "format", None) != ARCHITECTURE and files.is_local(model_dir):
        model_dir = os.path.abspath(os.fspath(model_dir).removeprefix("file://"))
    metadata = {
        "model_dir": os.fspath(model_dir) if model_dir else None,
        "embedding_dim": encoder.embedding_dim,
        "document_length": encoder.document_length,
        "query_length": encoder.query_length,
        "compute_dtype": encoder.model.compute_dtype,
        "model_sha256": fingerprint(encoder),
    }
    if getattr(encoder, "dimensions", None) is not None:
        metadata[DIMENSIONS_FIELD] = encoder.dimensions
    if metadata["compute_dtype"] == "bfloat16":
        metadata[BFLOAT16_SHA256] = fingerprint(encoder, in_bfloat16=True)
    return metadata


def with_recorded_dimensions(recorded, encoder, where):
    """`encoder` as the embeddings `recorded` (a model record: `retriever.json`, `gtr-keras encode`'s) were
    made: truncated to their `dimensions` (`TextEncoder.truncated`); an encoder truncated already is kept when
    it keeps those.

    Raises:
        MismatchError: `encoder` is truncated to other dimensions, naming the setting.

    Example:
    >>> with_recorded_dimensions({"dimensions": 128}, gtr_keras.load("models/gtr-base"), "indexes/x").embedding_dim
    128
    """
    dimensions, given = recorded.get(DIMENSIONS_FIELD), getattr(encoder, "dimensions", None)
    if given is not None and given != dimensions:
        built = f"--dimensions {dimensions}" if dimensions else f"all {recorded.get('embedding_dim')} dimensions"
        raise MismatchError(
            f"{where}: built with {built}, but dimensions {given} are given; give dimensions "
            f"{dimensions or 'none'} (or rebuild the index with --dimensions {given})"
        )
    return encoder if dimensions is None or given == dimensions else TruncatedEncoder(encoder, dimensions)


def model_change(recorded, encoder, fields, model_dir=None):
    """What differs between the model `recorded` (by `index_metadata`) and `encoder` in `fields`.

    The same model at another precision is the same model: where the record
    is of the model in bfloat16 (it holds `bfloat16_sha256`) and `encoder`
    computes in another dtype, `compute_dtype` and `model_sha256` are not
    compared, but the fingerprints of both models rounded to bfloat16 are.
    Documents encoded in bfloat16 are then searched with queries encoded in
    the encoder's dtype (float32 embeddings either way, within bfloat16's
    rounding of each other).

    Returns:
        `(change, given)`: `describe_change`'s phrase, or None when the model
        is the recorded one; and `index_metadata(encoder, model_dir)`.

    Example:
    >>> model_change(index_metadata(encoder, None), encoder, MODEL_FIELDS)[0] is None
    True
    """
    from gtr_keras.models.model_files.fingerprint import fingerprint

    given = index_metadata(encoder, model_dir)
    if BFLOAT16_SHA256 in recorded and recorded.get("compute_dtype") != given["compute_dtype"]:
        fields = [field for field in fields if field not in ("compute_dtype", "model_sha256")] + [BFLOAT16_SHA256]
        given[BFLOAT16_SHA256] = fingerprint(encoder, in_bfloat16=True)
    return describe_change(recorded, {field: given[field] for field in fields}, "the model given has"), given
