import pytest
import tensorflow as tf

from gtr_keras.filters.expressions import Filter
from gtr_keras.filters.metadata_columns import MetadataColumns
from gtr_keras.serving.filter_graph import FilterGraph

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


@pytest.fixture(scope="module")
def columns_and_mask():
    columns = MetadataColumns(["d0", "d1", "d2", "d3"], METADATA)
    return columns, tf.function(FilterGraph(columns).mask, input_signature=[tf.TensorSpec([None], tf.string)])


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


@pytest.mark.parametrize("clause", EDGE_CLAUSES)
def test_the_graph_and_metadata_columns_agree_on_quotes_commas_and_number_tokens(clause):
    from gtr_keras.errors import UserError

    columns = MetadataColumns([f"d{i}" for i in range(len(EDGE_METADATA))], EDGE_METADATA)
    mask = tf.function(FilterGraph(columns).mask, input_signature=[tf.TensorSpec([None], tf.string)])
    try:
        expected = columns.allowed(Filter(clause)).tolist()
    except UserError:
        with pytest.raises(tf.errors.InvalidArgumentError):
            mask(tf.constant([clause]))
        return
    assert mask(tf.constant([clause])).numpy().tolist() == expected
