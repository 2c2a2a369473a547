"""The checksums a committed directory records (`files.CHECKSUMS_FILE`), verified.

`files.atomic_outputs` writes `checksums.json` into every directory it
commits: the SHA-256 and size of each file below it, by relative path. A
directory written inside another one as a unit of its own (an index's
`segment-NNNNNN/`, a BM25 side rebuilt by an update) has its own, which alone
speaks for the files below it. Directories committed before gtr-keras recorded
checksums have none: `verify_checksums` then says so and checks nothing.

Loaders check sizes, types and ids; the checksums are read by `gtr-keras check`,
and at load time by every loader when the environment variable
`GTR_KERAS_VERIFY_CHECKSUMS=1` is set (`verify_if_asked`).
"""

import os

from gtr_keras.errors import DataError
from gtr_keras.utils import files
from gtr_keras.utils.records import check_fields, read_json_object

VERIFY_VARIABLE = "GTR_KERAS_VERIFY_CHECKSUMS"
_REMEDY = "write the directory again"


def _join(directory, relative):
    return f"{os.fspath(directory).rstrip('/')}/{relative}"


def verify_checksums(directory, expected_absent=lambda relative: False):
    """The problems with the files `directory/checksums.json` records, as `(path, what)` pairs.

    Args:
        directory: a directory committed by `files.atomic_outputs` (local or on any file system).
        expected_absent: `expected_absent(relative_path)` is True for a recorded file that may since have
            been removed on purpose (the base files of an index compacted since).

    Returns:
        `(problems, verified)`: the list of problems (a missing file, another size, another SHA-256, a
        malformed record), and the number of files whose SHA-256 was verified; `(None, 0)` for a
        directory with no `checksums.json` (written before they were recorded).

    Example:
    >>> verify_checksums("indexes/scifact")
    ([], 9)
    """
    path = _join(directory, files.CHECKSUMS_FILE)
    if not files.isfile(path):
        return None, 0
    try:
        record = check_fields(
            path,
            read_json_object(path, _REMEDY),
            {"format": (files.CHECKSUMS_FORMAT,), "algorithm": ("sha256",), "files": "object"},
            _REMEDY,
        )
    except DataError as error:
        return [(path, str(error).removeprefix(f"{path}: "))], 0
    problems, verified = [], 0
    for relative, entry in record["files"].items():
        parts = relative.split("/")
        if relative.startswith("/") or ".." in parts or "" in parts or not isinstance(entry, dict):
            problems.append((path, f"entry {relative!r} is not a file below the directory; {_REMEDY}"))
            continue
        if any(
            files.isfile(_join(directory, "/".join([*parts[:depth], files.CHECKSUMS_FILE])))
            for depth in range(1, len(parts))
        ):
            continue  # a unit of its own below: its checksums speak for it
        target = _join(directory, relative)
        if not files.isfile(target):
            if not expected_absent(relative):
                problems.append((target, f"missing (recorded in {path})"))
            continue
        sha256, size = files.file_sha256(target)
        if size != entry.get("size"):
            problems.append((target, f"{size} bytes, {entry.get('size')} recorded in {path} when it was written"))
        elif sha256 != entry.get("sha256"):
            problems.append(
                (target, f"its SHA-256 is not the one recorded in {path} when it was written (changed since)")
            )
        else:
            verified += 1
    return problems, verified


def verify_if_asked(directory, expected_absent=lambda relative: False):
    """Raises `DataError` naming the first damaged file of `directory` when `GTR_KERAS_VERIFY_CHECKSUMS=1`
    is set (the loaders' option); does nothing otherwise.

    Example:
    >>> verify_if_asked("models/gtr-base")
    """
    if os.environ.get(VERIFY_VARIABLE, "") not in ("1", "true", "yes"):
        return
    problems, _ = verify_checksums(directory, expected_absent)
    if problems:
        path, what = problems[0]
        raise DataError(f"{path}: {what}")
