import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gtr_keras.errors import UserError
from gtr_keras.exports.savedmodel.filter_graph import FilterGraph, _unquote
from gtr_keras.exports.savedmodel.filter_graph import parse_clause as parse_graph_clause
from gtr_keras.filters.expressions import NUMBER, Filter, parse_clause
from gtr_keras.filters.metadata_columns import MetadataColumns

METADATA = [
    {"lang": "en", "year": 2018, "open": True, "tags": ["a", "b"]},
    {"lang": "de", "year": 2021, "open": False, "tags": []},
    {"lang": "en", "year": 2021.5, "tags": ["b"]},
    {},
]
CLAUSES = [
    "lang = en",
    "lang != en",
    "lang in (de, 'fr')",
    "year >= 2021",
    "year < 2021",
    "year in (2018, 2021.5)",
    "open = true",
    "open != true",
    "tags = b",
    "tags IN (a, z)",
    "tags != a",
    "`lang`='en'",
]


def columns_and_mask_of(metadata):
    columns = MetadataColumns([f"d{i}" for i in range(len(metadata))], metadata)
    return columns, tf.function(FilterGraph(columns).mask, input_signature=[tf.TensorSpec([None], tf.string)])


@pytest.fixture(scope="module")
def columns_and_mask():
    return columns_and_mask_of(METADATA)


@pytest.mark.parametrize("clause", CLAUSES)
def test_the_graph_allows_what_metadata_columns_allow(columns_and_mask, clause):
    columns, mask = columns_and_mask
    assert mask(tf.constant([clause])).numpy().tolist() == columns.allowed(Filter(clause)).tolist()


def test_clauses_are_anded_and_none_allows_every_row(columns_and_mask):
    _, mask = columns_and_mask
    assert mask(tf.constant(["lang = en", "year > 2019"])).numpy().tolist() == [False, False, True, False]
    assert mask(tf.constant([], tf.string)).numpy().all()


@pytest.mark.parametrize(
    "clause, message",
    [("genre = x", "unknown field"), ("lang < 3", "compare numbers"), ("x", "cannot parse"), ("lang in en", "in \\(A")],
)
def test_a_bad_clause_fails_naming_it(columns_and_mask, clause, message):
    _, mask = columns_and_mask
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        mask(tf.constant([clause]))


EDGE_METADATA = [
    {"code": "007", "tag": "a,b", "year": 2019, "open": True},
    {"code": "7", "tag": "a", "year": 2020, "open": False},
    {"code": "1e3", "tag": "b", "year": 1000},
    {"code": "1000.0", "tag": "c"},
    {"code": "2019.50", "tag": '"a'},
    {"code": "2019.5", "tag": "true"},
]
EDGE_CLAUSES = [
    'tag in ("a,b", c)',
    "tag in ('a,b')",
    "tag in (a, 'b,c')",
    """tag = '"a'""",
    "tag = 'true'",
    "code = 007",
    "code = 1e3",
    "code in (2019.50, 7)",
    "code != 2019.5",
    "year = 1e3",
    "year in (2019, 2020.0)",
    'year = "2019"',
    "year in (2019, '2020')",
    "year = inf",
    "open = 'true'",
    "tag = true",
    "tag = a b",
    "tag in (a b)",
    "tag in (a,,b)",
    "tag in ()",
]


def assert_the_same_rows(columns_and_mask, clause):
    """The graph refuses `clause` where `MetadataColumns` does, else allows the same rows."""
    columns, mask = columns_and_mask
    try:
        expected = columns.allowed(Filter(clause)).tolist()
    except UserError:
        with pytest.raises(tf.errors.InvalidArgumentError):
            mask(tf.constant([clause]))
        return
    assert mask(tf.constant([clause])).numpy().tolist() == expected


@pytest.fixture(scope="module")
def edge_columns_and_mask():
    return columns_and_mask_of(EDGE_METADATA)


@pytest.mark.parametrize("clause", EDGE_CLAUSES)
def test_the_graph_and_metadata_columns_agree_on_quotes_commas_and_number_tokens(edge_columns_and_mask, clause):
    assert_the_same_rows(edge_columns_and_mask, clause)


# The two parsers on generated clauses: Unicode digits and spaces, missing spaces, odd field names and values.
SPACE_CHOICES = ["", " ", "  ", "\t", "\n", "\u00a0", "\u2007", "\u3000", "\u2028", "\x1c", "\x85", "\u200b", "\ufeff"]
FIELD_CHOICES = [
    "lang", "year", "open", "tags", "`release year`", "`lang`", "x.y-z", "langin", "lin", "l", "_", "in", "IN",
    "3d", "lang\u00e9", "\u0131n", "`a`b", "`", "``", "year\u00a0", "\uff4c\uff41\uff4e\uff47",
]  # fmt: skip
OP_CHOICES = ["=", "!=", "<", "<=", ">", ">=", "in", "IN", "In", "iN", "==", "=<", "!", "", "\u0131n", "inx", "\u2264"]
VALUE_CHOICES = [
    "en", "de", "'en'", '"de"', "'it\\'s'", "'a,b'", "'open", "true", "false", "'true'", "True",
    "2018", "2021", "2021.5", "-0.5", "+1", ".5", "1.", "1e3", "1e", "0x10", "inf", "nan", "007", "2_018",
    "1e400", "-1e400", "1" * 401, "9" * 5000, "1e-400",
    "\u0662\u0660\u0662\u0661", "\uff12\uff10\uff12\uff11", "\u0968\u0966\u0967\u096e", "2\u00a0018",
    "(en, de)", "(en,de)", "( 'en' ,\u00a0de )", "(2018, 2021.5)", "(en,)", "()", "(a b)", "((en))", "(en", "a)",
    "'a\nb'", "`x`", "%s", "(%p, '%s')",
]  # fmt: skip
GLYPHS = "lang yeriop=!<>(),'\"`\\._-0123456789\u0662\u0660\uff10\u00a0\u3000\t\nin%"


def _pieces(draw):
    space = st.sampled_from(SPACE_CHOICES)
    parts = [draw(space), draw(st.sampled_from(FIELD_CHOICES)), draw(space), draw(st.sampled_from(OP_CHOICES))]
    return "".join([*parts, draw(space), draw(st.sampled_from(VALUE_CHOICES)), draw(space)])


@st.composite
def clauses(draw):
    if draw(st.integers(0, 4)) == 0:
        return draw(st.text(GLYPHS, max_size=30))
    return _pieces(draw)


@tf.function(input_signature=[tf.TensorSpec([], tf.string)])
def graph_parse(clause):
    """The searcher's parse of `clause`, with each value unquoted, whether it is a bare number and its float64
    (as `FilterGraph` reads them)."""
    refusal, field, op, written = parse_graph_clause(clause)
    numeric = tf.strings.regex_full_match(written, NUMBER)
    numbers = tf.strings.to_number(tf.where(numeric, written, "0"), tf.float64)
    return refusal, field, op, _unquote(written), numeric, numbers


def _kind(value):
    return {bool: "boolean", str: "string"}.get(type(value), "number")


def assert_the_same_parse(text):
    refusal, field, op, values, numeric, numbers = (t.numpy() for t in graph_parse(tf.constant(text)))
    try:
        clause = parse_clause(text)
    except UserError:
        assert refusal != b"", f"the graph parses {text!r}, Python refuses it"
        return
    assert refusal == b"", f"the graph refuses {text!r} ({refusal!r}), Python parses it"
    assert (field.decode(), op.decode(), [v.decode() for v in values]) == (
        clause.field,
        clause.op,
        list(clause.written),
    )
    kinds = [_kind(value) for value in clause.values]
    assert numeric.tolist() == [kind == "number" for kind in kinds]
    assert [kind == "boolean" for kind in kinds] == [
        v in (b"true", b"false") and k != "string" for v, k in zip(values, kinds)
    ]
    read = [float(written) if kind == "number" else 0.0 for written, kind in zip(clause.written, kinds)]
    assert numbers.tolist() == read  # both the nearest float64 of the text (infinite past the largest)


@pytest.mark.parametrize(
    "text",
    [
        "langin (en)",  # one word, then no operator: refused by both (the graph took `in` off the field)
        "yearin (1990, 1991)",
        "year = \u0662\u0660\u0660\u0660",  # Arabic-Indic digits: a word, not a number, in both
        "lang\u00a0=\u00a0en",  # a no-break space separates, in both
        "lang = en\u00a0",  # and is not part of the value
        "lang\u3000in\u2007(en,\u00a0de)",
        "lang = 'a\nb'",
        "year < " + "9" * 5000,
        "year = 1e400",
        "`release year`in (1)",
        "lang in(en)",
        "lin (en)",
        "lang inx (en)",
        "lang = en\u200b",  # a zero-width space is no whitespace: part of the word
    ],
)
def test_the_graph_and_python_parse_these_clauses_alike(text):
    assert_the_same_parse(text)


@given(clauses())
@settings(max_examples=150, deadline=None)
def test_the_graph_and_python_parse_generated_clauses_alike(text):
    assert_the_same_parse(text)


@pytest.mark.large
@given(clauses())
@settings(max_examples=3000, deadline=None)
def test_the_graph_and_python_parse_many_generated_clauses_alike(text):
    assert_the_same_parse(text)


GENERATED_METADATA = [
    {"lang": "en", "year": 2018, "open": True, "tags": ["a", "b"], "release year": 1999, "x.y-z": "2021"},
    {"lang": "de", "year": 2021, "open": False, "tags": [], "release year": 2021.5, "x.y-z": "\u0662\u0660"},
    {"lang": "en\u00a0", "year": 2021.5, "tags": ["b", "en"], "x.y-z": "a,b"},
    {"lang": "\u0662\u0660\u0662\u0661", "year": 1e300, "open": True, "x.y-z": "it's"},
    {},
]


@pytest.fixture(scope="module")
def generated_columns_and_mask():
    return columns_and_mask_of(GENERATED_METADATA)


@pytest.mark.parametrize(
    "text, rows",
    [
        ("langin (en)", None),
        ("yearin (1990, 1991)", None),
        ("year = \u0662\u0660\u0660\u0660", None),  # a string, on a number field
        ("x.y-z = \u0662\u0660", [1]),
        ("lang\u00a0=\u00a0en", [0]),
        ("lang = en\u00a0", [0]),  # the graph answered none: RE2's `\s` is ASCII
        ("lang = 'en\u00a0'", [2]),
        ("year < 1" + "0" * 400, [0, 1, 2, 3]),
    ],
)
def test_the_graph_allows_what_python_allows_on_the_clauses_they_disagreed_on(generated_columns_and_mask, text, rows):
    columns, _ = generated_columns_and_mask
    if rows is None:
        with pytest.raises(UserError):
            columns.allowed(Filter(text))
    else:
        assert np.flatnonzero(columns.allowed(Filter(text))).tolist() == rows
    assert_the_same_rows(generated_columns_and_mask, text)


@given(clauses())
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_graph_allows_what_python_allows_on_generated_clauses(generated_columns_and_mask, text):
    assert_the_same_rows(generated_columns_and_mask, text)
