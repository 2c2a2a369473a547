"""The checks of an index directory of `gtr-keras index`, and of a search index directory.

Checksums first (so that a changed byte is named by its file), then the
records (`retriever.json`, `index.json`, `segments.json`: every field), then
each segment: its ids (their count against its record), its vectors (shape,
dtype, finite rows) or ScaNN's per-point arrays, its deletion list, its
documents, and the BM25 side (its ids against the dense part's live ids, its
texts against the documents).
"""

import os

import numpy as np

from gtr_keras.errors import DataError, MismatchError
from gtr_keras.index.layout import (
    BM25_SUBDIR,
    DOCUMENTS_FILE,
    EMBEDDINGS_NPY,
    IDS_TXT,
    INDEX_SUBDIR,
    MANIFEST_JSON,
    RETRIEVER_JSON,
    SCANN_DIR,
    check_scann_rows,
    has_float32,
    read_description,
    read_embeddings,
    read_ids,
    read_model_record,
)
from gtr_keras.index.segments import (
    BASE,
    documents_path,
    initial_manifest,
    live_corpus,
    metadata_types,
    read_deleted,
    read_manifest,
    segment_path,
)
from gtr_keras.lexical.bm25_side import has_bm25_side, load_bm25_side
from gtr_keras.utils import files

_BASE_FILES = (IDS_TXT, EMBEDDINGS_NPY, SCANN_DIR, files.CHECKSUMS_FILE)


def check_index_directory(index_dir, report):
    """Checks an index directory (`retriever.json`, `index/`, its documents and BM25 side) into `report`."""
    search_index = os.path.join(index_dir, INDEX_SUBDIR)
    manifest = report.step(lambda: read_manifest(search_index))
    base_used = manifest is None or any(s["name"] == BASE for s in manifest["segments"])
    bm25 = has_bm25_side(index_dir)

    def expected_absent(relative):
        name = relative.split("/")
        if name[0] == INDEX_SUBDIR and len(name) > 1 and name[1] in _BASE_FILES:
            return not base_used
        if relative == DOCUMENTS_FILE:
            return not base_used
        return name[0] == BM25_SUBDIR and not bm25

    report.checksums(index_dir, expected_absent)
    recorded = report.step(lambda: read_model_record(index_dir))
    live = check_search_index(search_index, report, checksums=False)
    if recorded is not None and live is not None and not manifest and recorded["num_documents"] != len(live):
        report.add(
            os.path.join(index_dir, RETRIEVER_JSON),
            f"num_documents {recorded['num_documents']}, the index holds {len(live)}",
        )
    if bm25 and live is not None:
        corpus = report.step(lambda: _documents(search_index, manifest))
        try:
            report.step(lambda: load_bm25_side(index_dir, list(live), corpus), passes=MismatchError)
            report.note("BM25 side")
        except MismatchError as error:  # an update killed between its dense commit and the side's rebuild
            report.note(f"BM25 side stale, refused until rebuilt ({str(error).split(': ', 1)[-1]})")


def check_search_index(directory, report, checksums=True):
    """Checks a search index directory (every segment) into `report`; returns its live ids, or None."""
    manifest = report.step(lambda: read_manifest(directory))
    described = report.step(lambda: read_description(directory))
    if described is None:
        return None
    directory, _, config = described
    manifest = manifest or initial_manifest(config["num_embeddings"])
    deleted = report.step(lambda: read_deleted(directory, manifest)) or {}
    live, stored = [], 0
    for segment in manifest["segments"]:
        path = segment_path(directory, segment["name"])
        if checksums or segment["name"] != BASE or files.isfile(os.path.join(path, files.CHECKSUMS_FILE)):
            report.checksums(path)  # the base of an index directory is its parent's unit
        ids = report.step(lambda: _check_segment(path, segment))
        if "metadata_types" in segment:
            report.step(lambda: _check_recorded_types(directory, segment))
        if ids is not None:
            mask = deleted.get(segment["name"], np.zeros(len(ids), bool))
            live += [i for i, gone in zip(ids, mask) if not gone]
            stored += len(ids)
    report.note(f"{len(manifest['segments'])} segment{'s' * (len(manifest['segments']) != 1)}")
    report.note(f"{len(live)} live rows of {stored} stored ({config['kind']}, {config['dims']} dims)")
    return live


def _check_segment(path, segment):
    _, config_path, config = read_description(path)
    if config["num_embeddings"] != segment["num_rows"]:
        raise DataError(
            f"{config_path}: num_embeddings {config['num_embeddings']}, the manifest says {segment['num_rows']}"
        )
    ids = list(read_ids(os.path.join(path, IDS_TXT), config["num_embeddings"]))
    if config["kind"] == "scann":
        with files.local_copy(os.path.join(path, SCANN_DIR)) as scann_dir:
            check_scann_rows(scann_dir, config)
    if has_float32(config["kind"], config["params"]):
        read_embeddings(os.path.join(path, EMBEDDINGS_NPY), config, config_path)
    return ids


def _check_recorded_types(directory, segment):
    """Raises `DataError` when `segment`'s documents hold a metadata field of a type that its manifest entry
    does not record: the record an update's type check trusts instead of reading them."""
    path = documents_path(directory, segment["name"])
    recorded = segment["metadata_types"]
    for field, kind in metadata_types(live_corpus([(path, None)])).items():
        if recorded.get(field) != kind:
            raise DataError(
                f"{path}: field `metadata.{field}` is a {kind}, but {os.path.join(directory, MANIFEST_JSON)} "
                f"records {recorded.get(field) or 'no such field'} for segment {segment['name']!r}"
            )


def _documents(directory, manifest):
    """The live documents of the search index `directory`'s segments, checked to be readable (a `Corpus`)."""
    manifest = manifest or initial_manifest(0)
    sources = [(documents_path(directory, s["name"]), None) for s in manifest["segments"]]
    deleted = read_deleted(directory, manifest)
    if deleted:
        sources = []
        for s in manifest["segments"]:
            ids = read_ids(os.path.join(segment_path(directory, s["name"]), IDS_TXT), s["num_rows"]).array
            mask = deleted.get(s["name"])
            sources.append((documents_path(directory, s["name"]), ids if mask is None else ids[~mask]))
    return live_corpus(sources)
