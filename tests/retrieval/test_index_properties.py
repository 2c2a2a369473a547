"""Property test: `Index` driven by random sequences of build, add, delete, update, compact and search over
random ids (whitespace, Unicode, path-like, empty, repeated, lone surrogates) and texts, each step held to a
model of the corpus: a refused operation changes no byte of the index directory, an accepted one leaves the
index holding the model's live documents, whose GTR search is NumPy's brute force over them (encoded by the
same encoder)."""

import hashlib
import os
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gtr_keras.beir.readers import Corpus
from gtr_keras.errors import UserError
from gtr_keras.retrieval.index import Index

WORDS = "wing lift drag shock boundary layer heat transfer flutter nozzle".split()
QUERIES = ["boundary layer heat transfer", "wing flutter"]
# Ids a document may have: Unicode, path-like, an integer (stored as "3"), one a string spells the same.
GOOD_IDS = ["d0", "d1", "d2", "é-1", "日本", "a/b", "../up", "C:\\x", "x.y", 3, "3"]
# Ids no document may have: whitespace (Unicode's too), empty, NUL, a lone surrogate, not a string.
BAD_IDS = ["has space", "tab\tx", "nbsp\u00a0", "", "nul\0", "\ud800", None, True]
TOLERANCE = 1e-4  # float32 scores of two batchings of the same texts

settings.register_profile(
    "index-properties",
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("index-properties-large", settings.get_profile("index-properties"), max_examples=200)


TEXT = st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join)
GOOD_DOCUMENT = st.tuples(st.sampled_from(GOOD_IDS), st.sampled_from(["", None, "a title"]), TEXT)
ANY_DOCUMENT = st.tuples(
    st.sampled_from(GOOD_IDS + BAD_IDS),
    st.sampled_from(["", None, "a title", "\ud800", 3]),
    st.one_of(TEXT, st.sampled_from([None, 5, "wing \udcff"])),
)
GOOD_CORPUS = st.lists(GOOD_DOCUMENT, min_size=1, max_size=6, unique_by=lambda document: str(document[0]))
CORPUS = st.one_of(GOOD_CORPUS, GOOD_CORPUS, st.lists(ANY_DOCUMENT, max_size=5))
LIVE_IDS = ["d0", "d1", "d2"]  # likely in the index: a deletion of them is likely accepted
DELETE = st.one_of(
    st.sampled_from(LIVE_IDS + GOOD_IDS + ["has space", "", "\udcff", "line\nbreak"]),
    st.lists(st.sampled_from(LIVE_IDS), min_size=1, max_size=2),
    st.lists(st.sampled_from(GOOD_IDS + ["has space", "\udcff"]), min_size=1, max_size=3),
)
OPERATION = st.one_of(
    st.tuples(st.just("build"), CORPUS),
    st.tuples(st.just("add"), CORPUS.filter(len)),
    st.tuples(st.just("delete"), DELETE),
    st.tuples(st.just("update"), CORPUS.filter(len), DELETE),
    st.tuples(st.just("compact")),
    st.tuples(st.just("search"), st.integers(1, 6)),
)
OPERATIONS = st.builds(
    lambda first, rest: [first, *rest], st.tuples(st.just("build"), GOOD_CORPUS), st.lists(OPERATION, max_size=10)
)


class CorpusModel:
    """What the index must hold: its live documents `{id: (title, text)}` (None: no index), and the last
    update committed (rerunning it changes nothing)."""

    def __init__(self):
        self.documents = None
        self.last_update = None

    @staticmethod
    def corpus(documents):
        """The documents as the rule of a corpus file takes them, or None when it refuses one."""
        ids = [document[0] for document in documents]
        for doc_id, title, text in documents:
            if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)):
                return None
            doc_id = str(doc_id)
            if not doc_id or "\0" in doc_id or "\ud800" in doc_id or any(c.isspace() for c in doc_id):
                return None
            if text is None or not isinstance(text, str) or "\udcff" in text:
                return None
            if title is not None and (not isinstance(title, str) or "\ud800" in title):
                return None
        if len({str(doc_id) for doc_id in ids}) != len(ids):
            return None
        return {str(doc_id): (title or "", text) for doc_id, title, text in documents}

    @staticmethod
    def delete_ids(ids):
        """The ids to delete as `Index.delete` takes them (one id, or a list), or None when it refuses one."""
        ids = [str(i) for i in ([ids] if isinstance(ids, (str, int)) else ids)]
        return None if any(not i or "\udcff" in i or "\n" in i for i in ids) else ids

    def expect(self, operation):
        """The documents after `operation`, or None when it is refused."""
        kind = operation[0]
        if kind == "build":
            corpus = self.corpus(operation[1])
            return corpus if corpus else None
        if self.documents is None:
            return None
        if kind in ("compact", "search"):
            return self.documents
        corpus = self.corpus(operation[1]) if kind in ("add", "update") else {}
        delete = self.delete_ids(operation[-1]) if kind in ("delete", "update") else []
        if corpus is None or delete is None:
            return None
        if self._request(corpus, delete) == self.last_update:
            return self.documents  # a rerun of the update last committed
        live = set(self.documents)
        if len(set(delete)) != len(delete) or not set(delete) <= live or set(delete) & set(corpus):
            return None
        documents = {i: d for i, d in self.documents.items() if i not in delete} | corpus
        return documents or None

    def apply(self, operation, documents):
        kind = operation[0]
        if kind == "build":
            self.last_update = None
        elif kind in ("add", "delete", "update"):
            corpus = self.corpus(operation[1]) if kind != "delete" else {}
            self.last_update = self._request(corpus, self.delete_ids(operation[-1]) if kind != "add" else [])
        self.documents = documents

    @staticmethod
    def _request(corpus, delete):
        return tuple(corpus.items()), tuple(sorted(delete))


def _snapshot(directory):
    """SHA-256 of every file under `directory`, and the names beside it."""
    found = {}
    for root, _, names in os.walk(directory):
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                found[os.path.relpath(os.path.join(root, name), directory)] = hashlib.sha256(f.read()).hexdigest()
    return found, sorted(os.listdir(os.path.dirname(directory)))


def _as_corpus(documents):
    return Corpus([d[0] for d in documents], [d[1] for d in documents], [d[2] for d in documents])


def _run(operation, path, encoder):
    kind = operation[0]
    if kind == "build":
        Index.build(path, _as_corpus(operation[1]), encoder, exact=True)
    elif kind == "add":
        Index.open(path, encoder).add(_as_corpus(operation[1]))
    elif kind == "delete":
        Index.open(path, encoder).delete(operation[1])
    elif kind == "update":
        Index.open(path, encoder).update(add=_as_corpus(operation[1]), delete=operation[2])
    elif kind == "compact":
        Index.open(path, encoder).compact()
    else:
        Index.open(path, encoder)


def _check_search(path, encoder, documents, k):
    """The index's GTR hits are NumPy's brute force over `documents`; its BM25 side holds them too."""
    index = Index.open(path, encoder)
    assert sorted(index.ids) == sorted(documents)
    ids = list(documents)
    joined = [f"{title} {text}".strip() for title, text in documents.values()]
    scores = encoder.encode_queries(QUERIES) @ encoder.encode_documents(joined).T
    for hits, row in zip(index.search(QUERIES, k=k), scores):
        order = np.argsort(-row, kind="stable")
        expected = row[order]
        assert len(hits) == min(k, len(ids))
        np.testing.assert_allclose([hit["score"] for hit in hits], expected[: len(hits)], atol=TOLERANCE)
        for place, hit in enumerate(hits):
            neighbours = expected[max(place - 1, 0) : place + 2]
            if np.sum(np.abs(neighbours - expected[place]) <= TOLERANCE) == 1:  # no tie: one id can be there
                assert hit["id"] == ids[order[place]]
            assert (hit["title"], hit["text"]) == documents[hit["id"]]
    for hits in index.search(QUERIES, k=k, retriever="hybrid"):
        assert {hit["id"] for hit in hits} <= set(documents) and len(hits) == min(k, len(ids))


def _check_sequence(operations, encoder, root):
    workspace = tempfile.mkdtemp(dir=root)
    path = os.path.join(workspace, "idx")
    model = CorpusModel()
    try:
        for operation in operations:
            expected = model.expect(operation)
            before = _snapshot(path)
            try:
                _run(operation, path, encoder)
                refused = None
            except UserError as error:
                refused = error
            assert (refused is None) == (expected is not None), (operation, refused)
            event(f"{operation[0]} {'refused' if refused else 'accepted'}")
            if refused is not None:
                assert _snapshot(path) == before, operation
                continue
            model.apply(operation, expected)
            _check_search(path, encoder, model.documents, operation[1] if operation[0] == "search" else 5)
    finally:
        shutil.rmtree(workspace)


@settings(settings.get_profile("index-properties"))
@given(operations=OPERATIONS)
def test_any_sequence_of_operations_keeps_the_index_equal_to_its_model(tiny_encoder, tmp_path_factory, operations):
    _check_sequence(operations, tiny_encoder, tmp_path_factory.getbasetemp())


@pytest.mark.large
@settings(settings.get_profile("index-properties-large"))
@given(operations=OPERATIONS)
def test_many_sequences_of_operations_keep_the_index_equal_to_its_model(tiny_encoder, tmp_path_factory, operations):
    _check_sequence(operations, tiny_encoder, tmp_path_factory.getbasetemp())
