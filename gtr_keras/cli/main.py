"""The `gtr-keras` command: parses and checks the arguments, runs the sub-command's handler, reports errors.

The parser and its checks import neither TensorFlow nor Keras, so `--help` and
every mistake in the arguments are answered at once. Each command is a module of
`gtr_keras.cli.commands`: its flags, its checks of several flags (`check`) and its
handler (`run`), which imports what the command needs only when it runs.

Every user error ends the command with exit status 2 and one line naming the
flag, or the file, line and field: argument errors from the parser, the rest
as `gtr_keras.errors.UserError` from the library. So does a
`gtr_keras.errors.RetryLaterError` (an output another run holds). Other exceptions are bugs:
one line and exit status 1, or the traceback with `--debug`. What the library logs
shows as the command's lines while it runs (`console.console_logging`).

Example:
>>> main(["search", "what is a dual encoder?", "--index", "idx", "--model", "gtr_small_distilled_en"])  # doctest: +SKIP
0
"""

import contextlib
import os
import re
import sys
import warnings

from gtr_keras.cli.helpers.console import console_logging
from gtr_keras.cli.helpers.flag_checks import check_extras, check_outputs, check_remote_paths
from gtr_keras.cli.helpers.flag_types import PROG
from gtr_keras.cli.parser import build_parser, command_module


def _resource_problem(error):
    """One line for a TensorFlow error that is the machine's limit rather than a bug (a full disk, a file-size
    limit, memory), naming the file where TensorFlow does; None for anything else."""
    if not type(error).__module__.startswith("tensorflow"):
        return None
    message = _one_line(getattr(error, "message", "") or str(error))
    message = re.sub(r"\s*\[Op:\w+\].*$", "", re.sub(r"\{\{function_node [^}]*\}\}\s*", "", message))
    if type(error).__name__ == "ResourceExhaustedError" and ("OOM" in message or "memory" in message.lower()):
        return f"out of memory ({message[:200]}); lower --batch-size (or the token budgets)"
    if any(limit in message for limit in ("File too large", "No space left on device", "Disk quota exceeded")):
        return message.replace("; ", ": ")
    return None


def _one_line(message):
    """A message on one line: its lines joined with "; " (a library's multi-line error, e.g. huggingface_hub's)."""
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())


def _missing_local_model(path):
    """True for a local model path (one with a path separator or a leading dot) that names no directory:
    found here, without TensorFlow's import. A bare name may be a preset's: the library checks it."""
    local = path.removeprefix("file://")
    return "://" not in local and (os.sep in local or local.startswith(".")) and not os.path.isdir(local)


def _run(args, parser):
    model = getattr(args, "model", None)
    if model and _missing_local_model(model):
        print(f"{PROG} {args.command}: error: {model}: no such model directory", file=sys.stderr)
        return 2
    command = command_module(args.command)
    from gtr_keras.errors import RetryLaterError, UserError

    check_remote_paths(args, parser)
    try:
        # What the command holds from before its model is resolved (the model's stack is imported there).
        first = getattr(command, "before_the_model", lambda args: contextlib.nullcontext())
        with first(args):
            if getattr(args, "model", None):
                from gtr_keras.models.model_files.model_source import resolve_model_source

                # Once, before the handler reads its inputs; the directory's format is read when the model loads.
                args.model = resolve_model_source(args.model, read_format=False)
            with warnings.catch_warnings():
                if not args.debug:  # one line naming the command, as an error is; with --debug, where it arose
                    warnings.showwarning = lambda message, *_, **__: print(
                        f"{PROG} {args.command}: warning: {message}", file=sys.stderr
                    )
                command.run(args)
    except (UserError, RetryLaterError, OSError) as error:
        if args.debug:
            raise
        print(f"{PROG} {args.command}: error: {_one_line(str(error))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # a bug: one line, the traceback with --debug; or the machine's limits
        if args.debug:
            raise
        problem = _resource_problem(error)
        if problem:
            print(f"{PROG} {args.command}: error: {problem}", file=sys.stderr)
            return 2
        first_line = (str(error).strip().splitlines() or [""])[0]
        print(
            f"{PROG} {args.command}: internal error: {type(error).__name__}: {first_line} "
            f"(a bug; rerun with --debug for the traceback and report it)",
            file=sys.stderr,
        )
        return 1
    return 0


def main(argv=None):
    """Runs `gtr-keras` with `argv` (default: `sys.argv[1:]`); returns the exit status."""
    standalone = argv is None  # the command is the process: what it leaves on ram:// dies with it
    argv = sys.argv[1:] if argv is None else list(argv)
    quiet_tensorflow = ("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's C++ start-up lines (CUDA probing, oneDNN)
    if argv[:1] == ["saved-model-cli"]:
        os.environ.setdefault(*quiet_tensorflow)
        return command_module("saved-model-cli").run(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    check = getattr(command_module(args.command), "check", None)
    if check:
        check(args, parser.commands[args.command])
    check_extras(args, parser.commands[args.command])
    check_outputs(args, parser.commands[args.command], standalone)
    if not args.debug:
        os.environ.setdefault(*quiet_tensorflow)
    with console_logging():
        status = _run(args, parser.commands[args.command])
    if standalone and args.command == "serve":
        # A server stops within its grace period: not after the interpreter's teardown of TensorFlow (seconds),
        # nor aborted by it (SIGABRT) while an abandoned thread still runs a forward pass.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status
