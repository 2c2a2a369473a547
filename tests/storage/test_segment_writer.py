"""`update_search_index` and `compact_search_index`: updates equal rebuilds, commits are atomic, one writer."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO
from search_inputs import QUERIES, clustered, float32_recall, recall, unpack_codes_in_place

from gtr_keras.errors import BusyError, DataError, MismatchError, UserError
from gtr_keras.storage import segment_writer
from gtr_keras.storage.layout import SCANN_CODES, SCANN_DIR, SCANN_PACKED_CODES
from gtr_keras.storage.search_index import ArrayRows, SearchIndex, write_search_index
from gtr_keras.storage.segment_writer import (
    compact_search_index,
    live_ids,
    missing_ids,
    read_state,
    update_search_index,
)
from gtr_keras.storage.segmented_index import SegmentedIndex
from gtr_keras.utils.locks import output_lock

SCANN_PARAMS = {"num_leaves": 20, "num_leaves_to_search": 20, "training_sample_size": 2000}


def _build(directory, ids, vectors, kind="exact"):
    write_search_index(ArrayRows(ids, vectors), directory, kind=kind, params=SCANN_PARAMS if kind == "scann" else None)


def _assert_same_results(index, expected, k=10):
    """`index` answers exactly as a fresh exact index over `expected` (`{id: vector}`)."""
    fresh = SearchIndex(list(expected), np.stack(list(expected.values())), kind="exact")
    assert sorted(index.ids) == sorted(fresh.ids)
    got, want = index.search_ids(QUERIES, k), fresh.search_ids(QUERIES, k)
    assert got[0] == want[0]
    np.testing.assert_allclose(got[1], want[1], atol=1e-6)


def test_an_update_equals_a_rebuild_and_a_loaded_index_keeps_its_version(tmp_path):
    vectors = clustered(500, seed=3)
    ids = [f"d{i}" for i in range(500)]
    _build(tmp_path / "index", ids, vectors)
    before = SearchIndex.load(tmp_path / "index")
    answers = before.search_ids(QUERIES, 10)
    new = clustered(60, seed=4)
    new_ids = [f"d{i}" for i in range(470, 530)]  # 30 replaced, 30 added
    manifest = update_search_index(tmp_path / "index", ArrayRows(new_ids, new), ["d3", "d17"])
    assert manifest["generation"] == 1 and [s["num_deleted"] for s in manifest["segments"]] == [32, 0]
    expected = dict(zip(ids, vectors))
    del expected["d3"], expected["d17"]
    expected.update(zip(new_ids, new))
    after = SearchIndex.load(tmp_path / "index")
    assert isinstance(after, SegmentedIndex) and len(after.ids) == 528
    _assert_same_results(after, expected)
    assert before.search_ids(QUERIES, 10)[0] == answers[0]  # the reader that loaded generation 0 still answers it
    compact_search_index(tmp_path / "index")
    _assert_same_results(SearchIndex.load(tmp_path / "index"), expected)


@pytest.mark.parametrize("seed", range(4))
def test_random_sequences_of_updates_equal_a_rebuild(tmp_path, seed):
    """Property-style: random adds, replacements, deletions and compactions, checked after each step."""
    rng = np.random.default_rng(seed)
    ids = [f"d{i}" for i in range(200)]
    expected = dict(zip(ids, clustered(200, seed=10 + seed)))
    _build(tmp_path / "index", list(expected), np.stack(list(expected.values())))
    next_id = 200
    for step in range(6):
        present = list(expected)
        replaced = list(rng.choice(present, size=rng.integers(0, 20), replace=False))
        added = [f"d{next_id + i}" for i in range(rng.integers(0, 20))]
        next_id += len(added)
        rest = [i for i in present if i not in set(replaced)]
        deleted = list(rng.choice(rest, size=rng.integers(0, 15), replace=False))
        source = None
        if replaced or added:
            vectors = clustered(len(replaced) + len(added), seed=100 * seed + step)
            source = ArrayRows(replaced + added, vectors)
            expected.update(zip(replaced + added, vectors))
        for id_ in deleted:
            del expected[id_]
        update_search_index(tmp_path / "index", source, deleted, compact=bool(rng.integers(0, 4) == 0))
        loaded = SearchIndex.load(tmp_path / "index")
        _assert_same_results(loaded, expected, k=int(rng.integers(1, 30)))
        assert list(live_ids(tmp_path / "index")) == list(loaded.ids)  # without loading the vectors


def test_exact_ties_follow_the_id_rule_across_segments(tmp_path):
    same = clustered(1, seed=5)
    _build(tmp_path / "index", ["b", "d", "x"], np.concatenate([same, same, clustered(1, seed=6)]))
    update_search_index(tmp_path / "index", ArrayRows(["c", "a"], np.concatenate([same, same])))
    ids, _ = SearchIndex.load(tmp_path / "index").search_ids(same, 3)
    assert ids == [["d", "c", "b"]]  # equal scores: ids in descending order, as trec_eval ranks them


def test_scann_updates_share_the_first_segments_tree_and_keep_recall(tmp_path):
    vectors = clustered(2000, seed=7)
    ids = [f"d{i}" for i in range(2000)]
    _build(tmp_path / "index", ids, vectors, kind="scann")
    new = clustered(300, seed=8)
    new_ids = [f"d{i}" for i in range(1900, 2200)]
    update_search_index(tmp_path / "index", ArrayRows(new_ids, new), [f"d{i}" for i in range(0, 400, 2)])
    expected = dict(zip(ids, vectors))
    for i in range(0, 400, 2):
        del expected[f"d{i}"]
    expected.update(zip(new_ids, new))
    index = SearchIndex.load(tmp_path / "index")
    exact = SearchIndex(list(expected), np.stack(list(expected.values())), kind="exact").search_ids(QUERIES, 10)[0]
    found = index.search_ids(QUERIES, 10)[0]
    assert not {i for row in found for i in row} - set(expected)  # no deleted or replaced row comes back
    assert recall(found, exact) > 0.9
    compact_search_index(tmp_path / "index")
    compacted = SearchIndex.load(tmp_path / "index")
    assert compacted.ids == index.ids and compacted.search_ids(QUERIES, 10)[0] == found


def test_an_index_written_before_ah_codes_were_packed_is_updated_and_compacted_into_packed_codes(tmp_path):
    _build(tmp_path / "index", [f"d{i}" for i in range(2000)], clustered(2000, seed=7), kind="scann")
    unpack_codes_in_place(tmp_path / "index" / SCANN_DIR)  # as the last release wrote them
    update_search_index(tmp_path / "index", ArrayRows([f"n{i}" for i in range(300)], clustered(300, seed=8)), ["d0"])
    found = SearchIndex.load(tmp_path / "index").search_ids(QUERIES, 10)
    compact_search_index(tmp_path / "index")
    compacted = SearchIndex.load(tmp_path / "index")
    assert compacted.search_ids(QUERIES, 10)[0] == found[0]
    (part, _), *others = compacted.parts
    names = os.listdir(os.path.join(part.path, SCANN_DIR))
    assert not others and SCANN_PACKED_CODES in names and SCANN_CODES not in names


def _float32_recall(index, expected, queries, atol=1e-5):
    """`float32_recall` of `index` over `expected` (`{id: vector}`) and its hits, whose scores are checked to be
    float32 dot products within `atol`."""
    found_recall, found, scores = float32_recall(index, list(expected), np.stack(list(expected.values())), queries)
    np.testing.assert_allclose(
        scores, [[queries[q] @ expected[i] for i in row] for q, row in enumerate(found)], atol=atol
    )
    return found_recall, found


@pytest.mark.parametrize("reorder", ["float32", "int8"])
def test_scann_float32_rescoring_follows_updates_deletions_and_compaction(tmp_path, reorder):
    """Neighbours closer than int8 rounding: recall against float32 brute force stays at ScaNN's rescored one
    through an update, its deletions and a compaction; an index without float32 vectors stays one."""
    vectors, queries = (
        clustered(3000, seed=7, num_clusters=30, noise=0.35),
        clustered(100, seed=9, num_clusters=30, noise=0.35),
    )
    ids = [f"d{i}" for i in range(3000)]
    params = {**SCANN_PARAMS, "reorder": reorder}
    write_search_index(ArrayRows(ids, vectors), tmp_path / "index", "scann", params)
    new = clustered(400, seed=8, num_clusters=30, noise=0.35)
    new_ids = [f"d{i}" for i in range(2800, 3200)]  # 200 replaced, 200 added
    update_search_index(tmp_path / "index", ArrayRows(new_ids, new), [f"d{i}" for i in range(0, 600, 2)])
    expected = dict(zip(ids, vectors))
    for i in range(0, 600, 2):
        del expected[f"d{i}"]
    expected.update(zip(new_ids, new))
    segment = tmp_path / "index" / "segment-000001"
    assert (segment / "embeddings.npy").exists() == (reorder == "float32")
    if reorder == "float32":
        np.testing.assert_array_equal(np.load(segment / "embeddings.npy"), new)
    generous = {"reorder_factor": 50} | ({"rescore_factor": 5} if reorder == "float32" else {})
    index = SearchIndex.load(tmp_path / "index")
    index.set_search_params(generous)
    updated, found = _float32_recall(index, expected, queries, 1e-5 if reorder == "float32" else 1e-2)
    assert not {i for row in found for i in row} - set(expected)  # no deleted or replaced row comes back
    compact_search_index(tmp_path / "index")
    compacted = SearchIndex.load(tmp_path / "index")
    compacted.set_search_params(generous)
    if reorder == "float32":
        np.testing.assert_array_equal(compacted.live_embeddings(), np.stack([expected[i] for i in compacted.ids]))
        assert updated >= 0.995 and _float32_recall(compacted, expected, queries)[0] >= 0.995
    else:
        assert compacted.embeddings is None and updated < 0.99  # int8 order: below what float32 rescoring gets
        assert not list(tmp_path.glob("index/segment-*/embeddings.npy"))


def test_deleting_an_unknown_id_names_it_and_changes_nothing(tmp_path):
    _build(tmp_path / "index", ["a", "b", "c"], clustered(3, seed=9))
    before = sorted(os.listdir(tmp_path / "index"))
    with pytest.raises(DataError, match=r"gone.txt:2: id 'zz' is not in the index"):
        update_search_index(tmp_path / "index", None, ["a", "zz"], where=lambda i: f"gone.txt:{i + 1}")
    assert sorted(os.listdir(tmp_path / "index")) == before
    assert missing_ids(read_state(tmp_path / "index"), ["a", "zz"]) == [1]
    update_search_index(tmp_path / "index", None, ["a", "zz"], missing_ok=True)
    assert list(SearchIndex.load(tmp_path / "index").ids) == ["b", "c"]


def test_updates_refuse_another_dimension_an_id_added_and_deleted_and_an_empty_result(tmp_path):
    _build(tmp_path / "index", ["a", "b"], clustered(2, seed=9))
    with pytest.raises(MismatchError, match="3 dims"):
        update_search_index(tmp_path / "index", ArrayRows(["c"], np.array([[1.0, 0.0, 0.0]], "float32")))
    with pytest.raises(UserError, match="'a' is also among the documents added"):
        update_search_index(tmp_path / "index", ArrayRows(["a"], clustered(1, seed=1)), ["a"])
    with pytest.raises(UserError, match="delete every document"):
        update_search_index(tmp_path / "index", None, ["a", "b"])
    with pytest.raises(DataError, match=r"delete\[1\]: id 'a' duplicates delete\[0\]"):
        update_search_index(tmp_path / "index", None, ["a", "a"])


def test_compaction_runs_past_the_thresholds(tmp_path, monkeypatch):
    monkeypatch.setattr(segment_writer, "MAX_SEGMENTS", 3)
    _build(tmp_path / "index", [f"d{i}" for i in range(100)], clustered(100, seed=1))
    for step in range(2):
        manifest = update_search_index(tmp_path / "index", ArrayRows([f"n{step}"], clustered(1, seed=step)))
    assert len(manifest["segments"]) == 3
    manifest = update_search_index(tmp_path / "index", ArrayRows(["n2"], clustered(1, seed=2)))
    assert [s["num_rows"] for s in manifest["segments"]] == [103]
    manifest = update_search_index(tmp_path / "index", None, [f"d{i}" for i in range(30)])
    assert [(s["num_rows"], s["num_deleted"]) for s in manifest["segments"]] == [(73, 0)]  # 30 of 103 > 25%


def test_old_generations_files_go_once_two_newer_ones_exist(tmp_path):
    _build(tmp_path / "index", [f"d{i}" for i in range(10)], clustered(10, seed=1))
    for step in range(3):
        update_search_index(tmp_path / "index", ArrayRows([f"n{step}"], clustered(1, seed=step)), [f"d{step}"])
    names = sorted(os.listdir(tmp_path / "index"))
    assert names == [
        "checksums.json",
        "deleted-000002.npz",
        "deleted-000003.npz",
        "embeddings.npy",
        "ids.txt",
        "index.json",
        "segment-000001",
        "segment-000002",
        "segment-000003",
        "segments.json",
    ]
    compact_search_index(tmp_path / "index")
    update_search_index(tmp_path / "index", None, ["d5"])
    assert sorted(os.listdir(tmp_path / "index")) == [
        "checksums.json",
        "deleted-000005.npz",
        "index.json",
        "segment-000004",
        "segments.json",
    ]
    assert len(SearchIndex.load(tmp_path / "index").ids) == 9


def test_a_second_writer_is_refused(tmp_path):
    _build(tmp_path / "index", ["a", "b"], clustered(2, seed=1))
    script = f"""
import sys, time
from gtr_keras.utils.locks import output_lock
with output_lock({str(tmp_path / "index")!r}):
    print("locked", flush=True)
    time.sleep(60)
"""
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=_env())
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(BusyError, match="in use by another gtr-keras run"):
            update_search_index(tmp_path / "index", None, ["a"])
    finally:
        holder.kill()
        holder.wait()
    with output_lock(tmp_path / "index"):  # reentrant in one process: the update runs under its caller's lock
        update_search_index(tmp_path / "index", None, ["a"])
    assert list(SearchIndex.load(tmp_path / "index").ids) == ["b"]


def _env():
    return {**os.environ, "PYTHONPATH": REPO}


_UPDATE = """
import sys, time
sys.path.insert(0, {tests!r})
from search_inputs import clustered
from gtr_keras.storage import segment_writer
from gtr_keras.storage.layout import SCANN_CODES, SCANN_DIR, SCANN_PACKED_CODES
from gtr_keras.storage.search_index import ArrayRows

def announced(name, function):
    def slow(*args):
        print(name, flush=True)
        time.sleep(0.3)
        return function(*args)
    return slow

if sys.argv[1] == "slow":  # stops at each stage for the test's SIGKILL
    real_write = segment_writer.write_vectors
    segment_writer.write_vectors = lambda directory, chunks, n, d, params: real_write(
        directory, lambda: (announced("segment", lambda c: c)(chunk) for chunk in chunks()), n, d, params
    )
    segment_writer.write_deleted = announced("deletions", segment_writer.write_deleted)
    segment_writer.replace_file = announced("manifest", segment_writer.replace_file)
    segment_writer.files.remove = announced("cleanup", segment_writer.files.remove)
new = ArrayRows([f"n{{i}}" for i in range(3000)], clustered(3000, seed=11), chunk_rows=1000)
segment_writer.update_search_index({index!r}, new, ["d1", "d2"])
print("done", flush=True)
"""


@pytest.mark.large
@pytest.mark.parametrize("stage", ["segment", "deletions", "manifest"])
def test_kill_during_an_update_leaves_the_previous_version_and_a_rerun_completes_it(tmp_path, stage):
    """SIGKILL while the update writes its segment, its deletion list or its manifest; then the same update
    again, which completes it."""
    _build(tmp_path / "index", [f"d{i}" for i in range(1000)], clustered(1000, seed=1))
    update_search_index(tmp_path / "index", ArrayRows(["x"], clustered(1, seed=2)))
    previous = SearchIndex.load(tmp_path / "index")
    script = _UPDATE.format(tests=os.path.join(REPO, "tests"), index=str(tmp_path / "index"))
    process = subprocess.Popen([sys.executable, "-c", script, "slow"], stdout=subprocess.PIPE, text=True, env=_env())
    for line in process.stdout:
        if line.strip() == stage:
            process.send_signal(signal.SIGKILL)
            break
    assert process.wait() == -signal.SIGKILL
    assert json.loads((tmp_path / "index" / "segments.json").read_text())["generation"] == 1
    loaded = SearchIndex.load(tmp_path / "index")
    assert loaded.ids == previous.ids and loaded.search_ids(QUERIES, 5)[0] == previous.search_ids(QUERIES, 5)[0]
    rerun = subprocess.run([sys.executable, "-c", script, "fast"], capture_output=True, text=True, env=_env())
    assert rerun.returncode == 0, rerun.stderr
    loaded = SearchIndex.load(tmp_path / "index")
    assert len(loaded.ids) == 1001 - 2 + 3000 and "d1" not in set(loaded.ids)
    assert sorted(os.listdir(tmp_path / "index")) == [
        "checksums.json",
        "deleted-000002.npz",
        "embeddings.npy",
        "ids.txt",
        "index.json",
        "segment-000001",
        "segment-000002",
        "segments.json",
    ]


@pytest.mark.parametrize("commits", [1, 2])
def test_a_reader_loading_during_updates_sees_one_whole_generation(tmp_path, monkeypatch, commits):
    """A writer commits while a reader loads the generation it found: with one commit the reader gets that
    generation whole (its files are kept one generation more); with two, whose cleanup removes them, the
    reader starts again and gets the newest generation whole."""
    _build(tmp_path / "index", [f"d{i}" for i in range(50)], clustered(50, seed=1))
    update_search_index(tmp_path / "index", ArrayRows(["first"], clustered(1, seed=9)), ["d49"])
    real, found = SearchIndex._load_segments.__func__, []

    def writer_commits_meanwhile(cls, directory, manifest):
        if not found:
            found.append(manifest["generation"])
            for step in range(commits):
                update_search_index(tmp_path / "index", ArrayRows([f"r{step}"], clustered(1, seed=step)), [f"d{step}"])
        return real(cls, directory, manifest)

    monkeypatch.setattr(SearchIndex, "_load_segments", classmethod(writer_commits_meanwhile))
    index = SearchIndex.load(tmp_path / "index")
    assert found == [1]
    generation_1 = {f"d{i}" for i in range(49)} | {"first"}
    generation_3 = generation_1 - {"d0", "d1"} | {"r0", "r1"}
    assert set(index.ids) == (generation_1 if commits == 1 else generation_3)


def test_updates_and_compaction_on_another_file_system():
    from gtr_keras.utils import files
    from gtr_keras.utils.checksums import verify_checksums

    directory = "ram://live-indexes/index"
    expected = dict(zip([f"d{i}" for i in range(100)], clustered(100, seed=1)))
    write_search_index(ArrayRows(list(expected), np.stack(list(expected.values()))), directory, kind="exact")
    for step in range(3):
        new = clustered(2, seed=step)
        update_search_index(directory, ArrayRows([f"d{step}", f"n{step}"], new), [f"d{50 + step}"])
        expected.update(zip([f"d{step}", f"n{step}"], new))
        del expected[f"d{50 + step}"]
    _assert_same_results(SearchIndex.load(directory), expected)
    compact_search_index(directory)
    update_search_index(directory, None, ["d60"])
    update_search_index(directory, None, ["d61"])
    del expected["d60"], expected["d61"]
    _assert_same_results(SearchIndex.load(directory), expected)
    assert verify_checksums(directory) == ([], 7)  # every write kept the records on another file system too
    assert files.listdir(directory) == [
        "checksums.json",
        "deleted-000005.npz",
        "deleted-000006.npz",
        "index.json",
        "segment-000004",
        "segments.json",
    ]


def test_a_removed_manifest_or_an_edited_next_segment_never_lets_an_update_overwrite_a_segment(tmp_path):
    directory = tmp_path / "index"
    _build(directory, [f"d{i}" for i in range(10)], clustered(10, seed=1))
    update_search_index(directory, ArrayRows(["n0"], clustered(1, seed=2)))
    update_search_index(directory, ArrayRows(["n1"], clustered(1, seed=3)))
    manifest = json.loads((directory / "segments.json").read_text())
    (directory / "segments.json").write_text(json.dumps({**manifest, "next_segment": 2}))
    with pytest.raises(DataError, match="next_segment"):
        update_search_index(directory, ArrayRows(["n2"], clustered(1, seed=4)))
    (directory / "segments.json").unlink()
    with pytest.raises(DataError, match="segments.json: missing"):
        update_search_index(directory, ArrayRows(["n2"], clustered(1, seed=4)))
    with pytest.raises(DataError, match="segments.json: missing"):
        SearchIndex.load(directory)
    (directory / "segments.json").write_text(json.dumps(manifest))
    assert len(SearchIndex.load(directory).ids) == 12


def test_a_first_update_killed_after_its_segment_is_redone_by_a_rerun(tmp_path):
    from gtr_keras.utils.file_operations import counting, stopping_at

    _build(tmp_path / "probe", [f"d{i}" for i in range(10)], clustered(10, seed=1))
    with counting() as probe:
        update_search_index(tmp_path / "probe", ArrayRows(["n0"], clustered(1, seed=2)))
    renamed = [i for i, (kind, path) in enumerate(probe.operations) if kind == "rename" and ".segment-000001" in path]
    directory = tmp_path / "index"
    _build(directory, [f"d{i}" for i in range(10)], clustered(10, seed=1))
    with stopping_at(renamed[0] + 2) as log:
        update_search_index(directory, ArrayRows(["n0"], clustered(1, seed=2)))
    assert log.crashed and (directory / "segment-000001").is_dir()
    assert len(SearchIndex.load(directory).ids) == 10
    update_search_index(directory, ArrayRows(["n0"], clustered(1, seed=2)))
    assert len(SearchIndex.load(directory).ids) == 11


def test_loading_with_checksums_asked_names_a_changed_segment_file(tmp_path):
    directory = tmp_path / "index"
    _build(directory, [f"d{i}" for i in range(10)], clustered(10, seed=1))
    update_search_index(directory, ArrayRows(["n0"], clustered(1, seed=2)))
    SearchIndex.load(directory, verify=True)
    ids = directory / "segment-000001" / "ids.txt"
    ids.write_text("m0\n")
    assert len(SearchIndex.load(directory).ids) == 11  # the cheap checks pass
    with pytest.raises(DataError, match="segment-000001/ids.txt: its SHA-256"):
        SearchIndex.load(directory, verify=True)


def test_an_update_of_the_same_documents_with_other_metadata_is_no_rerun(tmp_path):
    from gtr_keras.beir.readers import Corpus
    from gtr_keras.storage.segments import documents_path, live_corpus

    vectors = clustered(40, seed=5)
    _build(tmp_path / "index", [f"d{i}" for i in range(30)], vectors[:30])
    new_ids = [f"d{i}" for i in range(30, 40)]
    for lang in ("dee", "de"):  # a typo, then the same update with it fixed
        corpus = Corpus(new_ids, [""] * 10, ["text"] * 10, [{"lang": lang}] * 10)
        manifest = update_search_index(tmp_path / "index", ArrayRows(new_ids, vectors[30:]), [], corpus=corpus)
    newest = manifest["segments"][-1]["name"]
    stored = live_corpus([(documents_path(tmp_path / "index", newest), None)])
    assert manifest["generation"] == 2 and {m["lang"] for m in stored.metadata} == {"de"}


def test_a_rerun_of_an_update_killed_before_its_compaction_compacts(tmp_path, monkeypatch):
    vectors = clustered(40, seed=6)
    _build(tmp_path / "index", [f"d{i}" for i in range(30)], vectors[:30])
    source = ArrayRows([f"d{i}" for i in range(30, 40)], vectors[30:])
    with monkeypatch.context() as patched:
        patched.setattr(
            segment_writer, "compact_search_index", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt)
        )
        with pytest.raises(KeyboardInterrupt):
            update_search_index(tmp_path / "index", source, [], compact=True)
    assert len(read_state(tmp_path / "index").manifest["segments"]) == 2  # committed, not compacted
    manifest = update_search_index(tmp_path / "index", source, [], compact=True)
    assert len(manifest["segments"]) == 1 and len(SearchIndex.load(tmp_path / "index").ids) == 40
