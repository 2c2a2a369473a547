"""The filter syntax: `FIELD OP VALUE` clauses, ANDed, and `Filter`, the clauses with an allow-list of ids.

A clause is `FIELD = VALUE`, `FIELD != VALUE`, `FIELD in (VALUE, VALUE, ...)` or `FIELD < | <= | > | >=
NUMBER`. A value is a number (`2019`, `-0.5`, `1e3`: ASCII digits), `true` or `false`, a quoted string (`'en'`
or `"en"`, with `\\'` and `\\"` inside) or a bare word (`en`: a string). A field is a name of ASCII letters,
digits, `_`, `.` and `-` (not starting with a digit), or any name in backquotes (`` `release year` ``).
Whitespace is what `str.isspace` calls whitespace (the no-break space and the other Unicode spaces too).

The grammar's pieces (`SPACES`, `WORD`, `QUOTED`, `NUMBER`, `FIELD_NAME`) are regular expressions in the syntax
that Python's `re` and RE2 read alike, so that the searcher SavedModel's parser
(`exports/savedmodel/filter_graph.py`, RE2 through `tf.strings`) is built from the same ones.
"""

import collections.abc
import dataclasses
import numbers
import os
import re
from collections.abc import Iterable, Sequence

from gtr_keras.errors import UserError
from gtr_keras.utils.text_files import check_id_text, check_text

OPERATORS = ("=", "!=", "<", "<=", ">", ">=", "in")
ORDER_OPERATORS = ("<", "<=", ">", ">=")
# The characters of `str.isspace` (the same from Unicode 14 to 15.1), as a character class's contents.
SPACES = r"\t\n\x0b\x0c\r\x1c-\x1f\x20\x85\xa0" + "\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
SYMBOLS = r"<=|>=|!=|=|<|>"
WORD = rf"[^{SPACES}()=<>!,'\"`]+"
QUOTED = r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\""""
NUMBER = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
FIELD_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]*"
_TOKEN = re.compile(
    rf"[{SPACES}]*(?:(?P<op>{SYMBOLS})|(?P<punct>[(),])|`(?P<backquoted>[^`]+)`|(?P<quoted>{QUOTED})|(?P<word>{WORD}))"
)
_FIELD = re.compile(rf"{FIELD_NAME}\Z")
_NUMBER = re.compile(rf"{NUMBER}\Z")


@dataclasses.dataclass(frozen=True)
class Clause:
    """One parsed clause: `field`, `op` (one of `OPERATORS`), `values` (a tuple; one value but for `in`),
    `text`, the expression as given (for messages), and `written`, each value as written (a quoted string
    unquoted), which a string field compares with (`code = 007` matches `"007"`)."""

    field: str
    op: str
    values: tuple
    text: str
    written: tuple = ()


def _tokens(text):
    tokens, position = [], 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            if not text[position:].strip():
                break
            raise UserError(f"filter {text!r}: cannot parse from {text[position:].strip()!r}")
        tokens.append((match.lastgroup, match.group(match.lastgroup)))
        position = match.end()
    return tokens


def _value(kind, token, text):
    if kind == "quoted":
        return re.sub(r"\\(.)", r"\1", token[1:-1])
    if kind != "word":
        raise UserError(f"filter {text!r}: expected a value, got {token!r}")
    if token in ("true", "false"):
        return token == "true"
    if _NUMBER.match(token):
        if any(c in token for c in ".eE"):
            return float(token)
        try:
            return int(token)
        except ValueError:  # more digits than Python converts (`sys.get_int_max_str_digits`): past a float64
            return float(token)
    return token


def _written(kind, token):
    return token if kind == "word" else re.sub(r"\\(.)", r"\1", token[1:-1])


def parse_clause(text):
    """Parses one clause.

    Raises:
        UserError: an expression that is not a clause, or not valid Unicode (a lone surrogate), naming it.

    Example:
    >>> parse_clause("lang in (en, 'de')")
    Clause(field='lang', op='in', values=('en', 'de'), text="lang in (en, 'de')", written=('en', 'de'))
    """
    tokens = _tokens(check_text(f"filter {text!r}", text))
    if len(tokens) < 3:
        raise UserError(f"filter {text!r}: expected FIELD OP VALUE (e.g. 'year >= 2019' or \"lang in (en, de)\")")
    (field_kind, field), (op_kind, op) = tokens[0], tokens[1]
    if field_kind == "backquoted":
        pass
    elif field_kind != "word" or not _FIELD.match(field):
        raise UserError(f"filter {text!r}: {field!r} is not a field name (quote odd names in backquotes)")
    if op_kind == "word" and op.lower() == "in":
        rest = tokens[2:]
        if rest[0] != ("punct", "(") or rest[-1] != ("punct", ")") or len(rest) < 3:
            raise UserError(f"filter {text!r}: expected `in (A, B, ...)`")
        inner = rest[1:-1]
        if any(inner[i] != ("punct", ",") for i in range(1, len(inner), 2)) or len(inner) % 2 == 0:
            raise UserError(f"filter {text!r}: expected values separated by commas inside `in (...)`")
        values = [inner[i] for i in range(0, len(inner), 2)]
        return Clause(field, "in", tuple(_value(*v, text) for v in values), text, tuple(_written(*v) for v in values))
    if op_kind != "op":
        raise UserError(f"filter {text!r}: expected an operator (=, !=, <, <=, >, >=, in) after {field!r}")
    value = _value(*tokens[2], text)
    if len(tokens) != 3:
        raise UserError(f"filter {text!r}: expected one value after {op!r} (use `in (...)` for several)")
    if op in ORDER_OPERATORS and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise UserError(f"filter {text!r}: {op} compares numbers, got {value!r}")
    return Clause(field, op, (value,), text, (_written(*tokens[2]),))


def _strings(value, what):
    """`value`, a string or an iterable of strings, as a list of strings: a string is one item, never its
    characters."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, collections.abc.Iterable):
        raise UserError(f"filter: {what} must be a string or a list of strings, got {type(value).__name__}")
    items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise UserError(f"filter: {what} must be strings, got {type(item).__name__} {item!r:.40}")
    return items


def _is_id(value):
    return isinstance(value, str) or (isinstance(value, numbers.Integral) and not isinstance(value, bool))


def id_list(ids: object, what: str) -> list[str]:
    """`ids` as a list of document ids (strings): one id (a string, or an integer as a corpus's `_id` may be)
    is one item, never its characters; an iterable of ids is each of them. Files of ids are their callers'
    (given as an `os.PathLike`: `Filter`, `Index.delete`).

    Each id names a document already stored, checked as such (`text_files.check_id_text(reference=True)`:
    not empty, valid Unicode, no NUL or line break; whitespace kept, as older versions stored such ids).

    Raises:
        UserError: naming `what`, for anything else (bytes, a float, a list of lists), or an id that breaks
            that rule (naming its place, `delete[3]`).

    Example:
    >>> id_list("d5", "delete"), id_list(["d1", 7], "delete")
    (['d5'], ['d1', '7'])
    """
    if _is_id(ids):
        return [check_id_text(what, str(ids), "id", UserError, reference=True)]
    if isinstance(ids, (bytes, bytearray, os.PathLike)) or not isinstance(ids, collections.abc.Iterable):
        raise UserError(f"{what} must be an id (a string or an integer) or a list of ids, got {type(ids).__name__}")
    items = list(ids)
    for item in items:
        if not _is_id(item):
            raise UserError(f"{what} must be strings or integers, got {type(item).__name__} {item!r:.40}")
    return [check_id_text(f"{what}[{i}]", str(item), "id", UserError, reference=True) for i, item in enumerate(items)]


class Filter:
    """What a filtered search may return: the documents matching every clause, and in `ids` when given.

    Args:
        expressions: a clause (str) or a sequence of them, ANDed (`parse_clause`), or None (none).
        ids: an allow-list of document ids: a sequence of ids (strings, or integers as a corpus's `_id` may
            be), one id (`ids="d5"` is the one document `d5`), a file of one id a line given as an
            `os.PathLike` (`pathlib.Path("allowed.txt")`; a `str` is always an id), or None (every id).

    Raises:
        UserError: a clause that does not parse, or an argument of another type; `DataError`: a file of ids
            that cannot be read, or an id there twice (naming its line).

    Example:
    >>> Filter(["year >= 2019", "lang in (en, de)"], ids=["d1", "d7"]).clauses[0].op
    '>='
    >>> Filter(ids="d5").ids
    ['d5']
    """

    def __init__(
        self,
        expressions: str | Sequence[str] | None = (),
        ids: str | int | Iterable[str | int] | os.PathLike[str] | None = None,
    ):
        expressions = () if expressions is None else _strings(expressions, "expressions")
        self.clauses = [parse_clause(expression) for expression in expressions]
        if isinstance(ids, os.PathLike):
            from gtr_keras.storage.layout import read_id_file

            ids = read_id_file(os.fspath(ids))[0]
        self.ids = None if ids is None else id_list(ids, "filter: ids")

    @classmethod
    def of(cls, value: "str | Sequence[str] | Filter | None") -> "Filter | None":
        """`value` as a `Filter`: a `Filter`, a clause (str), a list of clauses, or None (None)."""
        if value is None or isinstance(value, Filter):
            return value
        return cls(value)

    def __repr__(self) -> str:
        ids = "" if self.ids is None else f", ids=<{len(self.ids)} ids>"
        return f"Filter({[clause.text for clause in self.clauses]!r}{ids})"
