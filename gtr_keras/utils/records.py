"""JSON records and what they say: reading a JSON object with a one-line error, describing what
changed between a recorded setting and the current one, hashing sequences of strings, and the
checks of small values that resumable outputs record.
"""

import hashlib
import json
import math
import re

import numpy as np

from gtr_keras.errors import DataError, UserError
from gtr_keras.utils import files


def check_positive_int(value, name):
    """Returns `value` as an int if it is a positive integer; else raises a `UserError` naming it.

    Example:
    >>> check_positive_int(32, "batch_size")
    32
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise UserError(f"{name} must be a positive int, got {value!r}.")
    return int(value)


def read_json_object(path, remedy):
    """The JSON object stored in `path`.

    Args:
        path: str or path-like.
        remedy: what the user should do about a bad file, ending the error.

    Returns:
        A dict.

    Raises:
        DataError: the file cannot be read, is not JSON or not a JSON object.

    Example:
    >>> read_json_object("indexes/scifact/retriever.json", "rebuild the index")["embedding_dim"]
    768
    """
    try:
        value = json.loads(files.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise DataError(f"{path}: unreadable ({unreadable_reason(e, path)}); {remedy}") from e
    if not isinstance(value, dict):
        raise DataError(f"{path}: holds a JSON {type(value).__name__}, not an object; {remedy}")
    return value


def unreadable_reason(error, path):
    """An error's message without the path it starts with (`gtr_keras.utils.files`' errors name it)."""
    return str(error).removeprefix(f"{path}: ")


def _shown(value):
    if isinstance(value, str) and len(value) == 64:  # a SHA-256 hex digest
        return f"{value[:12]}…"
    return str(value)


def describe_change(recorded, current, current_label="now"):
    """Names the first field of `current` that `recorded` lacks or holds another value for.

    Args:
        recorded: dict of what was recorded (a manifest, `retriever.json`).
        current: dict of the values that must match, in the order to check.
        current_label: words that introduce the current value.

    Returns:
        A phrase such as `"document_length 512 recorded, now 256"` (SHA-256
        digests shortened to 12 digits), or None when all fields match.

    Example:
    >>> describe_change({"piece_size": 2048}, {"piece_size": 40}, "this run has")
    'piece_size 2048 recorded, this run has 40'
    """
    for field, value in current.items():
        if field not in recorded:
            return f"no {field} recorded"
        if recorded[field] != value:
            return f"{field} {_shown(recorded[field])} recorded, {current_label} {_shown(value)}"
    return None


def strings_sha256(strings):
    """SHA-256 (hex) of a sequence of str or bytes, each prefixed by its length."""
    digest = hashlib.sha256()
    for string in strings:
        data = string if isinstance(string, bytes) else string.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_file_name(value):
    """A name of a file directly in a record's own directory: never a path that could leave it."""
    return isinstance(value, str) and value not in ("", ".", "..") and "/" not in value and "\\" not in value


_FIELD_TYPES = {
    "count": ("a non-negative integer", lambda v: _is_number(v) and isinstance(v, int) and v >= 0),
    "positive": ("a positive integer", lambda v: _is_number(v) and isinstance(v, int) and v >= 1),
    "number": ("a finite number", _is_number),
    "str": ("a string", lambda v: isinstance(v, str)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "sha256": ("a SHA-256 hex digest", lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None),
    "list": ("a list", lambda v: isinstance(v, list)),
    "object": ("an object", lambda v: isinstance(v, dict)),
    "file": ("the name of a file in its directory", _is_file_name),
}


def check_fields(path, record, fields, remedy):
    """Checks the types of a JSON record's fields, naming the file and the field of the first wrong one.

    Args:
        path: the record's file, for messages.
        record: the dict read from it.
        fields: `{field: type}`, a type one of `count`, `positive`, `number`, `str`, `bool`, `sha256`, `list`,
            `object`, `file` (a name in the record's directory, never a path), or a tuple of the values allowed;
            a type ending with `?` may be missing or null.
        remedy: what to do about a bad file, ending the error.

    Returns:
        `record`.

    Raises:
        DataError: a required field is missing, or a field is of another type or value.

    Example:
    >>> check_fields("export.json", {"eos_id": 1}, {"eos_id": "count"}, "export the model again")
    {'eos_id': 1}
    """
    for field, kind in fields.items():
        optional = isinstance(kind, str) and kind.endswith("?")
        value = record.get(field)
        if value is None and field not in record and not optional:
            raise DataError(f"{path}: field {field!r} is missing; {remedy}")
        if value is None and optional:
            continue
        if isinstance(kind, tuple):
            if value not in kind or isinstance(value, bool) != any(isinstance(k, bool) for k in kind):
                raise DataError(
                    f"{path}: field {field!r} must be one of {', '.join(json.dumps(k) for k in kind)}, got "
                    f"{json.dumps(value)}; {remedy}"
                )
            continue
        description, valid = _FIELD_TYPES[kind.rstrip("?")]
        if not valid(value):
            raise DataError(f"{path}: field {field!r} must be {description}, got {json.dumps(value)[:80]}; {remedy}")
    return record
