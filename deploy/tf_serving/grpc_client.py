"""gRPC client for a gtr-keras export served by TF Serving.

    pip install tensorflow-serving-api==2.20.*
    python deploy/tf_serving/grpc_client.py --host localhost:8500 "wing lift"
    python deploy/tf_serving/grpc_client.py --signature search --k 3 "wing lift" "boundary layer"
    python deploy/tf_serving/grpc_client.py --model gtr_encoder --signature encode_queries "wing lift"

Texts go in requests of at most `--chunk-size` (the server's `max_batch_size`, 256 in
`batching.config`; larger requests are rejected); the answers are printed in input order.
"""

import argparse

import tensorflow as tf
from tensorflow_serving.apis import predict_pb2

MAX_BATCH_SIZE = 256  # batching.config's max_batch_size
INPUT_NAMES = {"gtr_searcher": "queries", "gtr_encoder": "texts"}


def build_requests(model, signature, texts, k=None, chunk_size=MAX_BATCH_SIZE):
    """`PredictRequest`s for `texts`, at most `chunk_size` texts each; `k` (per query) for `search`."""
    if k is not None and signature != "search":
        raise ValueError("--k goes with --signature search (serving_default uses the export's k)")
    if signature == "search" and (k is None or k < 1):
        raise ValueError("--signature search needs --k of at least 1")
    requests = []
    for start in range(0, len(texts), chunk_size):
        chunk = texts[start : start + chunk_size]
        request = predict_pb2.PredictRequest()
        request.model_spec.name = model
        request.model_spec.signature_name = signature
        request.inputs[INPUT_NAMES.get(model, "queries")].CopyFrom(tf.make_tensor_proto(chunk, dtype=tf.string))
        if k is not None:
            request.inputs["k"].CopyFrom(tf.make_tensor_proto([k] * len(chunk), dtype=tf.int32))
        requests.append(request)
    return requests


def main():
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    parser = argparse.ArgumentParser()
    parser.add_argument("texts", nargs="+", help="queries (searcher) or texts (encoder)")
    parser.add_argument("--host", default="localhost:8500", help="TF Serving gRPC address (default: %(default)s)")
    parser.add_argument("--model", default="gtr_searcher", choices=sorted(INPUT_NAMES), help="default: %(default)s")
    parser.add_argument(
        "--signature",
        default="serving_default",
        help="serving_default, search (searcher); encode_queries, encode_documents (encoder)",
    )
    parser.add_argument("--k", type=int, help="results per query, with --signature search")
    parser.add_argument(
        "--chunk-size", type=int, default=MAX_BATCH_SIZE, help="texts per request (default: %(default)s)"
    )
    args = parser.parse_args()

    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(args.host))
    for request in build_requests(args.model, args.signature, args.texts, args.k, args.chunk_size):
        response = stub.Predict(request, timeout=10.0)
        for key, value in sorted(response.outputs.items()):
            print(key, tf.make_ndarray(value))


if __name__ == "__main__":
    main()
