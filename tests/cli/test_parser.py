"""The `gtr-keras` parser: every sub-command and flag is described, with its default."""

import argparse

import pytest

from gtr_keras.cli.parser import build_parser

SUBCOMMANDS = [name for name in build_parser().commands if name != "saved-model-cli"]


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_flag_has_help_that_states_its_default(name):
    parser = build_parser().commands[name]
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
