import os
import pathlib

import numpy as np
import pytest

from gtr_keras.errors import DataError
from gtr_keras.utils import files
from gtr_keras.utils.files import atomic_directory, atomic_file, atomic_outputs, commits

OLD = files.DirectoryKind("an old output", ("old.txt",), ("old.txt", "new.txt"))


def test_atomic_directory_replaces_existing(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with atomic_directory(target, [OLD]) as tmp:
        (tmp / "new.txt").write_text("new")
        assert not (target / "new.txt").exists()
    assert os.listdir(target) == ["checksums.json", "new.txt"]
    assert os.listdir(tmp_path) == ["out"]


def test_a_directory_of_another_kind_is_never_replaced_and_named_with_a_stranger_inside(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    with atomic_directory(target) as tmp:  # an empty directory is replaced
        (tmp / "old.txt").write_text("old")
    (target / "notes.txt").write_text("mine")
    message = f"{target}: not replaced, it holds notes.txt, which is not part of an old output"
    for replaces in ([OLD], []):
        with pytest.raises(DataError, match=message.replace("an old output", ".*")) as raised:
            with atomic_directory(target, replaces) as tmp:
                raise AssertionError("the check comes before the block")
    assert "remove it or choose another output directory" in str(raised.value)
    os.remove(target / "old.txt")
    with pytest.raises(DataError, match="holds notes.txt"):  # no mark of the kind: the first entry is named
        files.check_replaceable(target, [OLD])
    with pytest.raises(DataError, match=message.replace("/out:", "/late:")):  # one put there meanwhile is found
        with atomic_directory(tmp_path / "late", [OLD]) as tmp:
            (tmp / "new.txt").write_text("new")
            os.makedirs(tmp_path / "late")
            (tmp_path / "late" / "notes.txt").write_text("mine")
    assert (target / "notes.txt").read_text() == "mine" and os.listdir(tmp_path / "late") == ["notes.txt"]
    assert sorted(os.listdir(tmp_path)) == ["late", "out"]


def test_a_file_output_never_replaces_a_directory_nor_a_directory_a_file(tmp_path):
    (tmp_path / "emb.npy").mkdir()
    (tmp_path / "emb.npy" / "kept.txt").write_text("mine")
    with pytest.raises(DataError, match=r"emb.npy: is a directory, expected a file \(it is not replaced\)"):
        with atomic_file(tmp_path / "emb.npy") as f:
            f.write(b"data")
    assert os.listdir(tmp_path / "emb.npy") == ["kept.txt"] and os.listdir(tmp_path) == ["emb.npy"]
    (tmp_path / "index").write_text("mine")
    with pytest.raises(DataError, match=r"index: exists and is not a directory \(it is not replaced\)"):
        with atomic_outputs(tmp_path / "index") as (staged,):
            staged.mkdir()
    assert (tmp_path / "index").read_text() == "mine"


def test_atomic_directory_keeps_old_on_error(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_directory(target, [OLD]) as tmp:
            (tmp / "new.txt").write_text("half")
            raise RuntimeError("boom")
    assert (target / "old.txt").read_text() == "old"
    assert os.listdir(target) == ["old.txt"]
    assert os.listdir(tmp_path) == ["out"]


def test_atomic_directory_creates_nothing_on_error(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_directory(tmp_path / "out"):
            raise RuntimeError
    assert os.listdir(tmp_path) == []


def test_atomic_file_appears_only_when_complete(tmp_path):
    path = tmp_path / "data.npy"
    path.write_bytes(b"previous")
    with pytest.raises(RuntimeError):
        with atomic_file(path) as f:
            f.write(b"partial")
            raise RuntimeError
    assert path.read_bytes() == b"previous"
    with atomic_file(path) as f:
        np.save(f, np.arange(3))
    np.testing.assert_array_equal(np.load(path), np.arange(3))
    assert os.listdir(tmp_path) == ["data.npy"]


def _snapshot(root):
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "checksums.json"
    }


def test_atomic_outputs_replace_a_file_and_a_directory_together(tmp_path):
    (tmp_path / "emb.npy").write_bytes(b"old npy")
    with atomic_outputs(tmp_path / "emb.npy", tmp_path / "index") as (npy, index):
        npy.write_bytes(b"new npy")
        index.mkdir()
        (index / "ids.txt").write_text("a\n")
        assert (tmp_path / "emb.npy").read_bytes() == b"old npy" and not (tmp_path / "index").exists()
    assert _snapshot(tmp_path) == {"emb.npy": b"new npy", "index/ids.txt": b"a\n"}


def test_atomic_outputs_keep_every_old_output_when_the_second_rename_fails(tmp_path, monkeypatch):
    (tmp_path / "a.npy").write_bytes(b"old a")
    (tmp_path / "a.ids.txt").write_bytes(b"old ids")
    before = _snapshot(tmp_path)
    renames = []

    def failing_rename(source, target):
        renames.append(target)
        if str(target).endswith("a.ids.txt") and not str(source).endswith("-old"):
            raise OSError(28, "No space left on device")
        real_rename(source, target)

    real_rename = os.rename
    monkeypatch.setattr(commits.os, "rename", failing_rename)
    with pytest.raises(OSError, match="No space"):
        with atomic_outputs(tmp_path / "a.npy", tmp_path / "a.ids.txt") as (npy, ids):
            npy.write_bytes(b"new a")
            ids.write_bytes(b"new ids")
    monkeypatch.undo()
    assert str(tmp_path / "a.npy") in map(str, renames)
    assert _snapshot(tmp_path) == before
    assert sorted(os.listdir(tmp_path)) == ["a.ids.txt", "a.npy"]


def test_atomic_outputs_refuse_a_target_left_unwritten(tmp_path):
    (tmp_path / "b.txt").write_bytes(b"old")
    with pytest.raises(RuntimeError, match="nothing was written"):
        with atomic_outputs(tmp_path / "a.txt", tmp_path / "b.txt") as (a, _):
            a.write_bytes(b"new")
    assert _snapshot(tmp_path) == {"b.txt": b"old"}


def _modes(root):
    modes = {}
    for directory, subdirectories, file_names in os.walk(root):
        for name in subdirectories + file_names:
            path = os.path.join(directory, name)
            modes[os.path.relpath(path, root)] = (os.path.isdir(path), os.stat(path).st_mode & 0o777)
    return modes


@pytest.mark.large
@pytest.mark.slow
def test_everything_written_respects_the_umask(tmp_path, tiny_st_dir):
    """Models, indexes, exports, embeddings and training outputs: 0755 directories, 0644 files.

    The commands run in a process of their own under umask 022 (the umask is process-wide).
    """
    import json
    import subprocess
    import sys

    corpus = tmp_path / "in" / "corpus.jsonl"
    corpus.parent.mkdir()
    corpus.write_text("".join(json.dumps({"_id": str(i), "text": f"wing lift {i}"}) + "\n" for i in range(20)))
    triples = tmp_path / "in" / "triples.jsonl"
    triples.write_text(
        "".join(
            json.dumps({"query": f"q {i}", "positive": f"wing {i}", "negatives": [f"lift {i}"]}) + "\n"
            for i in range(8)
        )
    )
    out = tmp_path / "out"
    commands = [
        ["convert", tiny_st_dir, str(out / "model")],
        ["encode", "--model", str(out / "model"), "--input", str(corpus), "--output", str(out / "embeddings.npy")],
        ["index", "--model", str(out / "model"), "--corpus", str(corpus), "--out", str(out / "index")],
        [
            "export",
            "--model",
            str(out / "model"),
            "--index",
            str(out / "index"),
            "--searcher",
            "brute-force",
            "--out",
            str(out / "export"),
        ],
        [
            "train",
            "--init",
            str(out / "model"),
            "--data",
            str(triples),
            "--steps",
            "2",
            "--batch-size",
            "4",
            "--checkpoint-every",
            "1",
            "--output-dir",
            str(out / "run"),
        ],
    ]
    script = (
        "import os, sys, json\nos.umask(0o022)\nfrom gtr_keras.cli.main import main\n"
        "for command in json.loads(sys.argv[1]):\n    assert main(command) == 0, command\n"
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-c", script, json.dumps(commands)], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    modes = _modes(out)
    assert len(modes) > 40 and any(path.startswith("run/checkpoints/") for path in modes)
    wrong = {path: oct(mode) for path, (is_dir, mode) in modes.items() if mode != (0o755 if is_dir else 0o644)}
    assert not wrong


def test_outputs_on_ram_filesystem_replace_together_and_survive_a_failure():
    root = "ram://test_files/outputs"
    with atomic_outputs(f"{root}/emb.npy", f"{root}/index") as (npy, index):
        np.save(npy, np.arange(3))
        index.mkdir()
        (index / "sub").mkdir()
        (index / "sub" / "ids.txt").write_text("a\n")
    assert files.glob(f"{root}/*") == [f"{root}/emb.npy", f"{root}/index"]
    assert files.read_bytes(f"{root}/index/sub/ids.txt") == b"a\n"
    with pytest.raises(RuntimeError):
        with atomic_file(f"{root}/emb.npy") as f:
            f.write(b"half")
            raise RuntimeError
    with files.open(f"{root}/emb.npy") as f:
        np.testing.assert_array_equal(np.load(f), np.arange(3))
    with files.local_copy(f"{root}/index") as local:
        assert open(os.path.join(local, "sub", "ids.txt")).read() == "a\n"


def test_a_file_path_keeps_its_scheme_where_pathlib_would_not():
    path = files.FilePath("gs://bucket/ids.txt")
    assert os.fspath(path) == "gs://bucket/ids.txt" and isinstance(path, os.PathLike)
    assert os.fspath(pathlib.Path("gs://bucket/ids.txt")) == "gs:/bucket/ids.txt"
    with files.open("ram://test_files/ids.txt", "w") as f:
        f.write("d1\n")
    assert files.read_bytes(files.FilePath("ram://test_files/ids.txt")) == b"d1\n"


def test_a_directory_on_another_file_system_is_replaced_only_when_of_the_kind_written():
    root = "ram://test_files/kinds"
    with atomic_directory(f"{root}/out") as staging:
        (staging / "old.txt").write_text("old")
    with atomic_directory(f"{root}/out", [OLD]) as staging:
        (staging / "new.txt").write_text("new")
    assert files.listdir(f"{root}/out") == ["checksums.json", "new.txt"]
    with files.open(f"{root}/out/notes.txt", "wb") as f:
        f.write(b"mine")
    with pytest.raises(DataError, match=f"{root}/out: not replaced, it holds notes.txt"):
        with atomic_directory(f"{root}/out", [OLD]):
            raise AssertionError("the check comes before the block")
    assert files.read_bytes(f"{root}/out/notes.txt") == b"mine"


def test_unknown_scheme_and_missing_file_are_data_errors_naming_the_path():
    from gtr_keras.errors import DataError

    with pytest.raises(DataError, match=r"^foo://bucket/x: TensorFlow has no file system for foo://"):
        files.exists("foo://bucket/x")
    with pytest.raises(DataError, match=r"^ram://test_files/none: no such file or directory$"):
        files.read_bytes("ram://test_files/none")
    with pytest.raises(DataError, match="foo://b/out.npy: TensorFlow has no file system"):
        with atomic_file("foo://b/out.npy") as f:
            f.write(b"x")


def test_an_output_at_the_root_of_another_file_system_leaves_no_local_folder(tmp_path, monkeypatch, tiny_encoder):
    import gtr_keras

    monkeypatch.chdir(tmp_path)
    gtr_keras.save(tiny_encoder, "ram://saved-at-the-root")
    with atomic_file("ram://a-file-at-the-root") as f:
        f.write(b"x")
    assert list(tmp_path.iterdir()) == []  # no "ram:" folder made for the parent "ram:/"
    assert gtr_keras.load("ram://saved-at-the-root").encode_queries(["a"]).shape == (1, 64)


def test_the_temporary_directory_of_a_killed_run_is_removed_by_the_next_and_one_in_use_never(tmp_path, monkeypatch):
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    from gtr_keras.utils import locks

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    holder = (
        "import sys, time\nfrom gtr_keras.utils import files\n"
        "with files.temporary_directory('gtr-keras-staging-') as d:\n"
        "    open(d + '/staged', 'w').write('x')\n    print(d, flush=True)\n    time.sleep(120)\n"
    )
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": os.pathsep.join(sys.path)}
    children = [
        subprocess.Popen([sys.executable, "-c", holder], env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 60
        while len(list(scratch.glob("gtr-keras-staging-*/staged"))) < 2:
            assert time.monotonic() < deadline and all(child.poll() is None for child in children)
            time.sleep(0.05)
        killed, alive = (child.stdout.readline().strip() for child in children)
        children[0].send_signal(signal.SIGKILL)
        children[0].wait(timeout=30)
        assert os.path.exists(f"{killed}/staged")
        with locks.output_lock(tmp_path / "out"):  # the next run of a command writing an output
            assert not os.path.exists(killed) and not os.path.exists(f"{killed}.owner")
            assert os.path.exists(f"{alive}/staged") and os.path.exists(f"{alive}.owner")
    finally:
        for child in children:
            child.kill()
            child.wait(timeout=30)
    with files.temporary_directory("gtr-keras-staging-") as mine:
        assert sorted(os.listdir(scratch)) == [os.path.basename(mine), os.path.basename(mine) + ".owner"]
    with atomic_file(tmp_path / "local.txt") as f:  # a local output stages beside its target, not here
        f.write(b"x")
        assert os.listdir(scratch) == []


def test_replace_file_never_leaves_the_path_absent(tmp_path, monkeypatch):
    path = tmp_path / "segments.json"
    files.replace_file(path, b"one")
    seen = []
    real_replace = os.rename

    def replace(source, target):
        seen.append(path.read_bytes())  # the old contents stay in place until the one rename
        real_replace(source, target)

    monkeypatch.setattr(os, "rename", replace)
    files.replace_file(path, b"two")
    assert seen == [b"one"] and path.read_bytes() == b"two" and os.listdir(tmp_path) == ["segments.json"]
    files.replace_file("ram://replaced/segments.json", b"three")
    files.replace_file("ram://replaced/segments.json", b"four")
    assert files.read_bytes("ram://replaced/segments.json") == b"four"
