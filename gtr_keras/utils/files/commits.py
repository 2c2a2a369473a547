"""Staged outputs renamed over their targets all together (`renameat2` where the system can)."""

import contextlib
import ctypes
import errno
import functools
import os
import shutil

from gtr_keras.utils.file_operations import CrashPoint, perform
from gtr_keras.utils.files.paths import delete, files_under, make_parent, parent_and_name, rename_path, tf


def fsync(path):
    perform("fsync", path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root):
    for dirpath, _, filenames in os.walk(root):
        for filename in filenames:
            fsync(os.path.join(dirpath, filename))
        fsync(dirpath)


def remove_local(path):
    if not os.path.lexists(path):
        return
    perform("remove", path)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


@functools.cache
def _renameat2():
    """glibc's `renameat2`, or None where the C library has none."""
    try:
        return ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None


def _exchange(staged, target):
    """Swaps the local paths `staged` and `target` in one step (Linux's `renameat2(RENAME_EXCHANGE)`): a
    reader finds the old target or the new, never none. False where the system or file system cannot."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    perform("rename", staged)
    if renameat2(_AT_FDCWD, os.fsencode(staged), _AT_FDCWD, os.fsencode(target), _RENAME_EXCHANGE) == 0:
        return True
    if ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), target)


def commit(pairs):
    """Renames each staged path over its target; all or none of the targets change.

    One existing target is exchanged with its staged path in one step where the
    system can (`_exchange`), and its old contents removed. Otherwise existing
    targets are first renamed aside (`<staged>-old`); if any rename fails, the
    new ones are removed and the old ones put back.
    """
    if len(pairs) == 1 and os.path.lexists(pairs[0][1]) and _exchange(*pairs[0]):
        staged, target = pairs[0]
        fsync(os.path.dirname(target))
        remove_local(staged)  # now the old contents, under a staging name that `remove_staging` clears
        return
    moved_aside, placed = [], []
    try:
        for staged, target in pairs:
            if os.path.exists(target):
                rename_path(target, f"{staged}-old")
                moved_aside.append((staged, target))
        for staged, target in pairs:
            rename_path(staged, target)
            placed.append(target)
    except BaseException as error:
        if isinstance(error, CrashPoint):
            raise
        for target in placed:
            remove_local(target)
        for staged, target in moved_aside:
            os.rename(f"{staged}-old", target)
        raise
    for parent in {os.path.dirname(target) for _, target in pairs}:
        fsync(parent)
    for staged, _ in moved_aside:
        remove_local(f"{staged}-old")


def upload_and_commit(pairs):
    """`commit` for targets on another file system: each staged tree is uploaded next to its target
    (`.<name>.upload-*`), then moved into place file by file once all are uploaded."""
    uploads = []
    try:
        for staged, target in pairs:
            parent, name = parent_and_name(target)
            upload = f"{parent}/.{name}.upload-{os.getpid()}-{os.path.basename(staged)}"
            is_file = os.path.isfile(staged)
            files = (
                [staged]
                if is_file
                else [os.path.join(root, file) for root, _, names in os.walk(staged) for file in names]
            )
            for file in files:
                destination = upload if is_file else f"{upload}/{os.path.relpath(file, staged)}"
                make_parent(destination)
                perform("write", destination)
                tf.io.gfile.copy(file, destination, overwrite=True)
            uploads.append((upload, target, is_file))
        for upload, target, is_file in uploads:
            delete(target)
            if is_file:
                rename_path(upload, target)
                continue
            for file in files_under(upload):
                destination = f"{target}/{os.path.relpath(file, upload)}"
                make_parent(destination)
                rename_path(file, destination)
            delete(upload)
    except BaseException as error:
        if isinstance(error, CrashPoint):
            raise
        for upload, _, _ in uploads:
            delete(upload)
        raise
