"""The `checksums.json` record of a directory kept up to date by every write into it."""

import contextlib
import fcntl
import hashlib
import os
import tempfile

from gtr_keras.errors import DataError
from gtr_keras.utils import checksum_records
from gtr_keras.utils.file_operations import CrashPoint, perform
from gtr_keras.utils.files.commits import fsync, remove_local
from gtr_keras.utils.files.paths import (
    delete,
    is_local,
    isdir,
    isfile,
    listdir,
    local_path,
    open,
    parent_and_name,
    read_bytes,
    rename_path,
    tf,
)

# Written into every directory that `atomic_outputs` commits, and kept up to date by every later write into it
# (`replace_file`, `atomic_outputs`, `remove`, `rename`): the SHA-256 and size of each of its files.
CHECKSUMS_FILE = checksum_records.CHECKSUMS_FILE


def remove(path):
    """Deletes a file or a directory tree; nothing happens if it does not exist. The record of its directory
    no longer names it (`recorded`)."""
    with recorded([(path, {"files": {}, "units": {}})]):
        delete(path)


def remove_staging(target):
    """Removes what runs killed while writing `target` through `atomic_outputs` left beside it
    (`.NAME.tmp-*`, `.NAME.upload-*`), or puts back the previous `target` that a commit killed between its
    renames had moved aside (`.NAME.tmp-*-old`); for a `target` directory with a record, also what killed
    changes of its record left inside it. Names are matched literally (no glob).

    Only for a caller that knows no other run is writing `target` (`locks.output_lock` holds it).
    """
    parent, name = parent_and_name(target)
    if not isdir(parent):
        return
    if name != CHECKSUMS_FILE and isfile(f"{parent}/{name}/{CHECKSUMS_FILE}"):
        with record_lock(f"{parent}/{name}"):  # a change of the record that a writer without the lock makes
            remove_staging(f"{parent}/{name}/{CHECKSUMS_FILE}")
    for entry in sorted(entry.rstrip("/") for entry in listdir(parent)):
        if not entry.startswith((f".{name}.tmp-", f".{name}.upload-")):
            continue
        stale = f"{parent}/{entry}"
        if entry.endswith("-old") and is_local(parent) and not os.path.exists(f"{parent}/{name}"):
            rename_path(stale, f"{parent}/{name}")
        else:
            delete(stale)


def file_sha256(path):
    """`(SHA-256 hex digest, size in bytes)` of the file `path` (local or on any file system)."""
    with open(path, "rb") as f:
        return checksum_records.sha256_of(f)


def write_checksums(directory):
    """Writes `directory/checksums.json` (the local directory an output is staged in): the record of every
    file below it, by path relative to it, and of the units below it (`checksum_records`), which
    `gtr-keras check` verifies; returns its unit id.

    Example:
    >>> write_checksums("/tmp/.index.tmp-x")  # doctest: +SKIP
    '3f2a...'
    """
    return checksum_records.write_staged(directory)


def _read_record(directory):
    """The record (`checksum_records`) of `directory`, or None where it holds none.

    Raises:
        DataError: a damaged record, naming it: a write into the directory would leave a record that no
            check can trust.
    """
    path = f"{directory.rstrip('/')}/{CHECKSUMS_FILE}"
    return checksum_records.parse(read_bytes(path), path) if isfile(path) else None


def staged_entries(staged, name):
    """`entries_at`'s shape for a local staged output that will be `name`: a file's state, or a directory's
    unit id (it holds its record by then)."""
    if os.path.isdir(staged):
        return {"files": {}, "units": {name: _read_record(os.fspath(staged))["unit"]}}
    return {"files": {name: checksum_records.file_state(staged)}, "units": {}}


@contextlib.contextmanager
def record_lock(directory):
    """Holds an exclusive `fcntl.flock` on the local `directory` for the block (nothing elsewhere): one
    change of its record at a time, whichever writers write into it."""
    if not is_local(directory):
        yield
        return
    descriptor = os.open(local_path(directory), os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def _change_record(directory, change):
    """Replaces the record of `directory` by `change(record)`, read and written under its lock."""
    path = f"{directory}/{CHECKSUMS_FILE}"
    with record_lock(directory):
        record = _read_record(directory)
        if record is None:  # the directory was removed meanwhile
            return
        remove_staging(path)  # what a killed change of the record left: no other one runs under the lock
        changed = change(record)
        if changed != record:
            _replace_bytes(path, checksum_records.sealed(changed))


@contextlib.contextmanager
def recorded(changes):
    """Keeps the records of the directories that `changes` write into up to date around the block, which
    makes the change: `changes` is a list of `(target, entries)`, `entries` what the target (a name directly
    in its directory) holds after the block, in `checksum_records.entries_at`'s shape (empty: removed).

    A directory without a record (one gtr-keras did not commit, or a staging one) is left as it is. In the
    others, the target's entries first allow both states, then, once the block has ended, hold the new one
    (`checksum_records.while_changing`, `after_change`): a kill leaves every file in a state its record
    allows. If the block raises, they are put back as they were.
    """
    targets, before = [], {}
    for target, entries in changes:
        parent, name = parent_and_name(target)
        try:
            recorded = name != CHECKSUMS_FILE and not name.startswith(".") and isfile(f"{parent}/{CHECKSUMS_FILE}")
        except DataError:  # a file system TensorFlow does not know: the change itself names the target
            recorded = False
        if recorded:
            targets.append((parent, name, entries))

    def during(parent, name, entries):
        def change(record):
            before[parent, name] = checksum_records.entries_at(record, name)
            return checksum_records.while_changing(record, name, entries)

        return change

    for parent, name, entries in targets:
        _change_record(parent, during(parent, name, entries))
    try:
        yield
    except BaseException as error:
        if not isinstance(error, CrashPoint):
            for parent, name, _ in targets:
                _change_record(parent, lambda r, p=parent, n=name: checksum_records.after_change(r, n, before[p, n]))
        raise
    for parent, name, entries in targets:
        _change_record(parent, lambda r, n=name, e=entries: checksum_records.after_change(r, n, e))


def _recorded_entries(path):
    """The entries of the record of `path`'s directory at `path` (`entries_at`'s shape), or None where its
    directory holds no record."""
    parent, name = parent_and_name(path)
    record = _read_record(parent)
    return None if record is None else checksum_records.entries_at(record, name)


def _replace_bytes(path, data):
    """Writes `data` to the file `path` by one rename over it (`replace_file`), leaving records as they are."""
    path = os.fspath(path)
    parent, name = parent_and_name(path)
    if is_local(path):
        descriptor, staged = tempfile.mkstemp(prefix=f".{name}.tmp-", dir=parent)
        with contextlib.suppress(FileNotFoundError):  # the mode of the file replaced (mkstemp's is 0600)
            os.fchmod(descriptor, os.stat(os.path.join(parent, name)).st_mode & 0o777)
        try:
            with os.fdopen(descriptor, "wb") as f:
                perform("write", staged)
                f.write(data)
                f.flush()
                perform("fsync", staged)
                os.fsync(f.fileno())
            rename_path(staged, os.path.join(parent, name))
        except BaseException as error:
            if not isinstance(error, CrashPoint):
                remove_local(staged)
            raise
        fsync(parent)
        return
    upload = f"{parent}/.{name}.upload-{os.getpid()}"
    perform("write", upload)
    with tf.io.gfile.GFile(upload, "wb") as f:
        f.write(data)
    rename_path(upload, path)


def replace_file(path, data):
    """Writes `data` (bytes) to the file `path` by one rename over it: a reader finds the old contents or the
    new, and `path` is never absent (as `atomic_file`'s commit may leave it for a moment, when the old file
    is renamed aside first). For a small file that readers poll, such as a manifest.

    Example:
    >>> replace_file("index/segments.json", json.dumps(manifest).encode("utf-8"))
    """
    with recorded([(path, {"files": {parent_and_name(path)[1]: _bytes_state(data)}, "units": {}})]):
        _replace_bytes(path, data)


def _bytes_state(data):
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def rename(source, target):
    """Renames `source` to `target` (replacing a file there; one rename on a local file system), the records
    of their directories kept up to date (`recorded`)."""
    source, target = os.fspath(source), os.fspath(target)
    entries = _recorded_entries(source)
    moved = {"files": {}, "units": {}}
    if entries is not None and parent_and_name(source)[0] == parent_and_name(target)[0]:
        moved = checksum_records.moved(entries, parent_and_name(source)[1], parent_and_name(target)[1])
    with recorded([(source, {"files": {}, "units": {}}), (target, moved)]):
        rename_path(source, target)
