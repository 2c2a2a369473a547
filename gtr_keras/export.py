"""SavedModel export: raw strings in, embeddings or search results out.

`export_encoder` writes `EXPORT_DIR/encoder/<version>/` with the signatures

- `serving_default` and `encode_documents`: tf.string `[None]` -> `{"embeddings": float32 [None, D]}`,
  document truncation;
- `encode_queries`: the same with query truncation.

`export_searcher` writes `EXPORT_DIR/searcher/<version>/` with

- `serving_default`: tf.string `[None]` -> `{"ids": tf.string [None, k], "scores": float32 [None, k]}`
  for the default `k`;
- `search`: the same with an int32 scalar `k` input.

The tokenizer (TF Text's SentencePiece op; `spiece.model` is also kept as an
asset), the encoder weights (as variables, so the model can be reloaded and
fine-tuned in TF) and the index are inside. The `brute-force` searcher uses
stock TensorFlow ops only (a matmul and `top_k`) and runs on stock TF Serving;
the `scann` searcher needs ScaNN's custom ops, and its searcher is rebuilt once
when the SavedModel is loaded (from the serialized ScaNN assets), never per call.

Loading needs `import tensorflow_text` (and `import scann` for a ScaNN
searcher) first; `load_export` does both.
"""

import copy
import json
import os
import shutil

import numpy as np
import tensorflow as tf

from gtr_keras.files import atomic_directory
from gtr_keras.index import SearchIndex
from gtr_keras.retrieval import INDEX_SUBDIR, RETRIEVER_JSON
from gtr_keras.tokenizer import pad_token_ids

STRINGS = tf.TensorSpec([None], tf.string, name="texts")
QUERIES = tf.TensorSpec([None], tf.string, name="queries")
K = tf.TensorSpec([], tf.int32, name="k")
SCANN_SUBDIR = "scann"
SCANN_TENSOR_FILES = ("scann_config.pb", "serialized_partitioner.pb", "ah_codebook.pb")
SCANN_ARRAY_FILES = ("datapoint_to_token.npy", "hashed_dataset.npy", "dataset.npy")
IMPORT_HINT = (
    "GTR SavedModels use TF Text's SentencePiece ops (and the ScaNN searcher uses ScaNN's ops): run "
    "`import tensorflow_text` (and `import scann`) before `tf.saved_model.load`/`hub.load`, or load with "
    "`gtr_keras.load_export(path)`."
)


class _Embedder(tf.Module):
    """The model and its tokenizer, as trackable TensorFlow objects."""

    def __init__(self, encoder):
        super().__init__()
        self.model = encoder.model
        self.tokenizer = encoder.tokenizer
        self.lengths = {"query": encoder.query_length, "document": encoder.document_length}
        # Keras layers do not expose TF Text's resources to SavedModel tracking; this module does.
        encoder.tokenizer._maybe_initialized_tf()
        self.sentencepiece_resource = encoder.tokenizer._sentence_piece

    def embed(self, texts, kind):
        token_ids = self.tokenizer.token_ids(texts, self.lengths[kind])
        return tf.cast(self.model(pad_token_ids(token_ids), training=False), tf.float32)


def _version_dir(export_dir, name, version):
    return os.path.join(export_dir, name, str(version))


def _root(encoder, staging):
    """The object to save: embedder, weights as (trainable) variables, SentencePiece asset."""
    root = tf.__internal__.tracking.AutoTrackable()
    root.embedder = _Embedder(encoder)
    root.variables = [v.value for v in encoder.model.variables]
    root.trainable_variables = [v.value for v in encoder.model.trainable_variables]
    path = os.path.join(staging, "spiece.model")
    with open(path, "wb") as f:
        f.write(encoder.tokenizer.proto)
    root.spiece_model = tf.saved_model.Asset(path)
    return root


def _save(root, staging, signatures):
    tf.saved_model.save(root, str(staging), signatures=signatures)
    os.remove(os.path.join(staging, "spiece.model"))


def export_encoder(encoder, export_dir, version=1):
    """Writes the encoder SavedModel to `export_dir/encoder/<version>/`.

    Example:
    >>> export_encoder(gtr_keras.load("models/gtr-base"), "exports/gtr-base")
    >>> model = gtr_keras.load_export("exports/gtr-base/encoder/1")
    >>> model.signatures["encode_queries"](texts=tf.constant(["a query"]))["embeddings"]
    """
    target = _version_dir(export_dir, "encoder", version)
    with atomic_directory(target) as staging:
        root = _root(encoder, staging)
        embedder = root.embedder
        root.encode_queries = tf.function(
            lambda texts: {"embeddings": embedder.embed(texts, "query")}, input_signature=[STRINGS]
        )
        root.encode_documents = tf.function(
            lambda texts: {"embeddings": embedder.embed(texts, "document")}, input_signature=[STRINGS]
        )
        _save(root, staging, {
            "serving_default": root.encode_documents,
            "encode_documents": root.encode_documents,
            "encode_queries": root.encode_queries,
        })
    return target


class _ScannResource(tf.saved_model.experimental.TrackableResource):
    """A ScaNN searcher rebuilt from its serialized assets once per SavedModel load.

    The searcher's protos and arrays travel as SavedModel assets; the resource
    reads them when it is created (once, at load), so a search call never
    rebuilds the index.

    Args:
        scann_dir: a ScaNN searcher serialized by `scann_ops_pybind` (`SearchIndex.save`).
        raw_dir: a scratch directory for raw copies of its `.npy` arrays, which
            the graph reads with `tf.io.decode_raw`.
    """

    def __init__(self, scann_dir, raw_dir):
        from scann.scann_ops.py import scann_ops

        self._tensors_to_scann = scann_ops.tensors_to_scann
        self._files = {name: tf.saved_model.Asset(os.path.join(scann_dir, name)) for name in SCANN_TENSOR_FILES}
        self._specs = {}
        for name in SCANN_ARRAY_FILES:
            array = np.ascontiguousarray(np.load(os.path.join(scann_dir, name)))
            raw_path = os.path.join(raw_dir, name.replace(".npy", ".raw"))
            array.tofile(raw_path)
            self._files[name] = tf.saved_model.Asset(raw_path)
            self._specs[name] = (array.dtype.name, list(array.shape))
        super().__init__()

    def _build(self, path_of):
        def read(name):
            return tf.io.read_file(path_of(self._files[name]))

        def array(name):
            dtype, shape = self._specs[name]
            return tf.reshape(tf.io.decode_raw(read(name), tf.as_dtype(dtype)), shape)

        return self._tensors_to_scann(
            array("dataset.npy"), tf.reshape(read("scann_config.pb"), [1]),
            tf.reshape(read("serialized_partitioner.pb"), [1]), array("datapoint_to_token.npy"),
            tf.reshape(read("ah_codebook.pb"), [1]), array("hashed_dataset.npy"),
            tf.constant(0, tf.int8), tf.constant(0.0), tf.constant(0.0),
        )

    def _create_resource(self):
        return self._build(lambda asset: asset.asset_path)

    def _named_assets(self):
        return {f"asset_{name.split('.')[0]}": asset for name, asset in self._files.items()}

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        return {**super()._trackable_children(save_type, **kwargs), **self._named_assets()}

    def _deserialization_dependencies(self, children):
        return self._named_assets()

    def _export_to_saved_model_graph(self, object_map, tensor_map, **unused_kwargs):
        # The graph for TF Serving's loader reads the assets through their
        # exported path variables (mapped first: see _deserialization_dependencies).
        exported = copy.copy(self)
        with tf.device(self._resource_device):
            handle = self._build(lambda asset: tensor_map[asset.asset_path])
        exported._resource_handle = handle
        object_map[self] = exported
        tensor_map[self.resource_handle] = handle
        return [self.resource_handle]


def export_searcher(encoder, index_dir, export_dir, searcher="scann", version=1, k=10):
    """Writes a query-string-to-document-ids SavedModel to `export_dir/searcher/<version>/`.

    Args:
        encoder: the `Encoder` the index was built with.
        index_dir: an index directory written by `gtr-keras index`.
        export_dir: the export root.
        searcher: `"scann"` (the index's ScaNN searcher; an exact index is
            exported as brute force) or `"brute-force"` (stock ops only).
        version: the TF Serving version directory.
        k: results per query of `serving_default`.

    Example:
    >>> export_searcher(encoder, "indexes/scifact", "exports/scifact", searcher="brute-force")
    """
    if searcher not in ("scann", "brute-force"):
        raise ValueError(f"searcher must be 'scann' or 'brute-force', got {searcher!r}")
    with open(os.path.join(index_dir, RETRIEVER_JSON), encoding="utf-8") as f:
        if json.load(f)["embedding_dim"] != encoder.embedding_dim:
            raise ValueError(f"{index_dir} was built with another model (embedding size differs)")
    index = SearchIndex.load(os.path.join(index_dir, INDEX_SUBDIR))
    use_scann = searcher == "scann" and index.kind == "scann"
    target = _version_dir(export_dir, "searcher", version)
    with atomic_directory(target) as staging:
        root = _root(encoder, staging)
        root.doc_ids = tf.Variable(np.array(index.ids, dtype=object), trainable=False, name="doc_ids")
        num_docs = len(index.ids)
        raw_dir = os.path.join(staging, "scann_raw")
        if use_scann:
            from scann.scann_ops.py import scann_ops

            os.makedirs(raw_dir)
            root.scann = _ScannResource(os.path.join(index_dir, INDEX_SUBDIR, SCANN_SUBDIR), raw_dir)
            reorder, leaves = index.params["reorder_factor"], index.params["num_leaves_to_search"]

            def top_k(queries, k):
                return scann_ops.scann_search_batched(
                    root.scann.resource_handle, queries, k, reorder * k, leaves, True
                )
        else:
            root.doc_embeddings = tf.Variable(index.embeddings, trainable=False, name="doc_embeddings")

            def top_k(queries, k):
                scores, neighbors = tf.math.top_k(tf.matmul(queries, root.doc_embeddings, transpose_b=True), k)
                return neighbors, scores

        def search(queries, k):
            k = tf.clip_by_value(k, 1, num_docs)
            neighbors, scores = top_k(root.embedder.embed(queries, "query"), k)
            return {"ids": tf.gather(root.doc_ids, neighbors), "scores": scores}

        root.search = tf.function(search, input_signature=[QUERIES, K])
        root.search_default_k = tf.function(lambda queries: search(queries, tf.constant(k)), input_signature=[QUERIES])
        _save(root, staging, {"serving_default": root.search_default_k, "search": root.search})
        shutil.rmtree(raw_dir, ignore_errors=True)
    return target


def load_export(path):
    """Loads an exported SavedModel after registering the custom ops it needs.

    Example:
    >>> searcher = gtr_keras.load_export("exports/scifact/searcher/1")
    >>> searcher.signatures["serving_default"](queries=tf.constant(["vitamin D"]))["ids"]
    """
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    try:
        import scann  # noqa: F401  (registers the ScaNN ops)
    except ImportError:
        pass
    try:
        return tf.saved_model.load(path)
    except (tf.errors.NotFoundError, ValueError) as error:
        if "Op type not registered" in str(error) or "not registered" in str(error):
            raise RuntimeError(f"{path}: {IMPORT_HINT} ({error})") from error
        raise
