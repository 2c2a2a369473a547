"""The patches that let GTR live beside Keras and keras-hub in one process, installed by `gtr_keras` once the
model family is imported: `keras_functional_models` (GTR's subclassed models beside keras-hub's functional
ones) and `keras_hub_preset_loader` (keras-hub's generic `from_preset` for GTR sources of other formats)."""
