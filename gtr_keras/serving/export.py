"""SavedModel export: raw strings in, embeddings or search results out.

`export_encoder` writes `EXPORT_DIR/encoder/<version>/`, a TF Hub reusable SavedModel
(https://www.tensorflow.org/hub/reusable_saved_models) following TF Hub's text-embedding
convention, with TF Serving's warmup requests: the SavedModel is `GTRTextEmbedder.write_saved_model`'s,
the one `GTRTextEmbedder.export` writes too (`obj(texts, training=...)`, `obj.variables`; signatures
`serving_default`, `encode_documents`, `encode_queries`).

`export_searcher` writes `EXPORT_DIR/searcher/<version>/` with

- `serving_default`: `queries` tf.string `[None]` -> `{"ids": tf.string [None, k], "scores": float32
  [None, k]}` for the export's `k`;
- `search`: `queries` tf.string `[None]` and `k` int32 `[None]` (one per query, so that TF Serving's
  batching can merge requests): each row holds its query's top `k` first; a batch is as wide as its
  largest `k` (at most the number of documents), and a row's places past its own `k` hold id `""` and
  score `-2.0` (never a real score: scores are cosines). `k < 1` is an error.
- `search_filtered`: as `search`, with `filter` tf.string `[None]`, the clauses of `search --filter` (ANDed,
  for the whole request; none: no filter), evaluated in the graph (`FilterGraph`) over the metadata of the
  index's documents kept in the SavedModel: the same hits as `gtr-keras search --filter` (docs/filters.md).
  A row past the allowed documents holds padding; a clause that does not parse, an unknown field or a type
  mismatch fails the request naming the clause.

An empty batch gives `[0, k]` (`[0, 0]` from `search`, whose `k` has no entries). Text that is not
valid UTF-8 is read with each invalid byte sequence replaced by U+FFFD, as everywhere in gtr-keras
(`GTRTokenizer`).

The tokenizer (TF Text's `FastSentencepieceTokenize` op, its model a graph constant; `spiece.model` is
also kept as an asset), the encoder weights and the index are inside. The `brute-force` searcher uses
stock TensorFlow ops only (a matmul and `top_k`) and runs on stock TF Serving; the `scann` searcher needs
ScaNN's custom ops, and its searcher is rebuilt once when the SavedModel is loaded (from the serialized
ScaNN assets), never per call. An index that rescores ScaNN's candidates with float32 (`reorder: "float32"`)
is exported with its float32 vectors (a variable) and rescores as `SearchIndex.search` does, answering as
`gtr-keras search`; `scann-int8` leaves them out (ScaNN's int8 order, a quarter of the memory).

`export_all` writes both as a unit (they replace their previous versions together), checking
first that the index was built with the encoder's model. A version directory is replaced only when
empty or a SavedModel (`check_export_outputs`).

Loading needs `import tensorflow_text` (and `import scann` for a ScaNN searcher) first;
`load_export` does both.

Export and index directories may be local or on any file system TensorFlow knows (`gs://...`,
`ram://...`): exports are written locally and uploaded, a remote index's ScaNN assets are copied
locally to be read.
"""

import contextlib
import copy
import os
import shutil
import uuid

import numpy as np
import tensorflow as tf

from gtr_keras.errors import DataError, UserError
from gtr_keras.index.layout import (
    INDEX_SUBDIR,
    NO_FLOAT32,
    SCANN_ARRAY_FILES,
    SCANN_DATAPOINT_TO_TOKEN,
    SCANN_TENSOR_FILES,
    has_float32,
    read_description,
)
from gtr_keras.index.scann_builder import codec_files, merge_scann
from gtr_keras.index.search_index import RESCORE_BAND, SearchIndex
from gtr_keras.index.segments import documents_path, index_documents, initial_manifest, read_manifest, segment_path
from gtr_keras.models.gtr.gtr_text_embedder import SAVED_MODEL_DIRECTORY, GTRTextEmbedder
from gtr_keras.retrieval.retriever import Retriever
from gtr_keras.serving.filter_graph import FilterGraph
from gtr_keras.utils import files
from gtr_keras.utils.checksums import verify_directory
from gtr_keras.utils.files import atomic_outputs
from gtr_keras.utils.locks import locks_output

QUERIES = tf.TensorSpec([None], tf.string, name="queries")
K = tf.TensorSpec([None], tf.int32, name="k")
FILTER = tf.TensorSpec([None], tf.string, name="filter")
PAD_ID, PAD_SCORE = "", -2.0
WARMUP_FILE = "tf_serving_warmup_requests"
WARMUP_TEXTS = ("what keeps a wing up?", "GTR is a dual encoder for retrieval.")
WARMUP_K = 3
SCANN_SUBDIR = "scann"
SEARCHERS = ("scann", "scann-int8", "brute-force")
# A `scann` searcher holds the float32 vectors it rescores with as a variable, in TF Serving's memory (a SavedModel
# cannot memory-map them): 2.9 GiB a million 768-d vectors. Above this it is refused unless asked for
# (`allow_large_float32`), `scann-int8` suggested: at 1 GiB (350,000 768-d vectors) the float32 copy already
# holds more than ScaNN's whole index of a million.
FLOAT32_LIMIT = 2**30
_VARIABLE_ROWS = 65_536
IMPORT_HINT = (
    "GTR SavedModels use TF Text's SentencePiece ops (and the ScaNN searcher uses ScaNN's ops): run "
    "`import tensorflow_text` (and `import scann`) before `tf.saved_model.load`/`hub.load`, or load with "
    "`gtr_keras.serving.load_export(path)`."
)


def _version_dir(export_dir, name, version):
    return os.path.join(export_dir, name, str(version))


def next_version(export_dir, names=("encoder", "searcher")):
    """The version after the highest of `export_dir/NAME/<version>` of `names` (1 when there is none): an
    export there adds it, and TF Serving, which serves the highest version, switches to it by itself while
    the versions it may be serving stay as they are.

    Example:
    >>> next_version("exports/scifact")
    2
    """
    versions = [0]
    for name in names:
        folder = os.path.join(export_dir, name)
        if files.isdir(folder):
            versions += [int(entry) for entry in files.listdir(folder) if entry.isdigit()]
    return max(versions) + 1


def check_export_outputs(export_dir, version=1, names=("encoder", "searcher")):
    """Refuses (`DataError` naming a file there) a version directory `export_dir/NAME/<version>` of `names`
    that holds something else than a SavedModel, which an export would replace; call it before the work.

    Example:
    >>> check_export_outputs("exports/scifact", 2)
    """
    for name in names:
        files.check_replaceable(_version_dir(export_dir, name, version), [SAVED_MODEL_DIRECTORY])


def _save(root, staging, signatures, model_name):
    GTRTextEmbedder.save_saved_model(root, staging, signatures)
    _write_warmup(staging, signatures, model_name)


def _write_warmup(staging, signatures, model_name):
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


def export_encoder(encoder, export_dir, version=None):
    """Writes the encoder SavedModel to `export_dir/encoder/<version>/`.

    Example:
    >>> export_encoder(gtr_keras.load("models/gtr-base"), "exports/gtr-base")
    >>> model = gtr_keras.serving.load_export("exports/gtr-base/encoder/1")
    >>> model.signatures["encode_queries"](texts=tf.constant(["a query"]))["embeddings"]
    """
    return export_all(encoder, export_dir, version=version)["encoder"]


def _write_encoder(encoder, staging):
    _write_warmup(staging, encoder.model.write_saved_model(staging), "gtr_encoder")


class _ScannResource(tf.saved_model.experimental.TrackableResource):
    """A ScaNN searcher rebuilt from its serialized assets once per SavedModel load.

    The searcher's protos and arrays travel as SavedModel assets; the resource
    reads them when it is created (once, at load), so a search call never
    rebuilds the index.

    Args:
        scann_dir: a ScaNN searcher serialized by `scann_ops_pybind` (`SearchIndex.save`).
        raw_dir: a scratch directory for raw copies of its `.npy` arrays, which
            the graph reads with `tf.io.decode_raw`, and of its other files.
        prefix: the start of its assets' names, unique among the searchers of one SavedModel (whose
            assets are named by their files' names).
    """

    def __init__(self, scann_dir, raw_dir, prefix=""):
        from scann.scann_ops.py import scann_ops

        self._tensors_to_scann = scann_ops.tensors_to_scann
        # ScaNN's resource op would otherwise share one searcher among every SavedModel and every part of one.
        self._shared_name = f"gtr-keras-scann-{uuid.uuid4().hex}"
        self._files = {}
        for name in SCANN_TENSOR_FILES:
            shutil.copyfile(os.path.join(scann_dir, name), os.path.join(raw_dir, prefix + name))
            self._files[name] = tf.saved_model.Asset(os.path.join(raw_dir, prefix + name))
        self._specs = {}
        for name in SCANN_ARRAY_FILES:
            array = np.ascontiguousarray(np.load(os.path.join(scann_dir, name)))
            raw_path = os.path.join(raw_dir, prefix + name.replace(".npy", ".raw"))
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

        none = tf.constant(0.0)  # no float32 dataset (reordering is on int8) and no norms (dot product)
        return self._tensors_to_scann(
            none,
            tf.reshape(read("scann_config.pb"), [1]),
            tf.reshape(read("serialized_partitioner.pb"), [1]),
            array(SCANN_DATAPOINT_TO_TOKEN),
            tf.reshape(read("ah_codebook.pb"), [1]),
            array("hashed_dataset.npy"),
            array("int8_dataset.npy"),
            array("int8_multipliers.npy"),
            none,
            shared_name=self._shared_name,
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


@locks_output("export_dir")
def export_searcher(
    encoder, index_dir, export_dir, searcher="scann", version=None, k=10, search_params=None, allow_large_float32=False
):
    """Writes a query-string-to-document-ids SavedModel to `export_dir/searcher/<version>/`.

    Args:
        encoder: the `Encoder` the index was built with (checked).
        index_dir: an index directory written by `gtr-keras index` (updated
            or not), or a list of them: shards of one model, searched as one
            (the merged top `k`).
        export_dir: the export root.
        searcher: `"scann"` (the index's ScaNN searcher, with its float32
            rescoring where the index keeps float32 vectors; an exact index is
            exported as brute force), `"scann-int8"` (ScaNN's int8 order
            only: no float32 vectors in memory) or `"brute-force"` (stock ops
            only; float32 vectors).
        version: the TF Serving version directory (None: `next_version`).
        k: results per query of `serving_default`.
        search_params: ScaNN's `num_leaves_to_search`, `reorder_factor` and `rescore_factor` for the exported
            searcher, overriding the index's (the setting `gtr-keras tune` recorded, or the build's); None: the
            index's.
        allow_large_float32: a `scann` searcher may hold more than `FLOAT32_LIMIT` bytes of float32 vectors
            (`searcher_float32_bytes`); without it that is a `UserError` suggesting `scann-int8`.

    Example:
    >>> export_searcher(encoder, "indexes/scifact", "exports/scifact", searcher="brute-force")
    """
    _check_searcher(encoder, index_dir, searcher, k, allow_large_float32)
    return _write_together(
        export_dir,
        version,
        {
            "searcher": lambda staging: _write_searcher(encoder, index_dir, staging, searcher, k, search_params),
        },
    )["searcher"]


@locks_output("export_dir")
def export_all(
    encoder,
    export_dir,
    index_dir=None,
    searcher="scann",
    version=None,
    k=10,
    search_params=None,
    allow_large_float32=False,
):
    """Writes the encoder export and, given an index, the searcher export, as a unit.

    `export_dir/encoder/<version>/` and `export_dir/searcher/<version>/`
    replace their previous versions together, once both are written: a
    failure leaves both as they were (an encoder and a searcher of different
    models side by side would serve wrong results). The arguments and the
    index's model are checked before anything is written.

    Args:
        encoder: the `Encoder` to export.
        export_dir: the export root.
        index_dir: an index directory built with `encoder`, or None for the encoder only.
        searcher, version, k, search_params, allow_large_float32: as for `export_searcher`.

    Returns:
        A dict from `"encoder"` (and `"searcher"`) to the directory written.

    Example:
    >>> export_all(encoder, "exports/scifact", "indexes/scifact", searcher="brute-force")["searcher"]
    'exports/scifact/searcher/1'
    """
    writers = {"encoder": lambda staging: _write_encoder(encoder, staging)}
    if index_dir is not None:
        _check_searcher(encoder, index_dir, searcher, k, allow_large_float32)
        writers["searcher"] = lambda staging: _write_searcher(encoder, index_dir, staging, searcher, k, search_params)
    return _write_together(export_dir, version, writers)


def write_export(
    encoder, export_dir, index=None, searcher="scann", k=10, version=None, search_param=None, allow_large_float32=False
):
    """`export --format savedmodel`: the encoder (and, given index directories, the searcher) SavedModels
    as the next version of `export_dir` (or `version`), after checking the version directories; returns
    the directories written. `search_param`: `(name, value)` pairs of the ScaNN searcher's setting
    (`export_searcher`'s `search_params`). Prints one line with the bytes of float32 vectors a `scann`
    searcher holds, where it holds any.

    Example:
    >>> write_export(encoder, "exports/scifact", ["indexes/scifact"])
    ['exports/scifact/encoder/1', 'exports/scifact/searcher/1']
    """
    version = check_export_versions(
        export_dir, index, version, searcher=searcher, allow_large_float32=allow_large_float32
    )
    index_dir = index[0] if index and len(index) == 1 else index
    held = searcher_float32_bytes(index_dir, searcher) if index_dir else None
    if held:
        print(
            f"the scann searcher holds {held[0]:,} bytes ({held[0] / 2**30:.2f} GiB) of float32 vectors ({held[1]:,} "
            f"rows x {held[2]} dims) to rescore with, in the memory of what serves it; --searcher scann-int8 leaves "
            "them out"
        )
    search_params = dict(search_param or [])
    return list(
        export_all(encoder, export_dir, index_dir, searcher, version, k, search_params, allow_large_float32).values()
    )


def check_export_versions(export_dir, index=None, version=None, searcher="scann", allow_large_float32=False, **options):
    """The version `write_export` writes, its directories checked first (`check_export_outputs`), and the float32
    vectors of a `scann` searcher of `index` (`check_float32`), before the model loads."""
    names = ["encoder", "searcher"] if index else ["encoder"]
    version = version or next_version(export_dir, names)
    check_export_outputs(export_dir, version, names)
    if index:
        check_float32(index[0] if len(index) == 1 else index, searcher, allow_large_float32)
    return version


def searcher_float32_bytes(index_dir, searcher):
    """`(bytes, rows, dims)` of the float32 vectors a `searcher` export of `index_dir` (one index directory or a
    list) holds to rescore ScaNN's candidates with: the live rows of every segment, 4 bytes a dimension; None for
    another searcher than `scann`, an exact index (brute force), or a ScaNN index with a part keeping none. Read
    from the indexes' descriptions and manifests, no vector loaded."""
    if searcher != "scann":
        return None
    rows = dims = 0
    for directory in _index_dirs(index_dir):
        search_dir, _, config = read_description(os.path.join(directory, INDEX_SUBDIR))
        manifest = read_manifest(search_dir) or initial_manifest(config["num_embeddings"])
        for segment in manifest["segments"]:
            _, _, described = read_description(segment_path(search_dir, segment["name"]))
            if described["kind"] != "scann" or not has_float32(described["kind"], described["params"]):
                return None
            rows, dims = rows + segment["num_rows"] - segment["num_deleted"], described["dims"]
    return rows * dims * 4, rows, dims


def check_float32(index_dir, searcher, allow_large_float32=False):
    """Refuses a `scann` searcher of `index_dir` that would hold more than `FLOAT32_LIMIT` bytes of float32
    vectors (`searcher_float32_bytes`), unless `allow_large_float32`: a `UserError` suggesting `scann-int8`."""
    held = searcher_float32_bytes(index_dir, searcher)
    if held and held[0] > FLOAT32_LIMIT and not allow_large_float32:
        raise UserError(
            f"--searcher scann would hold {held[0] / 2**30:.2f} GiB of float32 vectors ({held[1]:,} rows x {held[2]} "
            f"dims) in the SavedModel, in the memory of what serves it, above the {FLOAT32_LIMIT / 2**30:g} GiB "
            "limit: export --searcher scann-int8 (ScaNN's int8 order, recall@10 against float32 search near 0.97), "
            "or pass --allow-large-float32"
        )


def _write_together(export_dir, version, writers):
    version = version or next_version(export_dir, list(writers))
    targets = {name: _version_dir(export_dir, name, version) for name in writers}
    for target in targets.values():
        files.remove_staging(target)  # `export_all` holds the export root's lock
    with atomic_outputs(*targets.values(), replaces=[[SAVED_MODEL_DIRECTORY]] * len(targets)) as staged:
        for write, staging in zip(writers.values(), staged):
            staging.mkdir()
            write(staging)
    return targets


def _check_searcher(encoder, index_dir, searcher, k, allow_large_float32):
    if searcher not in SEARCHERS:
        raise UserError(f"searcher must be one of {', '.join(map(repr, SEARCHERS))}, got {searcher!r}")
    if not isinstance(k, int) or k < 1:
        raise UserError(f"k must be a positive integer, got {k!r}")
    for directory in _index_dirs(index_dir):
        Retriever.check_model(directory, encoder)
        _, _, config = read_description(os.path.join(directory, INDEX_SUBDIR))
        if searcher == "brute-force" and not has_float32(config["kind"], config["params"]):
            raise DataError(f"{directory}: the brute-force searcher needs float32 vectors, but {NO_FLOAT32}")
    check_float32(index_dir, searcher, allow_large_float32)


def _index_dirs(index_dir):
    return [index_dir] if isinstance(index_dir, (str, os.PathLike)) else list(index_dir)


def _scann_groups(index):
    """`[(scann_dir, keep mask or None, params, live rows)]`: the ScaNN searchers of a loaded index, consecutive
    parts that share one tree and codebooks joined into one (`merge_scann` does the joining)."""
    groups = []
    for part, deleted in index.parts:
        scann_dir = os.path.join(part.path, SCANN_SUBDIR)
        keep = None if deleted is None else ~deleted
        if groups and codec_files(groups[-1][0][0][0]) == codec_files(scann_dir):
            groups[-1][0].append((scann_dir, keep))
        else:
            groups.append(([(scann_dir, keep)], part.params))
    return groups


def _original_documents(index, copies):
    """`index_documents` of an index loaded from local copies of `index/` directories (`copies`: copy ->
    original), read from the originals: a copy of `index/` alone lacks the base segment's documents, which
    lie beside it (`documents_path`)."""
    for part, _ in index.parts:
        copy = next(c for c in copies if part.path == c or part.path.startswith(c.rstrip("/") + "/"))
        part.documents_path = documents_path(copies[copy], os.path.relpath(part.path, copy))
    return index_documents(index)


def _write_searcher(encoder, index_dir, staging, searcher, k, search_params=None):
    # One local copy of a remote index (the ScaNN assets are read again when the SavedModel is saved).
    with contextlib.ExitStack() as stack:
        originals = [os.path.join(d, INDEX_SUBDIR) for d in _index_dirs(index_dir)]
        local = [stack.enter_context(files.local_copy(d)) for d in originals]
        index = SearchIndex.load(local[0] if len(local) == 1 else local)
        documents = _original_documents(index, dict(zip(local, originals)))
        if index.kind == "mixed":
            raise UserError(f"{index_dir}: shards of exact and ScaNN indexes; export shards of one kind")
        use_scann = searcher != "brute-force" and index.kind == "scann"
        float32 = searcher == "scann" and all(part.embeddings is not None for part, _ in index.parts)
        if search_params and use_scann:
            index.set_search_params(search_params)
        root, embed = encoder.model.saved_model_root(staging), encoder.model.embed_strings
        root.doc_ids = tf.Variable(np.array(index.ids, dtype=object), trainable=False, name="doc_ids")
        num_docs = len(index.ids)
        raw_dir = os.path.join(staging, "scann_raw")
        if use_scann:
            from scann.scann_ops.py import scann_ops

            if float32:
                root.doc_embeddings = _float32_variable(index)
            root.scann_parts, searched, offset = [], [], 0
            for number, (parts, params) in enumerate(_scann_groups(index)):
                part_dir = os.path.join(raw_dir, str(number))
                os.makedirs(part_dir)
                if len(parts) > 1 or parts[0][1] is not None:
                    merged = os.path.join(part_dir, "merged")
                    os.makedirs(merged)
                    merge_scann(parts, merged)
                    parts = [(merged, None)]
                resource = _ScannResource(parts[0][0], part_dir, "" if number == 0 else f"part-{number}-")
                root.scann_parts.append(resource)
                size = np.load(os.path.join(parts[0][0], SCANN_DATAPOINT_TO_TOKEN), mmap_mode="r").shape[0]
                leaves = (params["num_leaves_to_search"], params["num_leaves"])
                rescore = index.params["rescore_factor"] if float32 else 1
                searched.append((resource, offset, size, params["reorder_factor"], rescore, leaves))
                offset += size

            def top_k(queries, k, every_leaf=False):
                # Plain tuples, not ScaNN's named one: `tf.cond` in `search` pairs them with an empty batch's.
                neighbors, scores = [], []
                for resource, first, size, reorder, rescore, leaves in searched:
                    width = tf.minimum(k, size)
                    # Rescored with float32 below, as `SearchIndex.search` does (`rescore_pool_size`).
                    pool = tf.minimum(width + (rescore - 1) * tf.minimum(width, RESCORE_BAND), size)
                    found = scann_ops.scann_search_batched(
                        resource.resource_handle,
                        queries,
                        pool,
                        tf.maximum(pool, reorder * width),
                        leaves[every_leaf],
                        True,
                    )
                    missing = tf.math.is_nan(found[1])  # places ScaNN's searched leaves could not fill
                    neighbors.append(tf.where(missing, 0, found[0]) + first)
                    scores.append(tf.where(missing, -np.inf, found[1]))
                neighbors, scores = tf.concat(neighbors, axis=1), tf.concat(scores, axis=1)
                if float32:
                    exact = tf.einsum("bcd,bd->bc", tf.gather(root.doc_embeddings, neighbors), queries)
                    scores = tf.where(tf.math.is_finite(scores), exact, -np.inf)
                elif len(searched) == 1:
                    return neighbors, scores
                best, place = tf.math.top_k(scores, k)
                return tf.gather(neighbors, place, batch_dims=1), best

            def allowed_top_k(queries, k, allowed):
                # Over-fetch in proportion to the rows allowed; rows left short are searched again over every
                # leaf and every row (`filtered_search`'s guarantee: k allowed hits while k allowed rows exist).
                count = tf.reduce_sum(tf.cast(allowed, tf.int32))
                fetch = tf.minimum(num_docs, k * tf.math.floordiv(num_docs + count - 1, tf.maximum(count, 1)) + 3)

                def kept(fetch, every_leaf):
                    neighbors, scores = top_k(queries, fetch, every_leaf)
                    keep = tf.gather(allowed, neighbors) & tf.math.is_finite(scores)
                    best, place = tf.math.top_k(tf.where(keep, scores, -np.inf), k)
                    filled = tf.reduce_sum(tf.cast(keep, tf.int32), axis=1) >= tf.minimum(k, count)
                    return tf.gather(neighbors, place, batch_dims=1), best, tf.reduce_all(filled)

                neighbors, scores, filled = kept(fetch, False)
                return tf.cond(filled, lambda: (neighbors, scores), lambda: kept(tf.constant(num_docs), True)[:2])
        else:
            root.doc_embeddings = _float32_variable(index)  # `_check_searcher` refused an index without them

            def top_k(queries, k):
                scores, neighbors = tf.math.top_k(tf.matmul(queries, root.doc_embeddings, transpose_b=True), k)
                return neighbors, scores

            def allowed_top_k(queries, k, allowed):
                scores = tf.matmul(queries, root.doc_embeddings, transpose_b=True)
                scores, neighbors = tf.math.top_k(tf.where(allowed[None, :], scores, -np.inf), k)
                return neighbors, scores

        root.filter_graph = FilterGraph(Retriever(None, index, documents).metadata)

        def search(queries, k, min_width=0, filter=None):
            valid = tf.debugging.assert_greater_equal(k, 1, message="k must be at least 1")
            with tf.control_dependencies([valid]):
                k = tf.minimum(k, num_docs)
            width = tf.reduce_max(tf.concat([k, [min_width]], axis=0))
            query_embeddings = embed(queries, "query")
            if filter is None:
                found = lambda: top_k(query_embeddings, width)  # noqa: E731
            else:
                allowed = root.filter_graph.mask(filter)
                found = lambda: allowed_top_k(query_embeddings, width, allowed)  # noqa: E731
            neighbors, scores = tf.cond(
                tf.shape(queries)[0] > 0,
                found,
                lambda: (tf.zeros([0, width], tf.int32), tf.zeros([0, width], tf.float32)),
            )
            neighbors, scores = tf.ensure_shape(neighbors, [None, None]), tf.ensure_shape(scores, [None, None])
            inside = (tf.range(width)[None, :] < k[:, None]) & tf.math.is_finite(scores)
            return {
                "ids": tf.where(inside, tf.gather(root.doc_ids, neighbors), PAD_ID),
                "scores": tf.where(inside, scores, PAD_SCORE),
            }

        root.search = tf.function(search, input_signature=[QUERIES, K])
        root.search_filtered = tf.function(
            lambda queries, k, filter: search(queries, k, filter=filter), input_signature=[QUERIES, K, FILTER]
        )
        root.search_default_k = tf.function(
            lambda queries: search(queries, tf.fill(tf.shape(queries), k), min(k, num_docs)), input_signature=[QUERIES]
        )
        signatures = {"serving_default": root.search_default_k, "search": root.search}
        _save(root, staging, {**signatures, "search_filtered": root.search_filtered}, "gtr_searcher")
        shutil.rmtree(raw_dir, ignore_errors=True)


def _float32_variable(index):
    """The float32 vectors of `index`'s live rows as the variable `doc_embeddings`, filled `_VARIABLE_ROWS` rows at
    a time from its (memory-mapped) parts: the export holds one copy of them, TensorFlow's, not a second in numpy
    (`tf.Variable` of an array holds both, and three at its peak)."""
    dims = index.dims
    variable = tf.Variable(lambda: tf.zeros([len(index.ids), dims], tf.float32), trainable=False, name="doc_embeddings")
    start = 0
    for part, deleted in index.parts:
        live = np.arange(len(part.ids)) if deleted is None else np.flatnonzero(~deleted)
        for first in range(0, len(live), _VARIABLE_ROWS):
            rows = np.asarray(part.embeddings[live[first : first + _VARIABLE_ROWS]], np.float32)
            end = start + len(rows)
            tf.raw_ops.ResourceStridedSliceAssign(
                ref=variable.handle, begin=[start, 0], end=[end, dims], strides=[1, 1], value=rows
            )
            start = end
    return variable


def load_export(path, verify=False):
    """Loads an exported SavedModel after registering the custom ops it needs.

    Args:
        path: a SavedModel directory, local or on a file system TensorFlow knows (`gs://...`).
        verify: first verify every file against the directory's record (`utils.checksums.verify_directory`),
            and refuse a damaged one.

    Raises:
        DataError: `path` does not exist, or is on a file system TensorFlow does not know.
        RuntimeError: the SavedModel needs ops that are not registered (the
            message says which import brings them).

    Example:
    >>> searcher = gtr_keras.serving.load_export("exports/scifact/searcher/1")
    >>> searcher.signatures["serving_default"](queries=tf.constant(["vitamin D"]))["ids"]
    """
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    try:
        from scann.scann_ops.py import scann_ops  # noqa: F401  (registers the ScaNN ops, also after a TF-free load)
    except ImportError:
        pass
    path = os.fspath(path)
    if not files.exists(path):  # (`exists` names a file system TensorFlow does not know)
        raise DataError(f"{path}: no such file or directory")
    try:
        if verify:
            verify_directory(path)
        return tf.saved_model.load(path)
    except (tf.errors.NotFoundError, ValueError, RuntimeError, KeyError) as error:
        if "not registered" in str(error) or "Op type" in str(error):
            raise RuntimeError(f"{path}: {IMPORT_HINT} ({type(error).__name__}: {error})") from error
        raise
