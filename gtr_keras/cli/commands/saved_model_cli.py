"""`gtr-keras saved-model-cli`: TensorFlow's saved_model_cli with the TF Text and ScaNN ops registered; `main`
runs it on the raw arguments, before parsing."""

import argparse
import sys


def add_parser(subparsers, parents):
    """Adds `saved-model-cli` to `subparsers` (for `--help`: its arguments pass through to TensorFlow's tool)."""
    return subparsers.add_parser(
        "saved-model-cli",
        help="TensorFlow's saved_model_cli with the TF Text and ScaNN ops loaded",
        description="Runs TensorFlow's saved_model_cli (all its arguments pass through, e.g. `show --dir D --all`) "
        "after loading the TF Text and ScaNN ops that gtr-keras exports use.",
        parents=parents,
    )


def run(argv):
    """TensorFlow's saved_model_cli on `argv`, with the TF Text and ScaNN ops registered; returns its status.

    `--help` (absl would exit 1 and show no sub-command) prints the tool's help and its flags.
    """
    import scann  # noqa: F401
    import tensorflow_text  # noqa: F401
    from absl import flags
    from tensorflow.python.tools import saved_model_cli as tf_saved_model_cli

    prog = "gtr-keras saved-model-cli"
    if "-h" in argv or "--help" in argv:
        parser = tf_saved_model_cli.create_parser()
        parser.prog = prog
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
        command = commands.get(argv[0]) if argv else None
        if command:
            command.prog = f"{prog} {argv[0]}"
        (command or parser).print_help()
        print(f"\nflags:\n{flags.FLAGS.module_help(tf_saved_model_cli.__name__)}")
        return 0
    sys.argv = [prog, *argv]
    try:
        tf_saved_model_cli.main()
    except SystemExit as exit_:
        return exit_.code or 0
    return 0
