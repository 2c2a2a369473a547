import numpy as np
import pytest

from gtr_keras.beir.readers import Corpus
from gtr_keras.errors import UserError
from gtr_keras.retrieval.reranking import FunctionScorer, rerank, rerank_run, reranker_of


class LengthScorer:
    """A reranker that scores a pair by its document's length, and records its calls."""

    def __init__(self):
        self.calls = []

    def predict(self, pairs, batch_size=32):
        self.calls.append(list(pairs))
        return np.array([len(document) for _, document in pairs], np.float32)


def test_rerank_scores_every_querys_pairs_in_one_call_and_orders_each_query():
    scorer = LengthScorer()
    hits = [
        [{"id": "a", "score": 0.9, "title": "", "text": "x"}, {"id": "b", "score": 0.8, "title": "T", "text": "yyy"}],
        [{"id": "c", "score": 0.5, "text": "zz"}, {"id": "d", "score": 0.4, "text": "zzzz"}, {"id": "e", "text": "q"}],
    ]
    reranked = rerank(scorer, ["q1", "q2"], hits, depth=2)
    assert scorer.calls == [[("q1", "x"), ("q1", "T yyy"), ("q2", "zz"), ("q2", "zzzz")]]
    assert [[h["id"] for h in row] for row in reranked] == [["b", "a"], ["d", "c"]]
    assert reranked[0][0] == {"id": "b", "score": 5.0, "title": "T", "text": "yyy"}


def test_a_hit_without_its_text_is_refused():
    with pytest.raises(UserError, match="hit 'a' of query 0 has no document text"):
        rerank(LengthScorer(), ["q"], [[{"id": "a", "score": 1.0}]])


def test_a_reranked_run_puts_the_reranked_documents_above_the_rest_in_first_stage_order():
    corpus = Corpus(["d1", "d2", "d3", "d4"], ["", "", "", ""], ["a", "bbb", "cc", "dddd"])
    run = {"q": {"d1": 4.0, "d2": 3.0, "d3": 2.0, "d4": 1.0}}
    reranked = rerank_run(LengthScorer(), {"q": "query"}, run, corpus, depth=2)["q"]
    assert sorted(reranked, key=lambda d: -reranked[d]) == ["d2", "d1", "d3", "d4"]


def test_a_function_scorer_is_a_reranker_for_index_search_whose_pairs_a_function_scores():
    from gtr_keras.models.text_encoder import TextPairScorer

    asked = []

    def score(pairs):
        asked.append(pairs)
        return [len(document) for _, document in pairs]

    scorer = FunctionScorer(score)
    assert isinstance(scorer, TextPairScorer)  # what `Index.search(rerank=...)` takes
    scores = scorer.predict([["q", "abc"], ("q", "a")])
    assert scores.dtype == np.float32 and scores.tolist() == [3.0, 1.0] and asked == [[("q", "abc"), ("q", "a")]]
    with pytest.raises(UserError, match="item 0 is not a"):
        scorer.predict(["not a pair"])


def test_reranker_of_takes_a_scorer_or_a_function_of_no_arguments_that_loads_one():
    scorer = FunctionScorer(lambda pairs: [0.0] * len(pairs))
    assert reranker_of(scorer) is scorer
    assert reranker_of(lambda: scorer) is scorer
    with pytest.raises(UserError, match="rerank: .* is not a reranker: give a reranker's scorer"):
        reranker_of(lambda: "not a scorer")


def test_a_keras_model_that_is_no_reranker_is_refused_without_being_called():
    import keras

    class Refusing(keras.Layer):
        def __call__(self, *args, **kwargs):
            raise AssertionError("a Keras layer given as rerank= was called")

    with pytest.raises(UserError, match="is not a reranker: give a reranker's scorer"):
        reranker_of(Refusing())
    with pytest.raises(UserError, match="is not a reranker"):
        reranker_of(keras.Sequential([keras.layers.Dense(1)]))  # callable, as a GTRTextEmbedder is


def test_a_function_that_loads_a_reranker_model_gives_its_scorer(reranker_dirs):
    from gtr_keras.models.reranker.reranker import Reranker

    model = Reranker.from_preset(reranker_dirs["bert"])
    assert reranker_of(lambda: model) is model.scorer()
    assert reranker_of(model) is model.scorer()
