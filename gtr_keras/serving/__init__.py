"""Serving: `export` writes the encoder and searcher SavedModels (TF Hub, Keras 3 `TFSMLayer`, TF
Serving) and loads them back."""
