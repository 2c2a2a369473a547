"""`gtr-keras check`: a directory gtr-keras wrote (an index, a model, an export) verified file by file."""

import sys

from gtr_keras.cli.helpers.flag_types import (
    PROG,
    input_path,
)
from gtr_keras.errors import DataError


def add_parser(subparsers, parents):
    """Adds `check` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "check",
        help="verify an index, a model directory or an export, file by file",
        description="Verifies a directory that gtr-keras wrote (an index directory with every segment and its BM25 "
        "side, a search index, a model directory, an export of any format): the SHA-256 of every file against "
        "its checksums.json records (every file recorded, every record there), its structure, every record's "
        "fields, row and id counts, and what a job that did not end left there. Exit 0 with one line when all "
        "is well; exit 2 naming the first damaged file and what is wrong.",
        parents=parents,
    )
    p.add_argument("path", type=input_path("path"), help="the directory (or .tflite file) to check")
    p.add_argument("--all", action="store_true", help="list every problem, not only the first")
    return p


def run(args):
    """`check PATH [--all]`: a directory verified (`integrity.directory_checker`); exit 2 at a problem."""
    from gtr_keras.integrity.directory_checker import check_directory

    report = check_directory(args.path)
    if report.ok:
        print(report.summary())
        return
    if args.all:
        for problem in report.problems[:-1]:
            print(f"{PROG} check: error: {problem}", file=sys.stderr)
    raise DataError(report.problems[-1] if args.all else report.problems[0])
