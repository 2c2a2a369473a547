"""The one rule of texts and ids: what every reader, the Python API and the server refuse alike."""

import re

import pytest

from gtr_keras.errors import DataError, UserError
from gtr_keras.utils.text_values import check_id_text, check_text, id_problem, id_value, text_problem, text_value


@pytest.mark.parametrize("value", ["q\t1", "q\n", "q\u00a01", "q 1", "q\u20031"])
def test_an_id_holding_any_whitespace_is_refused_naming_where_and_what(value):
    with pytest.raises(DataError, match="^run.txt:2: query id .* holds whitespace, which TREC run files"):
        check_id_text("run.txt:2", value, "query id")


@pytest.mark.parametrize(
    "value, problem",
    [
        ("", "is empty"),
        ("a\0b", "holds a NUL character"),
        ("d\ud800", "holds a lone surrogate (U+D800 at character 1), which UTF-8 cannot encode"),
        ("\udcff", "holds a lone surrogate (U+DCFF at character 0)"),
    ],
)
def test_an_empty_id_a_nul_or_a_lone_surrogate_is_refused(value, problem):
    assert id_problem(value).startswith(problem)
    with pytest.raises(UserError, match=r"^delete\[3\]: id .* " + re.escape(problem)):
        check_id_text("delete[3]", value, "id", UserError)


def test_an_id_that_names_a_stored_document_may_hold_whitespace_but_no_line_break():
    assert check_id_text("ids.txt:1", "has space", "id", reference=True) == "has space"
    assert check_id_text("ids.txt:1", "tab\there", "id", reference=True) == "tab\there"
    for value in ("a\nb", "a\rb", "", "a\0b", "\ud800"):
        with pytest.raises(DataError, match="^ids.txt:1: id "):
            check_id_text("ids.txt:1", value, "id", reference=True)


def test_an_id_is_a_string_or_an_integer():
    assert id_value("c.jsonl:1", "doc-1_é") == "doc-1_é"
    assert id_value("c.jsonl:1", 7) == "7"
    for value, problem in [(None, "missing field `_id`"), (True, "got bool"), (1.5, "got float"), (b"d", "got bytes")]:
        with pytest.raises(DataError, match=f"^c.jsonl:1: .*{problem}"):
            id_value("c.jsonl:1", value)


def test_a_text_holding_a_lone_surrogate_is_refused_with_its_place():
    assert text_problem("lift on a wing é") is None
    assert check_text("queries[0]", "lift") == "lift"
    with pytest.raises(UserError, match=r"^queries\[2\]: a lone surrogate \(U\+DFFF at character 3\), which UTF-8"):
        check_text("queries[2]", "abc\udfffd")
    assert text_value("c.jsonl:4", None, "title", required=False) == ""
    with pytest.raises(DataError, match=r"^c.jsonl:4: field `text`: a lone surrogate \(U\+D834 at character 0\)"):
        text_value("c.jsonl:4", "\ud834", "text", required=True)
    with pytest.raises(DataError, match="^c.jsonl:4: missing field `text`$"):
        text_value("c.jsonl:4", None, "text", required=True)
    with pytest.raises(DataError, match="^c.jsonl:4: field `text` must be a string, got int$"):
        text_value("c.jsonl:4", 5, "text", required=True)
