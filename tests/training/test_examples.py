import gzip
import re

import pytest
import tensorflow as tf
from conftest import write_jsonl

from gtr_keras.errors import DataError, DataWarning
from gtr_keras.training.examples import (
    Example,
    decode_record,
    read_mined_negatives,
    read_msmarco_triples,
    read_triples,
    tfrecord_dataset,
    write_tfrecord,
)

GOOD = {"query": "what is a cat", "positive": "a cat is an animal", "negatives": ["dogs bark"]}
EXAMPLES = [
    Example("q1", "p1", ("n1", "n2"), "1", "d1", ("d2", "d3")),
    Example("café ①", "passage", (), "q2", "passage", ()),
]


def test_malformed_line_names_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, "{not json"])
    with pytest.raises(DataError, match=re.escape(f"{path}:2: malformed JSON")):
        list(read_triples(path))


@pytest.mark.parametrize(
    "record, message",
    [
        ({"query": "q"}, "missing field `positive`"),
        ({"positive": "p"}, "missing field `query`"),
        ({"query": "q", "positive": 3}, "field `positive` must be a string"),
        ({"query": "q", "positive": "p", "negatives": "n"}, "field `negatives` must be a list"),
        ({"query": "q", "positive": "p", "negatives": [1]}, "field `negatives` must hold strings"),
        ({"query": "q", "positive": "p", "negatives": ["n"], "negative_ids": []}, "0 ids for 1 negatives"),
    ],
)
def test_bad_fields_are_named(tmp_path, record, message):
    path = write_jsonl(tmp_path / "bad.jsonl.gz", [GOOD, record])
    with pytest.raises(DataError, match=re.escape(f"{path}:2: ") + ".*" + re.escape(message)):
        list(read_triples(path))


def test_empty_texts_are_skipped_and_counted(tmp_path):
    records = [{"query": f"question {i} about cats", "positive": f"passage {i}", "negatives": []} for i in range(4)]
    records[1]["query"] = "  "
    records[2]["positive"] = ""
    records[3]["negatives"] = ["", "kept negative", " "]
    path = write_jsonl(tmp_path / "train.jsonl", records)
    expected = r"skipped 2 example\(s\).*line 2, line 3.*dropped 2 empty hard negative"
    with pytest.warns(DataWarning, match=expected):
        examples = list(read_triples(path))
    assert [e.query for e in examples] == ["question 0 about cats", "question 3 about cats"]
    assert examples[1].negatives == ("kept negative",)


def test_ids_are_read_when_given_and_texts_otherwise(tmp_path):
    path = write_jsonl(
        tmp_path / "train.jsonl",
        [
            {
                "query": "q",
                "positive": "p",
                "negatives": ["n1", "n2"],
                "query_id": 7,
                "positive_id": "d1",
                "negative_ids": ["d2", 3],
            },
            {"query": "q2", "positive": "p2"},
        ],
    )
    first, second = read_triples(path)
    assert (first.query_id, first.positive_id, first.negative_ids) == ("7", "d1", ("d2", "3"))
    assert (second.query_id, second.positive_id, second.negatives) == ("q2", "p2", ())


def test_mined_negatives_errors(tmp_path):
    path = write_jsonl(tmp_path / "neg.jsonl", [{"query_id": "q0", "negative_ids": ["d0", "zzz"]}])
    with pytest.raises(DataError, match=re.escape(f"{path}:1: field `negative_ids`") + r".*'zzz'"):
        read_mined_negatives(path, {"d0"})
    write_jsonl(path, [{"negative_ids": []}])
    with pytest.raises(DataError, match="missing field `query_id`"):
        read_mined_negatives(path, {"d0"})
    write_jsonl(path, [{"query_id": "q", "negative_ids": []}, {"query_id": "q", "negative_ids": []}])
    with pytest.raises(DataError, match=re.escape(f"{path}:2: query 'q' already listed on line 1")):
        read_mined_negatives(path, {"d0"})


@pytest.mark.parametrize("field", ["query_id", "positive_id"])
def test_an_id_must_be_a_string_or_an_integer(tmp_path, field):
    path = write_jsonl(tmp_path / "train.jsonl", [{**GOOD, field: True}])
    message = f"{path}:1: field `{field}` must be a string or an integer, got bool"
    with pytest.raises(DataError, match=re.escape(message)):
        list(read_triples(path))


def test_msmarco_triples_are_one_negative_each_with_texts_as_ids(tmp_path):
    path = tmp_path / "triples.tsv.gz"
    path.write_bytes(gzip.compress(b"what is a cat\ta cat is an animal\tdogs bark\n\t\tno query\n"))
    with pytest.warns(DataWarning, match=r"skipped 1 example\(s\) with an empty query or positive \(e.g. line 2\)"):
        (example,) = read_msmarco_triples(path)
    assert example == Example(
        "what is a cat", "a cat is an animal", ("dogs bark",), "what is a cat", "a cat is an animal", ("dogs bark",)
    )


def test_mined_negatives_keep_the_file_order_and_take_integer_ids(tmp_path):
    path = write_jsonl(
        tmp_path / "negatives.jsonl",
        [{"query_id": 3, "negative_ids": ["d2", 1]}, {"query_id": "q1", "negative_ids": []}],
    )
    assert read_mined_negatives(path, {"1", "d2"}) == {"3": ["d2", "1"], "q1": []}


@pytest.mark.parametrize("name", ["train.tfrecord", "train.tfrecord.gz"])
def test_tfrecord_examples_read_back_as_they_were_written(tmp_path, name):
    path = tmp_path / name
    assert write_tfrecord(EXAMPLES, path) == 2
    assert [decode_record(element) for element in tfrecord_dataset(path).as_numpy_iterator()] == EXAMPLES
    with open(path, "rb") as f:
        assert (f.read(2) == b"\x1f\x8b") == name.endswith(".gz")


def test_a_tfrecord_write_that_fails_leaves_the_earlier_file_as_it_was(tmp_path):
    path = tmp_path / "train.tfrecord"
    write_tfrecord(EXAMPLES[:1], path)
    before = path.read_bytes()

    def failing():
        yield EXAMPLES[1]
        raise DataError("train.jsonl:2: missing field `positive`")

    with pytest.raises(DataError, match="missing field"):
        write_tfrecord(failing(), path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["train.tfrecord"]
    assert len(list(tf.data.TFRecordDataset(str(path)))) == 1
