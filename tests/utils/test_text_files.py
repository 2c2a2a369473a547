import gzip
import re

import pytest
from conftest import write_jsonl

from gtr_keras.errors import DataError, DataWarning, UserError
from gtr_keras.utils.text_files import (
    check_id_text,
    check_text,
    id_field,
    id_problem,
    id_value,
    iter_jsonl,
    iter_lines,
    iter_tsv_rows,
    str_field,
    text_problem,
    text_value,
)


def located(path, pattern):
    return "^" + re.escape(str(path)) + pattern


def test_iter_lines_numbers_lines_from_one_and_keeps_their_endings(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"first\r\nsecond\n\nlast")
    assert list(iter_lines(path)) == [(1, "first\r\n"), (2, "second\n"), (3, "\n"), (4, "last")]


def test_iter_lines_gunzips_a_file_named_gz(tmp_path):
    path = tmp_path / "notes.txt.gz"
    path.write_bytes(gzip.compress(b"wing\nlift\n"))
    assert list(iter_lines(path)) == [(1, "wing\n"), (2, "lift\n")]


def test_iter_lines_drops_a_byte_order_mark_at_the_start_only(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"\xef\xbb\xbfa\n\xef\xbb\xbfb\n")
    assert list(iter_lines(path)) == [(1, "a\n"), (2, "\ufeffb\n")]


def test_iter_lines_strict_refuses_invalid_utf8_naming_file_and_line(tmp_path):
    path = tmp_path / "ids.txt"
    path.write_bytes(b"d1\nd\xff2\n")
    with pytest.raises(DataError, match=located(path, r":2: invalid UTF-8 \(invalid start byte at byte 1\)$")):
        list(iter_lines(path))


def test_iter_lines_replace_keeps_the_text_with_a_warning(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_bytes(b"ok\nbad \xff byte\n")
    with pytest.warns(DataWarning, match=located(path, r":2: invalid UTF-8 .*replaced with U\+FFFD$")):
        assert list(iter_lines(path, errors="replace")) == [(1, "ok\n"), (2, "bad \ufffd byte\n")]


def test_iter_lines_of_a_missing_file(tmp_path):
    path = tmp_path / "nowhere.txt"
    with pytest.raises(DataError, match=located(path, ": no such file")):
        list(iter_lines(path))


def test_iter_jsonl_skips_blank_lines_and_numbers_lines(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"a": 1}, "", "  ", {"b": 2}])
    assert list(iter_jsonl(path)) == [(1, {"a": 1}), (4, {"b": 2})]


def test_iter_jsonl_malformed_json_names_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"a": 1}, '{"a": '])
    with pytest.raises(DataError, match=located(path, r":2: malformed JSON")):
        list(iter_jsonl(path))


def test_iter_jsonl_rejects_non_object(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", ["[1, 2]"])
    with pytest.raises(DataError, match=located(path, r":1: expected a JSON object, got list")):
        list(iter_jsonl(path))


def test_iter_jsonl_reads_gzipped_records(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl.gz", [{"_id": "q1"}, {"_id": "q2"}])
    assert [record["_id"] for _, record in iter_jsonl(path)] == ["q1", "q2"]


def test_iter_tsv_rows_splits_columns_and_skips_blank_lines(tmp_path):
    path = tmp_path / "qrels.tsv"
    path.write_text("q1\td1\t1\r\n\n  \nq2\td2\t0\n")
    assert list(iter_tsv_rows(path, ("query-id", "corpus-id", "score"))) == [
        (1, ["q1", "d1", "1"]),
        (4, ["q2", "d2", "0"]),
    ]


def test_iter_tsv_rows_names_the_expected_columns_of_a_bad_row(tmp_path):
    path = tmp_path / "triples.tsv"
    path.write_text("a\tb\tc\nonly\ttwo\n")
    expected = r":2: expected 3 tab-separated columns \(query, positive, negative\), got 2$"
    with pytest.raises(DataError, match=located(path, expected)):
        list(iter_tsv_rows(path, ("query", "positive", "negative")))


@pytest.mark.parametrize("value, expected", [("d1", "d1"), (7, "7")])
def test_id_field_reads_a_string_or_integer_id(value, expected):
    assert id_field("corpus.jsonl", 3, {"_id": value}) == expected


@pytest.mark.parametrize(
    "record, problem",
    [
        ({}, "missing field `_id`"),
        ({"_id": True}, "field `_id` must be a string or an integer, got bool"),
        ({"_id": 1.5}, "field `_id` must be a string or an integer, got float"),
        ({"_id": "d 1"}, "`_id` 'd 1' holds whitespace"),
    ],
)
def test_id_field_names_file_line_and_problem(record, problem):
    with pytest.raises(DataError, match=f"^corpus.jsonl:3: {re.escape(problem)}"):
        id_field("corpus.jsonl", 3, record)


def test_str_field_required_optional_and_of_the_wrong_type():
    assert str_field("c.jsonl", 1, {"text": "x"}, "text", required=True) == "x"
    assert str_field("c.jsonl", 1, {}, "title", required=False) == ""
    assert str_field("c.jsonl", 1, {"title": None}, "title", required=False) == ""
    with pytest.raises(DataError, match="^c.jsonl:1: missing field `text`$"):
        str_field("c.jsonl", 1, {}, "text", required=True)
    with pytest.raises(DataError, match="^c.jsonl:1: field `title` must be a string, got int$"):
        str_field("c.jsonl", 1, {"title": 3}, "title", required=False)


def test_a_line_nested_deeper_than_python_can_parse_is_named_with_its_file_and_line(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text('{"_id": "1"}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(DataError, match=r"deep\.jsonl:2: malformed JSON \(maximum recursion depth exceeded"):
        list(iter_jsonl(str(path)))


def test_an_integer_of_more_digits_than_python_converts_is_read_as_an_infinite_float(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": 7, "metadata": {"big": -' + "9" * 5000 + ', "year": 2019}}\n')
    assert list(iter_jsonl(str(path))) == [(1, {"_id": 7, "metadata": {"big": float("-inf"), "year": 2019}})]


@pytest.mark.parametrize(
    "after, problem",
    [
        (', "x": }', "malformed JSON (Expecting value"),
        (', "deep": ' + "[" * 100_000 + "]" * 100_000 + "}", "malformed JSON (maximum recursion"),
    ],
    ids=["syntax", "depth"],
)
def test_a_long_integer_followed_by_bad_json_is_named_with_its_file_and_line(tmp_path, after, problem):
    """The long integer sends the line to the second parse (integers read as floats): its errors are named too."""
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": 1}\n{"_id": 2, "big": ' + "9" * 5000 + after + "\n")
    with pytest.raises(DataError, match=f"^{re.escape(str(path))}:2: {re.escape(problem)}"):
        list(iter_jsonl(str(path)))


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
