"""Every crash point of a write path, tried: the harness of tests/test_crash_points.py.

`assert_every_crash_point` counts the operations of one uninterrupted run
(`utils.file_operations.counting`), then for each N from 1 to that count
starts again from the previous state, stops the run at its N-th operation
(`stopping_at`: a `CrashPoint` that skips every cleanup, as a kill would), and
asserts that what is there is the previous state or the new one, that
`gtr-keras check` finds nothing damaged there (only what the stopped run left,
`CheckReport.leftovers`, which the rerun removes), and that a rerun ends with
exactly the state of the uninterrupted run, which `gtr-keras check` passes.
"""

import os

from gtr_keras.cli.main import main
from gtr_keras.integrity.directory_checker import check_directory
from gtr_keras.utils.file_operations import counting, stopping_at


def assert_every_crash_point(root, prepare, run, state, checked=None, accept=None):
    """Tries every crash point of `run`; returns how many there are.

    Args:
        root: a `pathlib.Path` to work in (one subdirectory per try).
        prepare: `prepare(directory)` writes the previous state into the new directory `directory` and
            returns what `run` and `state` take.
        run: `run(target)`, the write path.
        state: `state(target)`, a comparable value of what loads there (None: nothing, as before a first
            write).
        checked: `checked(target)`, the paths that `gtr-keras check` must find nothing damaged in after a stop,
            and pass after the rerun (default: none).
        accept: `accept(found, before, after)`, whether a state found after a stop is allowed (default:
            `found` is `before` or `after`).
    """
    accept = accept or (lambda found, before, after: found in (before, after))
    target = prepare(root / "previous")
    before = state(target)
    target = prepare(root / "uninterrupted")
    with counting() as log:
        run(target)
    after = state(target)
    assert after != before, "the run must change what loads"
    for n in range(1, log.count + 1):
        target = prepare(root / f"stopped-{n}")
        with stopping_at(n) as stopped:
            run(target)
        assert stopped.crashed, f"operation {n} of {log.count} was not reached"
        found = state(target)
        assert accept(found, before, after), f"stopped at operation {n} ({log.operations[n - 1]}): {found!r}"
        for path in (checked or (lambda _: []))(target):
            if os.path.exists(path):
                assert_nothing_damaged(path, f"check after operation {n} ({log.operations[n - 1]})")
        run(target)
        assert state(target) == after, f"the rerun after a stop at operation {n} ({log.operations[n - 1]})"
        for path in (checked or (lambda _: []))(target):
            assert main(["check", os.fspath(path)]) == 0, f"check after the rerun of a stop at operation {n}"
    return log.count


def assert_nothing_damaged(path, where):
    """`gtr-keras check` finds nothing damaged in `path`: what it names is what a stopped run left
    (`CheckReport.leftovers`), which its rerun removes."""
    report = check_directory(path)
    damaged = [problem for problem in report.problems if problem not in report.leftovers]
    assert not damaged, f"{where}: {damaged}"
