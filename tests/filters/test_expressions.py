import re

import numpy as np
import pytest

from gtr_keras.errors import DataError, UserError
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


@pytest.mark.parametrize(
    "text, clause",
    [
        ("lang\u00a0=\u00a0en\u00a0", ("lang", "=", ("en",))),  # Unicode spaces separate (str.isspace)
        ("\u3000lang\u2007in\u2028(en,\u202fde)\x85", ("lang", "in", ("en", "de"))),
        ("year = \u0662\u0660\u0660\u0660", ("year", "=", ("\u0662\u0660\u0660\u0660",))),  # a word: numbers are ASCII
        ("year = \uff12\uff10\uff11\uff19", ("year", "=", ("\uff12\uff10\uff11\uff19",))),
        ("lang = en\u200b", ("lang", "=", ("en\u200b",))),  # a zero-width space is no whitespace
        ("year < 1" + "0" * 400, ("year", "<", (10**400,))),
        ("year < -" + "9" * 5000, ("year", "<", (float("-inf"),))),  # past the digits Python converts: a float
        ("`lang`in (en)", ("lang", "in", ("en",))),
    ],
)
def test_the_grammar_s_whitespace_is_unicode_and_its_digits_ascii(text, clause):
    parsed = parse_clause(text)
    assert parsed == Clause(*clause, text, parsed.written)


@pytest.mark.parametrize("text", ["langin (en)", "yearin (1990, 1991)", "lang in(en)x", "lang\u200b= en"])
def test_in_and_a_field_run_together_are_one_word(text):
    with pytest.raises(UserError):
        parse_clause(text)


def test_a_string_where_a_list_is_expected_is_one_value(tmp_path):
    filter = Filter("lang = en", ids="d5")
    assert filter.ids == ["d5"] and [clause.text for clause in filter.clauses] == ["lang = en"]
    assert Filter(ids=("d5", 7)).ids == ["d5", "7"]  # integer ids, as a corpus's `_id` may be
    assert Filter(ids=7).ids == ["7"] and Filter(ids=np.int64(7)).ids == ["7"]
    assert Filter(ids=iter(["d1"])).ids == ["d1"] and Filter(ids=[]).ids == []
    assert Filter(None, ids=["d1"]).clauses == []
    allowed = tmp_path / "allowed.txt"
    allowed.write_text("d2\n\nd9\n")
    assert Filter(ids=allowed).ids == ["d2", "d9"]  # a file of ids only as an os.PathLike
    assert Filter(ids=str(allowed)).ids == [str(allowed)]  # a str is one id, whatever it looks like
    allowed.write_text("d2\nd2\n")
    with pytest.raises(DataError, match="allowed.txt:2"):
        Filter(ids=allowed)


@pytest.mark.parametrize(
    "expressions, ids, message",
    [
        (5, None, "expressions must be a string or a list of strings, got int"),
        (["lang = en", 5], None, "expressions must be strings, got int 5"),
        ((), b"d5", "ids must be an id (a string or an integer) or a list of ids, got bytes"),
        ((), [True], "ids must be strings or integers, got bool True"),
        ((), [["d1"]], "ids must be strings or integers, got list"),
        ((), 5.0, "ids must be an id (a string or an integer) or a list of ids, got float"),
        ((), True, "ids must be an id (a string or an integer) or a list of ids, got bool"),
    ],
)
def test_arguments_of_other_types_are_one_user_error(expressions, ids, message):
    with pytest.raises(UserError, match=re.escape(f"filter: {message}")):
        Filter(expressions, ids=ids)


def test_a_clause_or_an_id_holding_a_lone_surrogate_is_one_user_error_naming_it():
    with pytest.raises(UserError, match=r"^filter 'lang = \\udcff': a lone surrogate \(U\+DCFF at character 7\)"):
        Filter("lang = \udcff")
    with pytest.raises(UserError, match=r"^filter: ids\[1\]: id 'd\\ud800' holds a lone surrogate"):
        Filter(ids=["d1", "d\ud800"])
    with pytest.raises(UserError, match=r"^filter: ids\[0\]: id '' is empty"):
        Filter(ids=[""])
    assert Filter(ids=["has space"]).ids == ["has space"]  # an id an older version stored: still named
