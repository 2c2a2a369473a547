"""Crash-safe writing: a file, a directory or a set of outputs appears whole or not at all."""

import contextlib
import os
import pathlib
import shutil
import tempfile


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root):
    for dirpath, _, filenames in os.walk(root):
        for filename in filenames:
            _fsync(os.path.join(dirpath, filename))
        _fsync(dirpath)


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def _commit(pairs):
    """Renames each staged path over its target; all or none of the targets change.

    Existing targets are first renamed aside (`<staged>-old`); if any rename
    fails, the new ones are removed and the old ones put back.
    """
    moved_aside, placed = [], []
    try:
        for staged, target in pairs:
            if os.path.exists(target):
                os.rename(target, f"{staged}-old")
                moved_aside.append((staged, target))
        for staged, target in pairs:
            os.rename(staged, target)
            placed.append(target)
    except BaseException:
        for target in placed:
            _remove(target)
        for staged, target in moved_aside:
            os.rename(f"{staged}-old", target)
        raise
    for parent in {os.path.dirname(target) for _, target in pairs}:
        _fsync(parent)
    for staged, _ in moved_aside:
        _remove(f"{staged}-old")


@contextlib.contextmanager
def atomic_outputs(*targets):
    """Staging paths for several outputs (files or directories) that replace them together.

    Yields one path per target, a sibling named `.<name>.tmp-*` that does not
    exist yet: the block creates a file or a directory there. When the block
    ends without an exception, everything staged is flushed to disk and
    renamed over its target, existing targets being first renamed aside and
    then deleted; if the block or a rename fails, all targets are left as they
    were and the staged paths are deleted. Missing parent directories are
    created. A process killed during the renames leaves the old outputs under
    their `.<name>.tmp-*-old` names, never a half-written one. Use it for
    outputs that only make sense together, such as `emb.npy` and `emb.ids.txt`.

    Args:
        *targets: str or path-like. The outputs to create or replace.

    Yields:
        A list of `pathlib.Path`, the staging path of each target.

    Example:
    >>> with atomic_outputs("emb.npy", "emb.ids.txt") as (npy, ids):
    ...     np.save(npy, embeddings)
    ...     ids.write_text("".join(f"{i}\\n" for i in doc_ids))
    """
    targets = [os.path.abspath(os.fspath(target)) for target in targets]
    staging = []
    try:
        for target in targets:
            parent, name = os.path.split(target)
            os.makedirs(parent, exist_ok=True)
            staged = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)
            os.rmdir(staged)
            staging.append(staged)
        yield [pathlib.Path(path) for path in staging]
        missing = [target for staged, target in zip(staging, targets) if not os.path.exists(staged)]
        if missing:
            raise RuntimeError(f"nothing was written for {', '.join(missing)}")
        for staged in staging:
            if os.path.isdir(staged):
                _fsync_tree(staged)
            else:
                _fsync(staged)
        _commit(list(zip(staging, targets)))
    except BaseException:
        for staged in staging:
            _remove(staged)
        raise


@contextlib.contextmanager
def atomic_directory(target):
    """Create or replace directory `target` all at once.

    Yields an empty sibling temporary directory (`.<name>.tmp-*`) to write
    into; `atomic_outputs` says how it replaces `target`. If the block raises,
    `target` is left untouched. The directory gets the mode a plain `mkdir`
    would (0755 under umask 022).

    Args:
        target: str or path-like. The directory to create or replace.

    Yields:
        `pathlib.Path` of the temporary directory.

    Example:
    >>> with atomic_directory("runs/index") as tmp:
    ...     np.save(tmp / "embeddings.npy", embeddings)
    """
    target = os.fspath(target)
    if os.path.exists(target) and not os.path.isdir(target):
        raise ValueError(f"{target} exists and is not a directory.")
    with atomic_outputs(target) as (staging,):
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
        with open(staging, "wb") as f:
            yield f
