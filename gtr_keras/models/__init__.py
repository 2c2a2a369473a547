"""Model families, one folder each, in keras-hub's layout (`keras_hub/src/models/<family>/`); beside them
`text_encoder` (every encoder's interface) and `token_windows` (token windows of long texts, with their offsets).

Public names: `Encoder` (what `gtr_keras.load` returns for a model), `TextEncoder` (every encoder's interface),
`PRESETS` (the architectures and trained models by name), `BUNDLED_MODEL_DIR` (the model bundled with the package).
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "Encoder": "gtr_keras.models.gtr.encoder",
        "TextEncoder": "gtr_keras.models.text_encoder",
        "PRESETS": "gtr_keras.models.gtr.presets",
        "BUNDLED_MODEL_DIR": "gtr_keras.models.gtr.presets",
    },
)
