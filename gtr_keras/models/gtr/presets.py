"""Architecture presets for GTR encoders.

The shapes are those of the T5 v1.0 encoders that the published GTR checkpoints
(`sentence-transformers/gtr-t5-{base,large,xl,xxl}`) were fine-tuned from. Every
size projects to a 768-d embedding. `gtr-small` (4.9M parameters, an 8k
SentencePiece vocabulary) is what the CPU recipes train from scratch, and
`gtr-tiny` is for tests.

`BUNDLED` names the trained models that ship inside the package: a name there is
accepted wherever a model directory is (`gtr_keras.load`, `from_preset`, every
`--model`).
"""

import os

ASSETS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "assets")
BUNDLED = {
    "gtr_small_distilled_en": os.path.join(ASSETS_DIR, "gtr-small-distilled"),
    "gtr-small-distilled": os.path.join(ASSETS_DIR, "gtr-small-distilled"),  # the name before keras-hub's
}

PRESETS = {
    "gtr-base": dict(
        vocabulary_size=32128, num_layers=12, hidden_dim=768, key_value_dim=64,
        num_heads=12, intermediate_dim=3072,
    ),
    "gtr-large": dict(
        vocabulary_size=32128, num_layers=24, hidden_dim=1024, key_value_dim=64,
        num_heads=16, intermediate_dim=4096,
    ),
    "gtr-xl": dict(
        vocabulary_size=32128, num_layers=24, hidden_dim=1024, key_value_dim=128,
        num_heads=32, intermediate_dim=16384,
    ),
    "gtr-xxl": dict(
        vocabulary_size=32128, num_layers=24, hidden_dim=1024, key_value_dim=128,
        num_heads=128, intermediate_dim=65536,
    ),
    "gtr-small": dict(
        vocabulary_size=8100, num_layers=4, hidden_dim=256, key_value_dim=64,
        num_heads=4, intermediate_dim=768,
    ),
    "gtr-tiny": dict(
        vocabulary_size=1100, num_layers=3, hidden_dim=64, key_value_dim=8,
        num_heads=4, intermediate_dim=128, embedding_dim=64,
    ),
}

HUB_IDS = {
    "gtr_t5_base_en": "sentence-transformers/gtr-t5-base",
    "gtr_t5_large_en": "sentence-transformers/gtr-t5-large",
    "gtr_t5_xl_en": "sentence-transformers/gtr-t5-xl",
    "gtr_t5_xxl_en": "sentence-transformers/gtr-t5-xxl",
    # the names before keras-hub's
    "gtr-base": "sentence-transformers/gtr-t5-base",
    "gtr-large": "sentence-transformers/gtr-t5-large",
    "gtr-xl": "sentence-transformers/gtr-t5-xl",
    "gtr-xxl": "sentence-transformers/gtr-t5-xxl",
}


def preset_config(name, **overrides):
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


def parameter_count(config):
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


def resolve_bundled(source):
    """The directory of a bundled model's name (`BUNDLED`); any other source unchanged.

    Example:
    >>> os.path.basename(resolve_bundled("gtr-small-distilled"))
    'gtr-small-distilled'
    >>> resolve_bundled("models/gtr-base")
    'models/gtr-base'
    """
    return BUNDLED.get(source, source) if isinstance(source, str) else source


def keras_hub_presets():
    """keras-hub's preset records (`keras_hub.src.utils.preset_utils.register_presets`) of the published
    checkpoints (their Hugging Face ids, converted on the way by `GTRTextEmbedder.from_preset`) and of the
    bundled model (its directory), so that `GTRTextEmbedder.presets` lists them."""
    sizes = {"gtr_t5_base_en": "gtr-base", "gtr_t5_large_en": "gtr-large", "gtr_t5_xl_en": "gtr-xl",
             "gtr_t5_xxl_en": "gtr-xxl"}
    records = {
        name: {"metadata": {"description": f"GTR-{size.split('-')[1].upper()} (Ni et al., 2022), sentence-"
                                           f"transformers checkpoint {HUB_IDS[name]}, converted on loading",
                            "params": parameter_count(preset_config(size)), "path": "gtr"},
               "kaggle_handle": f"hf://{HUB_IDS[name]}"}
        for name, size in sizes.items()
    }
    records["gtr_small_distilled_en"] = {
        "metadata": {"description": "gtr-keras' bundled small GTR, distilled from all-MiniLM-L6-v2 on CPU "
                                    "(recipes/distill_broad; assets/gtr-small-distilled/MODEL_CARD.md)",
                     "params": parameter_count(preset_config("gtr-small", vocabulary_size=32_100)), "path": "gtr"},
        "kaggle_handle": BUNDLED["gtr_small_distilled_en"],
    }
    return records
