import re

import pytest

from gtr_keras.errors import UserError
from gtr_keras.filters.expressions import Clause, Filter, parse_clause


@pytest.mark.parametrize(
    "text, clause",
    [
        ("lang = en", ("lang", "=", ("en",))),
        ("lang='en'", ("lang", "=", ("en",))),
        ('title != "it\\"s"', ("title", "!=", ('it"s',))),
        ("year >= 2019", ("year", ">=", (2019,))),
        ("score < -0.5", ("score", "<", (-0.5,))),
        ("score <= 1e3", ("score", "<=", (1000.0,))),
        ("open = true", ("open", "=", (True,))),
        ("tags IN (a, 'b c', 3)", ("tags", "in", ("a", "b c", 3))),
        ("`release year` > 1999", ("release year", ">", (1999,))),
        ("meta.source-name = x", ("meta.source-name", "=", ("x",))),
    ],
)
def test_clauses_parse(text, clause):
    parsed = parse_clause(text)
    assert parsed == Clause(*clause, text, parsed.written)


def test_a_clause_keeps_its_values_as_written():
    assert parse_clause("code in (007, 1e3, 'x, y', 2019.50)").written == ("007", "1e3", "x, y", "2019.50")


@pytest.mark.parametrize(
    "text, message",
    [
        ("lang", "expected FIELD OP VALUE"),
        ("lang en x", "expected an operator"),
        ("lang = en de", "expected one value"),
        ("year > recent", "> compares numbers"),
        ("tags in (a b)", "separated by commas"),
        ("tags in a", "expected `in (A, B, ...)`"),
        ("3d = x", "not a field name"),
        ("x = 'open", "cannot parse"),
    ],
)
def test_bad_clauses_are_one_user_error_naming_them(text, message):
    with pytest.raises(UserError, match=re.escape(message)) as error:
        parse_clause(text)
    assert str(error.value).startswith(f"filter {text!r}: ") and "\n" not in str(error.value)


def test_a_filter_ands_its_clauses_and_takes_an_allow_list():
    filter = Filter(["year >= 2019", "lang in (en, de)"], ids=["d1"])
    assert [clause.field for clause in filter.clauses] == ["year", "lang"] and filter.ids == ["d1"]
    assert Filter.of("lang = en").clauses[0].values == ("en",)
    assert Filter.of(None) is None and Filter.of(filter) is filter
