"""`gtr-keras check` on every kind of directory: healthy ones pass with one line, a changed byte is named."""

import json
import os
import pathlib
import shutil

import pytest

from gtr_keras.beir.readers import Corpus
from gtr_keras.cli.main import main
from gtr_keras.retrieval.index_building import build_index, index_embeddings
from gtr_keras.retrieval.index_updates import update_index
from gtr_keras.tuning.tuner import tune
from gtr_keras.utils import files

# The recall@10 the tuned ScaNN fixtures are tuned to: far below what one leaf of ten finds, so that the setting
# chosen on the tuning half meets it on the held-out half whatever the timings chose (at 0.5, near one leaf's
# recall, the held-out half could miss it and `tune` refuse).
TARGET = 0.2


def _flip(path, offset=None):
    data = bytearray(path.read_bytes())
    offset = len(data) // 2 if offset is None else offset
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _check(capsys, path, *flags):
    capsys.readouterr()
    code = main(["check", str(path), *flags])
    out, err = capsys.readouterr()
    return code, out, err


def _corpus(path, n=24):
    words = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()
    with open(path, "w") as f:
        for i in range(n):
            text = " ".join(words[(i * 7 + j) % len(words)] for j in range(3 + i % 5))
            f.write(json.dumps({"_id": f"d{i}", "title": f"title {i}", "text": text}) + "\n")
    return path


@pytest.fixture(scope="module")
def built_index(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("checked")
    corpus = _corpus(root / "corpus.jsonl")
    argv = ["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(root / "idx"), "--exact"]
    assert main(argv) == 0
    return root / "idx"


def test_check_passes_a_healthy_index_model_and_onnx_export_and_names_one_changed_byte_in_each(
    built_index, tiny_model_dir, tiny_onnx_export, tmp_path, capsys
):
    cases = [
        (built_index, os.path.join("index", "embeddings.npy"), "an index directory"),
        (tiny_model_dir, "model.weights.h5", "a model directory"),
        (tiny_onnx_export, "encoder.onnx", "an ONNX or OpenVINO export"),
    ]
    for source, data_file, kind in cases:
        copy = tmp_path / os.path.basename(str(source))
        shutil.copytree(source, copy)
        code, out, err = _check(capsys, copy)
        assert code == 0, err
        assert out.count("\n") == 1 and out.startswith(f"{copy}: {kind}, ok (") and "SHA-256 verified" in out
        _flip(copy / data_file, -1 if data_file.endswith(".npy") else None)
        code, out, err = _check(capsys, copy)
        assert code == 2 and out == ""
        assert err.startswith(f"gtr-keras check: error: {copy / data_file}: ") and err.count("\n") == 1, err


def test_check_says_what_an_onnx_export_runs_with_as_gtr_keras_load_checks_it(tiny_onnx_export, capsys):
    code, out, err = _check(capsys, tiny_onnx_export)
    assert code == 0, err
    assert "onnx export, D 64; runs with onnxruntime, sentencepiece;" in out and "tokenizers" not in out


def test_all_lists_every_problem_and_the_first_is_named_alone(built_index, tmp_path, capsys):
    copy = tmp_path / "idx"
    shutil.copytree(built_index, copy)
    _flip(copy / "index" / "ids.txt", 0)
    _flip(copy / "documents.jsonl.gz")
    code, _, err = _check(capsys, copy)
    assert code == 2 and err.count("\n") == 1
    code, _, err = _check(capsys, copy, "--all")
    assert code == 2 and err.count("\n") >= 2
    assert str(copy / "index" / "ids.txt") in err and str(copy / "documents.jsonl.gz") in err


def test_a_removed_checksums_json_is_named_and_a_record_rewritten_through_files_is_still_checked(
    built_index, tmp_path, capsys
):
    copy = tmp_path / "idx"
    shutil.copytree(built_index, copy)
    (copy / "checksums.json").unlink()
    code, _, err = _check(capsys, copy)
    assert code == 2 and err.startswith(f"gtr-keras check: error: {copy / 'checksums.json'}: missing"), err
    shutil.rmtree(copy)
    shutil.copytree(built_index, copy)
    _rewrite(copy / "index" / "index.json", {"format_version": 2, "kind": "exact"})
    code, _, err = _check(capsys, copy)
    assert code == 2 and "index.json: field 'num_embeddings' is missing" in err


def _rewrite(path, record):
    """Writes `record` to `path` through `files` (its directory's record follows): a writer's mistake, which
    only the record checks can see."""
    files.replace_file(path, json.dumps(record).encode("utf-8"))


def test_an_updated_index_checks_every_segment_and_its_bm25_side(built_index, tiny_model_dir, tmp_path, capsys):
    copy = tmp_path / "idx"
    shutil.copytree(built_index, copy)
    new = _corpus(tmp_path / "new.jsonl", 3)
    assert main(["update", str(copy), "--model", tiny_model_dir, "--corpus", str(new)]) == 0
    code, out, err = _check(capsys, copy)
    assert code == 0 and "2 segments" in out and "BM25 side" in out, err
    _flip(copy / "index" / "segment-000001" / "embeddings.npy", -1)
    code, _, err = _check(capsys, copy)
    assert code == 2 and "segment-000001/embeddings.npy: its SHA-256 is not the one recorded" in err


def test_a_manifest_whose_segment_points_outside_is_named(built_index, tiny_model_dir, tmp_path, capsys):
    copy = tmp_path / "idx"
    shutil.copytree(built_index, copy)
    new = _corpus(tmp_path / "new.jsonl", 3)
    assert main(["update", str(copy), "--model", tiny_model_dir, "--corpus", str(new)]) == 0
    manifest = json.loads((copy / "index" / "segments.json").read_text())
    manifest["segments"][1]["name"] = "../../elsewhere"
    _rewrite(copy / "index" / "segments.json", manifest)
    code, _, err = _check(capsys, copy)
    assert code == 2 and "segments.json: field 'segments[1].name'" in err


def test_a_segment_whose_documents_hold_a_type_its_manifest_entry_does_not_record_is_named(
    tiny_model_dir, tmp_path, capsys
):
    documents = [{"_id": f"d{i}", "text": f"wing lift {i}", "metadata": {"year": 2000 + i}} for i in range(3)]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in documents))
    index = tmp_path / "idx"
    assert (
        main(["index", "--model", tiny_model_dir, "--corpus", str(tmp_path / "corpus.jsonl"), "--out", str(index)]) == 0
    )
    (tmp_path / "new.jsonl").write_text(json.dumps({"_id": "d9", "text": "drag", "metadata": {"year": 2024}}) + "\n")
    assert main(["update", str(index), "--model", tiny_model_dir, "--corpus", str(tmp_path / "new.jsonl")]) == 0
    assert _check(capsys, index)[0] == 0
    manifest = json.loads((index / "index" / "segments.json").read_text())
    manifest["segments"][0]["metadata_types"] = {"year": "string"}
    _rewrite(index / "index" / "segments.json", manifest)
    code, _, err = _check(capsys, index)
    assert code == 2 and err.count("\n") == 1, err
    assert (
        f"{index / 'documents.jsonl.gz'}: field `metadata.year` is a number, but "
        f"{index / 'index' / 'segments.json'} records string for segment '.'" in err
    ), err


def test_what_is_not_a_gtr_keras_directory_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    code, _, err = _check(capsys, tmp_path)
    assert code == 2 and "not a directory that gtr-keras writes" in err


# Every file of every directory gtr-keras writes, one byte changed at a time. Each fixture is built once; each
# test changes a copy.


def _metadata_corpus(ids):
    words = "wing lift drag shock boundary layer heat transfer flutter nozzle jet buckling panel cone mach".split()
    texts = [" ".join(words[(i * 7 + j) % 15] for j in range(4)) for i in ids]
    metadata = [{"year": 2000 + i} for i in ids]
    return Corpus([f"d{i}" for i in ids], [f"title {i}" for i in ids], texts, metadata)


def _listing(directory):
    return sorted(os.path.relpath(os.path.join(r, n), directory) for r, _, names in os.walk(directory) for n in names)


@pytest.fixture(scope="module")
def updated_index(tmp_path_factory, tiny_model_dir, tiny_encoder):
    """An index directory with a BM25 side, updated once (3 documents added, 2 deleted)."""
    root = tmp_path_factory.mktemp("updated")
    build_index(tiny_encoder, _metadata_corpus(range(24)), root / "idx", tiny_model_dir, kind="exact")
    update_index(root / "idx", corpus=_metadata_corpus(range(100, 103)), encoder=tiny_encoder, delete=["d1", "d2"])
    return root / "idx"


@pytest.fixture(scope="module")
def int8_index(tmp_path_factory, tiny_model_dir, tiny_encoder):
    """An exact index of int8 codes, its rescoring tuned (`tuned.json` and the plot in `index/`)."""
    pytest.importorskip("matplotlib")
    root = tmp_path_factory.mktemp("int8")
    build_index(tiny_encoder, _metadata_corpus(range(40)), root / "idx", tiny_model_dir, params={"vectors": "int8"})
    tune(root / "idx", sample=20, k=5, target_recall=0.5)
    return root / "idx"


@pytest.fixture(scope="module")
def tuned_scann_index(tmp_path_factory):
    """An index directory of ScaNN over 1,000 vectors with documents and a BM25 side, tuned with `build`."""
    pytest.importorskip("matplotlib")
    import numpy as np
    from search_inputs import CORPUS

    root, n = tmp_path_factory.mktemp("scann"), 1000
    np.save(root / "vectors.npy", CORPUS[:n])
    ids = [f"doc-{i}" for i in range(n)]
    (root / "vectors.ids.txt").write_text("".join(f"{i}\n" for i in ids))
    corpus = Corpus(ids, [""] * n, [f"wing lift {i % 7} drag {i % 11}" for i in range(n)])
    index_embeddings(str(root / "vectors.npy"), root / "idx", kind="scann", corpus=corpus, params={"num_leaves": 10})
    tune(root / "idx", sample=100, target_recall=TARGET, build=True)
    return root / "idx"


@pytest.fixture(scope="module")
def exports(tmp_path_factory, tiny_model_dir, tiny_onnx_export):
    """A SavedModel export root, and LiteRT and OpenVINO export directories (ONNX: `tiny_onnx_export`)."""
    root = tmp_path_factory.mktemp("exports")
    directories = {"onnx": tiny_onnx_export, "savedmodel": root / "savedmodel"}
    assert main(["export", "--model", tiny_model_dir, "--out", str(root / "savedmodel")]) == 0
    for name in ("litert", "openvino"):
        assert main(["export", "--model", tiny_model_dir, "--format", name, "--out", str(root / name)]) == 0
        directories[name] = root / name
    return directories


_BM25_SIDE = [
    "bm25/bm25.json",
    "bm25/checksums.json",
    "bm25/data.csc.index.npy",
    "bm25/ids.txt",
    "bm25/indices.csc.index.npy",
    "bm25/indptr.csc.index.npy",
    "bm25/params.index.json",
    "bm25/vocab.index.json",
]
_SCANN = [
    f"index/scann/{name}"
    for name in (
        "ah_codebook.pb",
        "datapoint_to_token.npy",
        "dp_norms.npy",
        "hashed_dataset.packed.json",
        "hashed_dataset.packed.npy",
        "int8_dataset.npy",
        "int8_multipliers.npy",
        "scann_assets.pbtxt",
        "scann_config.pb",
        "serialized_partitioner.pb",
    )
]
# What each writer writes, file by file: a file a writer adds is checked below once it is listed here.
_INDEX_DIRECTORY = [
    *_BM25_SIDE,
    "checksums.json",
    "documents.jsonl.gz",
    "index/checksums.json",
    "index/embeddings.npy",
    "index/ids.txt",
    "index/index.json",
    "retriever.json",
]
_TUNED = ["index/tune-recall-qps.png", "index/tuned.json"]
_SEGMENT = [
    f"index/segment-000001/{name}"
    for name in ("checksums.json", "documents.jsonl.gz", "embeddings.npy", "ids.txt", "index.json")
]
WRITTEN = {
    "updated_index": sorted(
        [
            *_INDEX_DIRECTORY,
            *_SEGMENT,
            "index/deleted-000001.npz",
            "index/segments.json",
        ]
    ),
    "int8_index": sorted([*_INDEX_DIRECTORY, *_TUNED, "index/int8-calibration.npy", "index/vectors-int8.npy"]),
    "tuned_scann_index": sorted([*_INDEX_DIRECTORY, *_TUNED, *_SCANN]),
    "model": [
        "assets/tokenizer/vocabulary.spm",
        "checksums.json",
        "config.json",
        "metadata.json",
        "model.weights.h5",
        "preprocessor.json",
        "task.json",
        "task.weights.h5",
        "tokenizer.json",
    ],
    "onnx": ["checksums.json", "encoder.onnx", "export.json", "spiece.model"],
    "openvino": ["checksums.json", "encoder.bin", "encoder.xml", "export.json", "spiece.model"],
    "litert": ["checksums.json", "encoder.tflite"],
    "savedmodel": [
        f"encoder/1/{name}"
        for name in (
            "assets.extra/tf_serving_warmup_requests",
            "assets/spiece.model",
            "checksums.json",
            "fingerprint.pb",
            "saved_model.pb",
            "variables/variables.data-00000-of-00001",
            "variables/variables.index",
        )
    ],
}


def _written(request, name):
    if name in ("onnx", "openvino", "litert", "savedmodel"):
        return request.getfixturevalue("exports")[name]
    return request.getfixturevalue("tiny_model_dir" if name == "model" else name)


def _assert_named(capsys, directory, path):
    """`check` exits 2 and its first line names `path`, whatever `--all` finds after it (never a crash)."""
    code, out, err = _check(capsys, directory, "--all")
    assert code == 2 and out == "" and err.startswith(f"gtr-keras check: error: {path}: "), (path, err)
    assert "internal error" not in err and "Traceback" not in err


def _every_file_named(request, capsys, tmp_path, name):
    source = pathlib.Path(_written(request, name))
    assert _listing(source) == WRITTEN[name]
    copy = tmp_path / "copy"
    code, out, err = _check(capsys, source)
    assert code == 0 and out.endswith(
        f"{len(WRITTEN[name]) - sum(n.endswith('checksums.json') for n in WRITTEN[name])} files' SHA-256 verified)\n"
    ), err
    for relative in WRITTEN[name]:
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(source, copy)
        _flip(copy / relative)
        _assert_named(capsys, copy, copy / relative)
        if relative.endswith(("checksums.json", "tuned.json")):
            (copy / relative).write_bytes(b"")  # emptied
            _assert_named(capsys, copy, copy / relative)
            (copy / relative).write_bytes((source / relative).read_bytes()[:-20])  # truncated
            _assert_named(capsys, copy, copy / relative)
            (copy / relative).unlink()
            _assert_named(capsys, copy, copy / relative)


@pytest.mark.parametrize("name", ["updated_index", "int8_index", "tuned_scann_index", "model", "onnx"])
def test_every_file_each_writer_writes_is_verified_and_one_changed_byte_in_any_is_named(
    request, capsys, tmp_path, name
):
    _every_file_named(request, capsys, tmp_path, name)


@pytest.mark.large
@pytest.mark.parametrize("name", ["openvino", "litert", "savedmodel"])
def test_every_file_of_the_other_exports_is_verified_and_one_changed_byte_in_any_is_named(
    request, capsys, tmp_path, name
):
    _every_file_named(request, capsys, tmp_path, name)


def test_a_child_directory_swapped_for_another_shards_or_an_empty_record_dropped_in_is_named(
    updated_index, built_index, tiny_model_dir, tmp_path, capsys
):
    copy = tmp_path / "idx"
    for child in ("index", "bm25"):
        shutil.copytree(updated_index, copy)
        shutil.rmtree(copy / child)
        shutil.copytree(built_index / child, copy / child)  # another shard of the same model
        code, _, err = _check(capsys, copy)
        assert code == 2 and err.startswith(f"gtr-keras check: error: {copy / child / 'checksums.json'}: the record of")
        assert "was replaced by another one" in err
        shutil.rmtree(copy)
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    (model / "assets" / "tokenizer" / "checksums.json").write_text("")
    _assert_named(capsys, model, model / "assets" / "tokenizer" / "checksums.json")


def test_what_a_killed_job_left_is_named_with_what_to_do(updated_index, tmp_path, capsys):
    copy = tmp_path / "idx"
    shutil.copytree(updated_index, copy)
    (copy / ".tune-index-k3x9ab_1").mkdir()  # a killed `tune --build` of idx/index
    (copy / ".tune-index-k3x9ab_1" / "1").write_bytes(b"x" * 10)
    (copy / "index" / ".segments.json.tmp-ab12").write_text("{")  # a killed manifest write
    (tmp_path / ".idx.tmp-zz").mkdir()  # a killed rebuild of the whole index
    (tmp_path / "idx.partial").mkdir()  # a killed build's encoded pieces
    with files.atomic_directory(copy / "index" / "segment-000007") as staging:  # a killed update's segment
        (staging / "ids.txt").write_text("d9\n")
    code, _, err = _check(capsys, copy, "--all")
    lines = err.splitlines()
    assert code == 2 and len(lines) == 5, err
    for path, what in [
        (copy / ".tune-index-k3x9ab_1", "the scratch of a `gtr-keras tune` that did not end"),
        (copy / "index" / ".segments.json.tmp-ab12", "the staging of a write of segments.json that did not end"),
        (tmp_path / ".idx.tmp-zz", "the staging of a write of idx that did not end"),
        (tmp_path / "idx.partial", "the encoded pieces of a `gtr-keras index` that did not end"),
        (copy / "index" / "segment-000007", "written by an update that did not end"),
    ]:
        assert any(line.startswith(f"gtr-keras check: error: {path}: ") and what in line for line in lines), err
    assert all(" remove " in line for line in lines)


def test_stale_is_said_only_of_an_updated_index_whose_side_an_update_left(updated_index, built_index, tmp_path, capsys):
    from gtr_keras.lexical.bm25_side import BM25_DIRECTORY

    def replace_side(index, side):  # as a writer does, so that the records agree: only the ids can tell
        with files.atomic_directory(index / "bm25", [BM25_DIRECTORY]) as staging:
            for name in os.listdir(side):
                if name != "checksums.json":
                    shutil.copy(side / name, staging / name)

    fresh, updated = tmp_path / "fresh", tmp_path / "updated"
    shutil.copytree(built_index, fresh)
    shutil.copytree(updated_index, updated)
    replace_side(fresh, updated_index / "bm25")
    code, _, err = _check(capsys, fresh)
    assert code == 2 and err.startswith(f"gtr-keras check: error: {fresh / 'bm25'}: not the documents of the index")
    assert "BM25 side stale" not in err and "was never updated" in err
    replace_side(updated, built_index / "bm25")  # as an update killed before it rebuilt the side leaves it
    code, out, err = _check(capsys, updated)
    assert code == 0 and "BM25 side stale, refused until rebuilt" in out, err


def test_compaction_an_update_from_embeddings_and_a_rebuilt_search_index_keep_every_record(
    updated_index, built_index, tiny_model_dir, tmp_path, capsys
):
    import numpy as np

    from gtr_keras.storage.search_index import ArrayRows, write_search_index

    copy = tmp_path / "idx"
    shutil.copytree(updated_index, copy)
    assert main(["update", str(copy), "--compact"]) == 0
    code, out, err = _check(capsys, copy)
    assert code == 0 and "1 segment;" in out, err
    np.save(tmp_path / "new.npy", np.eye(1, 64, dtype=np.float32))
    (tmp_path / "new.ids.txt").write_text("d500\n")
    assert main(["update", str(copy), "--embeddings", str(tmp_path / "new.npy"), "--model", tiny_model_dir]) == 0
    code, out, err = _check(capsys, copy)
    assert code == 0 and not (copy / "bm25").exists() and "BM25 side" not in out, err
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(built_index, rebuilt)
    vectors = np.load(rebuilt / "index" / "embeddings.npy")
    ids = (rebuilt / "index" / "ids.txt").read_text().splitlines()
    write_search_index(ArrayRows(ids, vectors), rebuilt / "index", "exact")  # replaced whole, as `tune --build` does
    code, out, err = _check(capsys, rebuilt)
    assert code == 0, err


def test_a_bare_search_index_is_not_blamed_for_the_tune_scratch_of_a_sibling_whose_name_it_begins(tmp_path, capsys):
    import numpy as np

    from gtr_keras.storage.search_index import ArrayRows, write_search_index

    vectors = np.eye(4, 8, dtype=np.float32)
    for name in ("foo", "foo-bar"):
        write_search_index(ArrayRows([f"d{i}" for i in range(4)], vectors), tmp_path / name, "exact")
    (tmp_path / ".tune-foo-bar-k3x9ab_1").mkdir()  # a running (or killed) `tune --build` of foo-bar
    code, _, err = _check(capsys, tmp_path / "foo")
    assert code == 0, err
    code, _, err = _check(capsys, tmp_path / "foo-bar")
    assert code == 2 and ".tune-foo-bar-k3x9ab_1: the scratch of a `gtr-keras tune`" in err


def test_the_scratch_of_a_stopped_tune_is_named_and_gone_once_tune_reruns(tuned_scann_index, tmp_path, capsys):
    from gtr_keras.utils.file_operations import stopping_at

    copy = tmp_path / "idx"
    shutil.copytree(tuned_scann_index, copy)
    with stopping_at(2) as stopped:  # in its first build, as a kill there would
        tune(copy, sample=100, target_recall=TARGET, build=True)
    assert stopped.crashed
    code, _, err = _check(capsys, copy)
    scratch = [name for name in os.listdir(copy) if name.startswith(".tune-")]
    assert code == 2 and len(scratch) == 1, err
    assert err.startswith(f"gtr-keras check: error: {copy / scratch[0]}: the scratch of a `gtr-keras tune`"), err
    tune(copy, sample=100, target_recall=TARGET)
    assert _check(capsys, copy)[0] == 0
