"""The command line's parser and error path (gtr_keras_cli), without running the sub-commands' work."""

import argparse
import dataclasses
import json
import re
import subprocess
import sys

import pytest

import gtr_keras_cli
from gtr_keras_cli import build_parser, main

SUBCOMMANDS = [name for name in build_parser().commands if name != "saved-model-cli"]


def _subparsers():
    return build_parser().commands


def _model_dir(tmp_path):
    """An (empty) model directory beside the test's other files, never containing them."""
    (tmp_path / "model").mkdir(exist_ok=True)
    return str(tmp_path / "model")


def _one_line_error(capsys):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_help_answers_without_importing_tensorflow_or_the_package():
    code = (
        "import sys, gtr_keras_cli\n"
        f"for argv in [['--help']] + [[name, '--help'] for name in {SUBCOMMANDS!r}]:\n"
        "    try:\n"
        "        gtr_keras_cli.main(argv)\n"
        "    except SystemExit as exit_:\n"
        "        assert exit_.code == 0, argv\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'gtr_keras')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]"
    assert "usage: gtr-keras train" in result.stdout
    assert "tensorflow" not in result.stderr.lower()


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_flag_has_help_that_states_its_default(name):
    parser = _subparsers()[name]
    assert parser.description, f"{name} has no description"
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or not action.option_strings:
            continue
        text = formatter._get_help_string(action)
        assert text, f"{name} {action.option_strings[0]} has no help"
        needs_default = not action.required and action.nargs != 0
        if needs_default:
            assert "default" in text or "required" in text, f"{name} {action.option_strings[0]}: no default in help"


def test_train_and_distill_flag_defaults_in_help_are_the_config_defaults():
    from gtr_keras.training.config import TrainConfig
    from gtr_keras.training.distillation_config import DistillConfig

    checked = 0
    for flags, config_class in ((gtr_keras_cli.TRAIN_FLAGS, TrainConfig),
                                (gtr_keras_cli.DISTILL_FLAGS, DistillConfig)):
        checked += _check_stated_defaults(flags, config_class)
    assert checked >= 30


def _check_stated_defaults(flags, config_class):
    defaults = {f.name: f.default for f in dataclasses.fields(config_class)}
    defaults.update({f"data.{f.name}": f.default for f in dataclasses.fields(config_class.data_class)})
    checked = 0
    for flag, key, _, _, text in flags:
        stated = re.search(r"\(default: ([^)]*)\)", text)
        if "required" in text:
            continue
        assert stated, flag
        value = stated.group(1).split(",")[0].strip()
        default = defaults[key]
        if default is None or isinstance(default, str) and default not in ("float32", "default", "auto", "train"):
            continue
        assert value == str(default), f"{flag}: help says {value}, {config_class.__name__} has {default!r}"
        checked += 1
    return checked


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["encode", "--model", "m", "--input", "x.txt", "--output", "o.npy", "--batch-size", "-1"], "--batch-size"),
        (["encode", "--model", "m", "--input", "x.txt", "--output", "o.npy", "--batch-size", "0"], "--batch-size"),
        (["encode", "--model", "m", "--input", "no-such.txt", "--output", "o.npy"], "--input"),
        (["encode", "--model", "m", "--input", "x.txt", "--output", "o.txt"], "--output"),
        (["encode", "--model", "m", "--input", "x.txt", "--output", "blocker/o.npy"], "--output"),
        (["encode", "--model", "m", "--input", "x.txt", "--output", "o.npy", "--precision", "fp8"], "--precision"),
        (["encode", "--model", "m", "--input", "x.txt", "--output", "o.npy", "--query-length", "1"],
         "--query-length"),
        (["search", "q", "--index", ".", "--model", "m"], "--index"),
        (["search", "q", "--index", "no-such", "--model", "m", "-k", "0"], "-k"),
        (["index", "--model", "m", "--corpus", "x.txt", "--out", "blocker"], "--out"),
        (["index", "--model", "m", "--corpus", "x.txt", "--out", "i", "--shard-size", "0"], "--shard-size"),
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
    line = _one_line_error(capsys)
    assert line.startswith(f"gtr-keras {argv[0]}: error: ") and flag in line


def test_user_error_is_exit_2_one_line_and_debug_shows_the_traceback(tmp_path, monkeypatch, capsys):
    from gtr_keras.cli import commands
    from gtr_keras.errors import DataError

    def failing(args):
        raise DataError("corpus.jsonl:3: missing field `text`")

    monkeypatch.setattr(commands, "encode", failing)
    (tmp_path / "x.txt").write_text("a\n")
    argv = ["encode", "--model", _model_dir(tmp_path), "--input", str(tmp_path / "x.txt"), "--output", str(tmp_path / "o.npy")]
    assert main(argv) == 2
    assert _one_line_error(capsys) == "gtr-keras encode: error: corpus.jsonl:3: missing field `text`"
    with pytest.raises(DataError):
        main([*argv, "--debug"])


def test_a_bug_is_exit_1_with_one_line_pointing_to_debug(tmp_path, monkeypatch, capsys):
    from gtr_keras.cli import commands

    def failing(args):
        raise KeyError("boom")

    monkeypatch.setattr(commands, "encode", failing)
    (tmp_path / "x.txt").write_text("a\n")
    assert main(["encode", "--model", _model_dir(tmp_path), "--input", str(tmp_path / "x.txt"), "--output",
                 str(tmp_path / "o.npy")]) == 1
    line = _one_line_error(capsys)
    assert "internal error: KeyError" in line and "--debug" in line


def test_train_flags_override_the_config_file(tmp_path):
    from gtr_keras.cli.commands import config_from_args

    (tmp_path / "t.tsv").write_text("q\tp\tn\n")
    path = tmp_path / "train.json"
    path.write_text(json.dumps({"init": "gtr-base", "output_dir": "out", "data": {"source": "t.tsv"}}))
    parser = build_parser()
    args = parser.parse_args(["train", "--config", str(path), "--steps", "9", "--num-negatives", "0",
                              "--precision", "bfloat16", "--no-mask-false-negatives"])
    config = config_from_args(args)
    assert (config.init, config.steps, config.precision) == ("gtr-base", 9, "bfloat16")
    assert config.data.num_negatives == 0
    assert config.data.source == "t.tsv" and config.mask_false_negatives is False
    data = str(tmp_path / "t.tsv")
    config = config_from_args(parser.parse_args(["train", "--init", "gtr-tiny", "--output-dir", "o", "--data", data]))
    assert (config.init, config.output_dir, config.data.source) == ("gtr-tiny", "o", data)
    assert config.batch_size == 128


@pytest.mark.large
def test_saved_model_cli_help_works():
    result = subprocess.run([sys.executable, "-m", "gtr_keras_cli", "saved-model-cli", "--help"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "saved-model-cli" in result.stdout + result.stderr


@pytest.fixture
def no_model_loading(monkeypatch):
    """Makes loading a model fail the test: a bad path must be refused before."""
    import gtr_keras.models.gtr.saving

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(gtr_keras.models.gtr.saving, "load", refuse)


@pytest.mark.parametrize(
    "argv, flag, path",
    [
        (["encode", "--model", "m", "--input", "foo://x/in.txt", "--output", "o.npy"], "--input", "foo://x/in.txt"),
        (["encode", "--model", "m", "--input", "x.txt", "--output", "foo://x/o.npy"], "--output", "foo://x/o.npy"),
        (["encode", "--model", "foo://x/model", "--input", "x.txt", "--output", "o.npy"], "--model", "foo://x/model"),
        (["evaluate", "--dataset", ".", "--retriever", "bm25", "--run-out", "foo://x/run.trec"], "--run-out",
         "foo://x/run.trec"),
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
    line = _one_line_error(capsys)
    assert line.startswith(f"gtr-keras {argv[0]}: error: argument {flag}: {path}: TensorFlow has no file system "
                           "for foo://")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.txt"]


def test_remote_paths_are_checked_like_local_ones(tmp_path, capsys, no_model_loading):
    import uuid

    from gtr_keras.utils import files

    root = f"ram://cli-checks/{uuid.uuid4().hex}"
    with files.atomic_file(f"{root}/not-an-index/notes.txt") as f:
        f.write(b"x\n")
    (tmp_path / "x.txt").write_text("a\n")
    cases = [
        (["encode", "--model", "m", "--input", f"{root}/nowhere.txt", "--output", str(tmp_path / "o.npy")],
         f"argument --input: {root}/nowhere.txt: no such file"),
        (["encode", "--model", "m", "--input", f"{root}/not-an-index", "--output", str(tmp_path / "o.npy")],
         f"argument --input: {root}/not-an-index: is a directory, expected a file"),
        (["encode", "--model", f"{root}/no-model", "--input", str(tmp_path / "x.txt"), "--output",
          str(tmp_path / "o.npy")], f"argument --model: {root}/no-model: no such model directory"),
        (["encode", "--model", _model_dir(tmp_path), "--input", str(tmp_path / "x.txt"), "--output", f"{root}/not-an-index"],
         f"argument --output: {root}/not-an-index: must end with .npy"),
        (["search", "q", "--index", f"{root}/not-an-index", "--model", "m"],
         f"argument --index: {root}/not-an-index: not an index directory (no retriever.json)"),
        (["evaluate", "--dataset", f"{root}/not-an-index/notes.txt", "--retriever", "bm25"],
         f"argument --dataset: {root}/not-an-index/notes.txt: is a file, expected a directory"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2, argv
        assert message in _one_line_error(capsys), argv


@pytest.mark.parametrize("model_id", ["hf://org/name", "kaggle://keras/gtr/keras/base", "modelscope://org/name"])
def test_hf_model_ids_are_left_to_the_model_loader(tmp_path, monkeypatch, capsys, model_id):
    import gtr_keras.models.gtr.saving
    from gtr_keras.errors import CheckpointError

    def load(path, **kwargs):
        raise CheckpointError(f"{path}: reached the loader")

    monkeypatch.setattr(gtr_keras.models.gtr.saving, "load", load)
    (tmp_path / "x.txt").write_text("a\n")
    argv = ["encode", "--model", model_id, "--input", str(tmp_path / "x.txt"), "--output", str(tmp_path / "o.npy")]
    assert main(argv) == 2
    assert _one_line_error(capsys) == f"gtr-keras encode: error: {model_id}: reached the loader"


def test_a_multi_line_user_error_is_printed_on_one_line(tmp_path, monkeypatch, capsys):
    from gtr_keras.cli import commands
    from gtr_keras.errors import CheckpointError

    def failing(args):
        raise CheckpointError("could not download 'org/name' (ConnectError\nAn error happened while trying.)")

    monkeypatch.setattr(commands, "convert", failing)
    assert main(["convert", "org/name", str(tmp_path / "out")]) == 2
    assert _one_line_error(capsys) == (
        "gtr-keras convert: error: could not download 'org/name' (ConnectError; An error happened while trying.)"
    )


@pytest.mark.parametrize("error, expected", [
    ("ResourceExhaustedError", "out of memory (OOM when allocating tensor with shape[4096,512,768]); lower "
                               "--batch-size (or the token budgets)"),
    ("OutOfRangeError", "out/checkpoints/ckpt-2_temp/part-00000: File too large"),
])
def test_the_machines_limits_are_exit_2_and_one_line_not_a_bug(tmp_path, monkeypatch, capsys, error, expected):
    import tensorflow as tf

    from gtr_keras.cli import commands

    message = {"ResourceExhaustedError": "OOM when allocating tensor with shape[4096,512,768] [Op:MatMul]",
               "OutOfRangeError": "{{function_node __wrapped__SaveV2}} out/checkpoints/ckpt-2_temp/part-00000; "
                                  "File too large [Op:SaveV2]"}[error]

    def failing(args):
        raise getattr(tf.errors, error)(None, None, message)

    monkeypatch.setattr(commands, "encode", failing)
    (tmp_path / "x.txt").write_text("a\n")
    argv = ["encode", "--model", _model_dir(tmp_path), "--input", str(tmp_path / "x.txt"), "--output", str(tmp_path / "o.npy")]
    assert main(argv) == 2
    assert _one_line_error(capsys) == f"gtr-keras encode: error: {expected}"
