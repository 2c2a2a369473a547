"""`DistillationTexts`: pairs, single texts and corpus records, as batches with the teacher's rows."""

import gzip
import json

import numpy as np
import pytest
from distillation_inputs import write_jsonl
from training_inputs import SPIECE

from gtr_keras.distillation.distillation_data import DistillationTexts
from gtr_keras.errors import DataError
from gtr_keras.models.gtr.gtr_tokenizer import GTRTokenizer


def test_texts_files_pairs_single_texts_and_corpus_records(tmp_path):
    pairs = write_jsonl(
        tmp_path / "p.jsonl", [{"query": "q1", "positive": "d1", "_id": 1}, {"query": "q2", "positive": "d2"}]
    )
    with gzip.open(tmp_path / "c.jsonl.gz", "wt") as f:
        f.write(json.dumps({"_id": "x", "title": "Title", "text": "body"}) + "\n\n")
        f.write(json.dumps({"_id": "y", "text": "d1"}) + "\n")
    (tmp_path / "t.txt").write_text("one\n\n  \ntwo\n")
    data = DistillationTexts([pairs, str(tmp_path / "c.jsonl.gz"), str(tmp_path / "t.txt")])
    assert data.read() == [("q1", "d1"), ("q2", "d2"), (None, "Title body"), (None, "d1"), (None, "one"), (None, "two")]
    assert data.distinct_texts() == (["q1", "q2"], ["d1", "d2", "Title body", "one", "two"])
    assert data.check() == 6


def test_a_batch_carries_the_teacher_rows_of_its_texts():
    data = DistillationTexts(["unused.txt"])
    data._examples = [("q0", "d0"), (None, "d1"), ("q1", "d0")]
    queries, documents = data.distinct_texts()
    teacher_queries = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    teacher_documents = np.array([[2.0, 0.0], [0.0, 2.0]], np.float32)
    tokenizer = GTRTokenizer(open(SPIECE, "rb").read())
    batch = next(iter(data.dataset(tokenizer, teacher_queries, teacher_documents, batch_size=3, repeat=False)))
    rows = {}
    for single, teacher_query, teacher_document in zip(
        batch["single"].numpy(),
        batch["teacher_query"].numpy(),
        batch["teacher_positive"].numpy(),
    ):
        rows[tuple(teacher_document)] = rows.get(tuple(teacher_document), []) + [(single, tuple(teacher_query))]
    assert sorted(rows[(2.0, 0.0)]) == [(False, (0.0, 1.0)), (False, (1.0, 0.0))]  # d0 with q0 and with q1
    assert rows[(0.0, 2.0)] == [(True, (0.0, 2.0))]  # a single text is its own anchor


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"query": "q", "positive": "d"}\n{"query": "q2"}\n', r"t\.jsonl:2: missing field `positive`"),
        ('{"query": "q", "positive": "d"}\n{bad\n', r"t\.jsonl:2: malformed JSON"),
        ('{"_id": "a", "title": "only a title"}\n', r"t\.jsonl:1: missing field `text`"),
        ('{"_id": "a", "text": 5}\n', r"t\.jsonl:1: field `text` must be a string"),
        ('{"text": "no id"}\n', r"t\.jsonl:1: missing field `_id`"),
        ("", r"t\.jsonl: no texts to distil on"),
    ],
)
def test_bad_texts_name_the_file_line_and_field(tmp_path, content, message):
    (tmp_path / "t.jsonl").write_text(content)
    with pytest.raises(DataError, match=message):
        DistillationTexts([str(tmp_path / "t.jsonl")]).check()
