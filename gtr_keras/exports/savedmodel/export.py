"""SavedModel export: raw strings in, embeddings or search results out.

`export_encoder` writes `EXPORT_DIR/encoder/<version>/`, a TF Hub reusable SavedModel
(https://www.tensorflow.org/hub/reusable_saved_models) following TF Hub's text-embedding
convention, with TF Serving's warmup requests: the SavedModel is `GTRTextEmbedder.write_saved_model`'s,
the one `GTRTextEmbedder.export` writes too (`obj(texts, training=...)`, `obj.variables`, Keras' `obj.serve(texts)`;
signatures `serving_default`, `encode_documents`, `encode_queries`).

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

The searcher of a passages index (`gtr-keras index --passages`, docs/long-documents.md) answers its documents as
`gtr-keras search` does: each document scored by its best window (MaxP, in the graph, over `k` times the most
windows a document has), and two more outputs, int64 `passage_start` and `passage_end` `[None, k]`: the
characters of that window in the document's text (`-1` in padding).

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

from gtr_keras.exports.savedmodel.searcher_graph import check_searcher, write_searcher
from gtr_keras.exports.savedmodel.warmup import write_warmup
from gtr_keras.exports.versions import write_together
from gtr_keras.utils.locks import locks_output


def export_encoder(encoder, export_dir, version=None):
    """Writes the encoder SavedModel to `export_dir/encoder/<version>/`.

    Example:
    >>> export_encoder(gtr_keras.load("models/gtr-base"), "exports/gtr-base")
    >>> model = gtr_keras.exports.load_export("exports/gtr-base/encoder/1")
    >>> model.signatures["encode_queries"](texts=tf.constant(["a query"]))["embeddings"]
    """
    return export_all(encoder, export_dir, version=version)["encoder"]


def _write_encoder(encoder, staging):
    write_warmup(staging, encoder.model.write_saved_model(staging, encoder.dimensions), "gtr_encoder")


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
    check_searcher(encoder, index_dir, searcher, k, allow_large_float32)
    return write_together(
        export_dir,
        version,
        {
            "searcher": lambda staging: write_searcher(encoder, index_dir, staging, searcher, k, search_params),
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
        check_searcher(encoder, index_dir, searcher, k, allow_large_float32)
        writers["searcher"] = lambda staging: write_searcher(encoder, index_dir, staging, searcher, k, search_params)
    return write_together(export_dir, version, writers)
