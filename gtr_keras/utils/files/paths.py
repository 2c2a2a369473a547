"""Paths of any file system TensorFlow knows, local ones without TensorFlow: reading, listing, making and deleting."""

import builtins
import contextlib
import functools
import glob as globbing
import gzip
import os
import shutil

from gtr_keras.errors import DataError
from gtr_keras.utils.file_operations import perform


class _TensorFlow:
    """The `tensorflow` module, imported on first attribute access."""

    def __getattr__(self, name):
        import tensorflow

        return getattr(tensorflow, name)


tf = _TensorFlow()


class FilePath(os.PathLike):
    """A path as given, scheme and all, standing where an `os.PathLike` is asked for a file (`pathlib.Path`
    would make `gs://bucket/ids.txt` `gs:/bucket/ids.txt`).

    Args:
        path: a local path or one with a scheme (`gs://`, `ram://`).

    Example:
    >>> os.fspath(FilePath("gs://bucket/withdrawn.txt"))
    'gs://bucket/withdrawn.txt'
    """

    def __init__(self, path):
        self.path = os.fspath(path)

    def __fspath__(self):
        return self.path

    def __repr__(self):
        return f"FilePath({self.path!r})"


def is_local(path):
    """True for a path of the local file system (no scheme, or `file://`)."""
    path = os.fspath(path)
    return "://" not in path or path.startswith("file://")


def named_errors(function):
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


def local_path(path):
    """`path` on the local file system (`file://` removed), or None for another file system's."""
    return path.removeprefix("file://") if is_local(path) else None


@named_errors
def exists(path):
    local = local_path(path)
    return os.path.exists(local) if local is not None else tf.io.gfile.exists(path)


@named_errors
def isdir(path):
    local = local_path(path)
    if local is not None:
        return os.path.isdir(local)
    return tf.io.gfile.exists(path) and tf.io.gfile.isdir(path)  # `exists` raises for an unknown scheme


def isfile(path):
    return exists(path) and not isdir(path)


@named_errors
def modified_ns(path):
    """When the file `path` was last written (ns since the epoch; a file renamed into place has its own
    time), or None where there is none.

    Example:
    >>> modified_ns("indexes/scifact/retriever.json") > 0
    True
    """
    local = local_path(path)
    if local is not None:
        try:
            return os.stat(local).st_mtime_ns
        except FileNotFoundError:
            return None
    return tf.io.gfile.stat(path).mtime_nsec if tf.io.gfile.exists(path) else None


@named_errors
def listdir(path):
    if local_path(path) is not None:
        return sorted(os.listdir(local_path(path)))
    return sorted(name.rstrip("/") for name in tf.io.gfile.listdir(path))


@named_errors
def glob(pattern):
    """The paths matching `pattern` (`*`, `?`, `[...]` within one path component, names starting with a dot
    included, as TensorFlow matches them), sorted."""
    if local_path(pattern) is not None:
        return sorted(globbing.glob(local_path(pattern), include_hidden=True))
    return sorted(tf.io.gfile.glob(pattern))


@named_errors
def makedirs(path):
    local = local_path(path)
    if local is not None:
        if not os.path.isdir(local):
            perform("mkdir", local)
            os.makedirs(local, exist_ok=True)
        return
    if not tf.io.gfile.exists(path):
        perform("mkdir", path)
    tf.io.gfile.makedirs(path)


@named_errors
def delete(path):
    local = local_path(path)
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
    if local_path(directory) is not None:
        return sorted(os.path.join(root, name) for root, _, names in os.walk(local_path(directory)) for name in names)
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


@named_errors
def open(path, mode="rb"):  # noqa: A001  (the module's counterpart of the builtin)
    """A file object (`tf.io.gfile.GFile`; the builtin one to read a local file in binary) for `path`; `mode` as
    for the builtin `open`."""
    if mode == "rb" and local_path(path) is not None:
        if os.path.isdir(local_path(path)):
            raise DataError(f"{path}: is a directory, expected a file")
        return builtins.open(local_path(path), "rb")
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


def make_parent(path):
    parent = remote_parent(path)
    if parent:
        makedirs(parent)


def remote_parent(path):
    """The parent of a path with a scheme, or None for one at the root (`ram://x`: its parent `ram:/` would
    name a local folder)."""
    scheme, rest = path.split("://", 1)
    head = rest.rstrip("/").rpartition("/")[0]
    return f"{scheme}://{head}" if head else None


@named_errors
def rename_path(source, target):
    perform("rename", source)
    if local_path(source) is not None:
        os.rename(local_path(source), local_path(target))
        return
    tf.io.gfile.rename(source, target, overwrite=True)
