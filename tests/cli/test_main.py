"""The `gtr-keras` entry and its error path, without running the sub-commands' work."""

import ast
import subprocess
import sys
import tomllib

import pytest
from command_line import empty_model_dir, one_line_error
from conftest import REPO

from gtr_keras.cli.commands import COMMANDS
from gtr_keras.cli.main import main
from gtr_keras.cli.parser import build_parser

SUBCOMMANDS = [name for name in build_parser().commands if name != "saved-model-cli"]


def _encode_one_text(tmp_path):
    """The arguments of `encode` of a one-line text file with an (empty) model directory."""
    (tmp_path / "x.txt").write_text("a\n")
    return [
        "encode",
        "--model",
        empty_model_dir(tmp_path),
        "--input",
        str(tmp_path / "x.txt"),
        "--output",
        str(tmp_path / "o.npy"),
    ]


def test_help_answers_without_importing_tensorflow_or_the_library():
    code = (
        "import sys, gtr_keras.cli.main\n"
        f"for argv in [['--help']] + [[name, '--help'] for name in {SUBCOMMANDS!r}]:\n"
        "    try:\n"
        "        gtr_keras.cli.main.main(argv)\n"
        "    except SystemExit as exit_:\n"
        "        assert exit_.code == 0, argv\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'gtr_keras')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    # The command line, the plumbing of files (no TensorFlow: it is imported on first use), the formats' table,
    # the loaders of other model formats that `import gtr_keras` registers (their converters are not imported),
    # and the parser of engine targets (`--to`, `--index`; it imports nothing more).
    assert [name for name in loaded if not name.startswith(("gtr_keras.cli.", "gtr_keras.utils"))] == [
        "gtr_keras",
        "gtr_keras.cli",
        "gtr_keras.convert",
        "gtr_keras.convert.preset_loader",
        "gtr_keras.engines",
        "gtr_keras.engines.targets",
        "gtr_keras.errors",
        "gtr_keras.exports",
        "gtr_keras.exports.export_formats",
        "gtr_keras.models",
        "gtr_keras.models.model_files",
        "gtr_keras.models.model_files.model_formats",
    ]
    assert {f"gtr_keras.cli.commands.{name}" for name in COMMANDS} <= set(loaded)
    assert "usage: gtr-keras train" in result.stdout
    assert "tensorflow" not in result.stderr.lower()


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["encode", "--model", "m", "--input", "x.txt", "--output", "o.npy", "--batch-size", "-1"], "--batch-size"),
        (["encode", "--model", "m", "--input", "x.txt", "--output", "o.npy", "--batch-size", "0"], "--batch-size"),
        (["encode", "--model", "m", "--input", "no-such.txt", "--output", "o.npy"], "--input"),
        (["encode", "--model", "m", "--input", "x.txt", "--output", "o.txt"], "--output"),
        (["encode", "--model", "m", "--input", "x.txt", "--output", "blocker/o.npy"], "--output"),
        (["encode", "--model", "m", "--input", "x.txt", "--output", "o.npy", "--precision", "fp8"], "--precision"),
        (["encode", "--model", "m", "--input", "x.txt", "--output", "o.npy", "--query-length", "1"], "--query-length"),
        (["search", "q", "--index", ".", "--model", "m"], "--index"),
        (["search", "q", "--index", "no-such", "--model", "m", "-k", "0"], "-k"),
        (["index", "--model", "m", "--corpus", "x.txt", "--out", "blocker"], "--out"),
        (["index", "--model", "m", "--corpus", "x.txt", "--out", "i", "--piece-size", "0"], "--piece-size"),
        (["evaluate", "--dataset", "no-such-dir"], "--dataset"),
        (["evaluate", "--dataset", "."], "--model"),
        (["evaluate", "--dataset", ".", "--run-out", "."], "--run-out"),
        (["mine", "--model", "m", "--dataset", ".", "--out", "n.jsonl", "--depth", "0"], "--depth"),
        (["convert", "src", "blocker"], "out_dir"),
        (["train", "--steps", "0"], "--steps"),
        (["train", "--strategy", "gpu"], "--strategy"),
        (["train", "--precision", "float16"], "--precision"),
        (["train", "--data-format", "csv"], "--data-format"),
        (["train", "--learning-rate", "0"], "--learning-rate"),
        (["train", "--train-fraction", "1.5"], "--train-fraction"),
        (["train", "--data", "no-such.jsonl"], "--data"),
        (["export", "--model", "m", "--out", "e", "--version", "0"], "--version"),
        (["analyze-lengths", "--run", "no-such.run", "--dataset", "."], "--run"),
    ],
)
def test_bad_flag_is_exit_2_and_one_line_naming_it(tmp_path, monkeypatch, capsys, argv, flag):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.txt").write_text("a\n")
    (tmp_path / "blocker").write_text("a file in the way\n")
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    line = one_line_error(capsys)
    assert line.startswith(f"gtr-keras {argv[0]}: error: ") and flag in line


def test_user_error_is_exit_2_one_line_and_debug_shows_the_traceback(tmp_path, monkeypatch, capsys):
    from gtr_keras.cli.commands import encode
    from gtr_keras.errors import DataError

    def failing(args):
        raise DataError("corpus.jsonl:3: missing field `text`")

    monkeypatch.setattr(encode, "run", failing)
    assert main(_encode_one_text(tmp_path)) == 2
    assert one_line_error(capsys) == "gtr-keras encode: error: corpus.jsonl:3: missing field `text`"
    with pytest.raises(DataError):
        main([*_encode_one_text(tmp_path), "--debug"])


def test_an_output_held_by_another_run_is_exit_2_and_one_line(tmp_path, monkeypatch, capsys):
    from gtr_keras.cli.commands import encode
    from gtr_keras.errors import BusyError

    def failing(args):
        raise BusyError("o.npy: in use by another gtr-keras run (gtr-keras encode, pid 7 on host)")

    monkeypatch.setattr(encode, "run", failing)
    assert main(_encode_one_text(tmp_path)) == 2
    assert one_line_error(capsys) == (
        "gtr-keras encode: error: o.npy: in use by another gtr-keras run (gtr-keras encode, pid 7 on host)"
    )


def test_a_bug_is_exit_1_with_one_line_pointing_to_debug(tmp_path, monkeypatch, capsys):
    from gtr_keras.cli.commands import encode

    def failing(args):
        raise KeyError("boom")

    monkeypatch.setattr(encode, "run", failing)
    (tmp_path / "x.txt").write_text("a\n")
    assert (
        main(
            [
                "encode",
                "--model",
                empty_model_dir(tmp_path),
                "--input",
                str(tmp_path / "x.txt"),
                "--output",
                str(tmp_path / "o.npy"),
            ]
        )
        == 1
    )
    line = one_line_error(capsys)
    assert "internal error: KeyError" in line and "--debug" in line


@pytest.mark.large
def test_saved_model_cli_help_works():
    result = subprocess.run(
        [sys.executable, "-m", "gtr_keras", "saved-model-cli", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "saved-model-cli" in result.stdout + result.stderr


@pytest.mark.parametrize("model_id", ["hf://org/name", "kaggle://keras/gtr/keras/base", "modelscope://org/name"])
def test_hf_model_ids_are_left_to_the_model_loader(tmp_path, monkeypatch, capsys, model_id):
    import gtr_keras.saving
    from gtr_keras.errors import CheckpointError

    def load(path, **kwargs):
        raise CheckpointError(f"{path}: reached the loader")

    monkeypatch.setattr(gtr_keras.saving, "load_model", load)
    (tmp_path / "x.txt").write_text("a\n")
    argv = ["encode", "--model", model_id, "--input", str(tmp_path / "x.txt"), "--output", str(tmp_path / "o.npy")]
    assert main(argv) == 2
    assert one_line_error(capsys) == f"gtr-keras encode: error: {model_id}: reached the loader"


def test_a_multi_line_user_error_is_printed_on_one_line(tmp_path, monkeypatch, capsys):
    from gtr_keras.cli.commands import convert
    from gtr_keras.errors import CheckpointError

    def failing(args):
        raise CheckpointError("could not download 'org/name' (ConnectError\nAn error happened while trying.)")

    monkeypatch.setattr(convert, "run", failing)
    assert main(["convert", "org/name", str(tmp_path / "out")]) == 2
    assert one_line_error(capsys) == (
        "gtr-keras convert: error: could not download 'org/name' (ConnectError; An error happened while trying.)"
    )


@pytest.mark.parametrize(
    "error, expected",
    [
        (
            "ResourceExhaustedError",
            "out of memory (OOM when allocating tensor with shape[4096,512,768]); lower "
            "--batch-size (or the token budgets)",
        ),
        ("OutOfRangeError", "out/checkpoints/ckpt-2_temp/part-00000: File too large"),
    ],
)
def test_the_machines_limits_are_exit_2_and_one_line_not_a_bug(tmp_path, monkeypatch, capsys, error, expected):
    import tensorflow as tf

    from gtr_keras.cli.commands import encode

    message = {
        "ResourceExhaustedError": "OOM when allocating tensor with shape[4096,512,768] [Op:MatMul]",
        "OutOfRangeError": "{{function_node __wrapped__SaveV2}} out/checkpoints/ckpt-2_temp/part-00000; "
        "File too large [Op:SaveV2]",
    }[error]

    def failing(args):
        raise getattr(tf.errors, error)(None, None, message)

    monkeypatch.setattr(encode, "run", failing)
    assert main(_encode_one_text(tmp_path)) == 2
    assert one_line_error(capsys) == f"gtr-keras encode: error: {expected}"


def test_python_dash_m_gtr_keras_runs_the_command():
    result = subprocess.run(
        [sys.executable, "-m", "gtr_keras", "search", "q", "--index", "no-such-index", "--model", "m"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("gtr-keras search: error: argument --index: no-such-index: no such directory")


def test_the_console_script_names_the_entry():
    with open(f"{REPO}/pyproject.toml", "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    module, _, function = scripts["gtr-keras"].partition(":")
    assert (module, function) == ("gtr_keras.cli.main", "main")
    assert getattr(__import__(module, fromlist=[function]), function) is main


@pytest.mark.large
def test_a_pytorch_checkpoint_without_torch_is_exit_2_naming_the_extra(tmp_path):
    import shutil

    from conftest import TINY_ST

    checkpoint = tmp_path / "bin-only"
    shutil.copytree(TINY_ST, checkpoint, ignore=shutil.ignore_patterns("model.safetensors"))
    (checkpoint / "pytorch_model.bin").write_bytes(b"not read")
    script = (
        "import sys\nsys.modules['torch'] = None\nfrom gtr_keras.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, "convert", str(checkpoint), str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    error = result.stderr.splitlines()[-1]  # after TensorFlow's start-up lines, which hiding torch brings out
    assert error.startswith("gtr-keras convert: error: ") and "install the [reference] extra" in error, error
    assert not (tmp_path / "out").exists()


def test_a_warning_is_one_line_naming_the_command(tmp_path, tiny_model_dir, capsys, shown_warnings):
    texts = tmp_path / "texts.txt"
    texts.write_bytes(b"wing lift\n\xff broken\n")
    assert main(["encode", "--model", tiny_model_dir, "--input", str(texts), "--output", str(tmp_path / "e.npy")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "invalid UTF-8" in line]
    assert lines and all(line.startswith("gtr-keras encode: warning: ") for line in lines)
