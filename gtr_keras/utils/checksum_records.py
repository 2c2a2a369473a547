"""What a `checksums.json` holds: the record of a directory gtr-keras writes, sealed, and how a write into a
recorded directory changes it (`utils.files` does the I/O; `utils.checksums` verifies).

A record (format 2) names its directory's files and the directories below it
that are units of their own:

- `unit`: a random id of this directory, written once when it is committed;
- `files`: `{relative path: {"sha256", "size"}}` of every file below it but
  those inside its units;
- `units`: `{relative path: unit id}` of each directory below it that holds a
  record of its own (a search index's `index/`, an updated index's
  `segment-NNNNNN/`, a rebuilt BM25 side): its parent names which one it is,
  so that a unit removed, emptied or swapped for another one is seen;
- `seal`: the SHA-256 of the record's canonical JSON without this field, so
  that a changed byte of the record itself names it (the file must also be
  that canonical JSON, byte for byte).

A write into a recorded directory after its commit (an update's segment, its
deletion list and manifest; `tune`'s setting and plot; a rebuilt or removed
BM25 side) changes its record in two steps around the change: first the entry
allows the state before and the state after (`{"any_of": [...]}`, None for
"absent"), then it holds the state after. A kill at any point leaves every
file in a state its record allows.
"""

import hashlib
import json
import os
import uuid

from gtr_keras.errors import DataError

CHECKSUMS_FILE = "checksums.json"
CHECKSUMS_FORMAT = 2
REMEDY = "write the directory again"
_FIELDS = ("format", "algorithm", "unit", "files", "units")


def canonical(record):
    """The bytes a record is written as: JSON, one space of indent, ASCII only, a final newline."""
    return (json.dumps(record, indent=1) + "\n").encode("ascii")


def sealed(record):
    """`record` (without its seal) as the bytes of a `checksums.json`, its seal added last."""
    record = {field: record[field] for field in _FIELDS}
    return canonical({**record, "seal": hashlib.sha256(canonical(record)).hexdigest()})


def new_record(files=None, units=None):
    """A record of a newly committed directory: a new unit id, and `files` and `units` sorted by path."""
    return {
        "format": CHECKSUMS_FORMAT,
        "algorithm": "sha256",
        "unit": uuid.uuid4().hex,
        "files": dict(sorted((files or {}).items())),
        "units": dict(sorted((units or {}).items())),
    }


def _is_relative(path):
    parts = path.split("/")
    return not path.startswith("/") and "" not in parts and "." not in parts and ".." not in parts


def _is_file_state(value):
    return (
        isinstance(value, dict)
        and set(value) == {"sha256", "size"}
        and isinstance(value["sha256"], str)
        and isinstance(value["size"], int)
    )


def _is_unit_id(value):
    return isinstance(value, str) and len(value) == 32


def allowed(entry):
    """The states an entry allows: `[state]`, or those of its `any_of` (None for absent)."""
    return entry["any_of"] if isinstance(entry, dict) and "any_of" in entry else [entry]


def parse(data, path):
    """The record of a `checksums.json` whose bytes are `data`.

    Raises:
        DataError: naming `path`: not JSON, a missing or malformed field, another format, or a seal that does
            not match (a changed byte).

    Example:
    >>> parse(sealed(new_record({"ids.txt": {"sha256": 64 * "0", "size": 3}})), "x/checksums.json")["units"]
    {}
    """

    def bad(what):
        return DataError(f"{path}: {what}; {REMEDY}")

    try:
        record = json.loads(data.decode("ascii"))
    except (ValueError, RecursionError) as error:
        raise bad(f"not a checksums record ({str(error).splitlines()[0]})") from None
    if not isinstance(record, dict):
        raise bad("not a checksums record (not a JSON object)")
    if record.get("format") != CHECKSUMS_FORMAT or record.get("algorithm") != "sha256":
        raise bad(
            f"format {record.get('format')!r} ({record.get('algorithm')!r}), this gtr-keras reads format "
            f"{CHECKSUMS_FORMAT} (sha256)"
        )
    for field in (*_FIELDS, "seal"):
        if field not in record:
            raise bad(f"field {field!r} is missing")
    if canonical(record) != data or sealed(record) != data:
        raise bad("changed since it was written (its seal does not match its contents)")
    if (
        not _is_unit_id(record["unit"])
        or not isinstance(record["files"], dict)
        or not isinstance(record["units"], dict)
    ):
        raise bad("fields 'unit', 'files' and 'units' must be a unit id and two objects")
    for kind, check in (("files", _is_file_state), ("units", _is_unit_id)):
        for relative, entry in record[kind].items():
            states = allowed(entry)
            if not _is_relative(relative) or not isinstance(states, list) or not states:
                raise bad(f"entry {relative!r} of {kind!r} is not a path below the directory")
            if not all(state is None or check(state) for state in states):
                raise bad(f"entry {relative!r} of {kind!r} is malformed")
    return record


def entries_at(record, name):
    """`{"files": ..., "units": ...}`: the entries of `record` for `name` (a file or directory directly in its
    directory) and everything below it."""
    return {
        kind: {path: entry for path, entry in record[kind].items() if path == name or path.startswith(f"{name}/")}
        for kind in ("files", "units")
    }


def _any_of(states):
    unique = []
    for state in states:
        if state not in unique:
            unique.append(state)
    return unique[0] if len(unique) == 1 else {"any_of": unique}


def while_changing(record, name, after):
    """The record that allows both the entries at `name` it holds and `after` (`entries_at`'s shape): the
    record of a directory while `name` in it is being replaced, added or removed."""
    before = entries_at(record, name)
    changed = {kind: dict(record[kind]) for kind in ("files", "units")}
    for kind in ("files", "units"):
        for path in before[kind].keys() | after[kind].keys():
            old = allowed(before[kind][path]) if path in before[kind] else [None]
            new = [after[kind].get(path)]
            changed[kind][path] = _any_of([*old, *new])
    return {**record, **{kind: dict(sorted(entries.items())) for kind, entries in changed.items()}}


def after_change(record, name, after):
    """The record once `name` holds `after` (`entries_at`'s shape; empty for a removed `name`)."""
    before, changed = entries_at(record, name), {}
    for kind in ("files", "units"):
        kept = {path: entry for path, entry in record[kind].items() if path not in before[kind]}
        changed[kind] = dict(sorted({**kept, **after[kind]}.items()))
    return {**record, **changed}


def moved(entries, source, target):
    """`entries` (`entries_at`'s shape) of the name `source`, as they are once renamed to `target`."""
    return {
        kind: {target + path.removeprefix(source): entry for path, entry in entries[kind].items()}
        for kind in ("files", "units")
    }


def sha256_of(file):
    """`(SHA-256 hex digest, size in bytes)` of what the binary file object `file` holds from its position."""
    digest, size = hashlib.sha256(), 0
    while chunk := file.read(1 << 22):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def file_state(path):
    """The state (`{"sha256", "size"}`) of the local file `path`."""
    with open(path, "rb") as f:
        sha256, size = sha256_of(f)
    return {"sha256": sha256, "size": size}


def staged_entries(directory):
    """`(files, units)` of a local directory staged for its commit: every file below it, but those inside
    directories that hold a record of their own (units, named by their id) and its own `checksums.json`."""
    files, units = {}, {}
    for root, dirs, names in os.walk(directory):
        relative_root = os.path.relpath(root, directory).replace(os.sep, "/")
        if relative_root != "." and CHECKSUMS_FILE in names:
            path = os.path.join(root, CHECKSUMS_FILE)
            with open(path, "rb") as f:
                units[relative_root] = parse(f.read(), path)["unit"]
            dirs.clear()
            continue
        for name in names:
            relative = name if relative_root == "." else f"{relative_root}/{name}"
            if relative != CHECKSUMS_FILE:
                files[relative] = file_state(os.path.join(root, name))
    return files, units


def write_staged(directory):
    """Writes `directory/checksums.json`, the record of a local directory staged for its commit, and returns
    its unit id.

    Example:
    >>> write_staged("/tmp/.index.tmp-x")  # doctest: +SKIP
    '3f2a...'
    """
    record = new_record(*staged_entries(directory))
    with open(os.path.join(directory, CHECKSUMS_FILE), "wb") as f:
        f.write(sealed(record))
    return record["unit"]
