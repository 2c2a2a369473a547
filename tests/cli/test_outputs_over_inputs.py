"""Property: for every command, an output equal to, inside, or containing one of its inputs (or another of
its outputs) is exit 2 before any work; on ram://, an output of a standalone command is refused too."""

import os
import subprocess
import sys

import pytest
from conftest import REPO

from gtr_keras.cli import main as cli
from gtr_keras.cli.parser import build_parser

# Every path argument of every command that writes something: (flag, kind of the value, "input"/"output").
COMMANDS = {
    "convert": [("SOURCE", "dir", "input"), ("OUT", "out-dir", "output")],
    "encode": [("--model", "dir", "input"), ("--input", "file", "input"), ("--output", "out-npy", "output")],
    "index": [("--model", "dir", "input"), ("--corpus", "beir", "input"), ("--out", "out-dir", "output")],
    "evaluate": [
        ("--dataset", "beir", "input"),
        ("--model", "dir", "input"),
        ("--run-out", "out-file", "output"),
        ("--output-json", "out-file", "output"),
    ],
    "mine": [("--model", "dir", "input"), ("--dataset", "beir", "input"), ("--out", "out-file", "output")],
    "export": [("--model", "dir", "input"), ("--index", "index", "input"), ("--out", "out-dir", "output")],
    "train": [
        ("--config", "file", "input"),
        ("--init", "dir", "input"),
        ("--data", "file", "input"),
        ("--tokenizer", "file", "input"),
        ("--negatives-file", "file", "input"),
        ("--validation-data", "beir", "input"),
        ("--output-dir", "out-dir", "output"),
    ],
    "distill": [
        ("--config", "file", "input"),
        ("--teacher", "dir", "input"),
        ("--student", "dir", "input"),
        ("--texts", "file", "input"),
        ("--tokenizer", "file", "input"),
        ("--validation-data", "beir", "input"),
        ("--output-dir", "out-dir", "output"),
    ],
    "demo": [("--model", "dir", "input"), ("--dataset", "beir", "input"), ("--out", "out-dir", "output")],
}
SUFFIX = {"out-npy": ".npy", "out-file": ".out", "out-dir": "", "file": ".txt"}


def make_input(root, number, kind):
    """An input of `kind` in a folder of its own (so that the folder contains it and nothing else)."""
    folder = root / f"input{number}"
    folder.mkdir()
    if kind == "file":
        path = folder / "file.txt"
        path.write_text("text\n")
    elif kind in ("dir", "beir", "index"):
        path = folder / kind
        (path / "qrels").mkdir(parents=True)
        for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv", "config.json", "retriever.json"):
            (path / name).write_text("{}\n")
    return str(path)


def argv_for(command, root, output_path=None, output_flag=None):
    argv, positional = [command], []
    for number, (flag, kind, role) in enumerate(COMMANDS[command]):
        if role == "input":
            value = make_input(root, number, kind) if not (root / f"input{number}").exists() else None
            value = value or next(str(p) for p in (root / f"input{number}").iterdir())
        else:
            value = output_path if flag == output_flag else str(root / f"output{number}{SUFFIX[kind]}")
        if flag.isupper():
            positional.append(value)
        else:
            argv += [flag, value]
    if command == "evaluate":
        argv += ["--retriever", "gtr"]
    return argv + positional


def cases():
    for command, arguments in COMMANDS.items():
        outputs = [(flag, kind) for flag, kind, role in arguments if role == "output"]
        for number, (flag, kind, role) in enumerate(arguments):
            for output_flag, output_kind in outputs:
                if output_flag == flag:
                    continue
                relations = ("equal", "inside", "containing") if role == "input" else ("equal",)
                for relation in relations:
                    if relation == "inside" and kind == "file":
                        continue  # nothing lies inside a file
                    yield pytest.param(
                        command,
                        number,
                        output_flag,
                        output_kind,
                        relation,
                        id=f"{command}-{output_flag}-{relation}-{flag}",
                    )


@pytest.mark.parametrize("command, number, output_flag, output_kind, relation", list(cases()))
def test_an_output_over_an_input_is_exit_2_before_any_work(
    tmp_path, monkeypatch, capsys, command, number, output_flag, output_kind, relation
):
    monkeypatch.setattr(cli, "_run", lambda *args: pytest.fail("the command started its work"))
    argv_for(command, tmp_path)  # makes the inputs
    flag, kind, role = COMMANDS[command][number]
    if role == "input":
        given = next(str(p) for p in (tmp_path / f"input{number}").iterdir())
    else:
        given = str(tmp_path / f"output{number}{SUFFIX[kind]}")
    path = {
        "equal": given,
        "inside": os.path.join(given, "sub" + SUFFIX.get(output_kind, "")),
        "containing": os.path.dirname(given),
    }[relation]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv_for(command, tmp_path, path, output_flag))
    assert exit_.value.code == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and error.startswith(f"gtr-keras {command}: error: argument")
    if passes_its_type(command, output_flag, path):  # else its type refused it first, as the message says
        assert f" overlaps {'input' if role == 'input' else 'output'} " in error, error


def passes_its_type(command, flag, path):
    action = next(
        a
        for a in build_parser().commands[command]._actions
        if (a.option_strings and a.option_strings[0] == flag) or (flag.isupper() and a.dest == "out_dir")
    )
    try:
        action.type(path)
    except Exception:  # argparse.ArgumentTypeError
        return False
    return True


def test_encode_refuses_an_input_that_its_ids_file_would_replace(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "_run", lambda *args: pytest.fail("the command started its work"))
    (tmp_path / "e.ids.txt").write_text("text\n")
    (tmp_path / "m").mkdir()
    with pytest.raises(SystemExit):
        cli.main(
            [
                "encode",
                "--model",
                str(tmp_path / "m"),
                "--input",
                str(tmp_path / "e.ids.txt"),
                "--output",
                str(tmp_path / "e.npy"),
            ]
        )
    assert f"argument --output: {tmp_path / 'e.ids.txt'} overlaps input --input" in capsys.readouterr().err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_same_arguments_without_overlap_pass_the_check(tmp_path, monkeypatch, command):
    reached = []
    monkeypatch.setattr(cli, "_run", lambda *args: reached.append(True) or 0)
    assert cli.main(argv_for(command, tmp_path)) == 0
    assert reached == [True]


def test_a_ram_output_of_a_standalone_command_is_refused(tmp_path):
    (tmp_path / "t.txt").write_text("a\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gtr_keras",
            "encode",
            "--model",
            "gtr_small_distilled_en",
            "--input",
            str(tmp_path / "t.txt"),
            "--output",
            "ram://e.npy",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(
        "gtr-keras encode: error: argument --output: ram://e.npy: ram:// lives inside one process only"
    )
