"""Outputs that appear whole or not at all: files and directories staged, then committed together."""

import contextlib
import os
import pathlib
import tempfile

from gtr_keras.errors import DataError
from gtr_keras.utils.file_operations import CrashPoint, perform
from gtr_keras.utils.files.commits import commit, fsync, fsync_tree, remove_local, upload_and_commit
from gtr_keras.utils.files.paths import (
    delete,
    exists,
    is_local,
    isdir,
    isfile,
    listdir,
    makedirs,
    parent_and_name,
    remote_parent,
)
from gtr_keras.utils.files.recorded import recorded, staged_entries, write_checksums
from gtr_keras.utils.files.replaceable import check_replaceable
from gtr_keras.utils.files.temporary import temporary_directory


@contextlib.contextmanager
def atomic_outputs(*targets, replaces=None):
    """Staging paths for several outputs (files or directories) that replace them together.

    Yields one local path per target, which does not exist yet: the block
    creates a file or a directory there. When the block ends without an
    exception, everything staged replaces its target; if the block raises,
    all targets are left as they were and the staged paths are deleted.
    Missing parent directories are created. Use it for outputs that only make
    sense together, such as `emb.npy` and `emb.ids.txt`.

    What a target may replace is checked when the block starts and again
    before anything is replaced (`DataError`s, nothing replaced): a file
    replaces a file, never a directory; a directory never replaces a file,
    and replaces an empty directory, or one of the `DirectoryKind`s that
    `replaces` names for it (`check_replaceable`).

    On a local file system, the staging path is a sibling named
    `.<name>.tmp-*`; it is flushed to disk and renamed over its target, an
    existing target being first renamed aside and then deleted (if a rename
    fails, the old outputs are put back; a process killed during the renames
    leaves them under their `.<name>.tmp-*-old` names, never half-written
    ones). For a target on another file system (`gs://...`), the staging path
    is in a local `temporary_directory`; once the block ends, it is uploaded next to the target
    (`.<name>.upload-*`) and then moved into place file by file: a failure
    before that last step leaves the old outputs as they were, a kill during
    it can leave a target partly replaced (rerun the command).

    Args:
        *targets: str or path-like. The outputs to create or replace.
        replaces: None, or one sequence of `DirectoryKind`s per target: what an existing directory there may
            be to be replaced.

    Yields:
        A list of `pathlib.Path`, the staging path of each target.

    Raises:
        DataError: a target is a directory that its output may not replace.

    Example:
    >>> with atomic_outputs("emb.npy", "emb.ids.txt") as (npy, ids):
    ...     np.save(npy, embeddings)
    ...     ids.write_text("".join(f"{i}\\n" for i in doc_ids))
    """
    targets = [os.fspath(target) for target in targets]
    replaces = [() for _ in targets] if replaces is None else [tuple(kinds) for kinds in replaces]
    local = [os.path.abspath(target.removeprefix("file://")) if is_local(target) else None for target in targets]
    for target, kinds in zip(targets, replaces):
        if kinds:
            check_replaceable(target, kinds)
    staging, created = [], []
    remote = any(path is None for path in local)
    with temporary_directory("gtr-keras-staging-") if remote else contextlib.nullcontext() as scratch:
        try:
            for target, path in zip(targets, local):
                parent = parent_and_name(path)[0] if path else remote_parent(target)
                if path is None and exists(target):  # an unknown scheme is named with the target
                    parent = None
                created += _missing_parents(parent) if parent else []
                if parent and not isdir(parent):
                    makedirs(parent)
                if path is None:
                    staging.append(os.path.join(scratch, f"{len(staging)}-{os.path.basename(target)}"))
                    continue
                name = parent_and_name(path)[1]
                staged = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)
                os.rmdir(staged)
                staging.append(staged)
            yield [pathlib.Path(path) for path in staging]
            missing = [target for staged, target in zip(staging, targets) if not os.path.exists(staged)]
            if missing:
                raise RuntimeError(f"nothing was written for {', '.join(missing)}")
            for staged, target, kinds in zip(staging, targets, replaces):
                if os.path.isdir(staged) and isfile(target):
                    raise DataError(f"{target}: exists and is not a directory (it is not replaced)")
                if os.path.isdir(staged):
                    check_replaceable(target, kinds)
                elif isdir(target):
                    raise DataError(f"{target}: is a directory, expected a file (it is not replaced)")
            for staged in staging:
                perform("write", staged)
                if os.path.isdir(staged):
                    write_checksums(staged)
            local_pairs = [(staged, path) for staged, path in zip(staging, local) if path is not None]
            for staged, _ in local_pairs:
                if os.path.isdir(staged):
                    fsync_tree(staged)
                else:
                    fsync(staged)
            changes = [
                (target, staged_entries(staged, parent_and_name(target)[1])) for staged, target in zip(staging, targets)
            ]
            with recorded(changes):
                upload_and_commit(
                    [(staged, target) for staged, target, path in zip(staging, targets, local) if path is None]
                )
                commit(local_pairs)
        except BaseException as error:
            if isinstance(error, CrashPoint):
                raise
            for staged in staging:
                remove_local(staged)
            for parent in reversed(created):  # the parents made for outputs that are not written
                with contextlib.suppress(OSError, DataError):
                    if isdir(parent) and not listdir(parent):
                        delete(parent)
            raise


def _missing_parents(directory):
    """`directory` and those of its ancestors that do not exist, outermost first."""
    missing = []
    while directory and not isdir(directory):
        missing.insert(0, directory)
        parent = os.path.dirname(directory) if is_local(directory) else remote_parent(directory)
        if not parent or parent == directory:
            break
        directory = parent
    return missing


@contextlib.contextmanager
def atomic_directory(target, replaces=()):
    """Create or replace directory `target` all at once.

    Yields an empty sibling temporary directory (`.<name>.tmp-*`) to write
    into; `atomic_outputs` says how it replaces `target`. If the block raises,
    `target` is left untouched. The directory gets the mode a plain `mkdir`
    would (0755 under umask 022). An existing `target` is replaced only when
    empty or of one of the kinds `replaces` names.

    Args:
        target: str or path-like. The directory to create or replace.
        replaces: the `DirectoryKind`s that an existing non-empty `target` may be.

    Yields:
        `pathlib.Path` of the temporary directory.

    Example:
    >>> with atomic_directory("runs/index") as tmp:
    ...     np.save(tmp / "embeddings.npy", embeddings)
    """
    target = os.fspath(target)
    if isfile(target):
        raise DataError(f"{target}: exists and is not a directory")
    check_replaceable(target, replaces)
    with atomic_outputs(target, replaces=[replaces]) as (staging,):
        staging.mkdir()
        yield staging


@contextlib.contextmanager
def atomic_file(path):
    """A binary file object whose contents appear at `path` only once fully written.

    If the block raises, `path` is left as it was (see `atomic_outputs`).

    Example:
    >>> with atomic_file("embeddings.npy") as f:
    ...     np.save(f, embeddings)
    """
    with atomic_outputs(path) as (staging,):
        with staging.open("wb") as f:
            yield f
