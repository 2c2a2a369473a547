"""`gtr-keras check` on every kind of directory: healthy ones pass with one line, a changed byte is named."""

import json
import os
import shutil

import pytest

from gtr_keras.cli.main import main


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


def test_a_directory_written_before_checksums_says_so_and_is_checked_for_the_rest(built_index, tmp_path, capsys):
    copy = tmp_path / "idx"
    shutil.copytree(built_index, copy)
    for checksums in copy.rglob("checksums.json"):
        checksums.unlink()
    code, out, _ = _check(capsys, copy)
    assert code == 0 and "written before checksums were recorded" in out
    (copy / "index" / "index.json").write_text(json.dumps({"format_version": 2, "kind": "exact"}))
    code, _, err = _check(capsys, copy)
    assert code == 2 and "index.json: field 'num_embeddings' is missing" in err


def test_an_updated_index_checks_every_segment_and_its_bm25_side(built_index, tiny_model_dir, tmp_path, capsys):
    copy = tmp_path / "idx"
    shutil.copytree(built_index, copy)
    new = _corpus(tmp_path / "new.jsonl", 3)
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(new), "--out", str(copy), "--update"]) == 0
    code, out, err = _check(capsys, copy)
    assert code == 0 and "2 segments" in out and "BM25 side" in out, err
    _flip(copy / "index" / "segment-000001" / "embeddings.npy", -1)
    code, _, err = _check(capsys, copy)
    assert code == 2 and "segment-000001/embeddings.npy: its SHA-256 is not the one recorded" in err


def test_a_manifest_whose_segment_points_outside_is_named(built_index, tiny_model_dir, tmp_path, capsys):
    copy = tmp_path / "idx"
    shutil.copytree(built_index, copy)
    new = _corpus(tmp_path / "new.jsonl", 3)
    assert main(["index", "--model", tiny_model_dir, "--corpus", str(new), "--out", str(copy), "--update"]) == 0
    manifest = json.loads((copy / "index" / "segments.json").read_text())
    manifest["segments"][1]["name"] = "../../elsewhere"
    (copy / "index" / "segments.json").write_text(json.dumps(manifest))
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
    (index / "index" / "segments.json").write_text(json.dumps(manifest))
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
