"""Architecture presets for GTR encoders.

The shapes are those of the T5 v1.0 encoders that the published GTR checkpoints
(`sentence-transformers/gtr-t5-{base,large,xl,xxl}`) were fine-tuned from. Every
size projects to a 768-d embedding. `gtr-small` (4.9M parameters, an 8k
SentencePiece vocabulary) is what the CPU recipes train from scratch, and
`gtr-tiny` is for tests.

`PRESET_SOURCES` is the one table of trained models by name, keras-hub's preset names
(`gtr_t5_base_en` ... `gtr_t5_xxl_en`, the published checkpoints; `gtr_small_distilled_en`, the model
that ships inside the package); the names of `PRESETS` are architectures (randomly initialised), not
trained models. Every name of `PRESET_SOURCES` is accepted wherever a model directory is (`gtr_keras.load`,
`GTRTextEmbedder.from_preset`, `keras_hub.models.TextEmbedder.from_preset`, `keras_hub.models.Backbone.from_preset`,
every `--model`).
"""

import os
from collections.abc import Mapping
from typing import Any

ASSETS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "assets")
BUNDLED_MODEL_DIR = os.path.join(ASSETS_DIR, "gtr-small-distilled")

PRESETS = {
    "gtr-base": dict(
        vocabulary_size=32128,
        num_layers=12,
        hidden_dim=768,
        key_value_dim=64,
        num_heads=12,
        intermediate_dim=3072,
    ),
    "gtr-large": dict(
        vocabulary_size=32128,
        num_layers=24,
        hidden_dim=1024,
        key_value_dim=64,
        num_heads=16,
        intermediate_dim=4096,
    ),
    "gtr-xl": dict(
        vocabulary_size=32128,
        num_layers=24,
        hidden_dim=1024,
        key_value_dim=128,
        num_heads=32,
        intermediate_dim=16384,
    ),
    "gtr-xxl": dict(
        vocabulary_size=32128,
        num_layers=24,
        hidden_dim=1024,
        key_value_dim=128,
        num_heads=128,
        intermediate_dim=65536,
    ),
    "gtr-small": dict(
        vocabulary_size=8100,
        num_layers=4,
        hidden_dim=256,
        key_value_dim=64,
        num_heads=4,
        intermediate_dim=768,
    ),
    "gtr-tiny": dict(
        vocabulary_size=1100,
        num_layers=3,
        hidden_dim=64,
        key_value_dim=8,
        num_heads=4,
        intermediate_dim=128,
        embedding_dim=64,
    ),
}

_PUBLISHED = ("base", "large", "xl", "xxl")

# keras-hub name: (source, architecture, description).
_TRAINED = {
    **{
        f"gtr_t5_{size}_en": (
            f"hf://sentence-transformers/gtr-t5-{size}",
            f"gtr-{size}",
            f"GTR-{size.upper()} (Ni et al., 2022), sentence-transformers checkpoint sentence-transformers/gtr-t5-"
            f"{size}, converted on loading",
        )
        for size in _PUBLISHED
    },
    "gtr_small_distilled_en": (
        BUNDLED_MODEL_DIR,
        "gtr-small",
        "gtr-keras' bundled small GTR, distilled from all-MiniLM-L6-v2 on CPU (recipes/distill_broad; "
        "assets/gtr-small-distilled/MODEL_CARD.md)",
    ),
}
_ARCHITECTURE_OVERRIDES = {"gtr_small_distilled_en": {"vocabulary_size": 32_100}}

PRESET_SOURCES = {name: source for name, (source, _, _) in _TRAINED.items()}


def preset_config(name: str, **overrides: Any) -> dict[str, Any]:
    """Returns the architecture arguments of a preset: `GTRBackbone` arguments and `embedding_dim`.

    Args:
        name: one of `PRESETS`.
        **overrides: arguments replacing the preset's (e.g. `embedding_dim=256`).

    Example:
    >>> preset_config("gtr-base")["num_layers"]
    12
    """
    if name not in PRESETS:
        raise ValueError(f"Unknown preset {name!r}; expected one of {sorted(PRESETS)}.")
    return {**PRESETS[name], **overrides}


def parameter_count(config: Mapping[str, Any]) -> int:
    """Counts the weights of a preset config (backbone and projection) without building it.

    Args:
        config: architecture arguments (see `preset_config`).

    Example:
    >>> round(parameter_count(preset_config("gtr-xl")) / 1e9, 2)
    1.24
    """
    d = config["hidden_dim"]
    inner = config["num_heads"] * config["key_value_dim"]
    ffn_in = 2 if config.get("feedforward", "relu") == "gated-gelu" else 1
    per_layer = 4 * d * inner + (ffn_in + 1) * d * config["intermediate_dim"] + 2 * d
    return (
        config["vocabulary_size"] * d
        + config.get("num_buckets", 32) * config["num_heads"]
        + config["num_layers"] * per_layer
        + d
        + d * config.get("embedding_dim", 768)
    )


def keras_hub_presets() -> dict[str, dict[str, Any]]:
    """keras-hub's preset records (`keras_hub.src.utils.preset_utils.register_presets`) of the trained
    models, so that `GTRTextEmbedder.presets` lists them (keras-hub's own loaders read the bundled model, a
    keras-hub preset, and no sentence-transformers checkpoint: docs/models.md).

    Example:
    >>> keras_hub_presets()["gtr_t5_base_en"]["kaggle_handle"]
    'hf://sentence-transformers/gtr-t5-base'
    """
    return {
        name: {
            "metadata": {
                "description": description,
                "path": "gtr",
                "params": parameter_count(preset_config(architecture, **_ARCHITECTURE_OVERRIDES.get(name, {}))),
            },
            "kaggle_handle": source,
        }
        for name, (source, architecture, description) in _TRAINED.items()
    }
