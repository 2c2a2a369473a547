"""The `gtr-keras` commands, one module each (`analyze-lengths` is `analyze_lengths.py`): its flags
(`add_parser(subparsers, parents)`), its checks of several flags together (`check(args, parser)`, where it has
any) and its handler (`run(args)`, which imports what it needs when it runs: TensorFlow's import waits for a
command that needs it). `COMMANDS` lists them in `gtr-keras --help`'s order: a new command is a module here
and its name there (`tests/cli/test_commands_package.py` holds the two together).
"""

COMMANDS = (
    "convert",
    "encode",
    "index",
    "update",
    "push",
    "search",
    "tune",
    "evaluate",
    "analyze_lengths",
    "train",
    "distill",
    "mine",
    "export",
    "check",
    "serve",
    "demo",
    "saved_model_cli",
)
