"""ScaNN's AH codes packed two a byte on disk: the packing, its files, and searchers that answer as before."""

import json
import os
import shutil

import numpy as np
import pytest
from search_inputs import CORPUS, QUERIES, doc_ids, unpack_codes_in_place

from gtr_keras.storage.layout import SCANN_CODES, SCANN_PACKED_CODES, SCANN_PACKED_RECORD
from gtr_keras.storage.scann_builder import load_scann
from gtr_keras.storage.scann_codes import CodeRows, pack, pack_codes, scann_assets, unpack
from gtr_keras.storage.search_index import ArrayRows, SearchIndex, write_search_index

PARAMS = {"num_leaves": 20, "num_leaves_to_search": 20}


@pytest.mark.parametrize("num_codes", [1, 2, 7, 8, 192, 193])
def test_codes_packed_two_a_byte_unpack_to_themselves(num_codes):
    codes = np.random.default_rng(num_codes).integers(0, 16, (50, num_codes), dtype=np.uint8)
    packed = pack(codes)
    assert packed.dtype == np.uint8 and packed.shape == (50, (num_codes + 1) // 2)
    np.testing.assert_array_equal(packed[:, 0] & 15, codes[:, 0])
    np.testing.assert_array_equal(unpack(packed, num_codes), codes)
    np.testing.assert_array_equal(unpack(packed[[3, 1]], num_codes), codes[[3, 1]])  # a row stays a point's


def test_pack_codes_replaces_codes_below_16_in_blocks_and_leaves_wider_ones(tmp_path):
    codes = np.random.default_rng(0).integers(0, 16, (23, 7), dtype=np.uint8)
    np.save(tmp_path / SCANN_CODES, codes)
    pack_codes(tmp_path, block_rows=5)
    assert sorted(os.listdir(tmp_path)) == [SCANN_PACKED_RECORD, SCANN_PACKED_CODES]
    assert json.loads((tmp_path / SCANN_PACKED_RECORD).read_text()) == {"num_codes": 7}
    assert np.load(tmp_path / SCANN_PACKED_CODES).shape == (23, 4)
    rows = CodeRows(tmp_path)
    assert rows.shape == (23, 7) and rows.dtype == np.uint8
    np.testing.assert_array_equal(rows[:], codes)
    pack_codes(tmp_path)  # packed already: nothing to do
    np.testing.assert_array_equal(CodeRows(tmp_path)[:], codes)
    wide = tmp_path / "wide"
    wide.mkdir()
    codes[17, 3] = 16  # a codebook of more than 16 centres a subspace
    np.save(wide / SCANN_CODES, codes)
    pack_codes(wide, block_rows=5)
    assert os.listdir(wide) == [SCANN_CODES] and CodeRows(wide).num_codes is None


def test_a_built_index_keeps_packed_codes_and_answers_as_one_with_codes_a_byte_each(tmp_path):
    write_search_index(ArrayRows(doc_ids(3000), CORPUS), tmp_path / "packed", kind="scann", params=PARAMS)
    scann_dir = tmp_path / "packed" / "scann"
    assert SCANN_CODES not in os.listdir(scann_dir)
    assert np.load(scann_dir / SCANN_PACKED_CODES).shape == (3000, 8)  # 16 codes of 4 dimensions a point
    shutil.copytree(tmp_path / "packed", tmp_path / "unpacked")
    unpack_codes_in_place(tmp_path / "unpacked" / "scann")  # as the last release wrote them
    assert np.load(tmp_path / "unpacked" / "scann" / SCANN_CODES).shape == (3000, 16)
    packed, unpacked = SearchIndex.load(tmp_path / "packed"), SearchIndex.load(tmp_path / "unpacked")
    found, scores = packed.search_ids(QUERIES, 10)
    expected, expected_scores = unpacked.search_ids(QUERIES, 10)
    assert found == expected
    np.testing.assert_array_equal(scores, expected_scores)
    packed.save(tmp_path / "saved")  # a searcher ScaNN serializes is packed too
    assert SCANN_PACKED_CODES in os.listdir(tmp_path / "saved" / "scann")
    assert SearchIndex.load(tmp_path / "saved").search_ids(QUERIES, 10)[0] == found


def test_scanns_unpacked_copy_is_removed_after_its_load(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr("tempfile.tempdir", None)
    (tmp_path / "tmp").mkdir()
    write_search_index(ArrayRows(doc_ids(2000), CORPUS[:2000]), tmp_path / "index", kind="scann", params=PARAMS)
    scann_dir = tmp_path / "index" / "scann"
    with scann_assets(scann_dir, block_rows=300) as assets:
        (scratch,) = [name for name in os.listdir(tmp_path / "tmp") if not name.endswith(".owner")]
        unpacked = tmp_path / "tmp" / scratch / SCANN_CODES
        assert json.dumps(str(unpacked)) in assets
        np.testing.assert_array_equal(np.load(unpacked), CodeRows(scann_dir)[:])
    assert os.listdir(tmp_path / "tmp") == []
    searcher = load_scann(scann_dir)  # reads its codes while loading only
    assert os.listdir(tmp_path / "tmp") == []
    assert searcher.search_batched(QUERIES, 10, 1000, 20, True, 256)[0].shape == (len(QUERIES), 10)
