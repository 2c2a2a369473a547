"""`gtr_keras.cli.commands`: one module a command, each with its flags and its handler, listed once in
`COMMANDS` (docs/architecture.md, "A new command")."""

import inspect
import os

from conftest import REPO

from gtr_keras.cli.commands import COMMANDS
from gtr_keras.cli.parser import build_parser, command_module

FOLDER = os.path.join(REPO, "gtr_keras", "cli", "commands")


def test_the_list_of_commands_is_the_modules_of_the_folder():
    modules = sorted(name[:-3] for name in os.listdir(FOLDER) if name.endswith(".py") and name != "__init__.py")
    assert sorted(COMMANDS) == modules
    assert len(set(COMMANDS)) == len(COMMANDS)


def test_each_command_module_adds_its_parser_and_runs_its_handler():
    for name in COMMANDS:
        module = command_module(name)
        assert list(inspect.signature(module.add_parser).parameters) == ["subparsers", "parents"], name
        assert len(inspect.signature(module.run).parameters) == 1, name
        if hasattr(module, "check"):
            assert list(inspect.signature(module.check).parameters) == ["args", "parser"], name


def test_the_parser_has_the_commands_in_the_order_of_the_list():
    assert list(build_parser().commands) == [name.replace("_", "-") for name in COMMANDS]
