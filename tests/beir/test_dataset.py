import pytest
from beir_files import write_beir

import gtr_keras.beir.dataset
from gtr_keras.beir.dataset import load_dataset
from gtr_keras.beir.readers import Corpus
from gtr_keras.errors import DataError


def test_load_dataset_gives_the_judged_queries_in_qrels_order(tmp_path):
    corpus = Corpus(["d1", "d2"], ["A", ""], ["cats purr", "dogs bark"])
    queries = {"q1": "cats", "q2": "dogs", "q3": "unjudged"}
    directory = write_beir(tmp_path / "beir", corpus, queries, [("q2", "d2", 1), ("q1", "d1", 1)])
    loaded_corpus, loaded_queries, qrels, report = load_dataset(directory)
    assert loaded_corpus.joined() == ["A cats purr", "dogs bark"]
    assert list(loaded_queries.items()) == [("q2", "dogs"), ("q1", "cats")]
    assert qrels == {"q2": {"d2": 1}, "q1": {"d1": 1}} and report.ok


def test_a_missing_split_is_named_before_the_corpus_is_read(tmp_path, monkeypatch):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    monkeypatch.setattr(gtr_keras.beir.dataset, "load_corpus", lambda path: pytest.fail("the corpus was read"))
    with pytest.raises(DataError, match=r"qrels/dev.tsv: no such file \(splits there: test\)"):
        load_dataset(str(tmp_path), "dev")
