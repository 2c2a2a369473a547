"""gRPC client for a gtr-keras export served by TF Serving.

    pip install tensorflow-serving-api==2.20.*
    python export/serving/grpc_client.py --host localhost:8500 "wing lift"
"""

import argparse

import grpc
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("queries", nargs="+")
    parser.add_argument("--host", default="localhost:8500")
    parser.add_argument("--model", default="gtr_searcher", help="gtr_searcher or gtr_encoder")
    parser.add_argument("--signature", default="serving_default")
    args = parser.parse_args()

    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(args.host))
    request = predict_pb2.PredictRequest()
    request.model_spec.name = args.model
    request.model_spec.signature_name = args.signature
    input_name = "queries" if args.model == "gtr_searcher" else "texts"
    request.inputs[input_name].CopyFrom(tf.make_tensor_proto(args.queries, dtype=tf.string))
    response = stub.Predict(request, timeout=10.0)
    for key, value in response.outputs.items():
        print(key, tf.make_ndarray(value))


if __name__ == "__main__":
    main()
