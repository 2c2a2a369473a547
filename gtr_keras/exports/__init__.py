"""Exports, the files a model and an index are served from elsewhere (the HTTP server is `gtr_keras.server`):
`savedmodel/` writes the encoder and searcher SavedModels (TF Hub, Keras 3 `TFSMLayer`, TF Serving) and loads
them back; `litert`, `onnx_export`, `openvino_export` and `token_id_export` write the other formats,
`reranker_export` a reranker's; `versions` numbers them as TF Serving does; `export_formats` is the formats'
table, `exporter` (`gtr_keras.export`) the one call that writes any of them; `runtime_encoder`,
`saved_model_encoder` and `litert_encoder` run them.

Public names: `FORMATS` (every export format), `load_export`, `export_all`, `export_encoder`,
`export_searcher`, `export_litert`, `load_litert`, `litert_path`, `export_onnx`, `export_openvino`, `RuntimeEncoder`;
`gtr_keras.export` is the one call that writes any of them.
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "FORMATS": "gtr_keras.exports.export_formats",
        "load_export": "gtr_keras.exports.savedmodel.loader",
        "export_all": "gtr_keras.exports.savedmodel.export",
        "export_encoder": "gtr_keras.exports.savedmodel.export",
        "export_searcher": "gtr_keras.exports.savedmodel.export",
        "export_litert": "gtr_keras.exports.litert",
        "load_litert": "gtr_keras.exports.litert",
        "litert_path": "gtr_keras.exports.litert",
        "export_onnx": "gtr_keras.exports.onnx_export",
        "export_openvino": "gtr_keras.exports.openvino_export",
        "RuntimeEncoder": "gtr_keras.exports.runtime_encoder",
    },
)
