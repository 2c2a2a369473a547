"""`gtr-keras distill`: a teacher distilled into a small GTR student (resumable)."""

from gtr_keras.cli.helpers import train_runs
from gtr_keras.cli.helpers.train_flags import DISTILL_FLAGS, add_train_arguments


def add_parser(subparsers, parents):
    """Adds `distill` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "distill",
        help="distil a teacher into a small GTR student (resumable)",
        description="Trains a GTR student to give the teacher's in-batch similarity distributions (KL divergence, "
        "optionally with an embedding MSE) on the --texts; the teacher embeds each text once into a "
        "resumable cache under --output-dir, and the training loop is `train`'s (rerun to resume).",
        parents=parents,
    )
    add_train_arguments(p, DISTILL_FLAGS)
    return p


def run(args):
    from gtr_keras.distillation.distillation_config import DistillConfig
    from gtr_keras.distillation.distillation_loop import distill as run_distillation
    from gtr_keras.distillation.teachers import check_teacher_source
    from gtr_keras.models.gtr.presets import PRESETS
    from gtr_keras.models.model_files.model_source import resolve_model_source

    config = train_runs.config_from_args(args, DistillConfig)
    train_runs.check_run_outputs(config)
    check_teacher_source(config.teacher)
    if config.init not in PRESETS:
        resolve_model_source(config.init, read_format=False)
    run_distillation(config)
    train_runs.say_where(config, "distilled")
