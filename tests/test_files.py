import os

import numpy as np
import pytest

from gtr_keras.files import atomic_directory, atomic_file


def test_atomic_directory_replaces_existing(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with atomic_directory(target) as tmp:
        (tmp / "new.txt").write_text("new")
        assert not (target / "new.txt").exists()
    assert os.listdir(target) == ["new.txt"]
    assert os.listdir(tmp_path) == ["out"]


def test_atomic_directory_keeps_old_on_error(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_directory(target) as tmp:
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
