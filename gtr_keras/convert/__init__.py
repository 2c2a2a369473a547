"""Loading models by format, as keras-hub keeps its Hugging Face converters apart
(`keras_hub/src/utils/transformers/`): `preset_loader` (the loader of each format keras-hub does not read,
registered for a resolved `ModelSource`) and the reader of the other format, `sentence_transformers` (the
Hugging Face layout of `sentence-transformers/gtr-t5-*`, in and out). It builds the embedder class it is
given, so nothing here imports the model classes."""
