"""Which existing directories an output may replace: empty ones and those of the kinds its writer names."""

import dataclasses
import fnmatch
import os

from gtr_keras.errors import DataError
from gtr_keras.utils.files.paths import isdir, listdir, parent_and_name
from gtr_keras.utils.files.recorded import CHECKSUMS_FILE


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
