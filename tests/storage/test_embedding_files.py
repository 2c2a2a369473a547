import json

import numpy as np
import pytest
import tensorflow as tf

from gtr_keras.errors import DataError
from gtr_keras.storage.embedding_files import EmbeddingFiles

DIMS = 16


def _unit(n, seed):
    x = np.random.default_rng(seed).standard_normal((n, DIMS)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _embedding_file(directory, name, ids, vectors=None, seed=0):
    vectors = _unit(len(ids), seed) if vectors is None else vectors
    with tf.io.gfile.GFile(f"{directory}/{name}.npy", "wb") as f:
        np.save(f, vectors)
    with tf.io.gfile.GFile(f"{directory}/{name}.ids.txt", "w") as f:
        f.write("".join(f"{i}\n" for i in ids))
    return vectors


@pytest.fixture(params=["local", "ram"])
def directory(request, tmp_path):
    if request.param == "local":
        yield str(tmp_path)
        return
    path = f"ram://embedding-files-{id(request)}"
    tf.io.gfile.makedirs(path)
    yield path
    tf.io.gfile.rmtree(path)


def test_embedding_files_are_read_in_file_name_order_a_chunk_at_a_time(directory):
    second = _embedding_file(directory, "part-1", ["c", "d", "e"], seed=2)
    first = _embedding_file(directory, "part-0", ["a", "b"], seed=1)
    embeddings = EmbeddingFiles.open(f"{directory}/part-*.npy", chunk_rows=2)
    assert embeddings.ids == ["a", "b", "c", "d", "e"] and embeddings.num_rows == 5 and embeddings.dims == DIMS
    chunks = list(embeddings.chunks())
    assert [len(c) for c in chunks] == [2, 2, 1]
    np.testing.assert_array_equal(np.concatenate(chunks), np.concatenate([first, second]))
    assert embeddings.model is None


def test_beam_npz_files_are_read_the_same_way(tmp_path):
    vectors = _unit(3, 1)
    with open(tmp_path / "embeddings-00000-of-00001.npz", "wb") as f:
        np.savez(f, ids=np.array(["x", "y", "z"]), embeddings=vectors, files=np.zeros(3), lines=np.arange(3))
    embeddings = EmbeddingFiles.open(str(tmp_path / "embeddings-*.npz"))
    assert embeddings.ids == ["x", "y", "z"]
    np.testing.assert_array_equal(np.concatenate(list(embeddings.chunks())), vectors)


def _bad(tmp_path, case):
    """Writes embedding files with one fault; returns the message expected, naming its file (and line or row)."""
    good = _embedding_file(tmp_path, "a", ["a0", "a1", "a2"])
    if case == "rows":
        (tmp_path / "a.ids.txt").write_text("a0\na1\n")
        return r"a\.ids\.txt: 2 ids for the 3 rows of .*a\.npy"
    if case == "dims":
        np.save(tmp_path / "b.npy", np.eye(2, 8, dtype=np.float32))
        (tmp_path / "b.ids.txt").write_text("b0\nb1\n")
        return r"b\.npy: 8 dims, but .*a\.npy has 16"
    if case == "nan":
        good[1, 3] = np.nan
        np.save(tmp_path / "a.npy", good)
        return r"a\.npy: row 1 holds NaN or infinity"
    if case == "norm":
        good[2] *= 2
        np.save(tmp_path / "a.npy", good)
        return r"a\.npy: row 2 has norm 2, not 1"
    if case == "duplicate":
        _embedding_file(tmp_path, "b", ["b0", "a1"])
        return r"b\.ids\.txt:2: id 'a1' duplicates .*a\.ids\.txt:2"
    if case == "whitespace":
        (tmp_path / "a.ids.txt").write_text("a0\na1 \na2\n")
        return r"a\.ids\.txt:2: id 'a1 ' holds whitespace, which TREC run files \(and so evaluation\) cannot keep"
    if case == "whitespace inside":
        (tmp_path / "a.ids.txt").write_text("a0\na1\na\t2\n")
        return r"a\.ids\.txt:3: id 'a\\t2' holds whitespace"
    if case == "no ids":
        (tmp_path / "a.ids.txt").unlink()
        return r"a\.ids\.txt: unreadable ids file"
    if case == "float64":
        np.save(tmp_path / "a.npy", good.astype(np.float64))
        return r"a\.npy: expected a float32 \[n, D\] array"
    if case == "not npy":
        (tmp_path / "a.npy").write_bytes(b"PK\x03\x04 not an array")
        return r"a\.npy: not a \.npy array"
    if case == "truncated":
        (tmp_path / "a.npy").write_bytes((tmp_path / "a.npy").read_bytes()[:-8])
        return r"a\.npy: truncated"
    if case == "one model record":
        _embedding_file(tmp_path, "b", ["b0"])
        (tmp_path / "b.json").write_text(json.dumps({"model": {"model_sha256": "x"}}))
        return r"a\.npy: no model record .* while other embedding files have one"
    if case == "two models":
        _embedding_file(tmp_path, "b", ["b0"])
        (tmp_path / "a.json").write_text(json.dumps({"model": {"model_sha256": "x"}}))
        (tmp_path / "b.json").write_text(json.dumps({"model": {"model_sha256": "y"}}))
        return r"b\.json: embeddings of another model than .*a\.json"
    if case == "query embeddings":
        _embedding_file(tmp_path, "b", ["b0"])
        for name, kind in (("a", "document"), ("b", "query")):
            (tmp_path / f"{name}.json").write_text(json.dumps({"model": {"model_sha256": "x"}, "kind": kind}))
        return r"b\.json: field 'kind' is 'query', not 'document'; an index holds documents"
    if case == "record not an object":
        (tmp_path / "a.json").write_text("[1, 2]")
        return r"a\.json: not a JSON object"
    if case == "empty record":
        (tmp_path / "a.json").write_text("{}")
        return r"a\.json: field 'model' is missing, not an object"
    if case == "model a string":
        (tmp_path / "a.json").write_text(json.dumps({"model": "gtr-base", "kind": "document"}))
        return r"a\.json: field 'model' is str, not an object"
    if case == "record of another embedding file":
        (tmp_path / "a.json").write_text(json.dumps({"model": {"model_sha256": "x"}, "num_rows": 5}))
        return r"a\.json: field 'num_rows' is 5, but .*a\.npy has 3 rows; the record is of another embedding file"
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case",
    [
        "rows",
        "dims",
        "nan",
        "norm",
        "duplicate",
        "whitespace",
        "whitespace inside",
        "no ids",
        "float64",
        "not npy",
        "truncated",
        "one model record",
        "two models",
        "query embeddings",
        "record not an object",
        "empty record",
        "model a string",
        "record of another embedding file",
    ],
)
def test_a_bad_embedding_file_is_named_before_any_index_work(tmp_path, case):
    message = _bad(tmp_path, case)
    with pytest.raises(DataError, match=message):
        EmbeddingFiles.open(str(tmp_path / "*.npy"))


def _npz(path, ids, vectors):
    with open(path, "wb") as f:
        np.savez(f, ids=ids, embeddings=vectors)


@pytest.mark.parametrize(
    "ids, message",
    [
        (np.array(["x0", "x1", "x2"]), r"x\.npz \(field 'ids'\): 3 ids for the 5 rows of .*x\.npz"),
        (np.array([f"x{i}" for i in range(7)]), r"x\.npz \(field 'ids'\): 7 ids for the 5 rows of .*x\.npz"),
        (
            np.array([b"1", b"2", b"3", b"4", b"5"]),
            r"x\.npz \(field 'ids'\) must be a 1-D array of strings .* got \|S1",
        ),
        (np.array([["1", "2"]] * 5), r"x\.npz \(field 'ids'\) must be a 1-D array of strings .* shape \(5, 2\)"),
        (np.arange(5, dtype=np.float64), r"x\.npz \(field 'ids'\) must be a 1-D array of strings .* got float64"),
        (np.array(["x0", "x1", "x 2", "x3", "x4"]), r"x\.npz:ids\[2\]: id 'x 2' holds whitespace"),
        (np.array(["x0", "x1", "x2", "x1", "x4"]), r"x\.npz:ids\[3\]: id 'x1' duplicates .*x\.npz:ids\[1\]"),
    ],
)
def test_a_beam_npz_file_goes_through_the_checks_of_a_npy_file(tmp_path, ids, message):
    _npz(tmp_path / "x.npz", ids, _unit(5, 0))
    with pytest.raises(DataError, match=message):
        EmbeddingFiles.open(str(tmp_path / "*.npz"))


def test_a_byte_order_mark_at_the_start_of_an_ids_file_is_dropped(tmp_path):
    _embedding_file(tmp_path, "a", ["201", "202"])
    (tmp_path / "a.ids.txt").write_bytes(b"\xef\xbb\xbf201\n202\n")
    assert EmbeddingFiles.open(str(tmp_path / "a.npy")).ids == ["201", "202"]


@pytest.mark.parametrize("name", ["a.npy", "x.npz"])
@pytest.mark.parametrize("kind", ["exact", "scann"])
def test_an_embedding_file_replaced_after_its_check_is_refused_naming_it(tmp_path, name, kind):
    from gtr_keras.retrieval.index_building import index_embeddings

    ids = [f"d{i}" for i in range(150)]
    if name.endswith(".npy"):
        _embedding_file(tmp_path, "a", ids, seed=1)
    else:
        _npz(tmp_path / name, np.array(ids), _unit(150, 1))
    embeddings = EmbeddingFiles.open(str(tmp_path / name), chunk_rows=64)
    replaced = _unit(150, 2)
    if name.endswith(".npy"):
        np.save(tmp_path / name, replaced)
    else:
        _npz(tmp_path / name, np.array(ids), replaced)
    with pytest.raises(DataError, match=rf"{name}: changed since it was checked \(rows 0-\d+ differ\)"):
        index_embeddings(embeddings, tmp_path / "idx", kind=kind)
    assert not (tmp_path / "idx").exists()


def test_a_beam_npz_file_replaced_between_its_ids_and_its_vectors_check_is_refused(tmp_path):
    _npz(tmp_path / "x.npz", np.array(["x0", "x1"]), _unit(2, 0))
    embeddings = EmbeddingFiles([str(tmp_path / "x.npz")])  # the ids are read with the vectors
    _npz(tmp_path / "x.npz", np.array(["x0", "x1"]), _unit(2, 1))
    with pytest.raises(DataError, match=r"x\.npz: changed since it was checked \(rows 0-1 differ\)"):
        embeddings.check_vectors()


def test_a_model_record_lacking_a_field_is_named(tmp_path):
    from gtr_keras.retrieval.index_building import index_embeddings

    _embedding_file(tmp_path, "a", ["a0"])
    (tmp_path / "a.json").write_text(json.dumps({"model": {"embedding_dim": DIMS}, "kind": "document"}))
    with pytest.raises(DataError, match=r"a\.json: field 'model' lacks \['document_length', 'query_length', "):
        index_embeddings(str(tmp_path / "a.npy"), tmp_path / "idx")


def test_a_glob_that_matches_nothing_is_named(tmp_path):
    with pytest.raises(DataError, match=r"part-\*\.npy: matches no \.npy or \.npz embedding file"):
        EmbeddingFiles.open(str(tmp_path / "part-*.npy"))


def test_the_model_record_of_encode_is_shared_by_the_embedding_files(tmp_path):
    for name in ("a", "b"):
        _embedding_file(tmp_path, name, [f"{name}0"])
        (tmp_path / f"{name}.json").write_text(json.dumps({"model": {"model_sha256": "m"}, "kind": "document"}))
    assert EmbeddingFiles.open(str(tmp_path / "*.npy")).model == {"model_sha256": "m"}


def test_embedding_files_of_one_model_at_two_paths_are_of_one_model(tmp_path):
    for name, model_dir in (("a", "/machine-1/gtr-base"), ("b", "/machine-2/gtr-base")):
        _embedding_file(tmp_path, name, [f"{name}0"])
        (tmp_path / f"{name}.json").write_text(json.dumps({"model": {"model_sha256": "m", "model_dir": model_dir}}))
    assert EmbeddingFiles.open(str(tmp_path / "*.npy")).model["model_sha256"] == "m"


@pytest.mark.parametrize("kind", ["exact", "scann"])
def test_index_embeddings_on_each_file_system_searches_as_the_in_memory_index(directory, kind):
    from gtr_keras.retrieval.index_building import index_embeddings
    from gtr_keras.storage.search_index import SearchIndex

    first = _embedding_file(directory, "part-0", [f"a{i}" for i in range(150)], seed=1)
    second = _embedding_file(directory, "part-1", [f"b{i}" for i in range(120)], seed=2)
    assert index_embeddings(f"{directory}/part-*.npy", f"{directory}/idx", kind=kind) == (270, kind)
    loaded = SearchIndex.load(f"{directory}/idx")
    vectors = np.concatenate([first, second])
    in_memory = SearchIndex(list(loaded.ids), vectors, kind="exact")
    found, expected = loaded.search_ids(vectors[::9], 5)[0], in_memory.search_ids(vectors[::9], 5)[0]
    assert [row[0] for row in found] == [row[0] for row in expected]  # each query is a row of the index
    assert np.mean([len(set(a) & set(b)) / 5 for a, b in zip(found, expected)]) > 0.9


def test_a_beam_npz_file_larger_than_a_chunk_is_read_whole(tmp_path):
    vectors = _unit(7, 3)
    with open(tmp_path / "embeddings-00000-of-00001.npz", "wb") as f:
        np.savez(f, ids=np.array([f"x{i}" for i in range(7)]), embeddings=vectors)
    vectors[5, 0] = np.nan
    with open(tmp_path / "embeddings-00000-of-00002.npz", "wb") as f:
        np.savez(f, ids=np.array([f"y{i}" for i in range(7)]), embeddings=vectors)
    embeddings = EmbeddingFiles([str(tmp_path / "embeddings-00000-of-00001.npz")], chunk_rows=3)
    np.testing.assert_array_equal(np.concatenate(list(embeddings.chunks())), _unit(7, 3))
    with pytest.raises(DataError, match=r"of-00002\.npz: row 5 holds NaN"):  # past the first chunk_rows rows
        EmbeddingFiles([str(tmp_path / "embeddings-00000-of-00002.npz")], chunk_rows=3).check_vectors()
