"""The records of the directories gtr-keras writes (`checksums.json`, `checksum_records`), verified.

Every directory that `files.atomic_outputs` commits holds a record of every
file below it, and every later write into it through `files` keeps that
record up to date; a directory below it that holds a record of its own (a
unit: a search index in an index directory, a segment, a BM25 side) is named
by its unit id in its parent's record. So a directory gtr-keras wrote is
verified whole, from its own record down:

- its `checksums.json` must be there (every directory gtr-keras writes holds
  one: a missing one was removed), sealed, and, for a unit, the one its
  parent names;
- every file it records must be there, of its size and SHA-256;
- every file below it must be recorded: a hidden name it does not record is
  what a job that did not end left (a write's staging `.NAME.tmp-*`, a tune's
  `.tune-*`), any other is not gtr-keras' (`Finding.leftover` tells them
  apart); lock files (`.NAME.lock`) are no outputs and are not recorded.

`gtr-keras check` reads them all (`verify_checksums`); a loader given
`verify=True` (`SearchIndex.load`, `BM25Retriever.load`, `gtr_keras.load`,
`load_export`, `RuntimeEncoder`) refuses a damaged file the same way first
(`verify_directory`); by default loaders check sizes, types and ids only.
"""

import dataclasses
import os

from gtr_keras.errors import DataError
from gtr_keras.utils import files
from gtr_keras.utils.checksum_records import CHECKSUMS_FILE, REMEDY, allowed, parse


@dataclasses.dataclass(frozen=True)
class Finding:
    """A problem with a file of a directory gtr-keras wrote.

    Args:
        path: the file (or directory) it is about.
        what: what is wrong, and what to do.
        leftover: True for what a job that did not end left (staging, scratch): not damage, but not the
            directory as written either; rerunning the job removes it.
    """

    path: str
    what: str
    leftover: bool = False

    def __str__(self):
        return f"{self.path}: {self.what}"


def _join(directory, relative):
    return f"{os.fspath(directory).rstrip('/')}/{relative}"


def is_lock(name):
    """Whether `name` is a lock file of `utils.locks` (`.NAME.lock`): no output, never recorded."""
    return name.startswith(".") and name.endswith(".lock")


def leftover_reason(name):
    """What the hidden entry `name` that no record names was left by, and what to do about it."""
    if ".tmp-" in name or ".upload-" in name:
        what = f"the staging of a write of {name[1:].split('.tmp-')[0].split('.upload-')[0]} that did not end"
    elif name.startswith(".tune-"):
        what = "the scratch of a `gtr-keras tune` that did not end"
    else:
        what = "a hidden entry gtr-keras did not record (the scratch of a job that did not end?)"
    return f"{what} (killed, or still running): rerun the job (it removes it), or remove it once no job runs"


def _listing(directory):
    """`(files, hidden directories)` below `directory`, as relative paths (a hidden directory is listed
    where its files are not seen: an empty one left by a killed job)."""
    found, hidden = [], []
    local = directory.removeprefix("file://") if files.is_local(directory) else None
    if local is not None:
        for root, dirs, names in os.walk(local):
            relative_root = os.path.relpath(root, local).replace(os.sep, "/")
            prefix = "" if relative_root == "." else f"{relative_root}/"
            found += [prefix + name for name in names]
            hidden += [prefix + name for name in dirs if name.startswith(".")]
        return sorted(found), hidden
    root = directory.rstrip("/")
    return sorted(path[len(root) + 1 :] for path in files.files_under(root)), hidden


def _state_problem(path, states, record_path):
    sha256, size = files.file_sha256(path)
    if any(state is not None and (state["sha256"], state["size"]) == (sha256, size) for state in states):
        return None
    sizes = [state["size"] for state in states if state is not None]
    if size not in sizes:
        recorded = " or ".join(map(str, sizes)) or "none"
        return f"{size} bytes, {recorded} recorded in {record_path} when it was written; {REMEDY}"
    return f"its SHA-256 is not the one recorded in {record_path} when it was written (changed since); {REMEDY}"


def _verify_unit(directory, findings, expected=None, parent_record=None):
    """Verifies the unit `directory` (`expected`: the unit ids its parent's record `parent_record` allows,
    or None for a top-level one) into `findings`; returns how many files' SHA-256 it verified."""
    record_path = _join(directory, CHECKSUMS_FILE)
    if not files.isfile(record_path):
        why = (
            f"{parent_record} records {directory} as a directory of its own"
            if parent_record
            else "every directory gtr-keras writes holds one"
        )
        findings.append(Finding(record_path, f"missing ({why}): removed since, or not written by gtr-keras; {REMEDY}"))
        return 0
    try:
        record = parse(files.read_bytes(record_path), record_path)
    except DataError as error:
        findings.append(Finding(record_path, str(error).removeprefix(f"{record_path}: ")))
        return 0
    if expected is not None and record["unit"] not in expected:
        findings.append(
            Finding(
                record_path,
                f"the record of another directory than the one {parent_record} names (unit {record['unit']}, "
                f"recorded {' or '.join(expected) or 'none'}): {directory} was replaced by another one; {REMEDY}",
            )
        )
    units = record["units"]
    listed, hidden = _listing(directory)
    present, seen, verified = set(), set(), 0

    def in_unit(relative):
        return any(relative == unit or relative.startswith(f"{unit}/") for unit in units)

    for relative in [*listed, *hidden]:
        parts = relative.split("/")
        if in_unit(relative) or relative == CHECKSUMS_FILE or is_lock(parts[-1]):
            continue
        present.add(relative)
        if relative in record["files"]:
            problem = _state_problem(_join(directory, relative), allowed(record["files"][relative]), record_path)
            if problem:
                findings.append(Finding(_join(directory, relative), problem))
            else:
                verified += 1
            continue
        depth = next((i for i, part in enumerate(parts) if part.startswith(".")), None)
        if depth is not None:
            entry = "/".join(parts[: depth + 1])
            if entry not in seen:
                seen.add(entry)
                findings.append(Finding(_join(directory, entry), leftover_reason(parts[depth]), leftover=True))
        elif relative in listed:
            findings.append(
                Finding(
                    _join(directory, relative),
                    f"not recorded in {record_path}: gtr-keras did not write it there (remove it, or {REMEDY})",
                )
            )
    for relative, entry in record["files"].items():
        if relative not in present and None not in allowed(entry):
            findings.append(Finding(_join(directory, relative), f"missing (recorded in {record_path}); {REMEDY}"))
    for relative, entry in units.items():
        ids, path = allowed(entry), _join(directory, relative)
        if files.isdir(path):
            verified += _verify_unit(path, findings, [i for i in ids if i is not None], record_path)
        elif None not in ids:
            findings.append(
                Finding(_join(path, CHECKSUMS_FILE), f"missing ({path}, recorded in {record_path}, is gone); {REMEDY}")
            )
    return verified


def verify_checksums(directory):
    """What is wrong with the files of `directory`, a directory gtr-keras wrote, against its records.

    Args:
        directory: a directory committed by `files.atomic_outputs` (local or on any file system).

    Returns:
        `(findings, verified)`: the `Finding`s (a missing, changed or unrecorded file, a missing or damaged
        record, a unit replaced by another one, what a job that did not end left), and the number of files
        whose SHA-256 was verified.

    Example:
    >>> verify_checksums("indexes/scifact")
    ([], 15)
    """
    findings = []
    verified = _verify_unit(os.fspath(directory).rstrip("/") or "/", findings)
    return findings, verified


def verify_directory(directory):
    """Raises `DataError` naming the first damaged file of `directory` (`verify_checksums`; what a job that
    did not end left is not damage): the loaders' `verify=True`. A directory found damaged is read once more
    first: a write into it (an update) may have changed a file and its record between the two reads.

    Example:
    >>> verify_directory("models/gtr-base")
    """
    for _ in range(2):
        damaged = [finding for finding in verify_checksums(directory)[0] if not finding.leftover]
        if not damaged:
            return
    raise DataError(str(damaged[0]))
