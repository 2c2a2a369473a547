"""The GTR model family as keras-hub classes, one responsibility a module.

From the bottom up: the T5 encoder layers, one a module (`gtr_relative_position_bias`, exact
relative-position buckets; `t5_attention`, `t5_feed_forward`, `t5_encoder_block`; and the head's
`gtr_masked_mean_pooling`), `presets`
(architectures, and the one table of trained models' names), `model_directory` (a preset directory's
files and the checks of its settings against its weights), `model_source` (a name, id or directory
resolved once into its path and format), `tokenizer` (`GTRTokenizer`, SentencePiece in the graph),
`backbone` (`GTRBackbone`, the T5 encoder), `preprocessor` (`GTRTextEmbedderPreprocessor`, query and
document budgets), `encoder` (`Encoder`, numpy batches bucketed by length), `preset_writer` (a model
directory written as a unit), `text_embedder` (`GTRTextEmbedder`: pooling, projection, L2 norm),
`keras_hub_loader` (keras-hub's generic `from_preset` for GTR sources), `functional_models` (GTR's
subclassed models beside keras-hub's functional ones), `fingerprint` (SHA-256 of a model), and `saving`
(`load`, `save`, `migrate`, `convert_sentence_transformers`).

Importing the family registers its presets with keras-hub (as `keras_hub/src/models/bert/__init__.py`
does) and installs the two patches that let GTR live beside keras-hub (`functional_models`,
`keras_hub_loader`); `gtr_keras` imports it as soon as Keras is imported.
"""

from keras_hub.src.utils.preset_utils import register_presets

from gtr_keras.models.gtr import functional_models, keras_hub_loader
from gtr_keras.models.gtr.backbone import GTRBackbone
from gtr_keras.models.gtr.presets import keras_hub_presets

register_presets(keras_hub_presets(), GTRBackbone)
functional_models.install()
keras_hub_loader.install()
