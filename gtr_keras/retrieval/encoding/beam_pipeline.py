"""Corpus encoding with Apache Beam, for corpora too large for one machine.

`encode_corpus_with_beam` runs a pipeline on any Beam runner (`DirectRunner`
locally; `DataflowRunner`, `FlinkRunner`, `SparkRunner` on a cluster):

1. list the corpus files (`corpus_files`: a BEIR directory, a file or a glob,
   on any `tf.io.gfile` file system) and spread them over the workers; each
   worker reads whole files, streamed, with the parser of `load_corpus`,
2. embed documents with `RunInference` and `GTRModelHandler`, which loads the
   model once per worker process (once per machine with `large_model=True`)
   and hands the encoder groups of documents that it sorts by token length
   (with `passages`, `GTRWindowHandler` cuts each document into its token windows
   first, with the worker's tokenizer, and embeds each window),
3. write `embeddings-SSSSS-of-NNNNN.npz` embedding files: per row (a document, or a
   window) its id, its place in the corpus (file number, line number, window number),
   its float32 embedding, and its title and text (gzipped JSON Lines), so the index
   can be assembled in corpus order without reading the corpus again,
4. write `corpus_files.json` (the corpus files, in order) once the pipeline
   has succeeded.

`corpus_from_embedding_files` reads the embedding files back as a `Corpus` and its embeddings in
corpus order, ready for `SearchIndex` and `index_building.write_index`;
`index_from_embedding_files` returns only the ids and embeddings.

Example:
>>> encode_corpus_with_beam("models/gtr-base", "data/corpus/part-*.jsonl.gz", "work/beam")  # doctest: +SKIP
>>> corpus, embeddings = corpus_from_embedding_files("work/beam")  # doctest: +SKIP
>>> index = SearchIndex(corpus.ids, embeddings)  # doctest: +SKIP
"""

import gzip
import io
import json
import os
import re

import apache_beam as beam
import numpy as np
from apache_beam.io.filebasedsink import FileBasedSink
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import KeyedModelHandler, RunInference
from apache_beam.options.pipeline_options import PipelineOptions

from gtr_keras.beir.readers import CORPUS_FILES, Corpus, document_values, in_collection, record_metadata
from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.retrieval.encoding.model_handlers import GTRModelHandler, GTRWindowHandler
from gtr_keras.retrieval.passages import passages_setting, split_row_id
from gtr_keras.storage.layout import PASSAGES_FIELD
from gtr_keras.utils import files
from gtr_keras.utils.text_files import iter_jsonl

FILE_PREFIX = "embeddings"
FILE_PATTERN = re.compile(rf"{FILE_PREFIX}-(\d+)-of-(\d+)\.npz")
MANIFEST = "corpus_files.json"
BEAM_OUTPUT_DIRECTORY = files.DirectoryKind(
    "encode_corpus_with_beam's embedding files", (), (MANIFEST, f"{FILE_PREFIX}-*", f"beam-temp-{FILE_PREFIX}-*")
)
_GLOB_CHARS = "*?["
_MAX_EXAMPLES = 5


def beam_pipeline_args(options):
    """Turns `KEY=VALUE` (or bare `KEY` flag) strings into Beam's `--KEY=VALUE` arguments.

    Example:
    >>> beam_pipeline_args(["project=p", "save_main_session"])
    ['--project=p', '--save_main_session']
    """
    args = []
    for option in options:
        key = option.split("=", 1)[0]
        if not key or key.startswith("-") or key.strip() != key:
            raise UserError(f"--beam-option {option!r}: expected KEY=VALUE or KEY, e.g. region=us-central1")
        args.append(f"--{option}")
    return args


def corpus_files(path):
    """The corpus files `path` names, in corpus order, listed without being read.

    Works for local paths and any `tf.io.gfile` scheme (`gs://`, `ram://`, ...).

    Args:
        path: a BEIR directory (its `corpus.jsonl[.gz]`), a corpus file, or a
            glob of corpus files (`*`, `?`, `[...]`), e.g.
            `gs://b/corpus/part-*.jsonl.gz`. The files matched are sorted by
            name: that order, then line order, is the corpus order.

    Returns:
        A list of file paths.

    Raises:
        DataError: no such file or directory, a directory without a corpus
            file, or a glob that matches no file; `UserError`: not a path (a
            `Corpus`: each worker reads files).

    Example:
    >>> corpus_files("data/corpus/part-*.jsonl.gz")  # doctest: +SKIP
    ['data/corpus/part-00000.jsonl.gz', 'data/corpus/part-00001.jsonl.gz']
    """
    if not isinstance(path, (str, os.PathLike)):
        raise UserError(f"each Beam worker reads corpus files: pass their path or glob, not a {type(path).__name__}")
    path = os.fspath(path)
    if any(char in path for char in _GLOB_CHARS) and not files.exists(path):
        matches = files.glob(path)
        if not matches:
            raise DataError(f"{path}: no file matches this pattern")
        return matches
    return [in_collection(path, CORPUS_FILES)]


def read_documents(file_number, path):
    """Reads one corpus file, streamed: what the pipeline encodes, keyed by what the index needs.

    Records are checked as `load_corpus` checks them (`readers.document_values`: same fields,
    same `FILE:LINE:` errors, invalid UTF-8 replaced with U+FFFD).

    Args:
        file_number: the file's place in the corpus order (`corpus_files`).
        path: the file (local or any `tf.io.gfile` path).

    Yields:
        `((id, file_number, line_no, title, text, metadata), "title text")`, the
        text joined like `Corpus.joined()`, `metadata` the record's (checked as
        `load_corpus` checks it) as JSON, or `""` for none.

    Raises:
        DataError: an unreadable file, malformed JSON, a missing or
            mistyped `_id`, `title` or `text`, an id or a text the rule of
            documents refuses, or a malformed `metadata`.

    Example:
    >>> next(read_documents(0, "corpus.jsonl"))  # doctest: +SKIP
    (('d1', 0, 1, 'A title', 'Body.', ''), 'A title Body.')
    """
    first = {}
    for line_no, record in iter_jsonl(path):
        doc_id, title, text, metadata = document_values(
            path, line_no, record.get("_id"), record.get("title"), record.get("text"), record.get("metadata"), first
        )
        key = (doc_id, file_number, line_no, title, text, json.dumps(metadata, ensure_ascii=False) if metadata else "")
        yield key, Corpus([doc_id], [title], [text]).joined()[0]


class _NpzFile:
    """Collects `(key, embedding)` rows, key `(id, file_number, line_no, window, title, text, metadata)` (a
    document's row as `read_documents` keys it, window 0; or a passages row, `window` its number in its document);
    `close()` writes one `.npz` file.

    Rows are written in corpus order. The file holds `ids` (str), `files`
    (int32 file numbers), `lines` (int64 line numbers), `windows` (int32),
    float32 `embeddings` `[n, D]`, and `documents`: the rows' `{"_id", "title", "text"}` records
    (and `metadata` where a row has any) as gzipped JSON Lines, stored as a
    uint8 array.
    """

    def __init__(self, file_handle):
        self.file_handle = file_handle
        self.rows = []

    def close(self):
        self.rows.sort(key=lambda row: row[0][1:4])
        keys = [key for key, _ in self.rows]
        embeddings = np.stack([e for _, e in self.rows]) if self.rows else np.zeros((0, 0), np.float32)
        documents = "".join(
            json.dumps(
                {"_id": doc_id, "title": title, "text": text, **({"metadata": json.loads(fields)} if fields else {})},
                ensure_ascii=False,
            )
            + "\n"
            for doc_id, _, _, _, title, text, fields in keys
        )
        self.rows = []  # the stacked embeddings and the documents string hold the rows now
        buffer = io.BytesIO()
        np.savez(
            buffer,
            ids=np.array([key[0] for key in keys], dtype=str),
            files=np.array([key[1] for key in keys], np.int32),
            lines=np.array([key[2] for key in keys], np.int64),
            windows=np.array([key[3] for key in keys], np.int32),
            embeddings=embeddings.astype(np.float32, copy=False),
            documents=np.frombuffer(gzip.compress(documents.encode("utf-8"), compresslevel=6), np.uint8),
        )
        del keys, embeddings, documents
        self.file_handle.write(buffer.getvalue())
        self.file_handle.close()


class EmbeddingFileSink(FileBasedSink):
    """Writes `(key, embedding)` rows to `PREFIX-SSSSS-of-NNNNN.npz` files (see `_NpzFile`).

    An embedding file is held in memory until written: `file_rows` x (`D * 4` bytes
    plus the document), about twice that while it is written.

    Args:
        file_path_prefix: path prefix of the embedding files, e.g. `gs://b/out/embeddings`.
        file_rows: most rows per embedding file.
    """

    def __init__(self, file_path_prefix, file_rows):
        super().__init__(
            file_path_prefix,
            coder=None,
            file_name_suffix=".npz",
            max_records_per_shard=file_rows,
            compression_type=CompressionTypes.UNCOMPRESSED,
        )

    def open(self, temp_path):
        return _NpzFile(super().open(temp_path))

    def write_record(self, embedding_file, row):
        embedding_file.rows.append(row)

    def close(self, embedding_file):
        embedding_file.close()


def _file_paths(beam_dir):
    """`{embedding file number: path}` and the embedding file count, checking the set is one complete run."""
    pattern = FileSystems.join(beam_dir, f"{FILE_PREFIX}-*-of-*.npz")
    paths = [m.path for m in FileSystems.match([pattern])[0].metadata_list]
    numbered = {}
    totals = set()
    for path in paths:
        match = FILE_PATTERN.fullmatch(path.rsplit("/", 1)[-1])
        if match:
            numbered[int(match[1])] = path
            totals.add(int(match[2]))
    if not numbered:
        raise FileNotFoundError(f"{beam_dir}: no {FILE_PREFIX}-SSSSS-of-NNNNN.npz embedding files")
    if len(totals) != 1:
        raise MismatchError(
            f"{beam_dir}: embedding files of different runs (totals {sorted(totals)}); delete the stale ones."
        )
    total = totals.pop()
    missing = sorted(set(range(total)) - set(numbered))
    if missing:
        raise DataError(
            f"{beam_dir}: {len(missing)} of {total} embedding files missing, the first is file {missing[0]}."
        )
    return numbered, total


def encode_corpus_with_beam(
    model_dir,
    corpus_path,
    output_dir,
    runner="DirectRunner",
    batch_size=32,
    pipeline_args=(),
    group_size=None,
    file_rows=50_000,
    large_model=False,
    model_sha256=None,
    passages=None,
):
    """Encodes a BEIR corpus with an Apache Beam pipeline into embedding files.

    This process only lists the corpus files (`corpus_files`); the pipeline's
    workers read them, through `tf.io.gfile`, one file per unit of work.

    Args:
        model_dir: gtr-keras model directory, readable by every worker.
        corpus_path: BEIR directory, `corpus.jsonl[.gz]` file or glob of such
            files, local or on any `tf.io.gfile` file system.
        output_dir: directory for the embedding files and `corpus_files.json`, on a
            Beam file system every worker can write; must not hold the
            output of an earlier run.
        runner: Beam runner name, e.g. `"DataflowRunner"`.
        batch_size: documents per forward pass.
        pipeline_args: further Beam arguments, e.g. `["--project=p"]`.
        group_size: documents per `RunInference` batch (see `GTRModelHandler`).
        file_rows: most documents per embedding file.
        large_model: share one model per machine across worker processes.
        model_sha256: the fingerprint every worker's model must have (the
            one the index records); by default not checked.
        passages: a passages setting `{"tokens", "stride"}` (`passages.passages_setting`, within the model's
            budget): each document cut into its windows by the worker's model (`GTRWindowHandler`), one row a
            window, as the in-process build cuts them; recorded in `corpus_files.json`. None: a row a document.

    Returns:
        The finished `PipelineResult`.

    Raises:
        DataError: no corpus file (before the pipeline starts), or (from the
            running pipeline) an unreadable file or a malformed record.
        FileExistsError: `output_dir` already holds embedding files or a manifest.

    Example:
    >>> encode_corpus_with_beam("gs://b/models/gtr-base", "gs://b/corpus/part-*.jsonl.gz", "gs://b/emb",
    ...                         runner="DataflowRunner", pipeline_args=["--region=us-central1"])  # doctest: +SKIP
    """
    paths = corpus_files(corpus_path)
    existing = FileSystems.match([FileSystems.join(output_dir, f"{FILE_PREFIX}-*.npz")])[0].metadata_list
    manifest_path = FileSystems.join(output_dir, MANIFEST)
    if existing or FileSystems.exists(manifest_path):
        raise FileExistsError(
            f"{output_dir}: holds the output of an earlier run ({len(existing)} embedding file(s)); delete it first."
        )
    options = PipelineOptions(list(pipeline_args), runner=runner)
    pipeline = beam.Pipeline(options=options)
    sink = EmbeddingFileSink(FileSystems.join(output_dir, FILE_PREFIX), file_rows)
    documents = (
        pipeline
        | "ListCorpusFiles" >> beam.Create(list(enumerate(paths)))
        | "SpreadFiles" >> beam.Reshuffle()
        | "ReadCorpus" >> beam.FlatMapTuple(read_documents)
    )
    handler_args = dict(batch_size=batch_size, group_size=group_size, large_model=large_model)
    if passages is None:
        handler = KeyedModelHandler(GTRModelHandler(model_dir, model_sha256=model_sha256, **handler_args))
        rows = documents | "Encode" >> RunInference(handler) | "Embeddings" >> beam.MapTuple(_document_row)
    else:
        handler = GTRWindowHandler(model_dir, passages, model_sha256=model_sha256, **handler_args)
        rows = documents | "Documents" >> beam.Keys() | "Encode" >> RunInference(handler) | beam.FlatMap(_window_rows)
    _ = rows | "WriteEmbeddingFiles" >> beam.io.Write(sink)
    result = pipeline.run()
    result.wait_until_finish()
    manifest = {"corpus": os.fspath(corpus_path), "files": paths, **({"passages": passages} if passages else {})}
    with FileSystems.create(manifest_path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(json.dumps(manifest, indent=1, ensure_ascii=False).encode("utf-8"))
    return result


def _document_row(key, result):
    """The embedding file row of a document `read_documents` keys: window 0."""
    doc_id, file_number, line_no, title, text, metadata = key
    return (doc_id, file_number, line_no, 0, title, text, metadata), result.inference


def _window_rows(result):
    """The embedding file rows of a document's windows (a `GTRWindowHandler` result), numbered in order."""
    _, file_number, line_no, title, _, metadata = result.example
    for number, (row, text, embedding) in enumerate(result.inference):
        yield (row, file_number, line_no, number, title, text, metadata), embedding


def _read_manifest(beam_dir):
    path = FileSystems.join(beam_dir, MANIFEST)
    if not FileSystems.exists(path):
        raise FileNotFoundError(f"{beam_dir}: no {MANIFEST}; not the output of a finished encode_corpus_with_beam")
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return json.loads(f.read().decode("utf-8"))


def _load_embedding_files(beam_dir, with_documents):
    """Ids, embeddings, and (with documents) titles, texts and metadata (None for none) of every embedding file, in
    corpus order, each metadata field checked to hold one type across the corpus files."""
    manifest = _read_manifest(beam_dir)
    paths = manifest["files"]
    numbered, total = _file_paths(beam_dir)
    arrays = {name: [] for name in ("ids", "files", "lines", "windows", "embeddings")}
    titles, texts, metadata = [], [], []
    for number in range(total):
        with FileSystems.open(numbered[number], compression_type=CompressionTypes.UNCOMPRESSED) as f:
            with np.load(io.BytesIO(f.read()), allow_pickle=False) as embedding_file:
                if not len(embedding_file["ids"]):
                    continue
                for name, parts in arrays.items():  # `windows`: none in files written before passages, all 0
                    default = np.zeros(len(embedding_file["ids"]), np.int32)
                    parts.append(embedding_file[name] if name in embedding_file.files else default)
                if with_documents:
                    for line in gzip.decompress(embedding_file["documents"].tobytes()).splitlines():
                        record = json.loads(line)
                        titles.append(record["title"])
                        texts.append(record["text"])
                        metadata.append(record.get("metadata", {}))
    if not arrays["ids"]:
        raise DataError(f"{manifest['corpus']}: no documents")
    dims = {e.shape[1] for e in arrays["embeddings"]}
    if len(dims) != 1:
        raise DataError(f"{beam_dir}: embedding files have different embedding sizes {sorted(dims)}.")
    file_numbers, lines = np.concatenate(arrays.pop("files")), np.concatenate(arrays.pop("lines"))
    if file_numbers.min() < 0 or file_numbers.max() >= len(paths):
        raise DataError(f"{beam_dir}: embedding files name file numbers missing from {MANIFEST}; delete {beam_dir}.")
    windows = np.concatenate(arrays.pop("windows"))
    order = np.lexsort((windows, lines, file_numbers))
    file_numbers, lines, windows = file_numbers[order], lines[order], windows[order]
    ids = np.concatenate(arrays.pop("ids"))[order]
    same = (file_numbers[1:] == file_numbers[:-1]) & (lines[1:] == lines[:-1]) & (windows[1:] == windows[:-1])
    repeated = np.flatnonzero(same)
    if len(repeated):
        first = repeated[0]
        raise MismatchError(
            f"{beam_dir}: {paths[file_numbers[first]]}:{lines[first]} is in more than one row "
            f"(embedding files of different runs?); delete {beam_dir} and encode again."
        )
    documents = np.flatnonzero(windows == 0)  # each document's first row
    doc_ids = ids[documents]
    if manifest.get("passages"):
        doc_ids = np.array([split_row_id(row)[0] for row in doc_ids.tolist()], dtype=str)
    _check_unique_ids(manifest["corpus"], doc_ids, [paths[n] for n in file_numbers[documents]], lines[documents])
    embeddings = np.concatenate(arrays.pop("embeddings"))
    embeddings = embeddings[order].astype(np.float32, copy=False)
    if not with_documents:
        return ids.tolist(), embeddings, titles, texts, None
    titles, texts = [titles[i] for i in order], [texts[i] for i in order]
    metadata, first = [metadata[i] for i in order], {}
    for doc_id, fields, number, line in zip(ids.tolist(), metadata, file_numbers, lines):
        if fields:
            record_metadata(paths[number], int(line), doc_id, fields, first)
    return ids.tolist(), embeddings, titles, texts, metadata if first else None


def _check_unique_ids(corpus_path, ids, paths, lines):
    """A `DataError` naming the first repeated ids and where they occur, as `load_corpus` names them."""
    by_id = np.argsort(ids, kind="stable")
    sorted_ids = ids[by_id]
    repeated = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])
    if not len(repeated):
        return
    first_seen = repeated[np.argsort(by_id[repeated + 1], kind="stable")][:_MAX_EXAMPLES]
    examples = ", ".join(
        f"{str(sorted_ids[k])!r} ({paths[by_id[k]]}:{lines[by_id[k]]} and {paths[by_id[k + 1]]}:{lines[by_id[k + 1]]})"
        for k in first_seen
    )
    raise DataError(f"{corpus_path}: {len(repeated)} duplicate `_id` value(s), e.g. {examples}")


def corpus_from_embedding_files(beam_dir):
    """Reads the output of `encode_corpus_with_beam` into memory, in corpus order.

    Corpus order is the order of the corpus files (`corpus_files.json`: a
    glob's matches sorted by name), then line order: the order `load_corpus`
    gives a single file holding them all. Everything is held in memory: the
    embeddings (`N * D * 4` bytes, twice while ordering them) and the
    documents (about their size in UTF-8 plus 150 bytes each).

    Args:
        beam_dir: the `output_dir` of `encode_corpus_with_beam`.

    Returns:
        `(corpus, embeddings)`: a `Corpus` and float32 `[N, D]` embeddings,
        row `i` belonging to `corpus.ids[i]`.

    Raises:
        FileNotFoundError: no embedding files, or no `corpus_files.json` (the run did
            not finish).
        MismatchError: embedding files of different runs (delete the directory and encode again).
        DataError: embedding files missing or of mismatched dimensions, an id that
            occurs more than once (named with its files and lines), or a
            corpus without documents.

    Example:
    >>> corpus, embeddings = corpus_from_embedding_files("work/beam")  # doctest: +SKIP
    >>> write_index("indexes/big", SearchIndex(corpus.ids, embeddings), corpus, metadata)  # doctest: +SKIP
    """
    ids, embeddings, titles, texts, metadata = _load_embedding_files(beam_dir, with_documents=True)
    return Corpus(ids=ids, titles=titles, texts=texts, metadata=metadata), embeddings


def index_from_embedding_files(beam_dir):
    """The ids and embeddings of `corpus_from_embedding_files`, without decoding the documents.

    Returns:
        `(ids, embeddings)`: a list of N str ids in corpus order and float32
        `[N, D]` embeddings.

    Example:
    >>> ids, embeddings = index_from_embedding_files("work/beam")  # doctest: +SKIP
    >>> index = SearchIndex(ids, embeddings)  # doctest: +SKIP
    """
    ids, embeddings, _, _, _ = _load_embedding_files(beam_dir, with_documents=False)
    return ids, embeddings


def index_with_beam(
    corpus, index_dir, model_dir, encoder, kind="auto", bm25=True, params=None, passages=None, **pipeline
):
    """Encodes `corpus` with an Apache Beam pipeline that reads it itself, then writes the index directory
    `index_dir` in corpus order (`index_building.write_index`); returns `(number of rows, kind)`.

    This process lists the corpus files (a glob that matches none is an error before the pipeline starts)
    but never reads them: the pipeline stores each document's id, title, text and place (file, line) with
    its embedding, and the index is assembled from those embedding files (`corpus_from_embedding_files`).
    Every run starts the pipeline afresh (runners retry failed work themselves), so no embedding of other
    texts or of another model is ever reused: the directory `INDEX_DIR.partial-beam` is deleted before the
    pipeline starts (refused if it holds anything else than such embedding files), and again once the index
    is written (a failed run leaves it for inspection).

    Args:
        corpus: a BEIR directory, a corpus file or a glob of them, on any file system the workers read.
        index_dir: the index directory to write.
        model_dir: the model's directory or name, which each worker loads.
        encoder: the same model loaded here (a function that loads it, called once the corpus is listed),
            for the index's model record.
        kind, bm25, params: as for `index_building.write_index`.
        passages: `"TOKENS[:STRIDE]"` or `(tokens, stride)` (checked against the model's budget here, before
            the pipeline starts): a passages index, its window rows cut by the workers (`GTRWindowHandler`) as
            the in-process build cuts them, the setting recorded; None: a row a document.
        **pipeline: `encode_corpus_with_beam`'s `runner`, `batch_size`, `file_rows` and `large_model`, and
            `beam_options`, `KEY[=VALUE]` strings (`beam_pipeline_args`).

    Example:
    >>> index_with_beam("gs://b/corpus-*.jsonl.gz", "indexes/big", "models/gtr-base", encoder, runner="DataflowRunner")
    ... # doctest: +SKIP
    """
    from gtr_keras.retrieval.index_building import index_metadata, work_dir_for, write_index
    from gtr_keras.storage.search_index import ArrayRows

    corpus_files(corpus)
    pipeline_args = beam_pipeline_args(pipeline.pop("beam_options", ()))
    beam_dir = work_dir_for(index_dir) + "-beam"
    files.check_replaceable(beam_dir, [BEAM_OUTPUT_DIRECTORY])
    encoder = encoder() if callable(encoder) and not hasattr(encoder, "encode_documents") else encoder
    setting = passages_setting(passages, encoder.document_length)
    metadata = {**index_metadata(encoder, model_dir), **({PASSAGES_FIELD: setting} if setting else {})}
    files.remove(beam_dir)
    encode_corpus_with_beam(
        os.fspath(model_dir),
        corpus,
        beam_dir,
        pipeline_args=pipeline_args,
        model_sha256=metadata["model_sha256"],
        passages=setting,
        **pipeline,
    )
    documents, embeddings = corpus_from_embedding_files(beam_dir)
    kind = write_index(index_dir, ArrayRows(documents.ids, embeddings), documents, metadata, kind, bm25, params)
    files.remove(beam_dir)
    return len(documents), kind
