"""Updates of a search index directory in place: new segments, deletion lists, compaction (`segments`).

An update reads the ids of the index (a few bytes a row) and the vectors it
is given, and writes one new segment, one deletion file (an eighth of a byte
a row) and the manifest, whose replacement by one rename commits it: a kill
at any point before leaves the previous generation as it was, and the next
update (or a rerun) removes what the killed one had written. A compaction
writes the live rows of every segment into one new segment (for ScaNN, the
per-point arrays joined without retraining: every segment shares the first's
tree and codebooks; and the float32 rows it rescores with, copied), and is
run automatically past `MAX_SEGMENTS` segments or `MAX_DELETED_FRACTION` of
deleted rows.
"""

import hashlib
import json
import os

import numpy as np

from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.storage.layout import (
    DOCUMENTS_FILE,
    EMBEDDINGS_NPY,
    IDS_TXT,
    MANIFEST_JSON,
    SCANN_DIR,
    SEARCH_INDEX_DIRECTORY,
    VECTOR_FILES,
    Ids,
    check_ids,
    has_float32,
    read_description,
    read_embeddings,
    read_ids,
    write_description,
    write_embeddings,
)
from gtr_keras.storage.quantized_vectors import write_vectors
from gtr_keras.storage.scann_builder import build_scann_segment, merge_scann
from gtr_keras.storage.segments import (
    BASE,
    deleted_name,
    documents_path,
    initial_manifest,
    live_corpus,
    metadata_types,
    read_deleted,
    read_manifest,
    segment_name,
    segment_path,
    used_names,
    write_deleted,
    write_documents,
)
from gtr_keras.utils import files
from gtr_keras.utils.files import atomic_directory, atomic_file, replace_file
from gtr_keras.utils.locks import locks_output
from gtr_keras.utils.records import strings_sha256

# Compaction runs after an update that leaves more segments than this, or more deleted rows than this
# fraction of the stored ones: each segment costs a search, each deleted ScaNN row a larger candidate pool.
MAX_SEGMENTS = 8
MAX_DELETED_FRACTION = 0.25
_BLOCK_ROWS = 65_536


class IndexState:
    """The generation an update starts from: its manifest, deletion masks and the live ids' places, read
    once (`read_state`) and handed to each step of one update (`live_ids`: each segment's live ids).
    """

    def __init__(self, directory):
        self.directory, _, self.config = read_description(directory)
        self.manifest = read_manifest(self.directory) or initial_manifest(self.config["num_embeddings"])
        self.deleted = read_deleted(self.directory, self.manifest)
        arrays, segments, rows = [], [], []
        for number, segment in enumerate(self.manifest["segments"]):
            ids = read_ids(os.path.join(self.path(segment["name"]), IDS_TXT), segment["num_rows"]).array
            live = np.flatnonzero(~self.deleted.get(segment["name"], np.zeros(len(ids), bool)))
            arrays.append(ids[live])
            segments.append(np.full(len(live), number))
            rows.append(live)
        self.ids, self.live_ids = Ids(np.concatenate(arrays)), arrays
        order = np.argsort(self.ids.array, kind="stable")
        self._sorted = self.ids.array[order]
        self._segment_of, self._row_of = np.concatenate(segments)[order], np.concatenate(rows)[order]

    def path(self, name):
        return segment_path(self.directory, name)

    def begin(self):
        """Writes the manifest of an index never updated before the first file of its first update, so that
        segments and deletion files are never on disk without one (`segments.check_segments_have_a_manifest`)."""
        path = os.path.join(self.directory, MANIFEST_JSON)
        if not files.isfile(path):
            replace_file(path, _manifest_bytes(self.manifest))

    def find(self, ids):
        """`(found, segment numbers, rows)` of `ids` (str) among the live ids."""
        wanted = np.array([i.encode("utf-8") for i in ids], dtype="S") if len(ids) else np.array([], "S1")
        places = np.minimum(np.searchsorted(self._sorted, wanted), max(len(self._sorted) - 1, 0))
        found = self._sorted[places] == wanted if len(self._sorted) else np.zeros(len(wanted), bool)
        return found, self._segment_of[places], self._row_of[places]

    def masks(self):
        return {s["name"]: self.deleted.get(s["name"], np.zeros(s["num_rows"], bool)).copy() for s in self.segments}

    @property
    def segments(self):
        return self.manifest["segments"]


def read_state(directory):
    """The `IndexState` of the search index in `directory`: its manifest, deletion lists and ids files (no
    vectors or searcher).

    Example:
    >>> "p1" in list(read_state("indexes/msmarco/index").ids)
    True
    """
    return IndexState(directory)


def missing_ids(state, ids):
    """The positions of the `ids` (str) that are not live rows of an `IndexState`.

    Example:
    >>> missing_ids(read_state("indexes/msmarco/index"), ["p1", "no-such-id"])
    [1]
    """
    return np.flatnonzero(~state.find(list(ids))[0]).tolist()


def live_ids(directory):
    """The ids of the live rows of the search index in `directory`, in the order `SearchIndex.load` gives
    them (`Ids`), read from the manifest, deletion lists and ids files alone (no vectors or searcher).

    Example:
    >>> "p1" in list(live_ids("indexes/msmarco/index"))
    True
    """
    return read_state(directory).ids


def check_not_added(delete, new_ids, where=None):
    """Raises `UserError` naming (by `where(i)`, default `delete[i]`) the first id of `delete` that `new_ids`
    (the ids an update adds or replaces) holds too: an update deletes an id or writes it, not both."""
    both = set(delete) & set(new_ids)
    if both:
        first = next(i for i, id_ in enumerate(delete) if id_ in both)
        where = where or (lambda i: f"delete[{i}]")
        raise UserError(f"{where(first)}: id {delete[first]!r} is also among the documents added or replaced")


@locks_output("directory")
def update_search_index(
    directory,
    source=None,
    delete=(),
    where=None,
    missing_ok=False,
    compact="auto",
    corpus=None,
    state=None,
    request=None,
):
    """Adds, replaces and deletes rows of the search index in `directory`, writing on the order of the change.

    The rows of `source` whose id is in the index replace it, the others are
    added, as one new segment of the index's kind (for ScaNN, with the tree
    and codebooks of its first segment); the ids of `delete` are deleted. The
    update is committed by one rename of the manifest: a process that loaded
    the index keeps answering from what it loaded, a later load sees the whole
    update, and a kill leaves the previous generation (rerun the update).

    Args:
        directory: a search index directory (or an index directory of
            `gtr-keras index`, whose `index/` is updated).
        source: the vectors to add or replace (`ids`, `dims`, `num_rows`,
            `chunks()`, as `write_search_index` takes: an `EmbeddingFiles`, an
            `ArrayRows`), or None.
        delete: ids to delete.
        where: `where(i)` names `delete[i]` in messages (default `delete[i]`).
        missing_ok: skip the ids of `delete` that are not in the index,
            rather than raise.
        compact: `"auto"` (past `MAX_SEGMENTS` or `MAX_DELETED_FRACTION`),
            True or False: then compact (`compact_search_index`).
        corpus: the documents of `source`'s rows (a `Corpus`, its ids in
            `source`'s order), stored with the segment for display, or None.
        state: the index's `IndexState` as the caller read it (under the
            same lock), or None: read here.
        request: what the update is asked, recorded in the manifest
            (`update_sha256`; default: `request_sha256` of `source`'s ids and
            vectors, `delete` and `corpus`): a rerun of the update last
            committed (one killed after its commit) changes nothing.

    Returns:
        The new manifest (`segments`).

    Raises:
        DataError: an id of `delete` that is not in the index (named by
            `where`), or a malformed index.
        MismatchError: `source` has another D than the index.
        UserError: an id both added and deleted, or an update that would
            leave no row.

    Example:
    >>> update_search_index("indexes/msmarco/index", EmbeddingFiles.open("new/*.npy"), ["p17", "p18"])["generation"]
    1
    """
    where = where or (lambda i: f"delete[{i}]")
    delete = check_ids(delete, where, DataError)
    state = state or read_state(directory)
    if source is None and not delete and compact is True:
        return compact_search_index(directory, state)
    _remove_unused(state)
    request = request or request_sha256(source, delete, corpus)
    if state.manifest.get("update_sha256") == request:  # a rerun of the update last committed (killed after it)
        return compacted_if_asked(state, compact)
    if source is not None and source.dims != state.config["dims"]:
        raise MismatchError(
            f"the new embeddings have {source.dims} dims, the index {state.directory} has {state.config['dims']}"
        )
    new_ids = list(source.ids) if source is not None else []
    if corpus is not None and list(corpus.ids) != new_ids:
        raise UserError("the corpus must hold the documents of the new rows, in their order")
    check_not_added(delete, new_ids, where)
    deleted = state.find(delete)
    if not missing_ok and not deleted[0].all():
        first = int(np.flatnonzero(~deleted[0])[0])
        raise DataError(f"{where(first)}: id {delete[first]!r} is not in the index {state.directory}")
    replaced = state.find(new_ids)
    masks, changed = state.masks(), False
    for found, numbers, rows in (deleted, replaced):
        for number, row in zip(numbers[found], rows[found]):
            masks[state.segments[number]["name"]][row] = True
            changed = True
    if len(state.ids) - int(deleted[0].sum()) - int(replaced[0].sum()) + len(new_ids) < 1:
        raise UserError(f"the update would delete every document of {state.directory}")
    segments = [dict(s, num_deleted=int(masks[s["name"]].sum())) for s in state.segments]
    number = state.manifest["next_segment"]
    if source is not None:
        _write_segment(state, segment_name(number), source, Ids(new_ids), corpus)
        types = metadata_types(corpus)
        segments.append(
            {"name": segment_name(number), "num_rows": source.num_rows, "num_deleted": 0, "metadata_types": types}
        )
        number += 1
    _commit(state, segments, masks if changed else None, number, request)
    return compacted_if_asked(state, compact)


def compacted_if_asked(state, compact):
    """The manifest of the generation `state` holds, compacted when `compact` asks it (a rerun of an update
    killed between its commit and its compaction compacts too)."""
    if compact is True or (compact == "auto" and needs_compaction(state.manifest)):
        return compact_search_index(state.directory)
    return state.manifest


def needs_compaction(manifest):
    """True past `MAX_SEGMENTS` segments or `MAX_DELETED_FRACTION` of deleted rows."""
    stored = sum(s["num_rows"] for s in manifest["segments"])
    deleted = sum(s["num_deleted"] for s in manifest["segments"])
    return len(manifest["segments"]) > MAX_SEGMENTS or deleted > MAX_DELETED_FRACTION * stored


@locks_output("directory")
def compact_search_index(directory, state=None):
    """Rewrites the live rows of every segment of the index in `directory` as one segment (and its documents);
    an index of one segment without deleted rows is left as it is.

    ScaNN segments are joined without retraining (`scann_builder.merge_scann`),
    exact ones copied a block at a time. Committed like an update.

    `state`: the index's `IndexState` as the caller read it, or None: read here.

    Returns:
        The new manifest.

    Example:
    >>> compact_search_index("indexes/msmarco/index")["segments"][0]["num_deleted"]
    0
    """
    state = state or read_state(directory)
    _remove_unused(state)
    if len(state.segments) == 1 and not state.segments[0]["num_deleted"]:
        return state.manifest  # one segment, every row live: compact already (a rerun changes nothing)
    name, kind = segment_name(state.manifest["next_segment"]), state.config["kind"]
    keeps = [_keep(state, s) for s in state.segments]
    paths = [state.path(s["name"]) for s in state.segments]
    segment_ids = [_segment_ids(state, s)[keep] for s, keep in zip(state.segments, keeps)]
    live_ids = Ids(np.concatenate(segment_ids))
    state.begin()
    with atomic_directory(state.path(name), [SEARCH_INDEX_DIRECTORY]) as tmp:
        if kind == "scann":
            os.mkdir(tmp / SCANN_DIR)
            merge_scann([(os.path.join(path, SCANN_DIR), keep) for path, keep in zip(paths, keeps)], tmp / SCANN_DIR)
            if has_float32(kind, state.config["params"]):
                write_embeddings(tmp / EMBEDDINGS_NPY, _live_blocks(paths, keeps), len(live_ids), state.config["dims"])
        else:
            write_vectors(
                tmp, lambda: _live_blocks(paths, keeps), len(live_ids), state.config["dims"], state.config["params"]
            )
        write_description(tmp, live_ids, kind, state.config["params"], state.config["dims"])
        corpus = live_corpus(
            [(documents_path(state.directory, s["name"]), ids) for s, ids in zip(state.segments, segment_ids)],
            keep_damaged=True,
        )
        if corpus is not None:
            write_documents(tmp / DOCUMENTS_FILE, corpus)
    segments = [{"name": name, "num_rows": len(live_ids), "num_deleted": 0, "metadata_types": metadata_types(corpus)}]
    request = state.manifest.get("update_sha256")  # a rerun of the update it follows changes nothing either
    return _commit(state, segments, {}, state.manifest["next_segment"] + 1, request)


def _keep(state, segment):
    deleted = state.deleted.get(segment["name"])
    return np.ones(segment["num_rows"], bool) if deleted is None else ~deleted


def _segment_ids(state, segment):
    return read_ids(os.path.join(state.path(segment["name"]), IDS_TXT), segment["num_rows"]).array


def _live_blocks(paths, keeps):
    for path, keep in zip(paths, keeps):
        _, config_path, config = read_description(path)
        vectors = read_embeddings(os.path.join(path, EMBEDDINGS_NPY), config, config_path)
        for start in range(0, len(keep), _BLOCK_ROWS):
            block = np.asarray(vectors[start : start + _BLOCK_ROWS])
            yield block[keep[start : start + _BLOCK_ROWS]]


def _write_segment(state, name, source, ids, corpus):
    kind = state.config["kind"]
    state.begin()
    with atomic_directory(state.path(name), [SEARCH_INDEX_DIRECTORY]) as tmp:
        if kind == "scann":
            os.mkdir(tmp / SCANN_DIR)
            codec = os.path.join(state.path(state.segments[0]["name"]), SCANN_DIR)
            with files.local_copy(codec) as local_codec:
                build_scann_segment(local_codec, source, tmp / SCANN_DIR)
            if has_float32(kind, state.config["params"]):
                write_embeddings(tmp / EMBEDDINGS_NPY, source.chunks(), source.num_rows, source.dims)
        else:
            write_vectors(tmp, source.chunks, source.num_rows, source.dims, state.config["params"])
        write_description(tmp, ids, kind, state.config["params"], state.config["dims"])
        if corpus is not None:
            write_documents(tmp / DOCUMENTS_FILE, corpus)


def request_sha256(source, delete, corpus):
    """SHA-256 of what an update is asked: the ids (and, with `source`, the vectors) it adds or replaces, the
    ids it deletes, the documents it stores (their metadata included). `source` None with a `corpus`: the
    corpus' documents, which the index's model encodes.

    Example:
    >>> request_sha256(None, ["p17"], load_corpus("new.jsonl"))[:12]  # doctest: +SKIP
    '5b0d4c1e8f2a'
    """
    digest = hashlib.sha256()
    ids = list(source.ids) if source is not None else list(corpus.ids) if corpus is not None else []
    digest.update(strings_sha256(ids).encode())
    for chunk in source.chunks() if source is not None else ():
        digest.update(np.ascontiguousarray(chunk, dtype="<f4").tobytes())
    digest.update(strings_sha256(sorted(delete)).encode())
    if corpus is not None:
        digest.update(strings_sha256([*corpus.titles, *corpus.texts]).encode())
        digest.update(json.dumps(corpus.metadata, sort_keys=True).encode())
    return digest.hexdigest()


def _commit(state, segments, masks, next_segment, request=None):
    """Writes the deletion file (`masks`; None: the previous generation's), then the manifest, then removes
    the files no generation kept uses."""
    generation = state.manifest["generation"] + 1
    deleted = state.manifest["deleted"] if masks is None else None
    masks = {name: mask for name, mask in (masks or {}).items() if mask.any()}
    if masks:
        state.begin()
        deleted = deleted_name(generation)
        with atomic_file(os.path.join(state.directory, deleted)) as f:
            write_deleted(f, masks)
    manifest = {
        "manifest_format": state.manifest["manifest_format"],
        "generation": generation,
        "segments": segments,
        "deleted": deleted,
        "next_segment": next_segment,
        "previous": {"segments": [s["name"] for s in state.segments], "deleted": state.manifest["deleted"]},
        "update_sha256": request,
    }
    replace_file(os.path.join(state.directory, MANIFEST_JSON), _manifest_bytes(manifest))
    state.manifest = manifest
    _remove_unused(state)
    return manifest


def _manifest_bytes(manifest):
    return json.dumps(manifest, indent=2).encode("utf-8")


def _remove_unused(state):
    """Removes the segments and deletion files that neither the manifest's generation nor the one before
    uses (those of killed updates, and of generations replaced since), and the staging killed writes left."""
    manifest, directory = state.manifest, state.directory
    used = used_names(manifest)
    for name in files.listdir(directory):
        if name.startswith(("segment-", "deleted-")) and name not in used:
            files.remove(os.path.join(directory, name))
    for name in (MANIFEST_JSON, segment_name(manifest["next_segment"]), deleted_name(manifest["generation"] + 1)):
        files.remove_staging(os.path.join(directory, name))
    if BASE not in used and manifest["generation"]:
        for name in (IDS_TXT, *VECTOR_FILES, SCANN_DIR):
            files.remove(os.path.join(directory, name))
        base_documents = documents_path(directory, BASE)
        if base_documents is not None:
            files.remove(base_documents)
