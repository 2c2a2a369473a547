import json
import subprocess
import sys

import pytest
from conftest import REPO

from gtr_keras.errors import DataError, UserError
from gtr_keras.lexical.bm25 import BM25Retriever

DOCS = {
    "cats": "Cats purr when they are happy and sleep all day.",
    "rockets": "Rockets burn liquid fuel to reach orbit around the Earth.",
    "bread": "Bakers knead dough and bake bread in a hot oven.",
    "tides": "The Moon's gravity pulls the oceans and causes tides.",
}


@pytest.fixture
def retriever():
    retriever = BM25Retriever()
    retriever.index(list(DOCS.values()), list(DOCS))
    return retriever


def test_search_finds_the_obvious_document(retriever):
    ids, scores = retriever.search(["baking breads in ovens", "why do cats purr", "what causes the tides"], k=2)
    assert [row[0] for row in ids] == ["bread", "cats", "tides"]
    assert all(row == sorted(row, reverse=True) for row in scores)
    assert all(s > 0 for row in scores for s in row)


def test_search_stems_and_drops_stopwords(retriever):
    ids, _ = retriever.search(["the knead", "kneading"], k=1)
    assert ids == [["bread"], ["bread"]]


def test_search_returns_only_matching_documents_even_for_large_k(retriever):
    ids, scores = retriever.search(["rocket orbit", "zebra", "the and"], k=100)
    assert ids == [["rockets"], [], []]
    assert len(scores[0]) == 1 and scores[1:] == [[], []]


def test_search_with_k_larger_than_corpus_returns_all_matches(retriever):
    ids, _ = retriever.search(["cats rockets bread tides"], k=10)
    assert sorted(ids[0]) == sorted(DOCS)


def test_search_before_index_raises():
    with pytest.raises(RuntimeError, match="index"):
        BM25Retriever().search(["q"], k=1)


def test_index_checks_inputs():
    with pytest.raises(UserError, match="2 texts but 1 ids"):
        BM25Retriever().index(["a", "b"], ["a"])
    with pytest.raises(UserError, match="empty corpus"):
        BM25Retriever().index([], [])


def test_save_then_load_searches_as_the_saved_index(retriever, tmp_path):
    retriever.save(tmp_path / "bm25")
    loaded = BM25Retriever.load(tmp_path / "bm25")
    queries = ["baking breads in ovens", "rocket orbit", "zebra"]
    assert loaded.search(queries, k=3) == retriever.search(queries, k=3)
    assert loaded.ids == list(DOCS) and loaded.get_config() == retriever.get_config()


def test_load_refuses_another_tokenization_naming_the_file(retriever, tmp_path):
    retriever.save(tmp_path / "bm25")
    settings = json.loads((tmp_path / "bm25" / "bm25.json").read_text())
    (tmp_path / "bm25" / "bm25.json").write_text(json.dumps({**settings, "stemmer": "french"}))
    with pytest.raises(DataError, match=r"bm25.json: a BM25 index of another format or tokenization"):
        BM25Retriever.load(tmp_path / "bm25")


@pytest.mark.large
def test_the_index_modules_import_bm25s_only_when_bm25_is_used():
    script = (
        "import sys\nimport gtr_keras.retrieval.retriever, gtr_keras.retrieval.hybrid_retriever\n"
        "assert 'bm25s' not in sys.modules\n"
        "from gtr_keras.lexical.bm25 import BM25Retriever\nBM25Retriever()\nassert 'bm25s' in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_search_within_allowed_documents_ranks_only_them(retriever):
    everything, scores = retriever.search(["cats bread rockets tides"], k=4)
    allowed = [doc_id in ("rockets", "tides") for doc_id in DOCS]
    ids, kept = retriever.search(["cats bread rockets tides"], k=4, allowed=allowed)
    assert ids == [[i for i in everything[0] if i in ("rockets", "tides")]]
    assert kept[0] == [s for i, s in zip(everything[0], scores[0]) if i in ("rockets", "tides")]
    assert retriever.search(["cats"], k=3, allowed=[False] * 4) == ([[]], [[]])


def test_tied_documents_are_ranked_and_cut_by_id_descending_whatever_the_corpus_order():
    texts = ["wing lift", "wing lift", "wing lift", "drag"]
    for order in ([0, 1, 2, 3], [2, 0, 3, 1], [3, 1, 2, 0]):
        retriever = BM25Retriever()
        retriever.index([texts[i] for i in order], [["a", "c", "b", "z"][i] for i in order])
        assert retriever.search(["wing"], k=2)[0] == [["c", "b"]]
        assert retriever.search(["wing"], k=10)[0] == [["c", "b", "a"]]


def test_a_corpus_without_terms_is_indexed_saved_and_loaded_and_matches_nothing(tmp_path):
    retriever = BM25Retriever()
    retriever.index(["!!!", "", "the and"], ["a", "b", "c"])
    assert retriever.search(["anything"], k=3) == ([[]], [[]])
    retriever.save(tmp_path / "bm25")
    assert BM25Retriever.load(tmp_path / "bm25").search(["anything", ""], k=3) == ([[], []], [[], []])


@pytest.mark.parametrize("field, value", [("num_documents", "4"), ("k1", None), ("method", 3), ("texts_sha256", 1)])
def test_a_settings_field_of_a_wrong_type_is_named(retriever, tmp_path, field, value):
    retriever.save(tmp_path / "bm25")
    path = tmp_path / "bm25" / "bm25.json"
    settings = json.loads(path.read_text())
    settings[field] = value
    path.write_text(json.dumps(settings))
    if value is None and field == "k1":
        BM25Retriever.load(tmp_path / "bm25")  # optional: the default
        return
    with pytest.raises(DataError, match=rf"bm25.json: field '{field}'"):
        BM25Retriever.load(tmp_path / "bm25")


def test_ties_within_allowed_documents_are_cut_by_id_descending():
    texts = ["wing lift", "wing lift", "wing lift", "wing lift", "drag"]
    for order in ([0, 1, 2, 3, 4], [3, 0, 4, 2, 1]):
        retriever = BM25Retriever()
        ids = [["a", "b", "c", "d", "z"][i] for i in order]
        retriever.index([texts[i] for i in order], ids)
        allowed = [doc_id in ("a", "b", "c") for doc_id in ids]
        assert retriever.search(["wing"], k=2, allowed=allowed)[0] == [["c", "b"]]
