"""The segments of an updated search index: its manifest, its deletion lists and its documents.

A search index directory that was never updated is one segment, its own
files (`index_format`). The first update adds `segments.json`, the manifest,
and from then on the manifest alone says what the index holds:

- `segments`: the segments in row order, each `{"name", "num_rows",
  "num_deleted"}` and, where known, `"metadata_types"`: the type of each
  metadata field its documents held when it was written (`metadata_types`;
  deletions only narrow it), so that an update's type check reads the
  documents of only the segments that could disagree; `"."` is the
  directory's own index, `segment-NNNNNN` a subdirectory holding a search index of the same kind (for ScaNN, with the
  tree and codebooks of the first: `scann_builder.build_scann_segment`) and,
  for documents given as text, their `documents.jsonl.gz`;
- `deleted`: the `deleted-GGGGGG.npz` file of the deleted rows of each
  segment (packed bits, by segment name), or null;
- `generation` (1 for the first update), `next_segment`, and `previous`, the
  segment names and deletion file of the generation before, whose files are
  kept for readers that are loading it;
- `update_sha256`: what the update that made the generation was asked
  (`segment_writer.request_sha256`), so that rerunning it after a kill that
  came after its commit changes nothing (null after a build or for older ones).

Segments and deletion files are written once and never changed; an update
writes its new files, then replaces the manifest in one rename (the commit),
then removes the files that neither this generation nor the one before uses.
The documents of the `"."` segment of an index directory are its
`documents.jsonl.gz`, beside `index/`.
"""

import gzip
import io
import json
import os
import re
import zipfile

import numpy as np

from gtr_keras.beir.readers import METADATA_TYPES, Corpus, metadata_type, read_records
from gtr_keras.errors import DataError, MismatchError
from gtr_keras.storage.layout import (
    DOCUMENTS_FILE,
    MANIFEST_JSON,
    REMEDY,
    RETRIEVER_JSON,
    SEARCH_FIELDS,
    read_model_record,
)
from gtr_keras.utils import files
from gtr_keras.utils.records import describe_change, read_json_object
from gtr_keras.utils.text_files import id_problem

BASE = "."
MANIFEST_FORMAT = 1
_MANIFEST_FIELDS = ("manifest_format", "generation", "segments", "deleted", "next_segment", "previous")
_SEGMENT_NAME = re.compile(r"segment-(\d{6})")
_DELETED_NAME = re.compile(r"deleted-(\d{6})\.npz")


def segment_name(number):
    return f"segment-{number:06d}"


def deleted_name(generation):
    return f"deleted-{generation:06d}.npz"


def segment_path(directory, name):
    return os.fspath(directory) if name == BASE else os.path.join(directory, name)


def initial_manifest(num_rows):
    """The manifest of an index that was never updated: its own rows, none deleted (generation 0)."""
    return {
        "manifest_format": MANIFEST_FORMAT,
        "generation": 0,
        "segments": [{"name": BASE, "num_rows": num_rows, "num_deleted": 0}],
        "deleted": None,
        "next_segment": 1,
        "previous": {"segments": [], "deleted": None},
    }


def read_manifest(directory):
    """The manifest of the search index in `directory`, or None for an index that was never updated.

    Raises:
        DataError: a malformed manifest, named with the field, or a missing one beside segments.
    """
    path = os.path.join(directory, MANIFEST_JSON)
    if not files.isfile(path):
        check_segments_have_a_manifest(directory)
        return None
    manifest = read_json_object(path, REMEDY)
    check_manifest(path, manifest)
    return manifest


def _count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_manifest(path, manifest):
    """Raises `DataError` naming `path` and the field of the first wrong type or value of `manifest`: its
    names must be of segments (`.` or `segment-NNNNNN`, numbered below `next_segment`) and deletion files
    of generations up to its own, never paths; its counts non-negative integers."""

    def bad(field, what):
        return DataError(f"{path}: field {field!r} {what}; {REMEDY}")

    for field in _MANIFEST_FIELDS:
        if field not in manifest:
            raise bad(field, "is missing")
    if manifest["manifest_format"] != MANIFEST_FORMAT:
        raise bad("manifest_format", f"is {manifest['manifest_format']!r}, not {MANIFEST_FORMAT}")
    for field in ("generation", "next_segment"):
        if not _count(manifest[field]) or (field == "next_segment" and manifest[field] < 1):
            raise bad(
                field,
                f"must be a {'positive' if field == 'next_segment' else 'non-negative'} integer, got "
                f"{json.dumps(manifest[field])}",
            )
    previous = manifest["previous"]
    if not isinstance(previous, dict) or not isinstance(previous.get("segments"), list):
        raise bad("previous", f"must be an object of 'segments' (a list) and 'deleted', got {json.dumps(previous)}")
    segments = manifest["segments"]
    if not isinstance(segments, list) or not segments:
        raise bad("segments", f"must be a non-empty list of segments, got {json.dumps(segments)}")
    names = []
    for i, segment in enumerate(segments):
        field = f"segments[{i}]"
        if not isinstance(segment, dict) or {"name", "num_rows", "num_deleted"} - set(segment):
            raise bad(field, f"must be an object of 'name', 'num_rows' and 'num_deleted', got {json.dumps(segment)}")
        names.append(segment["name"])
        if not _count(segment["num_rows"]) or not _count(segment["num_deleted"]):
            raise bad(field, f"must count rows with non-negative integers, got {json.dumps(segment)}")
        if segment["num_deleted"] > segment["num_rows"]:
            raise bad(field, f"deletes {segment['num_deleted']} of its {segment['num_rows']} rows")
        types = segment.get("metadata_types", {})
        if not isinstance(types, dict) or not all(
            isinstance(name, str) and kind in METADATA_TYPES for name, kind in types.items()
        ):
            raise bad(
                f"{field}.metadata_types",
                f"must map field names to one of {', '.join(METADATA_TYPES)}, got {json.dumps(types)[:200]}",
            )
    for field, listed in ((f"segments[{i}].name", [name]) for i, name in enumerate(names)):
        _check_segment_names(bad, field, listed, manifest["next_segment"])
    _check_segment_names(bad, "previous.segments", previous["segments"], manifest["next_segment"])
    if len(set(names)) != len(names):
        raise bad("segments", "names a segment twice")
    for field, name in (("deleted", manifest["deleted"]), ("previous.deleted", previous.get("deleted"))):
        match = _DELETED_NAME.fullmatch(name) if isinstance(name, str) else None
        if name is not None and (match is None or int(match.group(1)) > manifest["generation"]):
            raise bad(
                field,
                f"must be null or a deletion file deleted-NNNNNN.npz of a generation up to "
                f"{manifest['generation']}, got {json.dumps(name)}",
            )
    request = manifest.get("update_sha256")
    if request is not None and not (isinstance(request, str) and re.fullmatch(r"[0-9a-f]{64}", request)):
        raise bad("update_sha256", f"must be null or a SHA-256 hex digest, got {json.dumps(request)[:80]}")
    if manifest["deleted"] is None and any(segment["num_deleted"] for segment in segments):
        raise bad("deleted", "is null, but a segment has deleted rows")


def _check_segment_names(bad, field, names, next_segment):
    for name in names:
        match = _SEGMENT_NAME.fullmatch(name) if isinstance(name, str) else None
        if name != BASE and (match is None or int(match.group(1)) >= next_segment):
            raise bad(
                field,
                f"must name '.' or a segment-NNNNNN numbered below next_segment {next_segment}, got {json.dumps(name)}",
            )


def check_segments_have_a_manifest(directory):
    """Raises `DataError` when the search index `directory` holds segments or deletion files but no
    manifest (removed or lost): its base alone would be searched, and an update would write over them."""
    if files.isfile(os.path.join(directory, MANIFEST_JSON)):
        return
    orphans = [
        name for name in files.listdir(directory) if _SEGMENT_NAME.fullmatch(name) or _DELETED_NAME.fullmatch(name)
    ]
    if orphans:
        raise DataError(
            f"{os.path.join(directory, MANIFEST_JSON)}: missing, but {os.path.join(directory, orphans[0])} is there "
            f"(the manifest was removed: restore it from a backup, or {REMEDY})"
        )


def read_deleted(directory, manifest):
    """`{segment name: bool [num_rows] mask of its deleted rows}` for the segments of `manifest` with any."""
    if manifest["deleted"] is None:
        return {}
    path = os.path.join(directory, manifest["deleted"])
    try:
        with files.open(path) as f, np.load(io.BytesIO(f.read())) as stored:
            packed = {name: stored[name] for name in stored.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"{path}: unreadable ({e}); {REMEDY}") from e
    masks = {}
    for segment in manifest["segments"]:
        if segment["num_deleted"]:
            if segment["name"] not in packed:
                raise DataError(f"{path}: no deletions of segment {segment['name']!r}; {REMEDY}")
            mask = np.unpackbits(packed[segment["name"]], count=segment["num_rows"]).astype(bool)
            if int(mask.sum()) != segment["num_deleted"]:
                raise DataError(
                    f"{path}: segment {segment['name']!r} has {int(mask.sum())} deleted rows, not "
                    f"{segment['num_deleted']}; {REMEDY}"
                )
            masks[segment["name"]] = mask
    return masks


def write_deleted(path, masks):
    """Writes `masks` (`{segment name: bool mask}`) as packed bits to the local file `path`."""
    np.savez(path, **{name: np.packbits(mask) for name, mask in masks.items()})


def used_names(manifest):
    """The names in the index directory that `manifest`'s generation, or the one before, uses."""
    names = {segment["name"] for segment in manifest["segments"]} | set(manifest["previous"]["segments"])
    return names | {name for name in (manifest["deleted"], manifest["previous"]["deleted"]) if name}


def documents_path(directory, name):
    """Where the documents of segment `name` of the search index in `directory` are (the file may be absent),
    or None for the `"."` segment of a search index outside an index directory."""
    if name != BASE:
        return os.path.join(directory, name, DOCUMENTS_FILE)
    parent = os.path.dirname(os.fspath(directory).rstrip("/"))
    return os.path.join(parent, DOCUMENTS_FILE) if files.isfile(os.path.join(parent, RETRIEVER_JSON)) else None


def write_documents(path, corpus):
    """Writes `corpus`'s documents to the local file `path` as gzip JSON Lines (`_id`, `title`, `text`, and
    `metadata` where the document has any)."""
    metadata = corpus.metadata or [None] * len(corpus)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for doc_id, title, text, fields in zip(corpus.ids, corpus.titles, corpus.texts, metadata):
            record = {"_id": doc_id, "title": title, "text": text, **({"metadata": fields} if fields else {})}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


def metadata_types(corpus):
    """`{field: type}` of the metadata of `corpus`'s documents (`beir.readers.metadata_type`; a corpus holds
    one type a field), sorted by field; `{}` for None or a corpus without metadata.

    Example:
    >>> metadata_types(Corpus(["a", "b"], ["", ""], ["x", "y"], [{"year": 2019}, {"lang": "en"}]))
    {'lang': 'string', 'year': 'number'}
    """
    types = {}
    for fields in (corpus.metadata or []) if corpus is not None else []:
        for field, value in fields.items():
            kind = metadata_type(value)
            if kind is not None:
                types.setdefault(field, kind)
    return dict(sorted(types.items()))


def live_corpus(sources, keep_damaged=False):
    """The documents of several segments' live rows, as one `Corpus` (None when no segment has documents).

    Args:
        sources: `(documents path or None, live ids)` pairs, the ids a numpy bytes array of UTF-8, or
            None where every document of the file is live.
        keep_damaged: read a live document whose id breaks the rule of ids (one with whitespace, which older
            versions stored unchecked) as stored, as an update (the one that deletes it) and a compaction do;
            else refuse it (`check_stored_ids`).

    Raises:
        DataError: an unreadable documents file, or (unless `keep_damaged`) a live document with such an id.
    """
    ids, titles, texts, metadata, found = [], [], [], [], False
    for path, live_ids in sources:
        if path is not None and not files.isdir(os.path.dirname(path)):
            raise DataError(
                f"{os.path.dirname(path)}: removed while its index was loaded (updated twice since); load it again"
            )
        if path is None or not files.exists(path):
            continue
        found, corpus = True, read_records(path, with_metadata=True, stored=True)
        live = None if live_ids is None else set(live_ids.tolist())
        fields = corpus.metadata or [{}] * len(corpus)
        rows = [row for row, doc_id in enumerate(corpus.ids) if live is None or doc_id.encode("utf-8") in live]
        if not keep_damaged:
            check_stored_ids(path, [(row, corpus.ids[row]) for row in rows])
        for row in rows:
            ids.append(corpus.ids[row])
            titles.append(corpus.titles[row])
            texts.append(corpus.texts[row])
            metadata.append(fields[row])
    return Corpus(ids, titles, texts, metadata if any(metadata) else None) if found else None


def check_stored_ids(path, documents):
    """Raises `DataError` when a live document of the documents file `path` (`documents`: its `(row, id)`
    pairs) has an id that breaks the rule of ids (`text_files.id_problem`: one with whitespace, which older
    versions stored unchecked from Python), naming the file, the first such document's line and how to repair
    the index: delete them (`gtr-keras update INDEX --delete FILE`), or rebuild it."""
    damaged = [(row, doc_id, problem) for row, doc_id in documents if (problem := id_problem(doc_id))]
    if not damaged:
        return
    row, doc_id, problem = damaged[0]
    index_dir = os.path.dirname(path)  # the `"."` segment's documents lie in the index directory
    if _SEGMENT_NAME.fullmatch(os.path.basename(index_dir)):
        index_dir = os.path.dirname(os.path.dirname(index_dir))
    others = ""
    if len(damaged) > 1:
        shown = ", ".join(repr(other) for _, other, _ in damaged[1:4]) + (", ..." if len(damaged) > 4 else "")
        others = f" (and {len(damaged) - 1} other live documents of this segment: {shown})"
    raise DataError(
        f"{path}:{row + 1}: document id {doc_id!r} {problem}{others}: an older gtr-keras stored such ids unchecked "
        f"from Python; delete them (`gtr-keras update {index_dir} --delete FILE`, FILE holding the ids one a line) "
        "or rebuild the index from a corrected corpus"
    )


def index_documents(index, keep_damaged=False):
    """The documents of a loaded index's live rows, from the files of the segments it loaded (a `Corpus`,
    or None when none of its segments has documents); `keep_damaged` as `live_corpus` takes it."""
    return live_corpus(
        [(part.documents_path, None if deleted is None else part.ids.array[~deleted]) for part, deleted in index.parts],
        keep_damaged,
    )


def check_same_model(directories):
    """Raises `MismatchError` naming the first of the search index `directories` whose model (the
    `retriever.json` of its index directory, where there is one) is not the first's."""
    first = None
    for directory in directories:
        path = os.path.join(os.path.dirname(os.fspath(directory).rstrip("/")), RETRIEVER_JSON)
        if not files.isfile(path):
            continue
        recorded = read_model_record(os.path.dirname(path))
        model = {field: recorded.get(field) for field in SEARCH_FIELDS}
        if first is None:
            first = (path, model)
            continue
        change = describe_change(first[1], model, "this shard has")
        if change:
            raise MismatchError(
                f"{path}: a shard of another model than {first[0]} ({change}); shards searched together "
                f"must be built with one model"
            )
