import re

import numpy as np
import pytest
import tensorflow as tf
from conftest import write_jsonl
from training_inputs import SPIECE

from gtr_keras.errors import DataError, DataWarning
from gtr_keras.models.gtr.gtr_tokenizer import GTRTokenizer
from gtr_keras.training.data import TrainingData, hash_ids
from gtr_keras.training.examples import (
    read_beir,
    read_msmarco_triples,
    read_triples,
    write_tfrecord,
)


def triples(num_examples=12):
    """Example i has i % 4 negatives."""
    return [
        {
            "query": f"question {i} about cats",
            "positive": f"passage {i} answers the cat question",
            "negatives": [f"distractor {i}.{m} about dogs" for m in range(i % 4)],
        }
        for i in range(num_examples)
    ]


@pytest.fixture
def triples_file(tmp_path):
    return write_jsonl(tmp_path / "train.jsonl", triples())


@pytest.fixture(scope="module")
def tokenizer():
    return GTRTokenizer(SPIECE)


def rows(dataset):
    """Flattens string batches into per-example dicts of Python values."""
    out = []
    for batch in dataset.as_numpy_iterator():
        for i in range(len(batch["query"])):
            out.append({name: np.asarray(value[i]).tolist() for name, value in batch.items()})
    return out


def test_batches_are_tokenised_with_k_negatives_and_hashed_ids(triples_file, tokenizer):
    data = TrainingData(str(triples_file), num_negatives=2, query_length=8, document_length=16)
    batch = next(iter(data.dataset(tokenizer, batch_size=4)))
    assert sorted(batch) == ["negative_ids", "negatives", "positive", "positive_id", "query", "query_id"]
    assert batch["query"]["token_ids"].shape[0] == 4 and batch["query"]["token_ids"].shape[1] <= 8
    assert batch["negatives"]["token_ids"].shape[:2] == (4, 2)
    assert batch["negatives"]["token_ids"].shape[2] <= 16
    assert batch["negatives"]["padding_mask"].shape == batch["negatives"]["token_ids"].shape
    assert batch["positive_id"].dtype == tf.int64 and batch["negative_ids"].shape == (4, 2)
    # Every text ends with EOS (id 1) right before its padding.
    lengths = tf.reduce_sum(batch["query"]["padding_mask"], axis=1)
    last = tf.gather(batch["query"]["token_ids"], lengths - 1, batch_dims=1)
    assert (last.numpy() == 1).all()


def test_negatives_are_sampled_or_repeated_to_exactly_k(triples_file):
    data = TrainingData(str(triples_file), num_negatives=2)
    examples = rows(data.text_batches(batch_size=5, repeat=False))
    # Examples without negatives are dropped: 12 examples, 3 of which have none.
    assert len(examples) == 9
    for example in examples:
        i = int(example["query"].decode().split()[1])
        pool = {f"distractor {i}.{m} about dogs".encode() for m in range(i % 4)}
        assert set(example["negatives"]) <= pool and len(example["negatives"]) == 2
        if len(pool) >= 2:
            assert len(set(example["negatives"])) == 2
        else:
            assert set(example["negatives"]) == pool
        assert example["negative_ids"] == example["negatives"]


def test_no_negatives_requested_keeps_every_example(triples_file, tokenizer):
    data = TrainingData(str(triples_file), num_negatives=0)
    assert len(rows(data.text_batches(batch_size=5, repeat=False))) == 12
    batch = next(iter(data.dataset(tokenizer, batch_size=4)))
    assert sorted(batch) == ["positive", "positive_id", "query", "query_id"]


def test_order_is_a_function_of_the_seed(triples_file):
    data = TrainingData(str(triples_file), num_negatives=3)
    stream = lambda seed: rows(data.text_batches(batch_size=4, seed=seed).take(10))  # noqa: E731
    assert stream(1) == stream(1)
    assert stream(1) != stream(2)
    first_pass = [r["query"] for r in stream(1)[:9]]
    assert len(set(first_pass)) == 9


def test_skipping_batches_resumes_the_same_stream(triples_file, tokenizer):
    data = TrainingData(str(triples_file), num_negatives=2, shuffle_buffer=4)
    full = rows(data.text_batches(batch_size=4, seed=3).take(7))
    resumed = rows(data.text_batches(batch_size=4, seed=3, skip_batches=3).take(4))
    assert resumed == full[12:]
    token_batches = list(data.dataset(tokenizer, batch_size=4, seed=3).take(5).as_numpy_iterator())
    skipped = next(data.dataset(tokenizer, batch_size=4, seed=3, skip_batches=4).as_numpy_iterator())
    np.testing.assert_array_equal(skipped["negatives"]["token_ids"], token_batches[4]["negatives"]["token_ids"])


def test_static_shapes_for_tpu(triples_file, tokenizer):
    data = TrainingData(str(triples_file), num_negatives=2, query_length=8, document_length=16)
    spec = data.dataset(tokenizer, batch_size=4, drop_remainder=True, pad_to_length=True).element_spec
    assert spec["query"]["token_ids"].shape == (4, 8)
    assert spec["negatives"]["token_ids"].shape == (4, 2, 16)
    assert spec["negative_ids"].shape == (4, 2)


def test_bad_line_surfaces_through_the_pipeline_as_the_data_error(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [triples()[1], {"query": "q"}])
    data = TrainingData(str(path), num_negatives=0)
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(f"{path}:2: missing field `positive`")):
        list(data.text_batches(2, repeat=False))
    with pytest.raises(DataError, match=f"^{re.escape(str(path))}:2: missing field `positive`$"):
        with data.surface_errors():
            list(data.text_batches(2, repeat=False))
    with pytest.raises(DataError, match=f"^{re.escape(str(path))}:2: missing field `positive`$"):
        data.check()


def test_files_and_check_before_training(beir_dir, tmp_path):
    negatives = str(beir_dir.parent / "negatives.jsonl")
    data = TrainingData(str(beir_dir), negatives_file=negatives)
    assert data.files() == {
        "corpus": str(beir_dir / "corpus.jsonl"),
        "queries": str(beir_dir / "queries.jsonl"),
        "qrels": str(beir_dir / "qrels" / "train.tsv"),
        "negatives": negatives,
    }
    with pytest.warns(DataWarning):
        assert data.check() == 4
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'nope.jsonl'}: no such file (the negatives_file")):
        TrainingData(str(beir_dir), negatives_file=str(tmp_path / "nope.jsonl")).files()
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'none.jsonl'}: no such file or directory")):
        TrainingData(str(tmp_path / "none.jsonl")).files()
    empty = write_jsonl(tmp_path / "empty.jsonl", [{"query": " ", "positive": "p"}])
    with pytest.warns(DataWarning), pytest.raises(DataError, match=re.escape(f"{empty}: no training examples")):
        TrainingData(str(empty)).check()
    junk = tmp_path / "junk.tfrecord"
    junk.write_bytes(b"not a record" * 8)
    with pytest.raises(DataError, match=f"^{re.escape(str(junk))}: unreadable TFRecord file \\(corrupted record"):
        TrainingData(str(junk)).check()


def test_msmarco_triples(tmp_path):
    path = tmp_path / "triples.tsv"
    path.write_text("what is a cat\ta cat is an animal\tdogs bark\n\nq2\tp2\tn2\r\n")
    examples = list(read_msmarco_triples(path))
    assert [(e.query, e.positive, e.negatives) for e in examples] == [
        ("what is a cat", "a cat is an animal", ("dogs bark",)),
        ("q2", "p2", ("n2",)),
    ]
    data = TrainingData(str(path), num_negatives=1)
    assert data.resolved_format() == "msmarco"
    assert len(rows(data.text_batches(2, repeat=False))) == 2
    path.write_text("a\tb\tc\nonly two\tcolumns\n")
    with pytest.raises(DataError, match=re.escape(f"{path}:2: expected 3 tab-separated columns")):
        list(read_msmarco_triples(path))


@pytest.fixture
def beir_dir(tmp_path):
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    write_jsonl(
        root / "corpus.jsonl",
        [{"_id": f"d{i}", "title": f"T{i}", "text": f"document {i}"} for i in range(6)],
    )
    write_jsonl(root / "queries.jsonl", [{"_id": f"q{i}", "text": f"query {i}"} for i in range(3)])
    (root / "qrels" / "train.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq0\td0\t1\nq0\td1\t2\nq0\td5\t0\nq1\td2\t1\nq2\td3\t1\nq2\tgone\t1\n"
    )
    write_jsonl(
        tmp_path / "negatives.jsonl",
        [{"query_id": "q0", "negative_ids": ["d1", "d4", "d5"]}, {"query_id": "q1", "negative_ids": []}],
    )
    return root


def test_beir_examples_with_mined_negatives(beir_dir):
    with pytest.warns(DataWarning, match=r"train.tsv: .*1 document id\(s\) not in the corpus \(e.g. 'gone'\)"):
        examples = read_beir(beir_dir, "train", beir_dir.parent / "negatives.jsonl")
    assert [(e.query_id, e.positive_id, e.negative_ids) for e in examples] == [
        ("q0", "d0", ("d4", "d5")),  # d1 is judged relevant to q0, so it is not a negative
        ("q0", "d1", ("d4", "d5")),
        ("q1", "d2", ()),
        ("q2", "d3", ()),
    ]
    assert examples[0].positive == "T0 document 0"
    assert examples[0].negatives == ("T4 document 4", "T5 document 5")
    negatives_file = str(beir_dir.parent / "negatives.jsonl")
    data = TrainingData(str(beir_dir), negatives_file=negatives_file, num_negatives=1)
    assert data.resolved_format() == "beir"
    assert len(rows(data.text_batches(8, repeat=False))) == 2


@pytest.mark.parametrize("name", ["train.tfrecord", "train.tfrecord.gz"])
def test_tfrecord_round_trip_gives_the_same_batches(triples_file, tmp_path, name):
    path = tmp_path / name
    assert write_tfrecord(read_triples(triples_file), path) == 12
    from_jsonl = TrainingData(str(triples_file), num_negatives=2)
    from_records = TrainingData(str(path), num_negatives=2)
    assert list(from_records.examples()) == list(from_jsonl.examples())
    batches = [rows(d.text_batches(4, seed=5).take(5)) for d in (from_records, from_jsonl)]
    assert batches[0] == batches[1]


def test_train_fraction_keeps_whole_queries_deterministically(tmp_path):
    records = [
        {"query": f"query {i}", "positive": f"positive {i}.{j}", "query_id": f"q{i}"}
        for i in range(300)
        for j in (0, 1)
    ]
    path = write_jsonl(tmp_path / "train.jsonl", records)
    data = TrainingData(str(path), num_negatives=0, train_fraction=0.1)
    kept = [r["query_id"] for r in rows(data.text_batches(64, repeat=False))]
    queries = set(kept)
    assert 15 <= len(queries) <= 45
    assert len(kept) == 2 * len(queries)
    again = {r["query_id"] for r in rows(data.text_batches(64, seed=9, repeat=False))}
    assert again == queries


def test_max_positives_per_query_keeps_the_first_examples_of_each_query(beir_dir):
    with pytest.warns(DataWarning):
        data = TrainingData(str(beir_dir), num_negatives=0, max_positives_per_query=1)
        kept = [(e.query_id, e.positive_id) for e in data.examples()]
    assert kept == [("q0", "d0"), ("q1", "d2"), ("q2", "d3")]
    assert sorted(r["positive_id"] for r in rows(data.text_batches(8, repeat=False))) == [b"d0", b"d2", b"d3"]
    with pytest.raises(ValueError, match="max_positives_per_query"):
        TrainingData(str(beir_dir), max_positives_per_query=0)


def test_equal_texts_get_equal_hashed_ids(tmp_path, tokenizer):
    records = [{"query": f"q{i}", "positive": "the same passage", "negatives": [f"n{i}"]} for i in range(4)]
    data = TrainingData(str(write_jsonl(tmp_path / "t.jsonl", records)), num_negatives=1)
    batch = next(iter(data.dataset(tokenizer, batch_size=4)))
    assert len(set(batch["positive_id"].numpy().tolist())) == 1
    assert len(set(batch["negative_ids"].numpy().ravel().tolist())) == 4
    assert hash_ids(tf.constant(["the same passage"])).numpy()[0] == batch["positive_id"].numpy()[0]


def test_unknown_format_and_bad_settings(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text("x")
    with pytest.raises(DataError, match="cannot tell the training data format"):
        TrainingData(str(path)).resolved_format()
    with pytest.raises(ValueError, match="train_fraction"):
        TrainingData(str(path), train_fraction=0)
    with pytest.raises(ValueError, match="num_negatives"):
        TrainingData(str(path), num_negatives=-1)
