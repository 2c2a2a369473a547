"""Exports, the files a model and an index are served from elsewhere (the HTTP server is `gtr_keras.server`):
`savedmodel/` writes the encoder and searcher SavedModels (TF Hub, Keras 3 `TFSMLayer`, TF Serving) and loads
them back; `litert`, `onnx_export`, `openvino_export` and `token_id_export` write the other formats,
`reranker_export` a reranker's; `versions` numbers them as TF Serving does; `export_formats` is the formats'
table, `exporter` (`gtr_keras.export`) the one call that writes any of them; `runtime_encoder`,
`saved_model_encoder` and `litert_encoder` run them.

Public names: `FORMATS` (every export format), `RuntimeEncoder` (what `gtr_keras.load` answers for an ONNX,
OpenVINO or LiteRT export) and `load_export` (a SavedModel export's signatures, the searcher's included, as TF
Serving runs them); `gtr_keras.export` writes any format and `gtr_keras.load` loads any as an encoder.
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "FORMATS": "gtr_keras.exports.export_formats",
        "RuntimeEncoder": "gtr_keras.exports.runtime_encoder",
        "load_export": "gtr_keras.exports.savedmodel.loader",
    },
)
