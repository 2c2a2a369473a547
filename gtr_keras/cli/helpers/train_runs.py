"""What `train` and `distill` share once their flags are parsed: the run's config (`--config` with the flags on
top), its outputs checked before the run starts, and where the model was written."""

import os

from gtr_keras.utils import files


def config_from_args(args, config_class=None):
    """The config of parsed `train` (or `distill`) arguments: `--config` with the flags on top.

    `args.setting_keys` names the settings that the parser has flags for (`train_flags.add_train_arguments`).
    """
    from gtr_keras.training.config import TrainConfig, load_config

    overrides = {key: getattr(args, key) for key in args.setting_keys if getattr(args, key, None) is not None}
    return load_config(args.config, overrides, config_class or TrainConfig)


def check_run_outputs(config):
    """Refuses, before the run starts, an output directory whose `model` or `best_model` would replace a
    directory of something else."""
    from gtr_keras.models.model_files.model_directory import MODEL_DIRECTORIES
    from gtr_keras.training.callbacks import BEST_MODEL, BEST_MODEL_DIRECTORY

    files.check_replaceable(os.path.join(config.output_dir, "model"), MODEL_DIRECTORIES)
    files.check_replaceable(os.path.join(config.output_dir, BEST_MODEL), [BEST_MODEL_DIRECTORY])


def say_where(config, what):
    from gtr_keras.training.distributed import Cluster

    path = os.path.join(config.output_dir, "model")
    if config.strategy == "multi-worker" and not Cluster.from_environment().is_chief:
        print(f"{what} with the chief, which wrote the model to {path}")
    else:
        print(f"{what} model written to {path}")
