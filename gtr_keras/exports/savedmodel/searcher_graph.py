"""The searcher SavedModel's graph: an index's vectors (ScaNN or brute force), ids and metadata with the
encoder, and its `serving_default`, `search` and `search_filtered` signatures (`export` says what they take).
"""

import contextlib
import os
import shutil

import numpy as np
import tensorflow as tf

from gtr_keras.errors import DataError, UserError
from gtr_keras.exports.savedmodel.filter_graph import FilterGraph
from gtr_keras.exports.savedmodel.scann_resource import ScannResource
from gtr_keras.exports.savedmodel.warmup import FILTER, QUERIES, K, save_with_warmup
from gtr_keras.retrieval.index_building import with_recorded_dimensions
from gtr_keras.retrieval.passages import shards_setting, split_row_id
from gtr_keras.retrieval.retriever import Retriever
from gtr_keras.storage.layout import (
    INDEX_SUBDIR,
    NO_FLOAT32,
    PASSAGES_FIELD,
    SCANN_DATAPOINT_TO_TOKEN,
    has_float32,
    read_description,
    read_model_record,
)
from gtr_keras.storage.scann_builder import codec_files, merge_scann
from gtr_keras.storage.search_index import RESCORE_BAND, SearchIndex
from gtr_keras.storage.segments import documents_path, index_documents, initial_manifest, read_manifest, segment_path
from gtr_keras.utils import files

PAD_ID, PAD_SCORE, PAD_OFFSET = "", -2.0, -1


SCANN_SUBDIR = "scann"


SEARCHERS = ("scann", "scann-int8", "brute-force")


# A `scann` searcher holds the float32 vectors it rescores with as a variable, in TF Serving's memory (a SavedModel
# cannot memory-map them): 2.9 GiB a million 768-d vectors. Above this it is refused unless asked for
# (`allow_large_float32`), `scann-int8` suggested: at 1 GiB (350,000 768-d vectors) the float32 copy already
# holds more than ScaNN's whole index of a million.
FLOAT32_LIMIT = 2**30


_VARIABLE_ROWS = 65_536


def searcher_float32_bytes(index_dir, searcher):
    """`(bytes, rows, dims)` of the float32 vectors a `searcher` export of `index_dir` (one index directory or a
    list) holds to rescore ScaNN's candidates with: the live rows of every segment, 4 bytes a dimension; None for
    another searcher than `scann`, an exact index (brute force), or a ScaNN index with a part keeping none. Read
    from the indexes' descriptions and manifests, no vector loaded."""
    if searcher != "scann":
        return None
    rows = dims = 0
    for directory in index_dirs(index_dir):
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


def check_searcher(encoder, index_dir, searcher, k, allow_large_float32):
    if searcher not in SEARCHERS:
        raise UserError(f"searcher must be one of {', '.join(map(repr, SEARCHERS))}, got {searcher!r}")
    if not isinstance(k, int) or k < 1:
        raise UserError(f"k must be a positive integer, got {k!r}")
    directories = index_dirs(index_dir)
    shards_setting(directories, [read_model_record(directory) for directory in directories])
    for directory in directories:
        encoder = Retriever.encoder_for(directory, encoder)
        _, _, config = read_description(os.path.join(directory, INDEX_SUBDIR))
        if searcher == "brute-force" and not has_float32(config["kind"], config["params"]):
            raise DataError(f"{directory}: the brute-force searcher needs float32 vectors, but {NO_FLOAT32}")
    check_float32(index_dir, searcher, allow_large_float32)


def index_dirs(index_dir):
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


def write_searcher(encoder, index_dir, staging, searcher, k, search_params=None):
    # One local copy of a remote index (the ScaNN assets are read again when the SavedModel is saved).
    with contextlib.ExitStack() as stack:
        originals = [os.path.join(d, INDEX_SUBDIR) for d in index_dirs(index_dir)]
        local = [stack.enter_context(files.local_copy(d)) for d in originals]
        index = SearchIndex.load(local[0] if len(local) == 1 else local)
        documents = _original_documents(index, dict(zip(local, originals)))
        if index.kind == "mixed":
            raise UserError(f"{index_dir}: shards of exact and ScaNN indexes; export shards of one kind")
        use_scann = searcher != "brute-force" and index.kind == "scann"
        if search_params and use_scann:
            index.set_search_params(search_params)
        float32 = searcher == "scann" and all(part.rescores for part, _ in index.parts)  # rescore_factor 0: none
        encoder = with_recorded_dimensions(read_model_record(index_dirs(index_dir)[0]), encoder, index_dir)
        root, embed = encoder.model.saved_model_root(staging), encoder.model.embed_strings
        num_docs = len(index.ids)  # rows: a passages index's windows
        passages = read_model_record(index_dirs(index_dir)[0]).get(PASSAGES_FIELD)
        if passages:
            windows, hits = _window_variables(root, index.ids)
        else:
            root.doc_ids = tf.Variable(np.array(index.ids, dtype=object), trainable=False, name="doc_ids")
            windows, hits = 1, num_docs
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
                resource = ScannResource(parts[0][0], part_dir, "" if number == 0 else f"part-{number}-")
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
            root.doc_embeddings = _float32_variable(index)  # `check_searcher` refused an index without them

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
                k = tf.minimum(k, hits)
            width = tf.reduce_max(tf.concat([k, [min_width]], axis=0))
            fetch = tf.minimum(width * windows, num_docs)  # rows enough for `width` documents (MaxP)
            query_embeddings = embed(queries, "query", dimensions=encoder.dimensions)
            if filter is None:
                found = lambda: top_k(query_embeddings, fetch)  # noqa: E731
            else:
                allowed = root.filter_graph.mask(filter)
                found = lambda: allowed_top_k(query_embeddings, fetch, allowed)  # noqa: E731
            neighbors, scores = tf.cond(
                tf.shape(queries)[0] > 0,
                found,
                lambda: (tf.zeros([0, fetch], tf.int32), tf.zeros([0, fetch], tf.float32)),
            )
            neighbors, scores = tf.ensure_shape(neighbors, [None, None]), tf.ensure_shape(scores, [None, None])
            if passages:
                neighbors, scores = _best_windows(root, neighbors, scores, width, hits)
            inside = (tf.range(width)[None, :] < k[:, None]) & tf.math.is_finite(scores)
            if not passages:
                return {
                    "ids": tf.where(inside, tf.gather(root.doc_ids, neighbors), PAD_ID),
                    "scores": tf.where(inside, scores, PAD_SCORE),
                }
            return {
                "ids": tf.where(inside, tf.gather(root.doc_ids, tf.gather(root.row_documents, neighbors)), PAD_ID),
                "scores": tf.where(inside, scores, PAD_SCORE),
                "passage_start": tf.where(inside, tf.gather(root.passage_starts, neighbors), PAD_OFFSET),
                "passage_end": tf.where(inside, tf.gather(root.passage_ends, neighbors), PAD_OFFSET),
            }

        root.search = tf.function(search, input_signature=[QUERIES, K])
        root.search_filtered = tf.function(
            lambda queries, k, filter: search(queries, k, filter=filter), input_signature=[QUERIES, K, FILTER]
        )
        root.search_default_k = tf.function(
            lambda queries: search(queries, tf.fill(tf.shape(queries), k), min(k, hits)), input_signature=[QUERIES]
        )
        signatures = {"serving_default": root.search_default_k, "search": root.search}
        save_with_warmup(root, staging, {**signatures, "search_filtered": root.search_filtered}, "gtr_searcher")
        shutil.rmtree(raw_dir, ignore_errors=True)


def _window_variables(root, row_ids):
    """A passages index's rows as variables of `root` (`doc_ids`: the documents, in the order of their first
    windows; per row `row_documents`, its document's number, and `passage_starts`, `passage_ends`, its characters
    in the document's text); returns `(the most windows a document has, the number of documents)`."""
    numbers, documents, starts, ends = {}, [], [], []
    for row in row_ids:
        doc_id, start, end = split_row_id(row)
        documents.append(numbers.setdefault(doc_id, len(numbers)))
        starts.append(start)
        ends.append(end)
    root.doc_ids = tf.Variable(np.array(list(numbers), dtype=object), trainable=False, name="doc_ids")
    root.row_documents = tf.Variable(np.array(documents, np.int32), trainable=False, name="row_documents")
    root.passage_starts = tf.Variable(np.array(starts, np.int64), trainable=False, name="passage_starts")
    root.passage_ends = tf.Variable(np.array(ends, np.int64), trainable=False, name="passage_ends")
    return int(np.bincount(documents).max()), len(numbers)


def _best_windows(root, neighbors, scores, width, hits):
    """The rows of each query's best `width` documents among its rows `neighbors` (best first), each its
    document's best window (MaxP), and their scores; `-inf` past the documents found."""
    documents = tf.where(tf.math.is_finite(scores), tf.gather(root.row_documents, neighbors), hits)
    order = tf.argsort(documents, axis=1, stable=True)  # each document's rows together, its best first
    grouped = tf.gather(documents, order, batch_dims=1)
    first = tf.concat([tf.ones_like(grouped[:, :1], tf.bool), grouped[:, 1:] != grouped[:, :-1]], axis=1)
    best = tf.where(first & (grouped < hits), tf.gather(scores, order, batch_dims=1), -np.inf)
    best, place = tf.math.top_k(best, width)
    return tf.gather(tf.gather(neighbors, order, batch_dims=1), place, batch_dims=1), best


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
