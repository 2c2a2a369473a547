"""A corpus encoded into a search engine's collection by an Apache Beam pipeline (`gtr-keras encode --runner R
--corpus C --to TARGET`): the user's own `apache_beam.ml.rag` pipeline, run for them.

`encode_corpus_to_engine` checks the whole corpus first (streamed: every record as `load_corpus` checks it, ids
unique, each metadata field of one type; 8 bytes held per document), creates the collection with the record
contract's schema and its `CollectionInfo` (`create_collection`), then runs
`corpus files -> Chunks -> MLTransform(GTRTextEmbeddings) -> Beam's writer`: `QdrantWriteConfig` for `qdrant:`
targets, `MilvusVectorWriterConfig` (`MILVUS_COLUMNS`) for `milvus:` ones. Nothing is held but a batch at each
step; writes are upserts by id, so a rerun (after a failure, or of the same corpus) leaves one record per
document.

The records are those of the record contract (docs/past-one-machine.md), as `QdrantEngine` and `MilvusEngine`
write and read them: Qdrant points of one named vector `"dense"` (distance `Dot`), point id
`uuid5(GTR_NAMESPACE, doc_id)`, payload `{"id", "title", "text", "metadata"}`, the `CollectionInfo` in the
collection's metadata under `"gtr_keras"`; Milvus rows `id` (VARCHAR primary key), `embedding` (FLOAT_VECTOR,
a FLAT index of metric IP), `title`, `text` (VARCHAR), `metadata` (JSON, `metadata_terms.filterable`), the
collection created by `MilvusEngine.create`. `create_collection` creates a Qdrant collection as
`QdrantEngine.create` must (its twin until that exists: then `open_engine(target, collection).create(info)`).

Example:
>>> encode_corpus_to_engine("data/scifact", parse_target("qdrant:/data/qdrant"), "models/gtr-base",
...                         gtr_keras.load("models/gtr-base"), collection="scifact")  # doctest: +SKIP
5183
"""

import array
import dataclasses
import hashlib
import importlib.util
import json
import os
import uuid

import apache_beam as beam
import numpy as np
from apache_beam.ml.rag.ingestion.postgres_common import ColumnSpecsBuilder
from apache_beam.ml.rag.types import Chunk, Content
from apache_beam.ml.transforms.base import MLTransform
from apache_beam.options.pipeline_options import PipelineOptions

from gtr_keras.beir.readers import document_values
from gtr_keras.engines.engine import CollectionInfo
from gtr_keras.engines.metadata_terms import filterable
from gtr_keras.engines.milvus_engine import MAX_TEXT_BYTES, MilvusEngine
from gtr_keras.errors import DataError, UserError
from gtr_keras.retrieval.encoding.beam_pipeline import beam_pipeline_args, corpus_files, read_documents
from gtr_keras.retrieval.encoding.rag_embeddings import GTRTextEmbeddings
from gtr_keras.utils import files
from gtr_keras.utils.text_files import iter_jsonl

DEFAULT_COLLECTION = "gtr"
# Qdrant point ids are integers or UUIDs: a document's is the UUID5 of its id in this namespace (QdrantEngine's).
GTR_NAMESPACE = uuid.UUID("5f1c8d2e-3b7a-4e0f-9a64-6c2d1b8e7f30")
INFO_KEY = "gtr_keras"
# Each engine's package and the extra that installs it.
PACKAGES = {"qdrant": ("qdrant_client", "qdrant-client"), "milvus": ("pymilvus", "pymilvus")}

MILVUS_COLUMNS = (
    ColumnSpecsBuilder()
    .with_id_spec()
    .with_embedding_spec(convert_fn=list)
    .add_metadata_field("title", str, default="")
    .with_content_spec(column_name="text")
    .add_metadata_field("metadata", dict, convert_fn=filterable, default={})
    .build()
)


def point_id(doc_id):
    """The Qdrant point id of a document: `str(uuid5(GTR_NAMESPACE, doc_id))`.

    Example:
    >>> point_id("d1") == point_id("d1") != point_id("d2")
    True
    """
    return str(uuid.uuid5(GTR_NAMESPACE, doc_id))


def check_engine(target):
    """Refuses (`UserError`, one line) a target `encode --to` does not write, or whose engine's package is
    missing (the pip line to run).

    Example:
    >>> check_engine(parse_target("vertex-ai:batches"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gtr_keras.errors.UserError: target 'vertex-ai:batches': encode --to writes qdrant: and milvus: targets; ...
    """
    if target.engine not in PACKAGES:
        raise UserError(
            f"target {target.text!r}: encode --to writes qdrant: and milvus: targets; for Vertex AI build an index "
            f"(gtr-keras index) and push it: gtr-keras push --to {target.text}"
        )
    module, package = PACKAGES[target.engine]
    if importlib.util.find_spec(module) is None:
        raise UserError(f"target {target.text!r}: needs {package}: pip install 'gtr-keras[{target.engine}]'")


def scan_corpus(paths, max_text_bytes=None):
    """Reads every record of the corpus files `paths` (in corpus order), streamed, and checks them as
    `load_corpus` checks one file: each record (`document_values`), ids unique across the files, each metadata
    field of one type across them. Holds 8 bytes per document (a digest of its id).

    Args:
        paths: the corpus files (`corpus_files`).
        max_text_bytes: the most UTF-8 bytes a title or text may hold in the engine (None: no limit).

    Returns:
        `(number of documents, {field: type})`, the types as `MetadataColumns.types` gives them.

    Raises:
        DataError: a malformed record or a field of another type (naming file, line and field), a title or text
            past `max_text_bytes`, a repeated id (naming both places), or no document at all.

    Example:
    >>> scan_corpus(["corpus.jsonl"])  # doctest: +SKIP
    (3, {'year': 'number'})
    """
    first, digests = {}, array.array("Q")
    for path, line_no, (doc_id, *texts, _) in _corpus_documents(paths, first):
        digests.append(_digest(doc_id))
        for name, text in zip(("title", "text"), texts):
            if max_text_bytes is not None and len(text.encode("utf-8")) > max_text_bytes:
                raise DataError(
                    f"{path}:{line_no}: document {doc_id!r} field `{name}` is past the {max_text_bytes} bytes the "
                    "engine's field holds"
                )
    if not digests:
        raise DataError(f"{', '.join(paths)}: no documents")
    values, counts = np.unique(np.frombuffer(digests, np.uint64), return_counts=True)
    repeated = set(values[counts > 1].tolist())
    if repeated:
        seen = {}
        for path, line_no, (doc_id, *_) in _corpus_documents(paths, {}):
            if _digest(doc_id) in repeated:
                if doc_id in seen:
                    raise DataError(
                        f"{path}:{line_no}: duplicate `_id` {doc_id!r} (first at {seen[doc_id]}); ids name one document"
                    )
                seen[doc_id] = f"{path}:{line_no}"
    return len(digests), {field: kind for field, (kind, *_) in first.items()}


def _corpus_documents(paths, first):
    for path in paths:
        for line_no, record in iter_jsonl(path):
            values = (record.get(name) for name in ("_id", "title", "text", "metadata"))
            yield path, line_no, document_values(path, line_no, *values, first)


def _digest(doc_id):
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest(), "little")


def corpus_chunks(file_number, path):
    """The `Chunk`s of one corpus file (`read_documents`: streamed, checked): id the document's id, content its
    text, `metadata` `{"id", "title", "text", "metadata"}` (the Qdrant payload of the record contract; the title
    is what `GTRTextEmbeddings` embeds before the text).

    Example:
    >>> next(corpus_chunks(0, "corpus.jsonl")).metadata  # doctest: +SKIP
    {'id': 'd1', 'title': 'A title', 'text': 'Body.', 'metadata': {'year': 2019}}
    """
    for (doc_id, _, _, title, text, metadata), _ in read_documents(file_number, path):
        fields = json.loads(metadata) if metadata else {}
        payload = {"id": doc_id, "title": title, "text": text, "metadata": fields}
        yield Chunk(content=Content(text=text), id=doc_id, metadata=payload)


def with_point_id(chunk):
    """`chunk` (of `corpus_chunks`) with its Qdrant point id (`point_id`) as its id."""
    return dataclasses.replace(chunk, id=point_id(chunk.id))


def write_transform(target, collection):
    """Beam's own writer of `target`'s engine into `collection`, for `corpus_chunks`' chunks with embeddings.

    Example:
    >>> write_transform(parse_target("milvus:docs.db"), "scifact")  # doctest: +SKIP
    """
    if target.engine == "qdrant":
        from apache_beam.ml.rag.ingestion.qdrant import QdrantConnectionParameters, QdrantWriteConfig

        connection = (
            QdrantConnectionParameters.for_url(target.location, api_key=os.environ.get("QDRANT_API_KEY"))
            if target.remote
            else QdrantConnectionParameters.local(target.location)
        )
        config = QdrantWriteConfig(connection_params=connection, collection_name=collection)
        return beam.Map(with_point_id) | config.create_write_transform()
    from apache_beam.ml.rag.ingestion.milvus_search import MilvusVectorWriterConfig, MilvusWriteConfig
    from apache_beam.ml.rag.utils import MilvusConnectionParameters

    uri = target.location if target.remote else os.path.abspath(target.location)
    connection = MilvusConnectionParameters(uri=uri, token=os.environ.get("MILVUS_TOKEN", ""))
    return MilvusVectorWriterConfig(
        connection_params=connection,
        write_config=MilvusWriteConfig(collection_name=collection),
        column_specs=MILVUS_COLUMNS,
    ).create_write_transform()


def merged_info(found, info, where):
    """The `CollectionInfo` a collection recording `found` records once `info`'s documents are written: `found`
    with its metadata types widened by `info`'s; `info` itself for a new collection (`found` None).

    Raises:
        UserError: another dimension or model, or a field of another type, naming `where` (the collection).

    Example:
    >>> merged_info(CollectionInfo(4, "m", {"a": "string"}), CollectionInfo(4, "m", {"b": "number"}), "c")
    CollectionInfo(dimensions=4, model='m', metadata_types={'a': 'string', 'b': 'number'})
    """
    if found is None:
        return info
    if (found.dimensions, found.model) != (info.dimensions, info.model):
        raise UserError(
            f"{where}: holds {found.dimensions}-dimensional vectors of model {found.model}, not "
            f"{info.dimensions}-dimensional ones of model {info.model}; write to another collection"
        )
    for field, kind in info.metadata_types.items():
        if found.metadata_types.get(field, kind) != kind:
            raise UserError(
                f"{where}: metadata field {field!r} holds {found.metadata_types[field]}s there, {kind}s in this "
                "corpus: a field holds one type"
            )
    return dataclasses.replace(found, metadata_types={**found.metadata_types, **info.metadata_types})


def create_collection(target, collection, info, timeout=10):
    """Creates `collection` in `target` with the record contract's schema, recording `info`; an existing one
    recording the same dimensions and model is kept, its metadata types widened (`merged_info`). Milvus:
    `MilvusEngine.create`; Qdrant: what `QdrantEngine.create` does, which it must agree with.

    Args:
        target: a `qdrant` or `milvus` `Target` (`parse_target`).
        collection: the collection's name.
        info: the `CollectionInfo` of the documents to write.
        timeout: seconds a remote engine may take to answer.

    Raises:
        UserError: an unreachable or refusing engine, a collection of another dimension or model, or one that
            gtr-keras did not create.

    Example:
    >>> create_collection(parse_target("qdrant:/data/qdrant"), "scifact", CollectionInfo(768, "ab12...", {}))
    ... # doctest: +SKIP
    """
    where = f"{target.text} collection {collection!r}"
    try:
        if target.engine == "qdrant":
            _create_in_qdrant(target, collection, info, where, timeout)
            return
        engine = MilvusEngine(target, collection, timeout)
        try:
            engine.create(info)
        finally:
            engine.close()
    except UserError:
        raise
    except Exception as error:  # the engine's client: unreachable, locked by another process, a refused name
        message = " ".join(str(error).split()) or type(error).__name__
        raise UserError(f"{where}: {message[:300]}") from None


def _create_in_qdrant(target, collection, info, where, timeout):
    from qdrant_client import QdrantClient, models

    if target.remote:
        client = QdrantClient(
            url=target.location, api_key=os.environ.get("QDRANT_API_KEY"), timeout=timeout, check_compatibility=False
        )
    else:
        client = QdrantClient(path=target.location)
    try:
        if not client.collection_exists(collection):
            client.create_collection(
                collection,
                vectors_config={"dense": models.VectorParams(size=info.dimensions, distance=models.Distance.DOT)},
                metadata={INFO_KEY: dataclasses.asdict(info)},
            )
            return
        found = _recorded(client.get_collection(collection).config.metadata, where)
        merged = merged_info(found, info, where)
        if merged != found:
            client.update_collection(collection, metadata={INFO_KEY: dataclasses.asdict(merged)})
    finally:
        client.close()


def _recorded(properties, where):
    record = (properties or {}).get(INFO_KEY)
    if record is None:
        raise UserError(f"{where}: exists but gtr-keras did not create it (no {INFO_KEY!r} record); choose another")
    return CollectionInfo(**record)


def encode_corpus_to_engine(corpus, target, model_dir, encoder, collection=DEFAULT_COLLECTION, **pipeline):
    """Encodes a corpus with an Apache Beam pipeline into a Qdrant or Milvus collection; returns the number of
    documents written.

    Checks everything it can before any write: the engine and its package (`check_engine`), the corpus
    (`scan_corpus`), the model (`encoder`), the collection (`create_collection`, its first write); then runs
    the pipeline. Writes are upserts by id: a rerun leaves one record per document (it removes none: a document
    gone from the corpus stays in the collection).

    Args:
        corpus: a BEIR directory, a corpus file or a glob of them, on any file system the workers read.
        target: a `Target` (`parse_target`): `qdrant:PATH`, `qdrant+http://...`, `milvus:PATH.db`,
            `milvus+http://...`.
        model_dir: the model's directory, which each worker loads.
        encoder: the same model loaded here, or a function that loads it (called once the corpus is checked),
            truncated to the `dimensions` the workers keep (`TextEncoder.truncated`); its fingerprint and
            dimension are the collection's.
        collection: the collection's name.
        **pipeline: `runner` (default `"DirectRunner"`; Qdrant's local mode takes one process at a time: the
            DirectRunner in this process), `beam_options` (`KEY[=VALUE]` strings, `beam_pipeline_args`),
            `batch_size`, `large_model` and `load_model_args` (as `GTRTextEmbeddings` takes them), and
            `timeout` (seconds a remote engine may take to answer, default 10).

    Raises:
        UserError: a target it does not write, a missing package, a corpus error (`DataError`), a collection
            of another model or dimension, an unreachable engine: all before any write.

    Example:
    >>> encode_corpus_to_engine("data/scifact", parse_target("milvus:docs.db"), "models/gtr-base",
    ...                         lambda: gtr_keras.load("models/gtr-base"), collection="scifact")  # doctest: +SKIP
    5183
    """
    from gtr_keras.models.text_encoder import TruncatedEncoder
    from gtr_keras.retrieval.index_building import index_metadata

    check_engine(target)
    paths = corpus_files(corpus)
    count, metadata_types = scan_corpus(paths, MAX_TEXT_BYTES if target.engine == "milvus" else None)
    encoder = encoder() if callable(encoder) and not hasattr(encoder, "encode_documents") else encoder
    model_sha256 = index_metadata(encoder, model_dir)["model_sha256"]
    info = CollectionInfo(encoder.embedding_dim, model_sha256, metadata_types)
    pipeline_args = beam_pipeline_args(pipeline.pop("beam_options", ()))
    options = PipelineOptions(pipeline_args, runner=pipeline.pop("runner", "DirectRunner"))
    create_collection(target, collection, info, pipeline.pop("timeout", 10))
    dimensions = encoder.dimensions if isinstance(encoder, TruncatedEncoder) else None
    embeddings = GTRTextEmbeddings(os.fspath(model_dir), dimensions=dimensions, model_sha256=model_sha256, **pipeline)
    with files.temporary_directory("gtr-keras-mltransform-") as artifacts:
        with beam.Pipeline(options=options) as p:
            _ = (
                p
                | "ListCorpusFiles" >> beam.Create(list(enumerate(paths)))
                | "SpreadFiles" >> beam.Reshuffle()
                | "ReadCorpus" >> beam.FlatMapTuple(corpus_chunks)
                | "Embed" >> MLTransform(write_artifact_location=artifacts).with_transform(embeddings)
                | "Write" >> write_transform(target, collection)
            )
    return count
