import os
import signal

import pytest
from killed_at import killed_at

from gtr_keras.errors import DataError
from gtr_keras.utils import files
from gtr_keras.utils.file_operations import counting, stopping_at, watching


def _write_index(target):
    with files.atomic_directory(target) as staging:
        (staging / "ids.txt").write_text("a\n")


def test_counting_sees_every_operation_of_a_commit(tmp_path):
    with counting() as log:
        _write_index(tmp_path / "out")
    kinds = [kind for kind, _ in log.operations]
    assert kinds.count("write") == 1 and kinds.count("rename") == 1 and "fsync" in kinds
    assert log.count == len(kinds)


def test_stopping_at_each_operation_leaves_the_old_or_the_new_output(tmp_path):
    target = tmp_path / "out"
    kind = files.DirectoryKind("out", ("ids.txt",), ("ids.txt",))

    def write(text):
        with files.atomic_directory(target, [kind]) as staging:
            (staging / "ids.txt").write_text(text)

    write("old\n")
    with counting() as log:
        write("old\n")
    assert log.count == 7  # write, fsync x3 (two files, the directory), the exchange, fsync, remove
    for n in range(1, log.count + 2):
        write("old\n")
        with stopping_at(n) as stopped:
            write("new\n")
        assert stopped.crashed == (n <= log.count)
        assert (target / "ids.txt").read_text() == ("old\n" if n <= 5 else "new\n")  # never absent
        files.remove_staging(target)
        assert [name for name in os.listdir(tmp_path) if name.startswith(".out.")] == []


def test_a_stopped_block_skips_the_cleanup_a_killed_process_would_not_do(tmp_path):
    with stopping_at(1):
        _write_index(tmp_path / "out")
    assert [name for name in os.listdir(tmp_path) if name.startswith(".out.tmp-")]
    files.remove_staging(tmp_path / "out")
    assert os.listdir(tmp_path) == []


def test_a_refused_output_leaves_no_parent_directories_behind(tmp_path):
    with pytest.raises(DataError):
        with files.atomic_outputs(tmp_path / "out" / "encoder" / "1", tmp_path / "out" / "searcher" / "1"):
            raise DataError("refused")
    assert os.listdir(tmp_path) == []


def test_a_tests_watcher_kills_the_process_at_that_operation(tmp_path):
    script = f"from gtr_keras.utils import files\nwith files.atomic_file({str(tmp_path / 'f')!r}) as f: f.write(b'x')\n"
    result = killed_at(2, "-c", script, timeout=120)
    assert result.returncode == -signal.SIGKILL and not (tmp_path / "f").exists()
    assert killed_at(99, "-c", script, timeout=120).returncode == 0 and (tmp_path / "f").read_bytes() == b"x"


def test_no_environment_variable_turns_a_crash_point_on(tmp_path, monkeypatch):
    monkeypatch.setenv("GTR_KERAS_CRASH_AT", "1")
    with files.atomic_file(tmp_path / "f") as f:
        f.write(b"x")
    assert (tmp_path / "f").read_bytes() == b"x"


def test_a_watcher_sees_each_operation_before_it_is_done_and_only_in_its_block(tmp_path):
    seen = []
    with watching(lambda kind, path: seen.append((kind, path, os.path.exists(tmp_path / "f")))):
        with files.atomic_file(tmp_path / "f") as f:
            f.write(b"x")
    assert [(kind, exists) for kind, _, exists in seen] == [
        ("write", False),
        ("fsync", False),
        ("rename", False),
        ("fsync", True),
    ]
    count = len(seen)
    with files.atomic_file(tmp_path / "g") as f:
        f.write(b"y")
    assert len(seen) == count
