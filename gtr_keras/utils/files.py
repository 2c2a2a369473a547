"""All file access of gtr-keras: `tf.io.gfile` paths, and outputs that appear whole or not at all.

TensorFlow is imported on first use: local paths are handled by the OS directly
(`exists`, `isdir`, `isfile`, `listdir`, `glob`, `makedirs`, `remove`, binary
`open`, `read_bytes`, `local_copy`; text and write modes of `open` still go
through `tf.io.gfile`), so that loading and searching a local
`SearchIndex`, or `index --embeddings`, needs no TensorFlow (a process saves its
~500 MB).

Every path may be local or use a scheme TensorFlow's file systems know
(`gs://` on Cloud TPU VMs, `ram://` in tests, `s3://`/`hdfs://` where the
plugins are installed). A scheme TensorFlow does not know is a `DataError`
naming the path, never a local folder named after it.

Reading: `open` (any file), `open_decompressed` (gunzips `*.gz`), `exists`,
`isdir`, `isfile`, `listdir`, `glob`, and `local_copy` for code that
needs a local path (Keras weights files, ScaNN assets). Writing goes through
`atomic_outputs` / `atomic_directory` / `atomic_file`: the caller writes to a
local staging path, which then replaces the target (by a rename on a local
file system; by an upload to a sibling staging name and per-file renames
elsewhere). An existing directory is replaced only when it is empty or of a
`DirectoryKind` the writer names (`check_replaceable`): never a folder of the
user's that happens to sit where an output goes.

Every directory `atomic_outputs` commits holds its record, `checksums.json`
(`checksum_records`), and every later write into it through this module
(`replace_file`, `atomic_outputs`, `remove`, `rename`) keeps that record up to
date, in two steps around the change (`_recorded`), so that whatever writer
adds a file to a directory gtr-keras wrote, `gtr-keras check` verifies it.
"""

import builtins
import contextlib
import ctypes
import dataclasses
import errno
import fcntl
import fnmatch
import functools
import glob as globbing
import gzip
import hashlib
import os
import pathlib
import shutil
import tempfile

from gtr_keras.errors import DataError, UserError
from gtr_keras.utils import checksum_records
from gtr_keras.utils.file_operations import CrashPoint, crashed, perform

# Written into every directory that `atomic_outputs` commits, and kept up to date by every later write into it
# (`replace_file`, `atomic_outputs`, `remove`, `rename`): the SHA-256 and size of each of its files.
CHECKSUMS_FILE = checksum_records.CHECKSUMS_FILE


class _TensorFlow:
    """The `tensorflow` module, imported on first attribute access."""

    def __getattr__(self, name):
        import tensorflow

        return getattr(tensorflow, name)


tf = _TensorFlow()


def is_local(path):
    """True for a path of the local file system (no scheme, or `file://`)."""
    path = os.fspath(path)
    return "://" not in path or path.startswith("file://")


def _named_errors(function):
    """Turns TensorFlow's file-system errors about a path into one-line `DataError`s naming it."""

    @functools.wraps(function)
    def wrapper(path, *args, **kwargs):
        try:
            return function(os.fspath(path), *args, **kwargs)
        except FileNotFoundError:  # a local path read without TensorFlow
            raise DataError(f"{path}: no such file or directory") from None
        except PermissionError:
            raise DataError(f"{path}: permission denied") from None
        except tf.errors.UnimplementedError:
            scheme = os.fspath(path).split("://")[0]
            raise DataError(
                f"{path}: TensorFlow has no file system for {scheme}:// (local paths, gs://, ram:// "
                "and those of installed plugins such as tensorflow-io work)"
            ) from None
        except tf.errors.NotFoundError:
            raise DataError(f"{path}: no such file or directory") from None
        except tf.errors.PermissionDeniedError:
            raise DataError(f"{path}: permission denied") from None
        except tf.errors.OpError as error:
            raise DataError(f"{path}: {(error.message.strip().splitlines() or [type(error).__name__])[0]}") from None

    return wrapper


def _local(path):
    """`path` on the local file system (`file://` removed), or None for another file system's."""
    return path.removeprefix("file://") if is_local(path) else None


@_named_errors
def exists(path):
    local = _local(path)
    return os.path.exists(local) if local is not None else tf.io.gfile.exists(path)


@_named_errors
def isdir(path):
    local = _local(path)
    if local is not None:
        return os.path.isdir(local)
    return tf.io.gfile.exists(path) and tf.io.gfile.isdir(path)  # `exists` raises for an unknown scheme


def isfile(path):
    return exists(path) and not isdir(path)


@_named_errors
def modified_ns(path):
    """When the file `path` was last written (ns since the epoch; a file renamed into place has its own
    time), or None where there is none.

    Example:
    >>> modified_ns("indexes/scifact/retriever.json") > 0
    True
    """
    local = _local(path)
    if local is not None:
        try:
            return os.stat(local).st_mtime_ns
        except FileNotFoundError:
            return None
    return tf.io.gfile.stat(path).mtime_nsec if tf.io.gfile.exists(path) else None


@_named_errors
def listdir(path):
    if _local(path) is not None:
        return sorted(os.listdir(_local(path)))
    return sorted(name.rstrip("/") for name in tf.io.gfile.listdir(path))


@_named_errors
def glob(pattern):
    """The paths matching `pattern` (`*`, `?`, `[...]` within one path component, names starting with a dot
    included, as TensorFlow matches them), sorted."""
    if _local(pattern) is not None:
        return sorted(globbing.glob(_local(pattern), include_hidden=True))
    return sorted(tf.io.gfile.glob(pattern))


@_named_errors
def makedirs(path):
    local = _local(path)
    if local is not None:
        if not os.path.isdir(local):
            perform("mkdir", local)
            os.makedirs(local, exist_ok=True)
        return
    if not tf.io.gfile.exists(path):
        perform("mkdir", path)
    tf.io.gfile.makedirs(path)


def remove(path):
    """Deletes a file or a directory tree; nothing happens if it does not exist. The record of its directory
    no longer names it (`_recorded`)."""
    with _recorded([(path, {"files": {}, "units": {}})]):
        _delete(path)


@_named_errors
def _delete(path):
    local = _local(path)
    if local is not None:
        if os.path.lexists(local):
            perform("remove", local)
        if os.path.isdir(local) and not os.path.islink(local):
            shutil.rmtree(local)
        elif os.path.lexists(local):
            os.remove(local)
        return
    if not tf.io.gfile.exists(path):
        return
    perform("remove", path)
    if not tf.io.gfile.isdir(path):
        tf.io.gfile.remove(path)
        return
    for file in files_under(path):
        tf.io.gfile.remove(file)
    with contextlib.suppress(tf.errors.NotFoundError):  # ram:// has no directories left once empty
        tf.io.gfile.rmtree(path)


def files_under(directory):
    """The files below `directory`, at any depth.

    `ram://` lists no subdirectories (and calls any prefix of a path a
    directory), so there the tree is globbed depth by depth: a match is a file
    unless a deeper match lies below it.
    """
    directory = os.fspath(directory)
    if _local(directory) is not None:
        return sorted(os.path.join(root, name) for root, _, names in os.walk(_local(directory)) for name in names)
    if not directory.startswith("ram://"):
        return [os.path.join(root, name) for root, _, names in tf.io.gfile.walk(directory) for name in names]
    files, matches, pattern = [], tf.io.gfile.glob(f"{directory.rstrip('/')}/*"), directory.rstrip("/")
    while matches:
        pattern += "/*"
        deeper = tf.io.gfile.glob(f"{pattern}/*")
        parents = {match.rsplit("/", 1)[0] for match in deeper}
        files += [match for match in matches if match not in parents]
        matches = deeper
    return sorted(files)


@_named_errors
def open(path, mode="rb"):  # noqa: A001  (the module's counterpart of the builtin)
    """A file object (`tf.io.gfile.GFile`; the builtin one to read a local file in binary) for `path`; `mode` as
    for the builtin `open`."""
    if mode == "rb" and _local(path) is not None:
        if os.path.isdir(_local(path)):
            raise DataError(f"{path}: is a directory, expected a file")
        return builtins.open(_local(path), "rb")
    if "r" in mode and not tf.io.gfile.exists(path):
        raise tf.errors.NotFoundError(None, None, path)
    if "r" in mode and tf.io.gfile.isdir(path):
        raise DataError(f"{path}: is a directory, expected a file")
    return tf.io.gfile.GFile(path, mode)


class _GzipReader(gzip.GzipFile):
    """A `GzipFile` that closes the file it reads when it is closed."""

    def close(self):
        raw = self.fileobj
        try:
            super().close()
        finally:
            if raw is not None:
                raw.close()


def open_decompressed(path):
    """A binary file object for `path`, decompressed on the fly when the name ends with `.gz`."""
    raw = open(path, "rb")
    return _GzipReader(fileobj=raw, mode="rb") if os.fspath(path).endswith(".gz") else raw


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


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
            _named_errors(tf.io.gfile.copy)(path, local, overwrite=True)
        try:
            yield local
        except UserError as error:
            raise type(error)(str(error).replace(local, path.rstrip("/"))) from error


@dataclasses.dataclass(frozen=True)
class DirectoryKind:
    """A kind of directory that gtr-keras writes, known by its files, so that an existing one may be replaced.

    Args:
        description: what the directory is, for messages ("a keras-hub preset").
        marks: the names every directory of the kind holds.
        names: glob patterns (`fnmatch`, case-sensitive) of every top-level name such a directory may hold:
            what gtr-keras writes there, and what the format's other writers add.

    Example:
    >>> INDEX = DirectoryKind("an index", ("index.json",), ("index.json", "ids.txt", "embeddings.npy"))
    >>> INDEX.foreign(["index.json", "notes.txt"])
    'notes.txt'
    """

    description: str
    marks: tuple
    names: tuple

    def foreign(self, entries):
        """The first of directory entries `entries` that rules out the kind (a name it may not hold, or,
        with every mark missing from `entries`, the first entry), or None for a directory of the kind."""
        entries = sorted(entry for entry in entries if entry != CHECKSUMS_FILE)
        stranger = next(
            (entry for entry in entries if not any(fnmatch.fnmatchcase(entry, pattern) for pattern in self.names)), None
        )
        if stranger is None and not set(self.marks) <= set(entries):
            return entries[0] if entries else None
        return stranger


def _is_staging(name):
    """True for what a killed write of gtr-keras left (`.NAME.tmp-*`, `.NAME.upload-*`): never the user's."""
    return name.startswith(".") and (".tmp-" in name or ".upload-" in name)


def check_replaceable(target, kinds=()):
    """Refuses to let an output replace `target` when that would delete what the output's writer did not write.

    A missing `target` or an empty directory may always be replaced; a
    non-empty directory only when it is of one of `kinds` (`DirectoryKind`s:
    an earlier output of the same writer, or a directory of the format it
    writes). Call it before the expensive work; `atomic_outputs` calls it
    again before it replaces anything.

    Args:
        target: str or path-like, local or on any file system.
        kinds: the `DirectoryKind`s that `target` may be replaced as (none: only a missing or empty one).

    Raises:
        DataError: `target` is a non-empty directory of none of `kinds`, naming it and an entry that is
            not the output's.

    Example:
    >>> check_replaceable("models/gtr", [PRESET_DIRECTORY])  # doctest: +SKIP
    """
    target = os.fspath(target)
    if not isdir(target):
        return
    entries = [entry for entry in listdir(target) if entry != CHECKSUMS_FILE and not _is_staging(entry)]
    if target.startswith("ram://"):  # ram:// lists a sibling `NAME.partial/...` inside `NAME` (a prefix match)
        parent, name = parent_and_name(target)
        siblings = set(listdir(parent))
        entries = [entry for entry in entries if name + entry not in siblings]
    if not entries:
        return
    foreign = [kind.foreign(entries) for kind in kinds]
    if kinds and None in foreign:
        return
    entry = foreign[0] if kinds else entries[0]
    wanted = " or ".join(kind.description for kind in kinds)
    raise DataError(
        f"{target}: not replaced, it holds {entry}, which is not part of {wanted or 'this output'} (only an empty "
        "directory or an earlier output of the same kind is replaced); remove it or choose another output directory"
    )


def _fsync(path):
    perform("fsync", path)
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


def _commit(pairs):
    """Renames each staged path over its target; all or none of the targets change.

    One existing target is exchanged with its staged path in one step where the
    system can (`_exchange`), and its old contents removed. Otherwise existing
    targets are first renamed aside (`<staged>-old`); if any rename fails, the
    new ones are removed and the old ones put back.
    """
    if len(pairs) == 1 and os.path.lexists(pairs[0][1]) and _exchange(*pairs[0]):
        staged, target = pairs[0]
        _fsync(os.path.dirname(target))
        _remove(staged)  # now the old contents, under a staging name that `remove_staging` clears
        return
    moved_aside, placed = [], []
    try:
        for staged, target in pairs:
            if os.path.exists(target):
                _rename(target, f"{staged}-old")
                moved_aside.append((staged, target))
        for staged, target in pairs:
            _rename(staged, target)
            placed.append(target)
    except BaseException as error:
        if isinstance(error, CrashPoint):
            raise
        for target in placed:
            _remove(target)
        for staged, target in moved_aside:
            os.rename(f"{staged}-old", target)
        raise
    for parent in {os.path.dirname(target) for _, target in pairs}:
        _fsync(parent)
    for staged, _ in moved_aside:
        _remove(f"{staged}-old")


def _upload_and_commit(pairs):
    """`_commit` for targets on another file system: each staged tree is uploaded next to its target
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
                _make_parent(destination)
                perform("write", destination)
                tf.io.gfile.copy(file, destination, overwrite=True)
            uploads.append((upload, target, is_file))
        for upload, target, is_file in uploads:
            _delete(target)
            if is_file:
                _rename(upload, target)
                continue
            for file in files_under(upload):
                destination = f"{target}/{os.path.relpath(file, upload)}"
                _make_parent(destination)
                _rename(file, destination)
            _delete(upload)
    except BaseException as error:
        if isinstance(error, CrashPoint):
            raise
        for upload, _, _ in uploads:
            _delete(upload)
        raise


def parent_and_name(path):
    """`(parent, name)` of an output path as the staging beside it is named: a local path made absolute.

    Example:
    >>> parent_and_name("gs://bucket/runs/index")
    ('gs://bucket/runs', 'index')
    """
    path = os.fspath(path).rstrip("/")
    if is_local(path):
        return os.path.split(os.path.abspath(path.removeprefix("file://")))
    parent, _, name = path.rpartition("/")
    return parent, name


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
        with _record_lock(f"{parent}/{name}"):  # a change of the record that a writer without the lock makes
            remove_staging(f"{parent}/{name}/{CHECKSUMS_FILE}")
    for entry in sorted(entry.rstrip("/") for entry in listdir(parent)):
        if not entry.startswith((f".{name}.tmp-", f".{name}.upload-")):
            continue
        stale = f"{parent}/{entry}"
        if entry.endswith("-old") and is_local(parent) and not os.path.exists(f"{parent}/{name}"):
            _rename(stale, f"{parent}/{name}")
        else:
            _delete(stale)


def _make_parent(path):
    parent = _remote_parent(path)
    if parent:
        makedirs(parent)


def _remote_parent(path):
    """The parent of a path with a scheme, or None for one at the root (`ram://x`: its parent `ram:/` would
    name a local folder)."""
    scheme, rest = path.split("://", 1)
    head = rest.rstrip("/").rpartition("/")[0]
    return f"{scheme}://{head}" if head else None


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
                parent = parent_and_name(path)[0] if path else _remote_parent(target)
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
                    _fsync_tree(staged)
                else:
                    _fsync(staged)
            changes = [
                (target, _staged_entries(staged, parent_and_name(target)[1]))
                for staged, target in zip(staging, targets)
            ]
            with _recorded(changes):
                _upload_and_commit(
                    [(staged, target) for staged, target, path in zip(staging, targets, local) if path is None]
                )
                _commit(local_pairs)
        except BaseException as error:
            if isinstance(error, CrashPoint):
                raise
            for staged in staging:
                _remove(staged)
            for parent in reversed(created):  # the parents made for outputs that are not written
                with contextlib.suppress(OSError, DataError):
                    if isdir(parent) and not listdir(parent):
                        _delete(parent)
            raise


def _missing_parents(directory):
    """`directory` and those of its ancestors that do not exist, outermost first."""
    missing = []
    while directory and not isdir(directory):
        missing.insert(0, directory)
        parent = os.path.dirname(directory) if is_local(directory) else _remote_parent(directory)
        if not parent or parent == directory:
            break
        directory = parent
    return missing


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


def _staged_entries(staged, name):
    """`entries_at`'s shape for a local staged output that will be `name`: a file's state, or a directory's
    unit id (it holds its record by then)."""
    if os.path.isdir(staged):
        return {"files": {}, "units": {name: _read_record(os.fspath(staged))["unit"]}}
    return {"files": {name: checksum_records.file_state(staged)}, "units": {}}


@contextlib.contextmanager
def _record_lock(directory):
    """Holds an exclusive `fcntl.flock` on the local `directory` for the block (nothing elsewhere): one
    change of its record at a time, whichever writers write into it."""
    if not is_local(directory):
        yield
        return
    descriptor = os.open(_local(directory), os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def _change_record(directory, change):
    """Replaces the record of `directory` by `change(record)`, read and written under its lock."""
    path = f"{directory}/{CHECKSUMS_FILE}"
    with _record_lock(directory):
        record = _read_record(directory)
        if record is None:  # the directory was removed meanwhile
            return
        remove_staging(path)  # what a killed change of the record left: no other one runs under the lock
        changed = change(record)
        if changed != record:
            _replace_bytes(path, checksum_records.sealed(changed))


@contextlib.contextmanager
def _recorded(changes):
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
            _rename(staged, os.path.join(parent, name))
        except BaseException as error:
            if not isinstance(error, CrashPoint):
                _remove(staged)
            raise
        _fsync(parent)
        return
    upload = f"{parent}/.{name}.upload-{os.getpid()}"
    perform("write", upload)
    with tf.io.gfile.GFile(upload, "wb") as f:
        f.write(data)
    _rename(upload, path)


def replace_file(path, data):
    """Writes `data` (bytes) to the file `path` by one rename over it: a reader finds the old contents or the
    new, and `path` is never absent (as `atomic_file`'s commit may leave it for a moment, when the old file
    is renamed aside first). For a small file that readers poll, such as a manifest.

    Example:
    >>> replace_file("index/segments.json", json.dumps(manifest).encode("utf-8"))
    """
    with _recorded([(path, {"files": {parent_and_name(path)[1]: _bytes_state(data)}, "units": {}})]):
        _replace_bytes(path, data)


def _bytes_state(data):
    return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}


def rename(source, target):
    """Renames `source` to `target` (replacing a file there; one rename on a local file system), the records
    of their directories kept up to date (`_recorded`)."""
    source, target = os.fspath(source), os.fspath(target)
    entries = _recorded_entries(source)
    moved = {"files": {}, "units": {}}
    if entries is not None and parent_and_name(source)[0] == parent_and_name(target)[0]:
        moved = checksum_records.moved(entries, parent_and_name(source)[1], parent_and_name(target)[1])
    with _recorded([(source, {"files": {}, "units": {}}), (target, moved)]):
        _rename(source, target)


@_named_errors
def _rename(source, target):
    perform("rename", source)
    if _local(source) is not None:
        os.rename(_local(source), _local(target))
        return
    tf.io.gfile.rename(source, target, overwrite=True)
