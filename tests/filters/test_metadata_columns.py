import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gtr_keras.errors import DataError, UserError
from gtr_keras.filters.expressions import Filter
from gtr_keras.filters.metadata_columns import MetadataColumns

METADATA = [
    {"lang": "en", "year": 2018, "open": True, "tags": ["a", "b"]},
    {"lang": "de", "year": 2021, "open": False, "tags": []},
    {"lang": "en", "year": 2021.5, "tags": ["b"]},
    {},
]
IDS = ["d0", "d1", "d2", "d3"]


@pytest.mark.parametrize(
    "expressions, rows",
    [
        ("lang = en", [0, 2]),
        ("lang != en", [1]),  # a document without the field matches no clause
        ("lang in (de, fr)", [1]),
        ("year >= 2021", [1, 2]),
        ("year < 2021", [0]),
        ("year = 2021", [1]),
        ("year in (2018, 2021.5)", [0, 2]),
        ("open = true", [0]),
        ("open != true", [1]),
        ("tags = b", [0, 2]),
        ("tags in (a, z)", [0]),
        ("tags != a", [1, 2]),
        (["lang = en", "year > 2019"], [2]),
    ],
)
def test_clauses_select_the_rows_they_match(expressions, rows):
    assert np.flatnonzero(MetadataColumns(IDS, METADATA).allowed(Filter(expressions))).tolist() == rows


def test_an_allow_list_is_anded_with_the_clauses_and_unknown_ids_allow_nothing():
    columns = MetadataColumns(IDS, METADATA)
    assert np.flatnonzero(columns.allowed(Filter("lang = en", ids=["d2", "d3", "nope"]))).tolist() == [2]
    assert np.flatnonzero(columns.allowed(Filter(ids=["d3"]))).tolist() == [3]
    assert columns.allowed(None).all()


@pytest.mark.parametrize(
    "expression, message",
    [
        ("genre = x", "unknown field 'genre' \\(the index's fields: lang, open, tags, year\\)"),
        ("lang < 3", "< compares numbers, 'lang' is a string"),
        ("year = x", "'x' is a string, 'year' holds number"),
        ("open = 1", "1 is a number, 'open' holds boolean"),
        ("tags = true", "True is a boolean, 'tags' holds lists of strings"),
    ],
)
def test_unknown_fields_and_type_mismatches_are_one_user_error(expression, message):
    with pytest.raises(UserError, match=message):
        MetadataColumns(IDS, METADATA).allowed(Filter(expression))


def test_a_field_of_two_types_is_refused_naming_both_documents():
    with pytest.raises(
        DataError, match="document 'b' field `metadata.year` is a string, but document 'a' has a number"
    ):
        MetadataColumns(["a", "b"], [{"year": 2019}, {"year": "2019"}])


def test_without_metadata_every_field_is_unknown():
    with pytest.raises(UserError, match="its documents have no metadata"):
        MetadataColumns(IDS, None).allowed(Filter("lang = en"))


LANGS = ["en", "de", "fr"]
documents = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "lang": st.sampled_from(LANGS),
            "year": st.integers(2000, 2004),
            "open": st.booleans(),
            "tags": st.lists(st.sampled_from(LANGS), max_size=3),
        },
    ),
    min_size=1,
    max_size=40,
)
clauses = st.one_of(
    st.tuples(st.just("lang"), st.sampled_from(["=", "!="]), st.sampled_from(LANGS)),
    st.tuples(st.just("year"), st.sampled_from(["=", "!=", "<", "<=", ">", ">="]), st.integers(1999, 2005)),
    st.tuples(st.just("open"), st.sampled_from(["=", "!="]), st.booleans()),
    st.tuples(st.sampled_from(["lang", "tags"]), st.just("in"), st.lists(st.sampled_from(LANGS), min_size=1)),
    st.tuples(st.just("tags"), st.sampled_from(["=", "!="]), st.sampled_from(LANGS)),
)


def _text(field, op, value):
    if op == "in":
        return f"{field} in ({', '.join(value)})"
    return f"{field} {op} {str(value).lower() if isinstance(value, bool) else value}"


def _matches(document, field, op, value):
    if field not in document:
        return False
    have = document[field]
    if isinstance(have, list):
        hit = any(item in (value if op == "in" else [value]) for item in have)
        return not hit if op == "!=" else hit
    return {
        "=": lambda: have == value,
        "!=": lambda: have != value,
        "in": lambda: have in value,
        "<": lambda: have < value,
        "<=": lambda: have <= value,
        ">": lambda: have > value,
        ">=": lambda: have >= value,
    }[op]()


@settings(max_examples=200, deadline=None)
@given(documents, st.lists(clauses, min_size=1, max_size=3))
def test_random_filters_over_random_metadata_select_what_python_selects(metadata, chosen):
    ids = [f"d{i}" for i in range(len(metadata))]
    columns = MetadataColumns(ids, metadata)
    chosen = [clause for clause in chosen if clause[0] in columns.types]
    expected = [all(_matches(document, *clause) for clause in chosen) for document in metadata]
    assert columns.allowed(Filter([_text(*clause) for clause in chosen])).tolist() == expected


def test_a_number_past_a_float64_in_a_clause_compares_as_infinity():
    columns = MetadataColumns(IDS, METADATA)
    assert np.flatnonzero(columns.allowed(Filter("year < 1" + "0" * 400))).tolist() == [0, 1, 2]
    assert np.flatnonzero(columns.allowed(Filter("year > -" + "9" * 5000))).tolist() == [0, 1, 2]
    assert np.flatnonzero(columns.allowed(Filter("year in (1e400, 2018)"))).tolist() == [0]
    assert np.flatnonzero(columns.allowed(Filter("year != 1" + "0" * 400))).tolist() == [0, 1, 2]


@pytest.mark.parametrize("number", [10**400, float("inf"), float("nan")])
def test_a_stored_number_past_a_float64_is_a_data_error_naming_the_document_and_field(number):
    with pytest.raises(DataError, match="document 'd1' field `metadata.big` is a number that does not fit a float64"):
        MetadataColumns(["d0", "d1"], [{"big": 1}, {"big": number}])


@pytest.mark.parametrize(
    "ids, metadata, message",
    [
        ("d0", None, "ids must be a list of ids, got str"),
        (["d0", "d1"], [{}], "1 metadata dicts for 2 ids"),
        (["d0"], ["lang"], "the metadata of document 'd0' must be a dict or None, got str"),
    ],
)
def test_arguments_of_other_shapes_are_one_user_error(ids, metadata, message):
    with pytest.raises(UserError, match=re.escape(message)):
        MetadataColumns(ids, metadata)
