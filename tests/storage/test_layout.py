"""The files of an index: ids one a line, the format version, damaged or non-finite files named."""

import json

import numpy as np
import pytest
from search_inputs import CORPUS, doc_ids

from gtr_keras.errors import DataError, MismatchError, UserError
from gtr_keras.storage.layout import (
    SCANN_DIR,
    SCANN_PACKED_CODES,
    SCANN_PACKED_RECORD,
    TUNED_JSON,
    check_search_value,
    read_tuned,
)
from gtr_keras.storage.search_index import SearchIndex


def test_an_index_of_another_format_is_refused_with_the_remedy(tmp_path):
    directory = tmp_path / "index"
    SearchIndex(doc_ids(3), np.eye(3, dtype=np.float32), kind="exact").save(directory)
    config = json.loads((directory / "index.json").read_text())
    (directory / "index.json").write_text(json.dumps({**config, "format_version": 3}))
    error = r"index\.json: field 'format_version' is 3, this version of gtr_keras reads 2; rebuild the index$"
    with pytest.raises(MismatchError, match=error):
        SearchIndex.load(directory)


@pytest.mark.parametrize(
    "text, error",
    [
        ("doc-0\n\ndoc-2\n", r"ids\.txt: line 2: ids must be non-empty"),
        ("doc-0\ndoc-1\ndoc-0\n", r"ids\.txt: line 3: id 'doc-0' duplicates .*ids\.txt: line 1"),
        ("doc-0\ndoc-1", r"ids\.txt: line 2 is not terminated"),
        ("doc-0\ndoc-1\n", r"ids\.txt has 2 ids, expected 3"),
    ],
)
def test_load_names_bad_ids_file(tmp_path, text, error):
    directory = tmp_path / "index"
    SearchIndex(doc_ids(3), np.eye(3, dtype=np.float32), kind="exact").save(directory)
    (directory / "ids.txt").write_text(text)
    with pytest.raises(ValueError, match=error):
        SearchIndex.load(directory)


@pytest.mark.parametrize("bad_id", ["a\nb", "a\rb", ""])
def test_rejects_unstorable_ids(bad_id):
    with pytest.raises(UserError, match=r"ids\[1\]"):
        SearchIndex(["ok", bad_id], np.eye(2, dtype=np.float32))


def test_rejects_duplicate_ids():
    with pytest.raises(UserError, match=r"ids\[1\]: id 'a' duplicates ids\[0\]"):
        SearchIndex(["a", "a"], np.eye(2, dtype=np.float32))


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("index.json", None, r"index: not a search index \(no index\.json\); rebuild the index"),
        ("index.json", "{", r"index\.json: unreadable \(.*\); rebuild the index"),
        ("index.json", "[]", r"index\.json: holds a JSON list, not an object; rebuild the index"),
        ("embeddings.npy", "x", r"embeddings\.npy: unreadable \(.*\); rebuild the index"),
        ("ids.txt", None, r"ids\.txt: unreadable \(.*\); rebuild the index"),
    ],
)
def test_load_names_a_damaged_index(tmp_path, name, content, message):
    directory = tmp_path / "index"
    SearchIndex(doc_ids(3), np.eye(3, dtype=np.float32), kind="exact").save(directory)
    if content is None:
        (directory / name).unlink()
    else:
        (directory / name).write_text(content)
    with pytest.raises(DataError, match=message):
        SearchIndex.load(directory)


@pytest.mark.parametrize(
    "name, content, message",
    [
        (SCANN_PACKED_RECORD, None, r"packed\.json: unreadable \(.*\); rebuild the index"),
        (SCANN_PACKED_RECORD, '{"num_codes": 0}', r"packed\.json: field 'num_codes' must be"),
        (SCANN_PACKED_RECORD, '{"num_codes": 17}', r"packed\.npy: shape \(300, 8\) \(uint8\), but .* counts 17 codes"),
        (SCANN_PACKED_CODES, np.zeros((299, 8), np.uint8), r"packed\.npy: 299 rows, but 'num_embeddings' is 300"),
        (SCANN_PACKED_CODES, np.zeros((300, 8), np.int8), r"packed\.npy: shape \(300, 8\) \(int8\), but"),
    ],
)
def test_load_names_damaged_packed_ah_codes(tmp_path, name, content, message):
    directory = tmp_path / "index"
    SearchIndex(doc_ids(300), CORPUS[:300], kind="scann").save(directory)
    path = directory / SCANN_DIR / name
    if content is None:
        path.unlink()
    elif isinstance(content, str):
        path.write_text(content)
    else:
        np.save(path, content)
    with pytest.raises(DataError, match=message):
        SearchIndex.load(directory)


def test_a_stored_index_with_non_finite_rows_is_refused_naming_the_file(tmp_path):
    index = SearchIndex(doc_ids(3), np.eye(3, dtype=np.float32), kind="exact")
    index.save(str(tmp_path / "index"))
    embeddings = np.load(tmp_path / "index" / "embeddings.npy")
    embeddings[1, 0] = np.nan
    np.save(tmp_path / "index" / "embeddings.npy", embeddings)
    with pytest.raises(DataError, match=r"embeddings.npy: 1 rows hold NaN or infinity; rebuild the index"):
        SearchIndex.load(str(tmp_path / "index"))
    with pytest.raises(ValueError, match="hold NaN or infinity in 1 rows"):
        SearchIndex(doc_ids(3), embeddings, kind="exact")


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"num_leaves_to_search": 3, "reorder_factor": 20, "rescore_factor": 0}, None),
        ({"reorder_factor": 0}, "field 'setting': reorder_factor must be a positive int, got 0"),
        ({"rescore_factor": -1}, "field 'setting': rescore_factor must be an int >= 0"),
        ({"rescore": True}, "field 'setting': rescore must be a positive int"),
        ([3], "field 'setting' must map parameter names to ints"),
    ],
)
def test_a_tuned_setting_is_read_by_the_rule_of_search_settings(tmp_path, setting, message):
    """`tuned.json` holds what `check_search_value` takes: `rescore_factor` 0 (no float32 rescoring) among them."""
    (tmp_path / TUNED_JSON).write_text(json.dumps({"setting": setting}))
    if message is None:
        assert read_tuned(tmp_path)["setting"] == setting
        assert [check_search_value(name, value) for name, value in setting.items()] == [3, 20, 0]
    else:
        with pytest.raises(DataError, match=message):
            read_tuned(tmp_path)
