"""The manifest, deletion lists and documents of an updated search index (`segments`)."""

import json

import numpy as np
import pytest

from gtr_keras.beir.readers import Corpus
from gtr_keras.errors import DataError
from gtr_keras.storage.segments import (
    documents_path,
    initial_manifest,
    live_corpus,
    manifest_generation,
    metadata_types,
    read_deleted,
    read_manifest,
    used_names,
    write_deleted,
    write_documents,
)


def test_an_index_never_updated_has_no_manifest_and_generation_0_holds_its_rows(tmp_path):
    assert read_manifest(tmp_path) is None
    manifest = initial_manifest(7)
    assert manifest["segments"] == [{"name": ".", "num_rows": 7, "num_deleted": 0}] and used_names(manifest) == {"."}


def test_a_malformed_manifest_is_named_with_its_field(tmp_path):
    (tmp_path / "segments.json").write_text(json.dumps({"manifest_format": 1}))
    with pytest.raises(DataError, match=r"segments.json: field 'generation' is missing"):
        read_manifest(tmp_path)
    (tmp_path / "segments.json").write_text(json.dumps({**initial_manifest(1), "manifest_format": 9}))
    with pytest.raises(DataError, match="'manifest_format' is 9"):
        read_manifest(tmp_path)


def test_the_manifest_generation_is_0_before_an_update_and_none_while_unreadable(tmp_path):
    assert manifest_generation(tmp_path) == 0
    (tmp_path / "segments.json").write_text(json.dumps({**initial_manifest(1), "generation": 3, "next_segment": 1}))
    assert manifest_generation(tmp_path) == 3
    (tmp_path / "segments.json").write_text("{")
    assert manifest_generation(tmp_path) is None


def test_deletion_lists_round_trip_as_packed_bits_and_are_checked(tmp_path):
    mask = np.zeros(11, bool)
    mask[[0, 5, 10]] = True
    write_deleted(tmp_path / "deleted-000001.npz", {".": mask})
    manifest = dict(initial_manifest(11), deleted="deleted-000001.npz")
    manifest["segments"] = [{"name": ".", "num_rows": 11, "num_deleted": 3}]
    np.testing.assert_array_equal(read_deleted(tmp_path, manifest)["."], mask)
    manifest["segments"][0]["num_deleted"] = 2
    with pytest.raises(DataError, match="has 3 deleted rows, not 2"):
        read_deleted(tmp_path, manifest)


def test_documents_of_the_live_rows_of_each_segment(tmp_path):
    index = tmp_path / "indexes" / "x" / "index"
    assert documents_path(index, ".") is None  # a search index outside an index directory has none
    (tmp_path / "indexes" / "x" / "retriever.json").parent.mkdir(parents=True)
    (tmp_path / "indexes" / "x" / "retriever.json").write_text("{}")
    assert documents_path(index, ".") == str(tmp_path / "indexes" / "x" / "documents.jsonl.gz")
    (index / "segment-000001").mkdir(parents=True)
    write_documents(documents_path(index, "."), Corpus(["a", "b"], ["A", ""], ["old a", "b"]))
    write_documents(documents_path(index, "segment-000001"), Corpus(["a"], ["A2"], ["new a"]))
    corpus = live_corpus(
        [(documents_path(index, "."), np.array([b"b"])), (documents_path(index, "segment-000001"), None)]
    )
    assert (corpus.ids, corpus.titles, corpus.texts) == (["b", "a"], ["", "A2"], ["b", "new a"])
    assert live_corpus([(None, None), (str(tmp_path / "none.jsonl.gz"), None)]) is None
    (index / "segment-000002").mkdir()
    assert live_corpus([(documents_path(index, "segment-000002"), None)]) is None  # a segment of embeddings only
    (index / "segment-000002").rmdir()
    with pytest.raises(DataError, match="segment-000002: removed while its index was loaded"):
        live_corpus([(documents_path(index, "segment-000002"), None)])


def test_documents_keep_their_metadata_through_segments(tmp_path):
    (tmp_path / "segment-000001").mkdir()
    path = tmp_path / "segment-000001" / "documents.jsonl.gz"
    write_documents(path, Corpus(["a", "b", "c"], ["", "", ""], ["x", "y", "z"], [{"lang": "en"}, {}, {"lang": "de"}]))
    corpus = live_corpus([(str(path), np.array([b"a", b"c"]))])
    assert corpus.ids == ["a", "c"] and corpus.metadata == [{"lang": "en"}, {"lang": "de"}]
    write_documents(path, Corpus(["a"], [""], ["x"]))
    assert live_corpus([(str(path), None)]).metadata is None


@pytest.mark.parametrize(
    "field, value",
    [
        ("segments", None),
        ("segments", []),
        ("segments", {}),
        ("segments", 3),
        ("segments", [{"name": "../../other/index", "num_rows": 1, "num_deleted": 0}]),
        ("segments", [{"name": "/etc", "num_rows": 1, "num_deleted": 0}]),
        ("segments", [{"name": "segment-000009", "num_rows": 1, "num_deleted": 0}]),
        ("segments", [{"name": ".", "num_rows": -1, "num_deleted": 0}]),
        ("segments", [{"name": ".", "num_rows": 1, "num_deleted": 2}]),
        ("segments", ["."]),
        ("segments", [{"name": ".", "num_rows": 1, "num_deleted": 0, "metadata_types": {"year": "date"}}]),
        ("segments", [{"name": ".", "num_rows": 1, "num_deleted": 0, "metadata_types": ["year"]}]),
        ("generation", None),
        ("generation", "1"),
        ("next_segment", 0),
        ("next_segment", True),
        ("deleted", "../deleted-000001.npz"),
        ("deleted", []),
        ("previous", None),
        ("previous", {"segments": ["../x"], "deleted": None}),
    ],
)
def test_a_manifest_field_of_a_wrong_type_or_a_path_is_named(tmp_path, field, value):
    manifest = {**initial_manifest(1), "generation": 1, "next_segment": 2, field: value}
    (tmp_path / "segments.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=rf"segments.json: field '{field}"):
        read_manifest(tmp_path)


def test_metadata_types_are_each_fields_type_sorted_by_field():
    corpus = Corpus(["a", "b", "c"], ["", "", ""], ["x", "y", "z"], [{"year": 2019, "tags": ["p"]}, {}, {"open": True}])
    assert metadata_types(corpus) == {"open": "boolean", "tags": "list", "year": "number"}
    assert metadata_types(Corpus(["a"], [""], ["x"], None)) == {} == metadata_types(None)
    assert metadata_types(Corpus(["a"], [""], ["x"], [{"year": None}])) == {}  # nulls are no type (dropped on reading)


def test_segments_without_their_manifest_are_refused(tmp_path):
    (tmp_path / "segment-000001").mkdir()
    with pytest.raises(DataError, match=r"segments.json: missing, but .*segment-000001 is there"):
        read_manifest(tmp_path)
