"""`gtr-keras demo`: the main job offline: index, search, evaluate against BM25 and export (`helpers.demo_steps`)."""

from gtr_keras.cli.helpers.flag_types import (
    input_dir,
    output_dir,
)


def add_parser(subparsers, parents):
    """Adds `demo` and its flags to `subparsers` (`parents`: the flags every command takes)."""
    p = subparsers.add_parser(
        "demo",
        help="the main job: index, search, evaluate vs BM25 and export, offline",
        description="the main job: index, search, evaluate vs BM25 and export, offline",
        parents=parents,
    )
    p.add_argument("--out", type=output_dir, default="gtr-demo", help="where the index and exports go")
    p.add_argument(
        "--model", default=None, help="model directory or bundled model name (default: gtr_small_distilled_en)"
    )
    p.add_argument("--dataset", type=input_dir, default=None, help="BEIR directory (default: the bundled Cranfield)")
    return p


def run(args):
    from gtr_keras.cli.helpers.demo_steps import DEMO_DATASET, DEMO_MODEL, run_demo

    run_demo(args.out, args.model or DEMO_MODEL, args.dataset or DEMO_DATASET)
