"""The records of committed directories: kept up to date by every write into them, crash-consistent, and
verified whole (`utils.checksums`)."""

import os
import shutil

import pytest

from gtr_keras.errors import DataError
from gtr_keras.utils import files
from gtr_keras.utils.checksums import verify_checksums, verify_directory
from gtr_keras.utils.file_operations import counting, stopping_at

KIND = files.DirectoryKind("an output", ("ids.txt",), ("*",))


def _commit(target):
    with files.atomic_directory(target, [KIND]) as staging:
        (staging / "ids.txt").write_text("a\n")
        (staging / "assets").mkdir()
        (staging / "assets" / "vocab.txt").write_text("x\n")


def _found(directory):
    return [(os.path.relpath(f.path, directory), f.leftover) for f in verify_checksums(directory)[0]]


def _unit(parent):
    with files.atomic_directory(parent / "unit", [KIND]) as staging:
        (staging / "ids.txt").write_text("1\n")


def _atomic_file(directory):
    with files.atomic_file(directory / "deleted.npz") as f:
        f.write(b"\x00\x01")


WRITES = {  # each write twice: one adds, the second replaces
    "replace_file": lambda d: [files.replace_file(d / "manifest.json", data) for data in (b"{}", b"[]")],
    "atomic_file": lambda d: [_atomic_file(d) for _ in range(2)],
    "atomic_directory": lambda d: [_unit(d) for _ in range(2)],
    "remove": lambda d: files.remove(d / "assets"),
    "rename": lambda d: files.rename(d / "ids.txt", d / "ids-1.txt"),
}


@pytest.mark.parametrize("write", list(WRITES))
def test_every_write_into_a_committed_directory_keeps_its_record(tmp_path, write):
    _commit(tmp_path / "out")
    WRITES[write](tmp_path / "out")
    found, verified = verify_checksums(tmp_path / "out")
    records = len(list((tmp_path / "out").rglob("checksums.json")))
    assert found == [] and verified == len([p for p in (tmp_path / "out").rglob("*") if p.is_file()]) - records


@pytest.mark.parametrize("write", list(WRITES))
def test_a_write_stopped_at_any_operation_leaves_what_the_record_allows(tmp_path, write):
    _commit(tmp_path / "source")
    with counting() as log:
        shutil.copytree(tmp_path / "source", tmp_path / "counted")
        WRITES[write](tmp_path / "counted")
    assert log.count > 2
    for n in range(1, log.count + 1):
        target = tmp_path / f"stopped-{n}"
        shutil.copytree(tmp_path / "source", target)
        with stopping_at(n) as stopped:
            WRITES[write](target)
        assert stopped.crashed
        assert all(leftover for _, leftover in _found(target)), (n, log.operations[n - 1], _found(target))
        verify_directory(target)


def test_what_no_record_names_is_named_and_a_hidden_one_is_a_leftover(tmp_path):
    _commit(tmp_path / "out")
    (tmp_path / "out" / "notes.txt").write_text("mine")
    (tmp_path / "out" / ".tune-x1").mkdir()
    (tmp_path / "out" / ".ids.txt.tmp-1").write_text("half")
    (tmp_path / "out" / ".out.lock").write_text("{}")
    (tmp_path / "out" / "assets" / "checksums.json").write_text("")
    assert sorted(_found(tmp_path / "out")) == [
        (".ids.txt.tmp-1", True),
        (".tune-x1", True),
        ("assets/checksums.json", False),
        ("notes.txt", False),
    ]
    with pytest.raises(DataError, match=r"assets/checksums.json: not recorded in .*out/checksums.json"):
        verify_directory(tmp_path / "out")


def test_a_missing_emptied_or_swapped_record_is_named(tmp_path):
    _commit(tmp_path / "out")
    _unit(tmp_path / "out")
    _commit(tmp_path / "other")
    _unit(tmp_path / "other")
    shutil.rmtree(tmp_path / "out" / "unit")
    shutil.copytree(tmp_path / "other" / "unit", tmp_path / "out" / "unit")
    assert _found(tmp_path / "out") == [("unit/checksums.json", False)]
    assert "the record of another directory" in verify_checksums(tmp_path / "out")[0][0].what
    (tmp_path / "out" / "unit" / "checksums.json").write_text("")
    assert "not a checksums record" in verify_checksums(tmp_path / "out")[0][0].what
    (tmp_path / "out" / "unit" / "checksums.json").unlink()
    assert "out/checksums.json records" in verify_checksums(tmp_path / "out")[0][0].what
    (tmp_path / "out" / "checksums.json").unlink()
    assert _found(tmp_path / "out") == [("checksums.json", False)]
    assert "every directory gtr-keras writes holds one" in verify_checksums(tmp_path / "out")[0][0].what


def test_a_changed_missing_or_resized_file_is_named(tmp_path):
    _commit(tmp_path / "out")
    (tmp_path / "out" / "ids.txt").write_text("b\n")
    with pytest.raises(DataError, match=r"out/ids.txt: its SHA-256 is not the one recorded"):
        verify_directory(tmp_path / "out")
    (tmp_path / "out" / "ids.txt").write_text("bb\n")
    with pytest.raises(DataError, match=r"out/ids.txt: 3 bytes, 2 recorded"):
        verify_directory(tmp_path / "out")
    (tmp_path / "out" / "ids.txt").unlink()
    with pytest.raises(DataError, match=r"out/ids.txt: missing \(recorded in"):
        verify_directory(tmp_path / "out")


def test_a_committed_directory_on_another_file_system_is_kept_and_verified_too():
    root = "ram://checksums-test"
    with files.atomic_directory(f"{root}/out") as staging:
        (staging / "ids.txt").write_text("a\n")
    files.replace_file(f"{root}/out/manifest.json", b"{}")
    files.remove(f"{root}/out/ids.txt")
    assert verify_checksums(f"{root}/out") == ([], 1)
