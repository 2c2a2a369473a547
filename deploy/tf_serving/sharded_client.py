"""A client that searches a corpus split over several TF Serving searchers and merges their answers.

Each machine serves the searcher export of one shard of the corpus (`gtr-keras index` of its part, then
`gtr-keras export --index SHARD`); the client sends every query to all of them with the `search` signature
and keeps the best `k` of the answers by score (equal scores: ids in descending order, the rule of exact
search), which for exact shards is the top `k` of one index over the whole corpus.

    pip install tensorflow-serving-api==2.20.*
    python deploy/tf_serving/sharded_client.py --host machine-a:8500 --host machine-b:8500 -k 10 "wing lift"

`ShardedSearcher` takes any callables `(queries, k) -> {"ids", "scores"}`, so the same merge serves gRPC
stubs (`grpc_searcher`) and SavedModels loaded in one process (as the tests do).
"""

import argparse
import concurrent.futures

import numpy as np
import tensorflow as tf
from grpc_client import build_requests

PAD_ID = b""  # what a searcher puts in the places past a row's own k


def merge_top_k(answers, k):
    """The best `k` `(ids, scores)` of each query over several searchers' answers, best first.

    Args:
        answers: one `(ids, scores)` pair per searcher: bytes `[n, k_i]` and float `[n, k_i]` arrays.
        k: results per query.

    Returns:
        `(ids, scores)`: a list per query of at most `k` ids (bytes), and of their scores.

    Example:
    >>> merge_top_k([(np.array([[b"a"]]), np.array([[0.5]])), (np.array([[b"b"]]), np.array([[0.9]]))], 1)
    ([[b'b']], [[0.9]])
    """
    ids = np.concatenate([np.asarray(found, dtype=object) for found, _ in answers], axis=1)
    scores = np.concatenate([np.asarray(score, dtype=np.float64) for _, score in answers], axis=1)
    merged_ids, merged_scores = [], []
    for row_ids, row_scores in zip(ids, scores):
        ranked = sorted(
            ((score, found) for found, score in zip(row_ids, row_scores) if found != PAD_ID),
            key=lambda pair: pair[1],
            reverse=True,
        )
        ranked = sorted(ranked, key=lambda pair: -pair[0])[:k]  # stable: equal scores keep ids descending
        merged_ids.append([found for _, found in ranked])
        merged_scores.append([score for score, _ in ranked])
    return merged_ids, merged_scores


class ShardedSearcher:
    """Searches every shard's searcher (in parallel threads) and merges the answers (`merge_top_k`).

    Args:
        searchers: callables `(queries, k)` returning `{"ids", "scores"}` arrays, one per shard.

    Example:
    >>> searcher = ShardedSearcher([grpc_searcher("machine-a:8500"), grpc_searcher("machine-b:8500")])
    >>> ids, scores = searcher.search(["wing lift"], 10)  # doctest: +SKIP
    """

    def __init__(self, searchers):
        self.searchers = list(searchers)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(self.searchers))

    def search(self, queries, k):
        futures = [self._pool.submit(searcher, list(queries), k) for searcher in self.searchers]
        answers = [future.result() for future in futures]
        return merge_top_k([(np.asarray(a["ids"]), np.asarray(a["scores"])) for a in answers], k)


def saved_model_searcher(loaded):
    """A searcher callable of a searcher SavedModel loaded in this process (`gtr_keras.exports.load_export`)."""
    search = loaded.signatures["search"]

    def run(queries, k):
        outputs = search(queries=tf.constant(queries, tf.string), k=tf.constant([k] * len(queries), tf.int32))
        return {name: value.numpy() for name, value in outputs.items()}

    return run


def grpc_searcher(host, model="gtr_searcher", timeout=10.0):
    """A searcher callable that asks the TF Serving at `host` (`machine:8500`) with the `search` signature."""
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(host))

    def run(queries, k):
        responses = [stub.Predict(request, timeout=timeout) for request in build_requests(model, "search", queries, k)]
        return {
            name: np.concatenate([tf.make_ndarray(response.outputs[name]) for response in responses])
            for name in ("ids", "scores")
        }

    return run


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("queries", nargs="+")
    parser.add_argument("--host", action="append", required=True, help="a shard's TF Serving gRPC address; repeat")
    parser.add_argument("--model", default="gtr_searcher", help="the served searcher's name (default: %(default)s)")
    parser.add_argument("-k", type=int, default=10, help="results per query (default: %(default)s)")
    args = parser.parse_args()
    searcher = ShardedSearcher([grpc_searcher(host, args.model) for host in args.host])
    for query, ids, scores in zip(args.queries, *searcher.search(args.queries, args.k)):
        print(f"query: {query}")
        for rank, (found, score) in enumerate(zip(ids, scores), start=1):
            print(f"{rank:3d}. [{score:.4f}] {found.decode('utf-8')}")


if __name__ == "__main__":
    main()
