"""The checks across arguments and of remote paths: a bad path is exit 2 and one line before any work."""

import subprocess
import sys

import numpy as np
import pytest
from command_line import empty_model_dir, one_line_error
from conftest import REPO

from gtr_keras.cli.main import main


@pytest.fixture
def no_model_loading(monkeypatch):
    """Makes loading a model fail the test: a bad path must be refused before."""
    import gtr_keras.saving

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(gtr_keras.saving, "load_model", refuse)


@pytest.mark.parametrize(
    "argv, flag, path",
    [
        (["encode", "--model", "m", "--input", "foo://x/in.txt", "--output", "o.npy"], "--input", "foo://x/in.txt"),
        (["encode", "--model", "m", "--input", "x.txt", "--output", "foo://x/o.npy"], "--output", "foo://x/o.npy"),
        (["encode", "--model", "foo://x/model", "--input", "x.txt", "--output", "o.npy"], "--model", "foo://x/model"),
        (
            ["evaluate", "--dataset", ".", "--retriever", "bm25", "--run-out", "foo://x/run.trec"],
            "--run-out",
            "foo://x/run.trec",
        ),
        (["search", "q", "--index", "foo://x/index", "--model", "m"], "--index", "foo://x/index"),
        (["train", "--data", "foo://x/train.jsonl"], "--data", "foo://x/train.jsonl"),
    ],
)
def test_unknown_scheme_is_exit_2_naming_the_path_before_any_work(
    tmp_path, monkeypatch, capsys, no_model_loading, argv, flag, path
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.txt").write_text("a\n")
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    line = one_line_error(capsys)
    assert line.startswith(
        f"gtr-keras {argv[0]}: error: argument {flag}: {path}: TensorFlow has no file system for foo://"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.txt"]


def test_remote_paths_are_checked_like_local_ones(tmp_path, capsys, no_model_loading):
    import uuid

    from gtr_keras.utils import files

    root = f"ram://cli-checks/{uuid.uuid4().hex}"
    with files.atomic_file(f"{root}/not-an-index/notes.txt") as f:
        f.write(b"x\n")
    (tmp_path / "x.txt").write_text("a\n")
    cases = [
        (
            ["encode", "--model", "m", "--input", f"{root}/nowhere.txt", "--output", str(tmp_path / "o.npy")],
            f"argument --input: {root}/nowhere.txt: no such file",
        ),
        (
            ["encode", "--model", "m", "--input", f"{root}/not-an-index", "--output", str(tmp_path / "o.npy")],
            f"argument --input: {root}/not-an-index: is a directory, expected a file",
        ),
        (
            [
                "encode",
                "--model",
                f"{root}/no-model",
                "--input",
                str(tmp_path / "x.txt"),
                "--output",
                str(tmp_path / "o.npy"),
            ],
            f"argument --model: {root}/no-model: no such model directory",
        ),
        (
            [
                "encode",
                "--model",
                empty_model_dir(tmp_path),
                "--input",
                str(tmp_path / "x.txt"),
                "--output",
                f"{root}/not-an-index",
            ],
            f"argument --output: {root}/not-an-index: must end with .npy",
        ),
        (
            ["search", "q", "--index", f"{root}/not-an-index", "--model", "m"],
            f"argument --index: {root}/not-an-index: not an index directory (no retriever.json)",
        ),
        (
            ["evaluate", "--dataset", f"{root}/not-an-index/notes.txt", "--retriever", "bm25"],
            f"argument --dataset: {root}/not-an-index/notes.txt: is a file, expected a directory",
        ),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2, argv
        assert message in one_line_error(capsys), argv


def test_index_runner_without_apache_beam_is_exit_2_naming_the_extra(tmp_path):
    (tmp_path / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n')
    (tmp_path / "model").mkdir()
    script = (
        "import sys\nsys.modules['apache_beam'] = None\nfrom gtr_keras.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "index",
            "--model",
            str(tmp_path / "model"),
            "--corpus",
            str(tmp_path / "corpus.jsonl"),
            "--out",
            str(tmp_path / "index"),
            "--runner",
            "DirectRunner",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "gtr-keras index: error: argument --runner: needs Apache Beam: pip install 'gtr-keras[beam]' "
        "(see `gtr-keras index --help`)"
    ]
    assert not (tmp_path / "index").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--quantize", "int8"], "argument --quantize: applies to --format onnx, not savedmodel"),
        (["--format", "openvino", "--quantize", "int8"], "argument --quantize: applies to --format onnx, not openvino"),
        (["--format", "onnx", "--index", "INDEX"], "argument --index: the searcher is a SavedModel"),
        (["--format", "onnx", "--precision", "bfloat16"], "argument --precision: --format onnx exports float32"),
        (["--format", "litert", "--version", "2"], "argument --version: TF Serving's version directories"),
    ],
)
def test_export_format_combinations_are_exit_2_before_the_model_loads(
    extra, message, tmp_path, capsys, no_model_loading
):
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "retriever.json").write_text("{}")
    extra = [str(tmp_path / "index") if value == "INDEX" else value for value in extra]
    with pytest.raises(SystemExit) as exit_:
        main(["export", "--model", empty_model_dir(tmp_path), "--out", str(tmp_path / "out"), *extra])
    assert exit_.value.code == 2
    assert message in one_line_error(capsys)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["search", "q", "--index", "INDEX", "--fusion", "rrf"],
            "argument --fusion: fuses --retriever hybrid, not gtr",
        ),
        (
            ["evaluate", "--dataset", "INDEX", "--retriever", "bm25", "--gtr-weight", "0.3"],
            "argument --gtr-weight: fuses --retriever hybrid, not bm25",
        ),
        (
            ["update", "INDEX", "--delete", "IDS", "--bm25-corpus", "IDS"],
            "argument --metadata-corpus: only with --embeddings",
        ),
    ],
)
def test_flags_that_would_be_ignored_are_exit_2(argv, message, tmp_path, capsys, no_model_loading):
    (tmp_path / "index").mkdir()
    (tmp_path / "index" / "retriever.json").write_text("{}")
    (tmp_path / "ids.txt").write_text("a\n")
    swap = {"INDEX": str(tmp_path / "index"), "IDS": str(tmp_path / "ids.txt")}
    argv = [swap.get(value, value) for value in argv]
    if argv[0] != "index":
        argv += ["--model", empty_model_dir(tmp_path)]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in one_line_error(capsys)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["index", "--embeddings", "{tmp}/e.npy", "--out", "{tmp}/o", "--rescore", "5"],
            "argument --rescore: rescores",
        ),
        (["search", "q", "--index", "{index}", "--retriever", "bm25", "--search-param", "rescore=5"], "--search-param"),
        (["search", "q", "--index", "{index}", "--model", "m", "--search-param", "rescore"], "NAME=VALUE"),
        (
            ["search", "q", "--index", "{index}", "--model", "m", "--search-param", "reorder_factor=0"],
            "argument --search-param: reorder_factor must be a positive int, got 0.",
        ),
        (["export", "--model", "m", "--out", "o", "--search-param", "reorder_factor=5"], "ScaNN searcher of --index"),
        (
            ["export", "--model", "m", "--out", "o", "--index", "{index}", "--searcher", "scann-int8"]
            + ["--search-param", "rescore_factor=2"],
            "argument --search-param: rescore_factor rescores with float32 vectors, which --searcher scann-int8",
        ),
        (
            ["export", "--model", "m", "--out", "o", "--index", "{index}", "--searcher", "brute-force"]
            + ["--allow-large-float32"],
            "argument --allow-large-float32: goes with --index and --searcher scann",
        ),
        (["tune", "--index", "{index}", "--sample", "5", "--queries", "{tmp}/q.npy"], "not allowed with argument"),
        (["tune", "--index", "{index}", "--target-recall", "1.5"], "must be in (0, 1]"),
    ],
)
def test_quantization_and_tuning_flags_are_checked_before_any_work(tmp_path, capsys, no_model_loading, argv, message):
    index = tmp_path / "index"
    index.mkdir()
    (index / "retriever.json").write_text("{}")
    (tmp_path / "q.npy").write_bytes(b"")
    np.save(tmp_path / "e.npy", np.eye(2, dtype=np.float32))
    (tmp_path / "e.ids.txt").write_text("a\nb\n")
    argv = [arg.format(index=index, tmp=tmp_path) for arg in argv]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in one_line_error(capsys)
