"""No command replaces or deletes a directory it did not write: a folder of the user's where an output goes is
exit 2 and one line naming it and a file in it, before the model loads, and is left as it was."""

import json

import pytest
from conftest import TINY_ST

from gtr_keras.cli.main import main


def _users_folder(path):
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("mine")
    return path


def _refused(capsys, path, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"{path}: not replaced, it holds notes.txt" in err and "choose another output directory" in err, err
    assert (path / "notes.txt").read_text() == "mine"


@pytest.fixture
def no_model_loads(monkeypatch):
    """The model loaders fail the test: the refusal comes first."""
    from gtr_keras import saving
    from gtr_keras.cli.helpers import demo_steps

    def load(*args, **kwargs):
        raise AssertionError("the model was loaded before the output was checked")

    for name in ("load_model", "convert_sentence_transformers"):
        monkeypatch.setattr(saving, name, load)
    monkeypatch.setattr(demo_steps, "load_model", load)


def test_convert_to_sentence_transformers_keeps_a_users_folder(tmp_path, tiny_model_dir, capsys, no_model_loads):
    out = _users_folder(tmp_path / "userdir")
    _refused(capsys, out, ["convert", "--to", "sentence-transformers", tiny_model_dir, str(out)])


def test_convert_keeps_a_users_folder(tmp_path, capsys, no_model_loads):
    out = _users_folder(tmp_path / "userdir")
    _refused(capsys, out, ["convert", TINY_ST, str(out)])


def test_a_model_directory_with_a_stranger_inside_is_kept_whole(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "model"
    assert main(["convert", TINY_ST, str(out)]) == 0
    assert main(["convert", TINY_ST, str(out)]) == 0  # an earlier output is replaced
    (out / "notes.txt").write_text("mine")
    _refused(capsys, out, ["convert", TINY_ST, str(out)])
    st = tmp_path / "st"
    assert main(["convert", "--to", "sentence-transformers", tiny_model_dir, str(st)]) == 0
    assert main(["convert", "--to", "sentence-transformers", tiny_model_dir, str(st)]) == 0
    (st / "notes.txt").write_text("mine")
    _refused(capsys, st, ["convert", "--to", "sentence-transformers", tiny_model_dir, str(st)])


def test_index_keeps_a_users_folder_at_out_and_at_its_work_directory(tmp_path, tiny_model_dir, capsys, no_model_loads):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "d1", "title": "", "text": "lift"}) + "\n")
    out = _users_folder(tmp_path / "index")
    _refused(capsys, out, ["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(out)])
    work = _users_folder(tmp_path / "other.partial")
    _refused(
        capsys, work, ["index", "--model", tiny_model_dir, "--corpus", str(corpus), "--out", str(tmp_path / "other")]
    )
    beam = _users_folder(tmp_path / "third.partial-beam")
    _refused(
        capsys,
        beam,
        [
            "index",
            "--model",
            tiny_model_dir,
            "--corpus",
            str(corpus),
            "--runner",
            "DirectRunner",
            "--out",
            str(tmp_path / "third"),
        ],
    )
    assert not (tmp_path / "other").exists() and not (tmp_path / "third").exists()


def test_export_keeps_a_users_folder_at_a_version_directory(tmp_path, tiny_model_dir, capsys, no_model_loads):
    version = _users_folder(tmp_path / "exports" / "encoder" / "1")
    argv = ["export", "--model", tiny_model_dir, "--out", str(tmp_path / "exports"), "--version", "1"]
    _refused(capsys, version, argv)


def test_demo_keeps_a_users_folder_where_its_index_goes(tmp_path, capsys, no_model_loads):
    index = _users_folder(tmp_path / "demo" / "index")
    _refused(capsys, index, ["demo", "--out", str(tmp_path / "demo")])


def test_train_keeps_a_users_folder_where_its_model_goes(tmp_path, capsys, monkeypatch):
    from gtr_keras.training import loop

    monkeypatch.setattr(loop, "train", lambda config: pytest.fail("the run started before the output was checked"))
    model = _users_folder(tmp_path / "run" / "model")
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"query": "q", "positive": "p"}) + "\n")
    _refused(capsys, model, ["train", "--init", "gtr-tiny", "--data", str(data), "--output-dir", str(tmp_path / "run")])
