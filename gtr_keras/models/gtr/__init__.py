"""The GTR model family as keras-hub classes, one class a module, each module named after its class.

From the bottom up: the T5 encoder layers (`relative_position_bias`, exact relative-position buckets;
`t5_attention`, `t5_feed_forward`, `t5_encoder_block`; and the head's `masked_mean_pooling`), `presets`
(architectures, and the one table of trained models' names), `gtr_tokenizer` (`GTRTokenizer`, SentencePiece
in the graph), `gtr_backbone` (`GTRBackbone`, the T5 encoder), `gtr_text_embedder_preprocessor`
(`GTRTextEmbedderPreprocessor`, query and document budgets), `encoder` (`Encoder`, numpy batches bucketed by
length) and `gtr_text_embedder` (`GTRTextEmbedder`: pooling, projection, L2 norm). A model's files on disk
are `gtr_keras.models.model_files`'.

Importing the family registers its classes with Keras (`keras.saving.load_model` and keras-hub's
`from_preset` find them by their registered names) and its presets with keras-hub (as
`keras_hub/src/models/bert/__init__.py` does): `import gtr_keras` imports it at once when Keras is imported
already, and so does the first of `gtr_keras`' names that needs a model.
"""

from keras_hub.src.utils.preset_utils import register_presets

from gtr_keras.models.gtr.gtr_backbone import GTRBackbone
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder  # noqa: F401  (with its preprocessor and tokenizer)
from gtr_keras.models.gtr.presets import keras_hub_presets

register_presets(keras_hub_presets(), GTRBackbone)
