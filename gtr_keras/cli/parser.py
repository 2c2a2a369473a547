"""The `gtr-keras` argument parser: each command's flags come from its module of `gtr_keras.cli.commands`
(`add_parser`), in the order of `COMMANDS`; flags several commands share are `cli.helpers.shared_flags`' and
`cli.helpers.train_flags`'.
"""

import argparse
import importlib

from gtr_keras.cli.commands import COMMANDS
from gtr_keras.cli.helpers.flag_types import PROG, Parser


def command_module(command):
    """The module of `gtr_keras.cli.commands` that holds `command` (`"analyze-lengths"`: `analyze_lengths`).

    Example:
    >>> command_module("analyze-lengths").__name__
    'gtr_keras.cli.commands.analyze_lengths'
    """
    return importlib.import_module(f"gtr_keras.cli.commands.{command.replace('-', '_')}")


def build_parser():
    """The `gtr-keras` argument parser; `parser.commands` maps each sub-command's name to its parser.

    Example:
    >>> build_parser().parse_args(["check", "indexes/scifact"]).command
    'check'
    """
    parser = Parser(
        prog=PROG,
        description="GTR dual-encoder retrieval in Keras 3 on TensorFlow: convert, encode, "
        "index, search, evaluate, train, mine, export.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the traceback of any error")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.commands = subparsers.choices
    for name in COMMANDS:
        command_module(name).add_parser(subparsers, [common])
    return parser
