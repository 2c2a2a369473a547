"""Readers of model formats other than keras-hub presets, as keras-hub keeps its Hugging Face converters
apart (`keras_hub/src/utils/transformers/`): `sentence_transformers` (the Hugging Face layout of
`sentence-transformers/gtr-t5-*`), `first_format` (gtr-keras' first model directories) and
`preset_loader`, which `GTRTextEmbedder.from_preset` asks first. Each builds the embedder class it is
given, so nothing here imports the model classes."""
