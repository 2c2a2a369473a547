"""Local temporary directories that a killed process's successor removes, and local copies of remote paths."""

import contextlib
import fcntl
import os
import shutil
import tempfile

from gtr_keras.errors import UserError
from gtr_keras.utils.file_operations import crashed
from gtr_keras.utils.files.paths import files_under, is_local, isdir, named_errors, tf

_OWNER_SUFFIX = ".owner"


@contextlib.contextmanager
def temporary_directory(prefix):
    """A new local temporary directory (`tempfile.gettempdir()/PREFIX*`) for the block, removed afterwards.

    While it exists, this process holds an exclusive `fcntl.flock` on the
    file `<directory>.owner` beside it; the kernel drops it when the process
    ends, however it ends. Each call first removes the directories (and
    their `.owner` files) that processes killed before they could (SIGKILL,
    a crash) left under any `gtr-keras-` prefix: those whose `.owner` lock
    is free. One in use is never removed.

    Args:
        prefix: str, starting with `gtr-keras-`.

    Yields:
        str, the directory's path.

    Example:
    >>> with temporary_directory("gtr-keras-copy-") as scratch:
    ...     copy_into(scratch)
    """
    remove_abandoned_temporary_directories()
    root = tempfile.gettempdir()
    while True:
        descriptor, owner = tempfile.mkstemp(prefix=prefix, suffix=_OWNER_SUFFIX, dir=root)
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            if os.fstat(descriptor).st_ino == os.stat(owner).st_ino:
                break  # not taken for an abandoned one between its creation and the lock
        os.close(descriptor)
    directory = owner.removesuffix(_OWNER_SUFFIX)
    try:
        os.mkdir(directory, 0o700)
        yield directory
    finally:
        if not crashed():  # a stopped run leaves it, as a killed one does, to the next run's cleanup
            shutil.rmtree(directory, ignore_errors=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(owner)
        os.close(descriptor)


def remove_abandoned_temporary_directories():
    """Removes the `temporary_directory`s of processes that are gone (see there); returns their paths."""
    root, removed = tempfile.gettempdir(), []
    for name in sorted(os.listdir(root)):
        if not (name.startswith("gtr-keras-") and name.endswith(_OWNER_SUFFIX)):
            continue
        owner = os.path.join(root, name)
        try:
            descriptor = os.open(owner, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(descriptor).st_ino != os.stat(owner).st_ino:
                continue
            directory = owner.removesuffix(_OWNER_SUFFIX)
            shutil.rmtree(directory, ignore_errors=True)
            os.unlink(owner)
            removed.append(directory)
        except (BlockingIOError, FileNotFoundError):
            continue  # in use, or removed meanwhile
        finally:
            os.close(descriptor)
    return removed


@contextlib.contextmanager
def local_copy(path):
    """A local path holding `path`'s file or directory tree: `path` itself when local, else a temporary copy.

    A `UserError` raised in the block names the copy's files under `path`.

    Example:
    >>> with local_copy("gs://bucket/models/gtr-base") as directory:
    ...     model = GTRTextEmbedder.from_preset(directory)
    """
    path = os.fspath(path)
    if is_local(path):
        yield path.removeprefix("file://")
        return
    with temporary_directory("gtr-keras-copy-") as scratch:
        local = os.path.join(scratch, os.path.basename(path.rstrip("/")) or "copy")
        if isdir(path):
            for file in files_under(path):
                destination = os.path.join(local, os.path.relpath(file, path))
                os.makedirs(os.path.dirname(destination), exist_ok=True)
                tf.io.gfile.copy(file, destination, overwrite=True)
        else:
            named_errors(tf.io.gfile.copy)(path, local, overwrite=True)
        try:
            yield local
        except UserError as error:
            raise type(error)(str(error).replace(local, path.rstrip("/"))) from error
