"""The one rule for the texts and ids gtr-keras takes, from a file, from Python or over HTTP.

A text is valid Unicode: no lone surrogate (U+D800 to U+DFFF alone), which UTF-8 cannot encode and JSON's
`\\ud800` escape or a Python string can hold. A document's id is a text that is not empty and holds no
whitespace (a TREC run line, `qid Q0 docid rank score tag`, cannot keep it) and no NUL. An id that names a
document already stored (one to delete, one a filter allows) may hold whitespace but no line break: older
versions stored such ids unchecked, and deleting them is how such an index is repaired.

Each caller names where the value is (`FILE:LINE`, `Corpus row 3`, `queries[0]`, a request's field) and gets
the same phrase of the problem: the readers of corpus files, `Corpus`, `Index`, the Beam pipeline, the
encoders and rerankers, filters and `gtr-keras serve`.
"""

import re

from gtr_keras.errors import DataError, UserError

_SURROGATE = re.compile("[\ud800-\udfff]")
# What an id may not hold: whitespace (`\s` is what `str.isspace` calls whitespace), NUL, a lone surrogate.
_NOT_IN_IDS = re.compile("[\\s\0\ud800-\udfff]")


def text_problem(text):
    """What makes the string `text` no text gtr-keras takes (a lone surrogate, named with its place), or None.

    Example:
    >>> text_problem("lift"), text_problem("lift \\udcff")
    (None, 'a lone surrogate (U+DCFF at character 5), which UTF-8 cannot encode')
    """
    match = _SURROGATE.search(text)
    if match is None:
        return None
    return f"a lone surrogate (U+{ord(match.group()):04X} at character {match.start()}), which UTF-8 cannot encode"


def check_text(where, text, error=UserError):
    """`text`, a string, unless it holds a lone surrogate (`text_problem`): then `error` naming `where`.

    Example:
    >>> check_text("queries[0]", "lift on a wing")
    'lift on a wing'
    """
    problem = text_problem(text)
    if problem is not None:
        raise error(f"{where}: {problem}; give valid Unicode text")
    return text


def id_problem(value, reference=False):
    """What makes the string `value` no id (`check_id_text` raises it), or None.

    Example:
    >>> id_problem("d 1"), id_problem("d 1", reference=True)
    ('holds whitespace, which TREC run files (and so evaluation) cannot keep', None)
    """
    if not value:
        return "is empty"
    if _NOT_IN_IDS.search(value) is None:
        return None
    problem = text_problem(value)
    if problem is not None:
        return f"holds {problem}"
    if "\0" in value:
        return "holds a NUL character"
    if reference and ("\n" in value or "\r" in value):
        return "holds a line break"
    return None if reference else "holds whitespace, which TREC run files (and so evaluation) cannot keep"


def check_id_text(where, value, field, error=DataError, reference=False):
    """`value`, an id (a string), unless it breaks the rule of ids: `error` naming `where` and `field` then.

    Args:
        where: where the id is (`FILE:LINE`, `Corpus row 3`).
        value: the id.
        field: what the id is, for the message (`` `_id` ``, `query-id`, `id`).
        error: the exception class raised.
        reference: the id names a document already stored (to delete, to allow): whitespace is kept (but for
            line breaks), as older versions stored such ids.

    Example:
    >>> check_id_text("run.txt:2", "d 1", "corpus-id")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gtr_keras.errors.DataError: run.txt:2: corpus-id 'd 1' holds whitespace, which TREC run files (and so ...
    """
    problem = id_problem(value, reference)
    if problem is not None:
        raise error(f"{where}: {field} {value!r} {problem}")
    return value


def id_value(where, value, field="`_id`", error=DataError, reference=False):
    """A document's id (a string, or an integer as JSON may write one) as a string, checked by `check_id_text`
    (`reference`: as it takes it).

    Raises:
        `error`: naming `where` and `field`, for None (missing), another type (a bool, a float, bytes), or an id
            that breaks the rule.

    Example:
    >>> id_value("corpus.jsonl:3", 7)
    '7'
    """
    if value is None:
        raise error(f"{where}: missing field {field}")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise error(f"{where}: field {field} must be a string or an integer, got {type(value).__name__}")
    return check_id_text(where, str(value), field, error, reference)


def text_value(where, value, field, required, error=DataError):
    """A document's text field (`title`, `text`) as a string: `""` for a missing optional one.

    Raises:
        `error`: naming `where` and the field, for a missing required one, another type than a string, or a text
            that holds a lone surrogate.

    Example:
    >>> text_value("corpus.jsonl:3", None, "title", required=False)
    ''
    """
    if value is None:
        if required:
            raise error(f"{where}: missing field `{field}`")
        return ""
    if not isinstance(value, str):
        raise error(f"{where}: field `{field}` must be a string, got {type(value).__name__}")
    if _SURROGATE.search(value) is not None:
        check_text(f"{where}: field `{field}`", value, error)
    return value
