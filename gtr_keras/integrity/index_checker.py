"""The checks of an index directory of `gtr-keras index`, and of a search index directory.

Checksums first, of every file below the directory (`utils.checksums`: its
search index, every segment, deletion list, manifest and tuned setting, its
documents and BM25 side, each against the record of the directory it lies in),
so that a changed byte is named by its file; then the records
(`retriever.json`, `index.json`, `segments.json`, `tuned.json`: every field),
then each segment: its ids (their count against its record), its vectors
(shape, dtype, finite rows) or ScaNN's per-point arrays, its deletion list,
its documents (readable, and each live one with an id of the rule of ids:
one an older version stored with whitespace is named with how to repair
the index), and the BM25 side (its ids against the dense part's live ids,
its texts against the documents). What killed jobs left inside the directory
or beside it (staging, `.tune-*`, `NAME.partial`, segments no generation uses)
is named too.

`check_index` reports on index directories as `gtr-keras check` does (`Index.check`): it and what it
imports (`check_report`, and `utils`, `index` and `lexical`) lie beneath `retrieval`, which may import them
(docs/architecture.md); the checks of the other kinds of directory stay above `exports`.
"""

import fnmatch
import os
import re

import numpy as np

from gtr_keras.errors import DataError
from gtr_keras.integrity.check_report import CheckReport
from gtr_keras.lexical.bm25_side import has_bm25_side, load_bm25_side, side_mismatch
from gtr_keras.storage.layout import (
    BM25_SUBDIR,
    EMBEDDINGS_NPY,
    IDS_TXT,
    INDEX_JSON,
    INDEX_SUBDIR,
    MANIFEST_JSON,
    PUSH_LEDGER_GLOB,
    RETRIEVER_JSON,
    SCANN_DIR,
    TUNED_JSON,
    check_scann_rows,
    has_float32,
    is_tune_scratch,
    read_description,
    read_embeddings,
    read_ids,
    read_model_record,
    read_push_ledger,
    read_tuned,
)
from gtr_keras.storage.segments import (
    documents_path,
    initial_manifest,
    live_corpus,
    metadata_types,
    read_deleted,
    read_manifest,
    segment_path,
    used_names,
)
from gtr_keras.utils import files

INDEX_DIRECTORY = "an index directory"
_UNUSED = re.compile(r"segment-\d{6}|deleted-\d{6}\.npz")
_RERUN = "rerun the job (it removes it), or remove it once no job runs"
# What a build or a tune that did not end leaves beside a directory it writes (their own scratch).
BUILD_LEFTOVERS = {
    "{name}.partial": "the encoded pieces of a `gtr-keras index` that did not end (killed, or still running): "
    "rerun it (it resumes from them, then removes them), or remove them once no job runs",
    "{name}.partial-beam": f"the embedding files of an `index --runner` pipeline that did not end: {_RERUN}",
}
_TUNE_SCRATCH = f"the scratch of a `gtr-keras tune` that did not end (killed, or still running): {_RERUN}"


def _beside(directory, leftovers):
    name = files.parent_and_name(directory)[1]
    return {glob.format(name=name): why for glob, why in leftovers.items()}


def check_index(paths):
    """The `CheckReport` of an index directory, as `gtr-keras check` prints it (`check_directory`), or of
    several, shards of one index, in one report: every shard's problems, and its facts after its path.

    Example:
    >>> check_index(["indexes/scifact"]).ok
    True
    """
    if len(paths) == 1:
        report = CheckReport(paths[0], INDEX_DIRECTORY)
        report.step(lambda: check_index_directory(paths[0], report), paths[0])
        return report
    report = CheckReport(", ".join(paths), f"{len(paths)} index directories (shards of one index)")
    for path in paths:
        shard = check_index([path])
        report.problems += shard.problems
        report.leftovers += shard.leftovers
        report.verified += shard.verified
        report.note(f"{path}: {'; '.join(shard.facts)}")
    return report


def check_index_directory(index_dir, report):
    """Checks an index directory (`retriever.json`, `index/`, its documents and BM25 side) into `report`."""
    report.checksums(index_dir)
    report.leftovers_beside(index_dir, _beside(index_dir, BUILD_LEFTOVERS))
    search_index = os.path.join(index_dir, INDEX_SUBDIR)
    recorded = report.step(lambda: read_model_record(index_dir), os.path.join(index_dir, RETRIEVER_JSON))
    manifest = report.step(lambda: read_manifest(search_index), os.path.join(search_index, MANIFEST_JSON))
    live = check_search_index(search_index, report, checksums=False)
    if recorded is not None and live is not None and not manifest and recorded["num_documents"] != len(live):
        report.add(
            os.path.join(index_dir, RETRIEVER_JSON),
            f"num_documents {recorded['num_documents']}, the index holds {len(live)}",
        )
    for name in sorted(files.listdir(index_dir)):
        if fnmatch.fnmatchcase(name, PUSH_LEDGER_GLOB):
            ledger = report.step(lambda: read_push_ledger(os.path.join(index_dir, name)), os.path.join(index_dir, name))
            if ledger is not None:
                report.note(f"pushed {len(ledger['records'])} documents to {ledger['target']}")
    if live is None:
        return
    corpus = report.step(lambda: _documents(search_index, manifest), search_index)
    side = os.path.join(index_dir, BM25_SUBDIR)
    if not report.step(lambda: has_bm25_side(index_dir), side):
        return
    retriever = report.step(lambda: load_bm25_side(index_dir), side)
    mismatch = retriever and side_mismatch(retriever, live, corpus)
    if mismatch and manifest and manifest["generation"]:  # an update killed between its commit and the rebuild
        report.note(f"BM25 side stale, refused until rebuilt ({mismatch}; the next update rebuilds it)")
    elif mismatch:  # never updated: the side was written with the index
        report.add(side, f"{mismatch}: the index was never updated, so its side was changed since; rebuild the index")
    elif retriever is not None:
        report.note("BM25 side")


def check_search_index(directory, report, checksums=True):
    """Checks a search index directory (every segment) into `report`; returns its live ids, or None."""
    if checksums:
        report.checksums(directory)
        name = files.parent_and_name(directory)[1]
        report.leftovers_beside(directory, {lambda entry: is_tune_scratch(entry, name): _TUNE_SCRATCH})
    manifest = report.step(lambda: read_manifest(directory), os.path.join(directory, MANIFEST_JSON))
    described = report.step(lambda: read_description(directory), os.path.join(directory, INDEX_JSON))
    if described is None:
        return None
    directory, _, config = described
    tuned = report.step(lambda: read_tuned(directory), os.path.join(directory, TUNED_JSON))
    manifest = manifest or initial_manifest(config["num_embeddings"])
    deleted_path = os.path.join(directory, manifest["deleted"] or "deleted-*.npz")
    deleted = report.step(lambda: read_deleted(directory, manifest), deleted_path) or {}
    _check_unused(directory, manifest, report)
    live, stored = [], 0
    for segment in manifest["segments"]:
        path = segment_path(directory, segment["name"])
        ids = report.step(lambda: _check_segment(path, segment), path)
        if "metadata_types" in segment:
            report.step(
                lambda: _check_recorded_types(directory, segment), documents_path(directory, segment["name"]) or path
            )
        if ids is not None:
            mask = deleted.get(segment["name"], np.zeros(len(ids), bool))
            live += [i for i, gone in zip(ids, mask) if not gone]
            stored += len(ids)
    report.note(f"{len(manifest['segments'])} segment{'s' * (len(manifest['segments']) != 1)}")
    report.note(f"{len(live)} live rows of {stored} stored ({config['kind']}, {config['dims']} dims)")
    if tuned is not None:
        report.note(f"tuned: {', '.join(f'{name} {value}' for name, value in tuned['setting'].items())}")
    return live


def _check_unused(directory, manifest, report):
    """Names the segments and deletion lists that neither the manifest's generation nor the one before uses:
    what an update that did not end wrote before its commit."""
    used = used_names(manifest)
    for name in files.listdir(directory):
        if _UNUSED.fullmatch(name) and name not in used:
            report.add(
                os.path.join(directory, name),
                f"used by no generation of {os.path.join(directory, MANIFEST_JSON)}: written by an update that did "
                "not end (killed, or still running): the next update removes it (or remove it once no update runs)",
                leftover=True,
            )


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
    for field, kind in metadata_types(live_corpus([(path, None)], keep_damaged=True)).items():
        if recorded.get(field) != kind:
            raise DataError(
                f"{path}: field `metadata.{field}` is a {kind}, but {os.path.join(directory, MANIFEST_JSON)} "
                f"records {recorded.get(field) or 'no such field'} for segment {segment['name']!r}"
            )


def _documents(directory, manifest):
    """The live documents of the search index `directory`'s segments, checked to be readable and to have ids of
    the rule of ids (`segments.check_stored_ids`) (a `Corpus`)."""
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
