"""`FilterGraph`: the filter syntax of `search --filter` evaluated by TensorFlow ops, for the searcher SavedModel.

TF Serving has no Python: the clauses arrive as a tf.string tensor and are parsed with RE2 (`tf.strings`) by
the grammar of `filters.expressions`, built from its pieces (`parse_clause`: the same clauses refused, the same
fields, operators and values; `tests/exports/test_filter_graph.py` checks it on generated clauses), and matched
against the index's metadata columns (`MetadataColumns`), kept in the SavedModel as variables and, for
strings, a hash table of each field's vocabulary. A clause that does not parse, names an unknown field or
compares a number with a string fails the request (`InvalidArgumentError` naming it).
"""

import tensorflow as tf

from gtr_keras.filters.expressions import FIELD_NAME, NUMBER, ORDER_OPERATORS, QUOTED, SPACES, SYMBOLS, WORD

_S = f"[{SPACES}]"
_IN = "[iI][nN]"
# A field in backquotes (group 1) then any operator (2), or a field name (3) then a symbol (4) or, after
# whitespace, `in` (5): `langin (en)` is no clause, as `langin` is one word for `expressions`. Then the rest (6).
_CLAUSE = (
    rf"^{_S}*(?:`([^`]+)`{_S}*({SYMBOLS}|{_IN})|({FIELD_NAME})(?:{_S}*({SYMBOLS})|{_S}+({_IN}))){_S}*((?s:.+?)){_S}*$"
)
_VALUE = f"{QUOTED}|{WORD}"  # `expressions`' quoted and word tokens
_LIST = rf"\({_S}*(?:{_VALUE})(?:{_S}*,{_S}*(?:{_VALUE}))*{_S}*\)"
_COMPARE = {"<": tf.less, "<=": tf.less_equal, ">": tf.greater, ">=": tf.greater_equal}


def _unquote(values):
    quoted = tf.strings.regex_full_match(values, r"(?s)'.*'|\".*\"")
    length = tf.strings.length(values)
    inner = tf.strings.substr(values, tf.minimum(length, 1), tf.maximum(length - 2, 0))
    return tf.where(quoted, tf.strings.regex_replace(inner, r"\\(.)", r"\1"), values)


def _list_values(listed):
    """The values of a well-formed `(A, B, ...)` as written, split at the commas between values (not those
    inside quotes): `%` is escaped as `%p` so that `%s` marks the splits."""
    escaped = tf.strings.regex_replace(tf.strings.regex_replace(listed, "%", "%p"), r"^\(|\)$", "")
    joined = tf.strings.regex_replace(escaped, rf"{_S}*({_VALUE}){_S}*,?", r"\1%s")
    values = tf.strings.split(joined, "%s")[:-1]
    return tf.strings.regex_replace(values, "%p", "%")


def parse_clause(clause):
    """One clause (tf.string scalar) parsed by the grammar of `filters.expressions.parse_clause`: the same
    clauses are refused, and the others give the same field, operator and values.

    Returns:
        `(refusal, field, op, written)`: why `clause` is refused (tf.string, "" when it is not), its field
        (backquotes removed), its operator (`in` lowercased) and its values as written (tf.string `[n]`,
        quotes kept: `_unquote` removes them); the last three are meaningful where `refusal` is "".

    Example:
    >>> [t.numpy() for t in parse_clause(tf.constant("`lang` IN (en, 'de')"))[1:]]
    [b'lang', b'in', array([b'en', b"'de'"], dtype=object)]
    """
    matched = tf.strings.regex_full_match(clause, _CLAUSE)
    field = tf.strings.regex_replace(clause, _CLAUSE, r"\1\3")
    op = tf.strings.lower(tf.strings.regex_replace(clause, _CLAUSE, r"\2\4\5"))
    rest = tf.strings.regex_replace(clause, _CLAUSE, r"\6")
    is_in = tf.equal(op, "in")
    shaped = tf.where(is_in, tf.strings.regex_full_match(rest, _LIST), tf.strings.regex_full_match(rest, _VALUE))
    written = tf.cond(is_in, lambda: _list_values(rest), lambda: tf.reshape(rest, [1]))
    ordered = tf.reduce_any(tf.equal(op, list(ORDER_OPERATORS)))
    numbers = tf.reduce_all(tf.strings.regex_full_match(written, NUMBER))
    refusal = tf.where(
        ~matched,
        "filter: cannot parse (expected FIELD OP VALUE):",
        tf.where(
            ~shaped,
            "filter: cannot parse (expected one value, or `in (A, B, ...)`):",
            tf.where(ordered & ~numbers, "filter: < <= > >= compare numbers:", ""),
        ),
    )
    return refusal, field, op, written


def _fail(message, detail):
    return tf.debugging.Assert(False, [message, detail])


class FilterGraph(tf.Module):
    """The rows a filter allows, computed in a TensorFlow graph from an index's metadata columns.

    Args:
        columns: the `MetadataColumns` of the index's rows (`Retriever.metadata`).

    Example:
    >>> graph = FilterGraph(MetadataColumns(["d0", "d1"], [{"year": 2018}, {"year": 2021}]))
    >>> graph.mask(tf.constant(["year >= 2019"])).numpy().tolist()
    [False, True]
    """

    def __init__(self, columns):
        super().__init__(name="filter_graph")
        self.num_rows = len(columns.ids)
        self._fields = {}
        for number, (field, column) in enumerate(sorted(columns.columns.items())):
            stored = {
                "present": tf.Variable(column.present, trainable=False, name=f"present_{number}"),
                "codes": tf.Variable(column.codes, trainable=False, name=f"codes_{number}"),
            }
            if column.kind in ("string", "list"):
                keys = sorted(column.vocabulary, key=column.vocabulary.get)
                initializer = tf.lookup.KeyValueTensorInitializer(
                    tf.constant(keys or [""], tf.string),
                    tf.constant([column.vocabulary[k] for k in keys] or [-2], tf.int32),
                )
                stored["vocabulary"] = tf.lookup.StaticHashTable(initializer, default_value=-2)
            if column.kind == "list":
                stored["element_rows"] = tf.Variable(
                    column.element_rows.astype("int32"), trainable=False, name=f"rows_{number}"
                )
            self._fields[field] = (column.kind, stored)
        self._tables = [stored["vocabulary"] for _, stored in self._fields.values() if "vocabulary" in stored]
        self._variables = [v for _, stored in self._fields.values() for k, v in stored.items() if k != "vocabulary"]

    def mask(self, clauses):
        """bool `[N]`: the rows every clause of `clauses` (tf.string `[c]`, ANDed; none: every row) allows."""
        clauses = tf.convert_to_tensor(clauses, tf.string)
        allowed = tf.ones([self.num_rows], tf.bool)
        for_each = tf.range(tf.shape(clauses)[0])

        def step(i, allowed):
            return i + 1, allowed & self._clause(clauses[i])

        _, allowed = tf.while_loop(lambda i, _: i < tf.size(for_each), step, [0, allowed])
        return allowed

    def _clause(self, clause):
        refusal, field, op, written = parse_clause(clause)
        check = tf.debugging.Assert(tf.equal(refusal, ""), [refusal, clause])
        with tf.control_dependencies([check]):
            field, op, written = tf.identity(field), tf.identity(op), tf.identity(written)
        branches = [
            (tf.equal(field, name), lambda name=name: self._match(name, op, written, clause)) for name in self._fields
        ]

        def unknown():
            with tf.control_dependencies([_fail("filter: unknown field:", clause)]):
                return tf.zeros([self.num_rows], tf.bool)

        return tf.case(branches, default=unknown, exclusive=False) if branches else unknown()

    def _match(self, name, op, written, clause):
        kind, stored = self._fields[name]
        present = stored["present"]
        values = _unquote(written)
        bare = {
            "number": tf.strings.regex_full_match(written, NUMBER),
            "boolean": (written == "true") | (written == "false"),
        }
        if kind in bare:
            valid = tf.reduce_all(bare[kind])
        else:
            valid = ~tf.reduce_any((written == "true") | (written == "false"))
        holds = "lists of strings" if kind == "list" else f"{kind}s"
        check = tf.debugging.Assert(valid, [f"filter: a value of another type, {name!r} holds {holds}:", clause])
        with tf.control_dependencies([check]):
            values = tf.identity(values)
        if kind == "number":
            numbers = tf.strings.to_number(values, tf.float64)
            column = stored["codes"]
            equal = tf.reduce_any(column[:, None] == numbers[None, :], axis=1)
            cases = [
                (tf.equal(op, symbol), lambda c=compare: c(column, numbers[0])) for symbol, compare in _COMPARE.items()
            ]
            cases.append((tf.equal(op, "!="), lambda: ~equal))
            return tf.case(cases, default=lambda: equal, exclusive=False) & present
        ordered = tf.reduce_any(tf.equal(op, list(_COMPARE)))
        check = tf.debugging.Assert(~ordered, [f"filter: < <= > >= compare numbers, {name!r} is a {kind}:", clause])
        with tf.control_dependencies([check]):
            if kind == "boolean":
                wanted = tf.cast(tf.equal(values, "true"), tf.int8)
                equal = tf.reduce_any(stored["codes"][:, None] == wanted[None, :], axis=1)
            else:
                wanted = stored["vocabulary"].lookup(values)
                hit = tf.reduce_any(stored["codes"][:, None] == wanted[None, :], axis=1)
                if kind == "list":
                    equal = (
                        tf.math.unsorted_segment_max(tf.cast(hit, tf.int32), stored["element_rows"], self.num_rows) > 0
                    )
                else:
                    equal = hit
        return tf.where(tf.equal(op, "!="), ~equal, equal) & present
