"""The segments of an updated search index: its manifest, its deletion lists and its documents.

A search index directory that was never updated is one segment, its own
files (`index_format`). The first update adds `segments.json`, the manifest,
and from then on the manifest alone says what the index holds:

- `segments`: the segments in row order, each `{"name", "num_rows",
  "num_deleted"}`; `"."` is the directory's own index, `segment-NNNNNN` a
  subdirectory holding a search index of the same kind (for ScaNN, with the
  tree and codebooks of the first: `scann_builder.build_scann_segment`) and,
  for documents given as text, their `documents.jsonl.gz`;
- `deleted`: the `deleted-GGGGGG.npz` file of the deleted rows of each
  segment (packed bits, by segment name), or null;
- `generation` (1 for the first update), `next_segment`, and `previous`, the
  segment names and deletion file of the generation before, whose files are
  kept for readers that are loading it.

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

import numpy as np

from gtr_keras.beir.readers import Corpus, load_corpus
from gtr_keras.errors import DataError, MismatchError
from gtr_keras.index.layout import DOCUMENTS_FILE, MANIFEST_JSON, REMEDY, RETRIEVER_JSON, SEARCH_FIELDS
from gtr_keras.utils import files
from gtr_keras.utils.records import describe_change, read_json_object

BASE = "."
MANIFEST_FORMAT = 1
_MANIFEST_FIELDS = ("manifest_format", "generation", "segments", "deleted", "next_segment", "previous")


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
        DataError: a malformed manifest, named with the field.
    """
    path = os.path.join(directory, MANIFEST_JSON)
    if not files.isfile(path):
        return None
    manifest = read_json_object(path, REMEDY)
    for field in _MANIFEST_FIELDS:
        if field not in manifest:
            raise DataError(f"{path}: missing field {field!r}; {REMEDY}")
    if manifest["manifest_format"] != MANIFEST_FORMAT:
        raise DataError(f"{path}: field 'manifest_format' is {manifest['manifest_format']!r}, not {MANIFEST_FORMAT}")
    return manifest


def read_deleted(directory, manifest):
    """`{segment name: bool [num_rows] mask of its deleted rows}` for the segments of `manifest` with any."""
    if manifest["deleted"] is None:
        return {}
    path = os.path.join(directory, manifest["deleted"])
    try:
        with files.open(path) as f, np.load(io.BytesIO(f.read())) as stored:
            packed = {name: stored[name] for name in stored.files}
    except (OSError, ValueError) as e:
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
    """Writes `corpus`'s documents to the local file `path` as gzip JSON Lines (`_id`, `title`, `text`)."""
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for doc_id, title, text in zip(corpus.ids, corpus.titles, corpus.texts):
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text}, ensure_ascii=False) + "\n")


def live_corpus(sources):
    """The documents of several segments' live rows, as one `Corpus` (None when no segment has documents).

    Args:
        sources: `(documents path or None, live ids)` pairs, the ids a numpy bytes array of UTF-8, or
            None where every document of the file is live.
    """
    ids, titles, texts, found = [], [], [], False
    for path, live_ids in sources:
        if path is not None and not files.isdir(os.path.dirname(path)):
            raise DataError(
                f"{os.path.dirname(path)}: removed while its index was loaded (updated twice since); load it again"
            )
        if path is None or not files.exists(path):
            continue
        found, corpus = True, load_corpus(path)
        live = None if live_ids is None else set(live_ids.tolist())
        for doc_id, title, text in zip(corpus.ids, corpus.titles, corpus.texts):
            if live is None or doc_id.encode("utf-8") in live:
                ids.append(doc_id)
                titles.append(title)
                texts.append(text)
    return Corpus(ids, titles, texts) if found else None


def index_documents(index):
    """The documents of a loaded index's live rows, from the files of the segments it loaded (a `Corpus`,
    or None when none of its segments has documents)."""
    return live_corpus(
        [(part.documents_path, None if deleted is None else part.ids.array[~deleted]) for part, deleted in index.parts]
    )


def check_same_model(directories):
    """Raises `MismatchError` naming the first of the search index `directories` whose model (the
    `retriever.json` of its index directory, where there is one) is not the first's."""
    first = None
    for directory in directories:
        path = os.path.join(os.path.dirname(os.fspath(directory).rstrip("/")), RETRIEVER_JSON)
        if not files.isfile(path):
            continue
        recorded = read_json_object(path, REMEDY)
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
