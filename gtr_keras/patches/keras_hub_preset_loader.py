"""keras-hub's generic loaders for GTR sources that keras-hub cannot read itself.

`keras_hub.models.TextEmbedder.from_preset`, `Backbone.from_preset`, `Preprocessor.from_preset` and
`Tokenizer.from_preset` pick a loader with `get_preset_loader(preset)`, which knows keras-hub presets and a
fixed list of Hugging Face architectures: not sentence-transformers' T5, and not
the aliases of the trained models' names. keras-hub has no registry of loaders, so `install()` (run when
the model family is imported) wraps the `get_preset_loader` that those four classes call: a GTR source of
such a format (`model_source.gtr_model_source`) gets a `GTRPresetLoader`, which loads through
`GTRTextEmbedder.from_preset`; every other source keras-hub's own loader, unchanged.
"""

import os

from keras_hub.src.models import backbone, preprocessor, task
from keras_hub.src.tokenizers import tokenizer
from keras_hub.src.utils import preset_utils

from gtr_keras.models.gtr.gtr_backbone import GTRBackbone
from gtr_keras.models.gtr.gtr_text_embedder import GTRTextEmbedder
from gtr_keras.models.model_files.model_source import KERAS_HUB, gtr_model_source

_CALLERS = (task, backbone, preprocessor, tokenizer)


class GTRPresetLoader(preset_utils.PresetLoader):
    """A keras-hub `PresetLoader` of a resolved GTR `ModelSource`, loading through `GTRTextEmbedder.from_preset`.

    Args:
        source: a `gtr_keras.models.model_files.model_source.ModelSource`.

    Example:
    >>> loader = GTRPresetLoader(resolve_model_source("gtr-small-distilled"))
    >>> loader.check_backbone_class().__name__
    'GTRBackbone'
    """

    def __init__(self, source):
        super().__init__(source.path, {})
        self.source = source

    def check_backbone_class(self):
        return GTRBackbone

    def load_task(self, cls, load_weights, load_task_weights, **kwargs):
        return cls.from_preset(self.source, load_weights, **kwargs)

    def load_backbone(self, cls, load_weights, **kwargs):
        return GTRTextEmbedder.from_preset(self.source, load_weights, **kwargs).backbone

    def load_preprocessor(self, cls, config_file=preset_utils.PREPROCESSOR_CONFIG_FILE, **kwargs):
        loaded = GTRTextEmbedder.from_preset(self.source, load_weights=False).preprocessor
        budgets = {"sequence_length": loaded.sequence_length, "query_length": loaded.query_length, **kwargs}
        return cls(loaded.tokenizer, **budgets)

    def load_tokenizer(self, cls, config_file=preset_utils.TOKENIZER_CONFIG_FILE, **kwargs):
        return GTRTextEmbedder.from_preset(self.source, load_weights=False).preprocessor.tokenizer


def get_preset_loader(preset, keras_hub_loader=preset_utils.get_preset_loader):
    """keras-hub's `get_preset_loader`, except for GTR sources of a format keras-hub does not read.

    Args:
        preset: what keras-hub's `from_preset` was given.
        keras_hub_loader: keras-hub's own `get_preset_loader`.
    """
    source = gtr_model_source(preset) if isinstance(preset, (str, os.PathLike)) else None
    if source is not None and (source.format != KERAS_HUB or source.name != source.path or source.remote):
        return GTRPresetLoader(source)
    return keras_hub_loader(preset)


def install():
    """Makes keras-hub's generic `from_preset` loaders call `get_preset_loader` (idempotent).

    Example:
    >>> install()
    >>> type(keras_hub.models.TextEmbedder.from_preset("gtr-small-distilled")).__name__  # doctest: +SKIP
    'GTRTextEmbedder'
    """
    for module in _CALLERS:
        module.get_preset_loader = get_preset_loader
