"""Crash-safe writing: a file or directory appears whole or not at all."""

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


def current_umask():
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_directory(target):
    """Create or replace directory `target` all at once.

    Yields an empty sibling temporary directory (`.<name>.tmp-*`) to write
    into. When the block ends without an exception, the files are flushed to
    disk and the temporary directory is renamed to `target`; an existing
    `target` is first renamed aside, then deleted. If the block raises, the
    temporary directory is deleted and `target` is left untouched. The
    directory gets the mode a plain `mkdir` would (0755 under umask 022). A process
    killed at any point therefore leaves the previous `target` (possibly
    under its `.<name>.tmp-*-old` name, if killed between the two renames) or
    the new one, never a partly written one. Temporary directories of a
    killed process are left for the user to delete.

    Args:
        target: str or path-like. The directory to create or replace.

    Yields:
        `pathlib.Path` of the temporary directory.

    Example:
    >>> with atomic_directory("runs/index") as tmp:
    ...     np.save(tmp / "embeddings.npy", embeddings)
    """
    target = os.path.abspath(os.fspath(target))
    parent, name = os.path.split(target)
    if os.path.exists(target) and not os.path.isdir(target):
        raise ValueError(f"{target} exists and is not a directory.")
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)
    os.chmod(tmp, 0o777 & ~current_umask())  # mkdtemp makes 0700 directories whatever the umask
    old = f"{tmp}-old"
    has_old = False
    try:
        yield pathlib.Path(tmp)
        _fsync_tree(tmp)
        has_old = os.path.isdir(target)
        if has_old:
            os.rename(target, old)
        os.rename(tmp, target)
    except BaseException:
        if has_old and not os.path.exists(target):
            os.rename(old, target)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync(parent)
    if has_old:
        shutil.rmtree(old)


@contextlib.contextmanager
def atomic_file(path):
    """A binary file object whose contents appear at `path` only once fully written.

    The data goes to `path.tmp-<pid>`, is flushed to disk and renamed over
    `path`; if the block raises, the temporary file is removed and `path` is
    left as it was.

    Example:
    >>> with atomic_file("embeddings.npy") as f:
    ...     np.save(f, embeddings)
    """
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
