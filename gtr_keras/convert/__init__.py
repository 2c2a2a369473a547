"""Loading models by format, as keras-hub keeps its Hugging Face converters apart
(`keras_hub/src/utils/transformers/`): `preset_loader` (`load_embedder`: one loader per format of a resolved
`ModelSource`, keras-hub's preset loader for keras-hub presets), and the readers of the other formats,
`sentence_transformers` (the Hugging Face layout of `sentence-transformers/gtr-t5-*`, in and out) and
`legacy_format` (gtr-keras' first model directories). Each builds the embedder class it is given, so nothing
here imports the model classes."""
