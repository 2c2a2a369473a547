"""One writer at a time per output: a second run on the same output is refused, naming the first.

`output_lock(path)` is held by every command that writes a resumable or
replaced output (index, train, distill, export, encode, convert, evaluate, mine), for
the whole run. Its lock file is `.NAME.lock` beside the output, and notes the
holder's host, process id and command line for the message another run gets.

- Local file systems: an exclusive `fcntl.flock` on the lock file. The kernel
  drops it when the holder exits, however it ends (SIGKILL included), so a
  killed run leaves no lock behind, and a lock is never taken over while its
  holder lives.
- Other file systems (`gs://`, `ram://`): `tf.io.gfile` has no exclusive
  create, so the lock is an object written when absent and read back to check
  that this run's note is the one there. Two runs starting within that moment
  could both pass; a run that died on another machine leaves its lock object,
  which later runs name: delete it once that run is gone. A lock left on this
  machine by a process that no longer exists is taken over.

While it holds the lock, a run removes the staging files that a killed run of
the same output left (`.NAME.tmp-*`, `.NAME.upload-*`, and for a working
directory such as a training run's, those of the outputs it writes inside it):
no other run can be using them. A previous output that a run killed in the
middle of its commit had moved aside is put back instead. It also removes the
local temporary directories of killed runs of any output
(`files.remove_abandoned_temporary_directories`: staging for `gs://` outputs,
copies of remote models), never one in use.
"""

import contextlib
import fcntl
import functools
import inspect
import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from gtr_keras.errors import BusyError
from gtr_keras.utils import files

F = TypeVar("F", bound=Callable[..., Any])
_HELD = {}  # lock path -> how many blocks of this process hold it


def _lock_path(path):
    path = os.fspath(path)
    if files.is_local(path):
        path = os.path.realpath(path.removeprefix("file://"))  # one lock for every spelling of the path
    parent, name = files.parent_and_name(path)
    return f"{parent}/.{name}.lock"


def _note():
    command = " ".join([os.path.basename(sys.argv[0]) if sys.argv else "python", *sys.argv[1:]])
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "command": command[:300],
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "token": uuid.uuid4().hex,
    }


def _describe(text):
    try:
        note = json.loads(text)
        return f"{note['command']}, pid {note['pid']} on {note['host']}, started {note['started']}"
    except (ValueError, KeyError, TypeError):
        return "a run that has not said who it is yet"


def _busy(path, holder):
    return BusyError(f"{path}: in use by another gtr-keras run ({holder}); wait for it to end or stop it, then rerun")


def _lock_local(path, lock):
    os.makedirs(os.path.dirname(lock), exist_ok=True)
    while True:
        descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with open(lock, encoding="utf-8", errors="replace") as f:
                holder = _describe(f.read())
            os.close(descriptor)
            raise _busy(path, holder) from None
        try:
            if os.fstat(descriptor).st_ino == os.stat(lock).st_ino:
                break  # the file locked is still the lock file (its last holder may have removed it meanwhile)
        except FileNotFoundError:
            pass
        os.close(descriptor)
    os.ftruncate(descriptor, 0)
    os.write(descriptor, json.dumps(_note()).encode("utf-8"))
    return descriptor


def _alive_here(note):
    if note.get("host") != socket.gethostname():
        return True  # another machine's process: cannot be checked from here
    try:
        os.kill(int(note["pid"]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, KeyError):
        return True
    return True


def _lock_remote(path, lock):
    files.exists(path)  # a file system TensorFlow does not know is a `DataError` naming the output
    if files.exists(lock):
        text = files.read_bytes(lock).decode("utf-8", "replace")
        try:
            note = json.loads(text)
        except ValueError:
            note = {}
        if _alive_here(note):
            raise _busy(path, _describe(text) + f"; if it is gone, delete {lock}")
        files.remove(lock)  # its process is gone (some file systems, ram:// among them, append on "wb")
    note = _note()
    with files.open(lock, "wb") as f:
        f.write(json.dumps(note).encode("utf-8"))
    if json.loads(files.read_bytes(lock).decode("utf-8")).get("token") != note["token"]:
        raise _busy(path, _describe(files.read_bytes(lock).decode("utf-8", "replace")))


@contextlib.contextmanager
def output_lock(path, inside=()):
    """Holds the lock of output `path` for the block; reentrant within a process.

    Args:
        path: the output (file or directory), local or on any file system.
        inside: names of the outputs the run writes inside `path` (a working directory, such as a
            training run's), whose stale staging is removed too.

    Raises:
        BusyError: another run holds it; the message names that run.

    Example:
    >>> with output_lock("runs/index"):
    ...     build()
    """
    lock = _lock_path(path)
    if _HELD.get(lock):
        _HELD[lock] += 1
        try:
            yield
        finally:
            _HELD[lock] -= 1
        return
    local = files.is_local(lock)
    descriptor = _lock_local(path, lock) if local else _lock_remote(path, lock)
    _HELD[lock] = 1
    try:
        for target in (path, *(f"{os.fspath(path).rstrip('/')}/{name}" for name in inside)):
            files.remove_staging(target)
        files.remove_abandoned_temporary_directories()
        yield
    finally:
        del _HELD[lock]
        if local:
            with contextlib.suppress(FileNotFoundError):  # removed by hand meanwhile
                os.unlink(lock)
            fcntl.flock(descriptor, fcntl.LOCK_UN)
            os.close(descriptor)
        else:
            files.remove(lock)


def locks_output(argument: str, inside: Sequence[str] = ()) -> Callable[[F], F]:
    """Decorates a function that writes an output: it runs holding `output_lock` of the argument named
    `argument` (`"index_dir"`; `"config.output_dir"` for an attribute of one; None: no output, no lock).

    Example:
    >>> @locks_output("index_dir")
    ... def build_index(encoder, corpus, index_dir): ...
    """
    name, *attributes = argument.split(".")

    def decorate(function):
        signature = inspect.signature(function)

        @functools.wraps(function)
        def locked(*args, **kwargs):
            path = signature.bind(*args, **kwargs).arguments[name]
            for attribute in attributes:
                path = getattr(path, attribute)
            if path is None:
                return function(*args, **kwargs)
            with output_lock(path, inside):
                return function(*args, **kwargs)

        return locked

    return decorate
