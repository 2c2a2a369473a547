"""Model families, one folder each, in keras-hub's layout (`keras_hub/src/models/<family>/`).

Public names: `Encoder` (what `gtr_keras.load` returns for a model), `TextEncoder` (every encoder's interface),
`PRESETS`, `preset_config`, `parameter_count`, `BUNDLED_MODEL_DIR`, `train_sentencepiece`, `EOS_ID`, `fingerprint`.
"""

from gtr_keras.utils.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "Encoder": "gtr_keras.models.gtr.encoder",
        "TextEncoder": "gtr_keras.models.text_encoder",
        "PRESETS": "gtr_keras.models.gtr.presets",
        "preset_config": "gtr_keras.models.gtr.presets",
        "parameter_count": "gtr_keras.models.gtr.presets",
        "BUNDLED_MODEL_DIR": "gtr_keras.models.gtr.presets",
        "train_sentencepiece": "gtr_keras.models.gtr.gtr_tokenizer",
        "EOS_ID": "gtr_keras.models.gtr.gtr_tokenizer",
        "fingerprint": "gtr_keras.models.model_files.fingerprint",
    },
)
