"""Corpus encoding with Apache Beam, for corpora too large for one machine.

`encode_corpus_with_beam` runs a pipeline on any Beam runner (`DirectRunner`
locally; `DataflowRunner`, `FlinkRunner`, `SparkRunner` on a cluster):

1. read `corpus.jsonl[.gz]` with Beam's text IO (uncompressed files are split
   across workers; give many files, e.g. a glob, to spread compressed input),
2. parse each line into `(id, "title text")`, joined like `Corpus.joined()`,
3. embed documents with `RunInference` and `GTRModelHandler`, which loads the
   model once per worker process (once per machine with `large_model=True`)
   and hands the encoder groups of documents that it sorts by token length,
4. write `embeddings-SSSSS-of-NNNNN.npz` shards, each with a str `ids` array
   and a float32 `embeddings` array `[n, D]`.

`index_from_shards` reads the shards back as `(ids, embeddings)` sorted by id,
ready for `SearchIndex`.

Example:
>>> encode_corpus_with_beam("models/gtr-base", "data/scifact", "work/scifact-beam")  # doctest: +SKIP
>>> ids, embeddings = index_from_shards("work/scifact-beam")  # doctest: +SKIP
>>> index = SearchIndex(ids, embeddings)  # doctest: +SKIP
"""

import io
import json
import os
import re
import tempfile

import apache_beam as beam
import numpy as np
from apache_beam.io.filebasedsink import FileBasedSink
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import KeyedModelHandler, ModelHandler, PredictionResult, RunInference
from apache_beam.options.pipeline_options import PipelineOptions

from gtr_keras import checkpoints
from gtr_keras.corpus import CORPUS_FILES, Corpus, DataError, id_field, str_field

SHARD_PREFIX = "embeddings"
SHARD_PATTERN = re.compile(rf"{SHARD_PREFIX}-(\d+)-of-(\d+)\.npz")
_EXCERPT_CHARS = 120


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
            raise ValueError(f"--beam-option {option!r}: expected KEY=VALUE or KEY, e.g. region=us-central1.")
        args.append(f"--{option}")
    return args


def parse_document(filename, raw_line):
    """Parses one corpus line into `(id, text)`, the text joined like `Corpus.joined()`.

    A split read does not know line numbers, so errors quote the line instead.

    Args:
        filename: the file the line came from, for error messages.
        raw_line: the line as `bytes` (or `str`), without its line ending.

    Returns:
        `(id, text)`, or None for a blank line.

    Raises:
        DataError: invalid UTF-8, malformed JSON, not an object, or a missing
            or mistyped `_id`, `title` or `text`.

    Example:
    >>> parse_document("corpus.jsonl", b'{"_id": 7, "title": "T", "text": "Body."}')
    ('7', 'T Body.')
    """
    try:
        line = raw_line.decode("utf-8") if isinstance(raw_line, bytes) else raw_line
    except UnicodeDecodeError as e:
        raise DataError(f"{filename}:line {_excerpt(raw_line)}: invalid UTF-8 ({e})") from None
    if not line.strip():
        return None
    where = f"line {_excerpt(line)}"
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise DataError(f"{filename}:{where}: malformed JSON ({e})") from None
    if not isinstance(record, dict):
        raise DataError(f"{filename}:{where}: expected a JSON object, got {type(record).__name__}")
    doc_id = id_field(filename, where, record)
    title = str_field(filename, where, record, "title", required=False)
    text = str_field(filename, where, record, "text", required=True)
    return doc_id, Corpus([doc_id], [title], [text]).joined()[0]


def _excerpt(line):
    return repr(line[:_EXCERPT_CHARS]) + ("..." if len(line) > _EXCERPT_CHARS else "")


def _parse_lines(filename_and_line):
    document = parse_document(*filename_and_line)
    if document is not None:
        yield document


def corpus_file_pattern(path):
    """The corpus file of a BEIR directory, or `path` itself (a file or a glob).

    Works for any Beam filesystem (local, `gs://`, `s3://`, `hdfs://`).
    """
    for name in CORPUS_FILES:
        candidate = FileSystems.join(path, name)
        if FileSystems.exists(candidate):
            return candidate
    return path


def _local_model_dir(model_dir):
    """`model_dir` itself when local; else a local copy of its files (a preset's, weight shards included)."""
    if FileSystems.get_scheme(model_dir) is None:
        return model_dir
    local = tempfile.mkdtemp(prefix="gtr-keras-model-")
    patterns = [FileSystems.join(model_dir, "*"), FileSystems.join(model_dir, "assets", "*", "*")]
    for match in FileSystems.match(patterns):
        for metadata in match.metadata_list:
            relative = metadata.path[len(model_dir):].lstrip("/")
            os.makedirs(os.path.join(local, os.path.dirname(relative)), exist_ok=True)
            with FileSystems.open(metadata.path) as src, open(os.path.join(local, relative), "wb") as dst:
                while chunk := src.read(1 << 24):
                    dst.write(chunk)
    return local


class GTRModelHandler(ModelHandler):
    """A `RunInference` model handler that embeds document texts with a gtr-keras model.

    Each `RunInference` batch is a group of `group_size` documents; the
    `Encoder` sorts a group by token length and runs forward passes of
    `batch_size`, so a larger group wastes less compute on padding.

    Args:
        model_dir: a gtr-keras model directory, local or on a Beam filesystem
            (`gs://...`: copied to local disk on each worker).
        batch_size: documents per forward pass.
        group_size: documents per `RunInference` batch; default `16 * batch_size`.
        large_model: load one model per machine, shared by all SDK worker
            processes, instead of one per process.

    Example:
    >>> handler = KeyedModelHandler(GTRModelHandler("models/gtr-base"))  # doctest: +SKIP
    >>> pairs | RunInference(handler)  # (id, text) -> (id, PredictionResult)  # doctest: +SKIP
    """

    def __init__(self, model_dir, batch_size=32, group_size=None, large_model=False):
        group_size = group_size or 16 * batch_size
        super().__init__(min_batch_size=group_size, max_batch_size=group_size, large_model=large_model)
        self.model_dir = model_dir
        self.batch_size = batch_size

    def load_model(self):
        return checkpoints.load(_local_model_dir(self.model_dir))

    def run_inference(self, batch, model, inference_args=None):
        embeddings = model.encode_documents(list(batch), self.batch_size, progress=False)
        return [PredictionResult(text, embedding) for text, embedding in zip(batch, embeddings)]

    def get_num_bytes(self, batch):
        return sum(len(text.encode("utf-8")) for text in batch)

    def get_metrics_namespace(self):
        return "gtr_keras"


class _NpzShard:
    """Collects `(id, embedding)` rows; `close()` writes them as one `.npz` file."""

    def __init__(self, file_handle):
        self.file_handle = file_handle
        self.ids = []
        self.embeddings = []

    def close(self):
        buffer = io.BytesIO()
        embeddings = np.stack(self.embeddings) if self.embeddings else np.zeros((0, 0), np.float32)
        np.savez(buffer, ids=np.array(self.ids, dtype=str), embeddings=embeddings.astype(np.float32, copy=False))
        self.file_handle.write(buffer.getvalue())
        self.file_handle.close()


class EmbeddingShardSink(FileBasedSink):
    """Writes `(id, embedding)` rows to `PREFIX-SSSSS-of-NNNNN.npz` files.

    A shard is held in memory until written: `shard_rows * D * 4` bytes.

    Args:
        file_path_prefix: path prefix of the shards, e.g. `gs://b/out/embeddings`.
        shard_rows: most rows per shard.
    """

    def __init__(self, file_path_prefix, shard_rows):
        super().__init__(
            file_path_prefix, coder=None, file_name_suffix=".npz", max_records_per_shard=shard_rows,
            compression_type=CompressionTypes.UNCOMPRESSED,
        )

    def open(self, temp_path):
        return _NpzShard(super().open(temp_path))

    def write_record(self, shard, row):
        doc_id, embedding = row
        shard.ids.append(doc_id)
        shard.embeddings.append(embedding)

    def close(self, shard):
        shard.close()


def _shard_paths(shard_dir):
    """`{shard number: path}` and the shard count, checking the set is one complete run."""
    pattern = FileSystems.join(shard_dir, f"{SHARD_PREFIX}-*-of-*.npz")
    paths = [m.path for m in FileSystems.match([pattern])[0].metadata_list]
    numbered = {}
    totals = set()
    for path in paths:
        match = SHARD_PATTERN.fullmatch(path.rsplit("/", 1)[-1])
        if match:
            numbered[int(match[1])] = path
            totals.add(int(match[2]))
    if not numbered:
        raise FileNotFoundError(f"{shard_dir}: no {SHARD_PREFIX}-SSSSS-of-NNNNN.npz shards")
    if len(totals) != 1:
        raise ValueError(f"{shard_dir}: shards of different runs (totals {sorted(totals)}); delete the stale ones.")
    total = totals.pop()
    missing = sorted(set(range(total)) - set(numbered))
    if missing:
        raise ValueError(f"{shard_dir}: {len(missing)} of {total} shards missing, the first is shard {missing[0]}.")
    return numbered, total


def encode_corpus_with_beam(model_dir, corpus_path, output_dir, runner="DirectRunner", batch_size=32,
                            pipeline_args=(), group_size=None, shard_rows=50_000, large_model=False):
    """Encodes a BEIR corpus with an Apache Beam pipeline into embedding shards.

    Args:
        model_dir: gtr-keras model directory, readable by every worker.
        corpus_path: BEIR directory, `corpus.jsonl[.gz]` file or glob of such
            files, on any Beam filesystem.
        output_dir: directory for `embeddings-SSSSS-of-NNNNN.npz`; must not
            hold shards of an earlier run.
        runner: Beam runner name, e.g. `"DataflowRunner"`.
        batch_size: documents per forward pass.
        pipeline_args: further Beam arguments, e.g. `["--project=p"]`.
        group_size: documents per `RunInference` batch (see `GTRModelHandler`).
        shard_rows: most documents per shard file.
        large_model: share one model per machine across worker processes.

    Returns:
        The finished `PipelineResult`.

    Raises:
        FileExistsError: `output_dir` already holds shards.
        DataError: (from the running pipeline) a malformed corpus line.

    Example:
    >>> encode_corpus_with_beam("gs://b/models/gtr-base", "gs://b/corpus/part-*.jsonl.gz", "gs://b/emb",
    ...                         runner="DataflowRunner", pipeline_args=["--region=us-central1"])  # doctest: +SKIP
    """
    existing = FileSystems.match([FileSystems.join(output_dir, f"{SHARD_PREFIX}-*.npz")])[0].metadata_list
    if existing:
        raise FileExistsError(
            f"{output_dir}: holds {len(existing)} embedding shard(s) of an earlier run; delete them first."
        )
    handler = KeyedModelHandler(GTRModelHandler(model_dir, batch_size, group_size, large_model))
    options = PipelineOptions(list(pipeline_args), runner=runner)
    pipeline = beam.Pipeline(options=options)
    lines = beam.io.ReadFromTextWithFilename(corpus_file_pattern(corpus_path), coder=beam.coders.BytesCoder())
    sink = EmbeddingShardSink(FileSystems.join(output_dir, SHARD_PREFIX), shard_rows)
    _ = (
        pipeline
        | "ReadCorpus" >> lines
        | "ParseDocuments" >> beam.FlatMap(_parse_lines)
        | "Encode" >> RunInference(handler)
        | "Embeddings" >> beam.MapTuple(lambda doc_id, result: (doc_id, result.inference))
        | "WriteShards" >> beam.io.Write(sink)
    )
    result = pipeline.run()
    result.wait_until_finish()
    return result


def index_from_shards(shard_dir):
    """Reads the shards of `encode_corpus_with_beam` into memory, sorted by id.

    Rows are ordered by id (Python string order), not by corpus order, which a
    distributed read does not keep; the result is the same however the corpus
    was split. Everything is held in memory: `N * D * 4` bytes, plus a copy
    while sorting.

    Args:
        shard_dir: the `output_dir` of `encode_corpus_with_beam`.

    Returns:
        `(ids, embeddings)`: a list of N str ids, each corpus id once, and
        float32 `[N, D]` embeddings.

    Raises:
        FileNotFoundError: no shards.
        ValueError: shards missing or of different runs, mismatched
            dimensions, or an id in more than one row.

    Example:
    >>> ids, embeddings = index_from_shards("work/scifact-beam")  # doctest: +SKIP
    >>> index = SearchIndex(ids, embeddings)  # doctest: +SKIP
    """
    numbered, total = _shard_paths(shard_dir)
    all_ids, all_embeddings, sources = [], [], []
    for number in range(total):
        with FileSystems.open(numbered[number], compression_type=CompressionTypes.UNCOMPRESSED) as f:
            with np.load(io.BytesIO(f.read()), allow_pickle=False) as shard:
                ids, embeddings = shard["ids"], shard["embeddings"]
        if len(ids):
            all_ids.append(ids)
            all_embeddings.append(embeddings)
            sources.append(np.full(len(ids), number))
    if not all_ids:
        raise ValueError(f"{shard_dir}: the shards hold no embeddings (empty corpus?).")
    dims = {e.shape[1] for e in all_embeddings}
    if len(dims) != 1:
        raise ValueError(f"{shard_dir}: shards have different embedding sizes {sorted(dims)}.")
    ids = np.concatenate(all_ids)
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    repeated = np.flatnonzero(ids[1:] == ids[:-1])
    if len(repeated):
        sources = np.concatenate(sources)[order]
        first = repeated[0]
        raise ValueError(
            f"{shard_dir}: {len(repeated)} id(s) in more than one row, e.g. {str(ids[first])!r} in "
            f"{numbered[sources[first]]} and {numbered[sources[first + 1]]}; the corpus has duplicate `_id`s."
        )
    embeddings = np.concatenate(all_embeddings)[order]
    return ids.tolist(), embeddings.astype(np.float32, copy=False)
