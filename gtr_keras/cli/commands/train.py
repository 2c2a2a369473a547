"""`gtr-keras train`: a dual encoder trained or fine-tuned with the bidirectional in-batch loss, or a reranker
fine-tuned (resumable)."""

from gtr_keras.cli.helpers import train_runs
from gtr_keras.cli.helpers.train_flags import add_train_arguments


def add_parser(subparsers, parents):
    """Adds `train` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "train",
        help="train or fine-tune with the bidirectional in-batch loss (resumable)",
        description="Trains with Adafactor and the bidirectional in-batch softmax loss; rerunning with the same "
        "--output-dir resumes from the last checkpoint if the settings, model and data are unchanged.",
        parents=parents,
    )
    add_train_arguments(p)
    return p


def check(args, parser):
    """`--reranker` names the model to fine-tune, which `--init` (a GTR model's) would contradict."""
    if args.reranker and args.init:
        parser.error("argument --reranker: the model to fine-tune; not with --init (a GTR model's)")


def run(args):
    if args.reranker:
        from gtr_keras.training.reranker_training import RerankerTrainConfig, train_reranker

        args.init = args.reranker
        config = train_runs.config_from_args(args, RerankerTrainConfig)
        train_runs.check_run_outputs(config)
        train_reranker(config)
        train_runs.say_where(config, "reranker trained")
        return
    from gtr_keras.training.loop import train as run_training

    config = train_runs.config_from_args(args)
    train_runs.check_run_outputs(config)
    run_training(config)
    train_runs.say_where(config, "trained")
