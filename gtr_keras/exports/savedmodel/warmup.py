"""The inputs of the SavedModels' signatures (`queries`, `k`, `filter`) and TF Serving's warmup requests over
them (`assets.extra/tf_serving_warmup_requests`).
"""

import os

import tensorflow as tf

from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder

QUERIES = tf.TensorSpec([None], tf.string, name="queries")


K = tf.TensorSpec([None], tf.int32, name="k")


FILTER = tf.TensorSpec([None], tf.string, name="filter")


WARMUP_FILE = "tf_serving_warmup_requests"


WARMUP_TEXTS = ("what keeps a wing up?", "GTR is a dual encoder for retrieval.")


WARMUP_K = 3


def save_with_warmup(root, staging, signatures, model_name):
    GTRTextEmbedder.save_saved_model(root, staging, signatures)
    write_warmup(staging, signatures, model_name)


def write_warmup(staging, signatures, model_name):
    """TF Serving's warmup file, `assets.extra/tf_serving_warmup_requests`: a request to each signature
    (`PredictionLog` records), which TF Serving replays when it loads the model, so that the first
    client's call does not pay for tracing and TF Text's initialisation."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    os.makedirs(os.path.join(staging, "assets.extra"))
    with tf.io.TFRecordWriter(os.path.join(staging, "assets.extra", WARMUP_FILE)) as writer:
        for name, function in signatures.items():
            request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(name=model_name, signature_name=name))
            for spec in function.input_signature:
                values = list(WARMUP_TEXTS) if spec.dtype == tf.string else [WARMUP_K] * len(WARMUP_TEXTS)
                values = [] if spec.name == FILTER.name else values  # no filter: a warmup needs no metadata field
                if spec.shape.rank == 0:  # a scalar input (a reranker's `query`)
                    values = values[0]
                shape = [] if spec.shape.rank == 0 else [len(values)]
                request.inputs[spec.name].CopyFrom(tf.make_tensor_proto(values, dtype=spec.dtype, shape=shape))
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
