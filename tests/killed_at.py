"""Real kills at a crash point: `killed_at(n, ...)` runs Python in a subprocess that SIGKILLs itself just before
its `n`-th file operation (`gtr_keras.utils.file_operations`), for the tests of what a killed run leaves.

The kill is a watcher (`file_operations.watching`) that this file, run as a script, installs in that process
only: `python tests/killed_at.py N -m MODULE ARGS...` or `python tests/killed_at.py N -c CODE`.
"""

import itertools
import os
import runpy
import signal
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def killed_at(n, *args, timeout=600):
    """Runs `python ARGS` (`-m gtr_keras COMMAND ...`, or `-c CODE`) from the repository, killed (SIGKILL) just
    before its `n`-th file operation; returns its `subprocess.CompletedProcess` (stdout and stderr as bytes)."""
    env = {**os.environ, "PYTHONPATH": REPO}
    return subprocess.run(
        [sys.executable, os.path.abspath(__file__), str(n), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=timeout,
    )


def _kill_at(n):
    """A watcher that kills this process at its `n`-th operation."""
    operations = itertools.count(1)

    def watcher(kind, path):
        if next(operations) >= n:
            os.kill(os.getpid(), signal.SIGKILL)

    return watcher


def _main(n, option, target, *args):
    from gtr_keras.utils.file_operations import watching

    sys.argv = [target, *args]
    with watching(_kill_at(int(n))):
        if option == "-m":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})


if __name__ == "__main__":
    _main(*sys.argv[1:])
