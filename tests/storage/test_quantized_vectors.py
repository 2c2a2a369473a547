"""`quantized_vectors`: int8 and binary exact indexes, rescored with float32, on disk and in memory."""

import os
import tempfile

import numpy as np
import pytest
from search_inputs import CORPUS, QUERIES, doc_ids, recall

from gtr_keras.errors import DataError, UserError
from gtr_keras.storage import quantized_vectors
from gtr_keras.storage.layout import BINARY_NPY, EMBEDDINGS_NPY, INT8_CALIBRATION_NPY, INT8_NPY
from gtr_keras.storage.quantized_vectors import (
    SignRows,
    binary_codes,
    int8_calibration,
    int8_codes,
    vector_params,
)
from gtr_keras.storage.search_index import ArrayRows, SearchIndex, write_search_index
from gtr_keras.storage.segment_writer import update_search_index


@pytest.fixture(scope="module")
def exact():
    return SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact")


def test_int8_codes_decode_within_half_a_step_of_each_value():
    calibration = int8_calibration([CORPUS[:1000], CORPUS[1000:]])
    codes = int8_codes(CORPUS, calibration)
    decoded = calibration[0] + (codes.astype(np.float32) + 128) * calibration[1]
    assert codes.dtype == np.int8 and codes.min() == -128 and codes.max() == 127
    assert np.abs(decoded - CORPUS).max() <= calibration[1].max() / 2 + 1e-6


def test_sign_rows_read_packed_bits_as_plus_minus_one():
    rows = np.array([[0.3, -0.1, 0.0, 2.0, -5.0, 1.0, 1.0, -1.0, 0.5]], np.float32)
    np.testing.assert_array_equal(SignRows(binary_codes(rows), 9)[0:1], np.where(rows > 0, 1.0, -1.0))


@pytest.mark.parametrize("vectors", ["int8", "binary"])
def test_every_candidate_rescored_gives_exact_search(vectors, exact):
    index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, "exact", vector_params(vectors, rescore=len(CORPUS)))
    expected_rows, expected_scores = exact.search(QUERIES, 10)
    rows, scores = index.search(QUERIES, 10)
    np.testing.assert_array_equal(rows, expected_rows)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-6)


@pytest.mark.parametrize("vectors, pool, least", [("int8", 20, 0.99), ("binary", 100, 0.9)])
def test_a_small_pool_keeps_recall_and_exact_scores(vectors, pool, least, exact):
    index = SearchIndex(doc_ids(len(CORPUS)), CORPUS, "exact", vector_params(vectors, rescore=pool))
    rows, scores = index.search(QUERIES, 10)
    assert recall(rows, exact.search(QUERIES, 10)[0]) >= least
    np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", QUERIES, CORPUS[rows]), rtol=1e-5)


@pytest.mark.parametrize("vectors, codes", [("int8", INT8_NPY), ("binary", BINARY_NPY)])
def test_written_loaded_and_updated_with_deletions(vectors, codes, tmp_path, exact):
    directory = tmp_path / "index"
    write_search_index(ArrayRows(doc_ids(2000), CORPUS[:2000]), directory, "auto", {"vectors": vectors})
    names = {p.name for p in directory.iterdir()}
    assert {EMBEDDINGS_NPY, codes} <= names and (INT8_CALIBRATION_NPY in names) == (vectors == "int8")
    loaded = SearchIndex.load(directory)
    assert loaded.kind == "exact" and loaded.params == vector_params(vectors)
    assert not loaded.embeddings.flags.owndata and not isinstance(loaded.vectors.codes, np.memmap)  # mapped
    update_search_index(directory, ArrayRows(doc_ids(3000)[2000:], CORPUS[2000:]))
    update_search_index(directory, None, delete=["doc-5", "doc-2500"])
    updated = SearchIndex.load(directory)
    segments = [p for p in directory.iterdir() if p.name.startswith("segment-")]
    assert segments and all({p.name for p in s.iterdir()} >= {EMBEDDINGS_NPY, codes} for s in segments)
    ids, _ = updated.search_ids(CORPUS[[5, 2500, 2600]], 3)
    assert "doc-5" not in ids[0] and "doc-2500" not in ids[1] and ids[2][0] == "doc-2600"
    updated.set_search_params({"rescore": 3000})
    live = [i for i in range(3000) if i not in (5, 2500)]
    expected = SearchIndex([f"doc-{i}" for i in live], CORPUS[live], "exact").search_ids(QUERIES, 10)[0]
    assert updated.search_ids(QUERIES, 10)[0] == expected


def test_bad_vectors_or_rescore_are_user_errors():
    with pytest.raises(UserError, match="rescore applies to int8 or binary vectors only"):
        vector_params("float32", rescore=10)
    with pytest.raises(UserError, match="vectors must be one of"):
        vector_params("float16")
    index = SearchIndex(doc_ids(2), np.eye(2, dtype=np.float32), "exact", {"vectors": "binary"})
    with pytest.raises(UserError, match="has no search parameter 'reorder_factor' \\(it has: rescore\\)"):
        index.set_search_params({"reorder_factor": 3})


def _mapped_kib(path):
    """The resident KiB of this process's memory maps of the file `path` (`/proc/self/smaps`)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
                inside = len(fields) == 6 and fields[5] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="reads Linux's /proc/self/smaps")
@pytest.mark.parametrize("kind, params", [("scann", {"num_leaves": 10}), ("exact", {"vectors": "int8"})])
def test_a_search_rescores_from_the_float32_file_without_mapping_a_page_of_it(tmp_path, kind, params):
    """Issue 62: the rows a rescoring needs are read from the file (`os.preadv`), so a search's RSS holds no page
    of the float32 file, whatever the batch, and the answers are those of exact search."""
    write_search_index(ArrayRows(doc_ids(len(CORPUS)), CORPUS), tmp_path / "i", kind, params)
    path = (tmp_path / "i" / EMBEDDINGS_NPY).resolve()
    index = SearchIndex.load(tmp_path / "i")
    exact_rows = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact").search(QUERIES, 10)[0]
    assert recall(index.search(QUERIES, 10)[0], exact_rows) >= 0.99
    assert _mapped_kib(path) == 0


@pytest.mark.parametrize("kind, params", [("scann", {"num_leaves": 10}), ("exact", {"vectors": "int8"})])
def test_float32_rows_on_another_file_system_are_copied_to_a_local_file_and_read_from_it(kind, params, request):
    """`ram://` stands for `gs://`: the float32 file is not read into memory but copied to a local temporary
    file, opened (and unnamed once open: nothing is left in the temporary directory) and read where needed."""
    directory = f"ram://float-rows-{kind}-{id(request)}/index"
    write_search_index(ArrayRows(doc_ids(len(CORPUS)), CORPUS), directory, kind, params)
    loaded = SearchIndex.load(directory)
    rows = loaded.float_rows if kind == "scann" else loaded.vectors.float_rows
    assert isinstance(rows.floats, np.memmap)
    np.testing.assert_array_equal(rows.floats, CORPUS)
    exact_rows = SearchIndex(doc_ids(len(CORPUS)), CORPUS, kind="exact").search(QUERIES, 10)[0]
    assert recall(loaded.search(QUERIES, 10)[0], exact_rows) >= 0.99
    assert not [name for name in os.listdir(tempfile.gettempdir()) if name.startswith("gtr-keras-copy-")]


def test_rows_read_from_the_file_score_as_the_rows_in_memory_do(tmp_path):
    """Candidates in runs of consecutive rows and alone, unsorted, repeated across queries, and -1 for none: the
    file's rows (one read a run) give the same indices and scores as the array's."""
    np.save(tmp_path / "f.npy", CORPUS)
    floats = np.load(tmp_path / "f.npy", mmap_mode="r")
    from_file = quantized_vectors.FloatRows(floats, str(tmp_path / "f.npy"))
    candidates = np.argsort(-(QUERIES @ CORPUS.T), axis=1)[:, :200]
    candidates[:, 100:120] = np.arange(500, 520)  # one run, in every query
    candidates[0, -5:] = -1
    for found, expected in zip(
        from_file.rescore(QUERIES, candidates, 10, np.arange(len(CORPUS))),
        quantized_vectors.FloatRows(CORPUS).rescore(QUERIES, candidates, 10, np.arange(len(CORPUS))),
    ):
        np.testing.assert_array_equal(found, expected)


def test_a_float32_file_cut_short_after_loading_is_a_data_error_naming_it(tmp_path):
    np.save(tmp_path / "f.npy", CORPUS)
    rows = quantized_vectors.FloatRows(np.load(tmp_path / "f.npy", mmap_mode="r"), str(tmp_path / "f.npy"))
    os.truncate(tmp_path / "f.npy", 128 + 10 * CORPUS.shape[1] * 4)
    with pytest.raises(DataError, match=r"f\.npy: ended before row 10"):
        rows.rescore(QUERIES[:1], np.arange(5, 25)[None], 10, np.arange(len(CORPUS)))
