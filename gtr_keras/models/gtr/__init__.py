"""The GTR model family as keras-hub classes, one responsibility a module.

From the bottom up: the T5 encoder layers, one a module (`gtr_relative_position_bias`, exact
relative-position buckets; `t5_attention`, `t5_feed_forward`, `t5_encoder_block`; and the head's
`gtr_masked_mean_pooling`), `presets` (architectures and Hugging Face ids), `tokenizer` (`GTRTokenizer`,
SentencePiece in the graph), `backbone` (`GTRBackbone`, the T5 encoder), `preprocessor`
(`GTRTextEmbedderPreprocessor`, query and document budgets), `model_directory` (a preset directory's files
and the checks of its settings against its weights), `encoder` (`Encoder`, numpy batches bucketed by
length), `functional_models` (GTR's subclassed models beside keras-hub's functional ones in one process),
`text_embedder` (`GTRTextEmbedder`: pooling, projection, L2 norm), `fingerprint` (SHA-256 of a model), and
`saving` (`load`, `save`, `migrate`, `convert_sentence_transformers`).
"""

# Any module of the family registers them all with Keras (`keras_hub` presets name every class): this runs
# before the module asked for, so the classes never meet a half-imported module of their own.
from gtr_keras.models.gtr import text_embedder  # noqa: E402,F401
