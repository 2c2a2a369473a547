"""Serving: `export` writes the encoder and searcher SavedModels (TF Hub, Keras 3 `TFSMLayer`, TF
Serving) and loads them back.

Public names: `FORMATS` (every export format), `load_export`, `export_all`, `export_encoder`,
`export_searcher`, `export_litert`, `load_litert`, `litert_path`, `export_onnx`, `export_openvino`, `RuntimeEncoder`;
`gtr_keras.export` is the one call that writes any of them.
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "FORMATS": "gtr_keras.serving.export_formats",
        "load_export": "gtr_keras.serving.export",
        "export_all": "gtr_keras.serving.export",
        "export_encoder": "gtr_keras.serving.export",
        "export_searcher": "gtr_keras.serving.export",
        "export_litert": "gtr_keras.serving.litert",
        "load_litert": "gtr_keras.serving.litert",
        "litert_path": "gtr_keras.serving.litert",
        "export_onnx": "gtr_keras.serving.onnx_export",
        "export_openvino": "gtr_keras.serving.openvino_export",
        "RuntimeEncoder": "gtr_keras.serving.runtime_encoder",
    },
)
