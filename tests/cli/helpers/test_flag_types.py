"""The argument types: bounded numbers, and local paths checked for what the flag needs."""

import argparse
import os
import re

import pytest

from gtr_keras.cli.helpers import flag_types


@pytest.mark.parametrize(
    "parse, text, value",
    [
        (flag_types.at_least_one, "3", 3),
        (flag_types.at_least_zero, "0", 0),
        (flag_types.token_budget, "2", 2),
        (flag_types.positive_float, "0.5", 0.5),
        (flag_types.at_least_zero_float, "0", 0.0),
        (flag_types.fraction, "1", 1.0),
    ],
)
def test_a_number_in_range_is_parsed(parse, text, value):
    assert parse(text) == value


@pytest.mark.parametrize(
    "parse, text, message",
    [
        (flag_types.at_least_one, "0", "must be at least 1, got 0"),
        (flag_types.token_budget, "1", "must be at least 2 (one token and EOS), got 1"),
        (flag_types.positive_float, "0", "must be positive, got 0"),
        (flag_types.at_least_zero_float, "-1", "must be at least 0, got -1"),
        (flag_types.fraction, "1.5", "must be in (0, 1], got 1.5"),
    ],
)
def test_a_number_out_of_range_says_the_bound(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
        parse(text)


def test_input_paths_must_exist_and_be_of_their_kind(tmp_path):
    (tmp_path / "f.txt").write_text("a\n")
    assert flag_types.input_file(str(tmp_path / "f.txt")) == str(tmp_path / "f.txt")
    assert flag_types.input_dir(str(tmp_path)) == str(tmp_path)
    for parse, path, message in [
        (flag_types.input_file, tmp_path / "none.txt", "no such file"),
        (flag_types.input_file, tmp_path, "is a directory, expected a file"),
        (flag_types.input_dir, tmp_path / "f.txt", "is a file, expected a directory"),
        (flag_types.index_directory, tmp_path, "not an index directory (no retriever.json)"),
    ]:
        with pytest.raises(argparse.ArgumentTypeError) as error:
            parse(str(path))
        assert message in str(error.value)


def test_output_paths_need_a_writable_parent_and_the_right_kind(tmp_path):
    (tmp_path / "blocker").write_text("a file in the way\n")
    new = str(tmp_path / "new" / "deeper" / "o.txt")
    assert flag_types.output_file(new) == new
    for parse, path, message in [
        (flag_types.output_file, tmp_path, "is a directory, expected a file name"),
        (flag_types.output_dir, tmp_path / "blocker", "exists and is not a directory"),
        (flag_types.output_dir, tmp_path / "blocker" / "sub", "cannot be created"),
        (flag_types.output_path("file", ".npy"), tmp_path / "o.txt", "must end with .npy"),
    ]:
        with pytest.raises(argparse.ArgumentTypeError) as error:
            parse(str(path))
        assert message in str(error.value)


def test_remote_paths_and_globs_are_left_for_later_checks(tmp_path):
    assert flag_types.input_file("gs://bucket/none.txt") == "gs://bucket/none.txt"
    assert flag_types.output_dir("gs://bucket/out") == "gs://bucket/out"
    pattern = os.path.join(str(tmp_path), "corpus-*.jsonl")
    assert flag_types.corpus_source(pattern) == pattern
    assert flag_types.embedding_source(pattern) == pattern
    assert flag_types.corpus_source.path_check == ("input", "path")


def test_the_parser_reports_a_bad_argument_in_one_line(capsys):
    parser = flag_types.Parser(prog="gtr-keras")
    parser.add_argument("--steps", type=flag_types.at_least_one, default=1, help="optimizer steps")
    assert "optimizer steps (default: 1)" in parser.format_help()
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--steps", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "gtr-keras: error: argument --steps: must be at least 1, got 0 (see `gtr-keras --help`)\n"
    )


def test_a_search_param_takes_rescore_factor_0_and_any_other_setting_from_1():
    """`layout.check_search_value`'s one rule: `rescore_factor` 0 turns float32 rescoring off."""
    assert flag_types.search_param("rescore_factor=0") == ("rescore_factor", 0)
    assert flag_types.search_param("num_leaves_to_search=3") == ("num_leaves_to_search", 3)
    for text, message in (
        ("rescore=0", "rescore must be a positive int, got 0."),
        ("rescore_factor=-1", "must be NAME=VALUE with an int VALUE, got 'rescore_factor=-1'"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
            flag_types.search_param(text)
