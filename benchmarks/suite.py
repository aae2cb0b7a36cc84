"""One benchmark command for every package: runs (envs x agents x seeds from the package's defaults), their table,
committed run summaries and the results page drawn from them.

    python benchmarks/suite.py run --package torchbeast_atari --envs PongNoFrameskip-v4 BreakoutNoFrameskip-v4 \\
        --agents impala ppo --seeds 1 2 3 [--total_steps N] [--savedir DIR] [--label TEXT] [-- FLAG ...]
    python benchmarks/suite.py table RUN_DIR ... [--score 18] [--png curves.png] [--steps_at 1000000 ...]
    python benchmarks/suite.py collect RUN_DIR ... [--out docs/data] [--machine TEXT] [--label TEXT] [--variant TEXT] \\
        [--score S ...]
    python benchmarks/suite.py render [--data docs/data] [--out docs/results.md] [--img docs/img] [--experiments DIR]

The library is benchmarks/results/, a module per role: launch (``run``), table, collect and render (each module's
docstring says what its command does), on load (run directories, summaries, anchors) and groups.
"""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.results.collect import collect  # noqa: E402
from benchmarks.results.launch import run_suite  # noqa: E402
from benchmarks.results.load import PROG  # noqa: E402
from benchmarks.results.render import MARKERS, render  # noqa: E402
from benchmarks.results.table import table  # noqa: E402
from rl_core.config.flags import FlagParser  # noqa: E402
from rl_core.errors import UserError  # noqa: E402


def make_parser() -> FlagParser:
    parser = FlagParser(prog=PROG, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser(
        "run",
        usage=f"{PROG} run --envs ENV ... [--agents AGENT ...] [--seeds SEED ...] [flags] [-- FLAG ...]",
        help="Run envs x agents x seeds one after another (flags after -- are passed on).",
        description="Runs envs x agents x seeds one after another with the package's defaults; the "
        "flags after -- are passed on to every run; a finished run is skipped.",
    )
    r.add_argument(
        "--envs",
        "--games",
        dest="envs",
        nargs="+",
        required=True,
        metavar="ENV",
        help="--env of the runs (--games: the same).",
    )
    r.add_argument("--agents", nargs="+", default=["impala"], metavar="AGENT", help="--agent of the runs.")
    r.add_argument("--seeds", nargs="+", type=int, default=[1], metavar="SEED", help="--seed of the runs.")
    r.add_argument(
        "--total_steps", type=int, default=None, help="Each run's budget (default: the package's for the agent)."
    )
    r.add_argument("--savedir", default="~/logs/torchbeast/atari_suite", help="Where the run directories go.")
    r.add_argument("--package", default="torchbeast_atari", help="The torchbeast_X package whose launcher runs.")
    r.add_argument(
        "--label",
        default="",
        help="Tells these runs apart from others of the same env, agent and seed (the flags after -- differ, e.g. "
        "the core): their run directories end in _<label>; collect them with the same --label.",
    )
    t = sub.add_parser(
        "table",
        help="The results table (markdown) and curves of run directories.",
        description="Prints the results table (markdown) of run directories grouped by (env, agent).",
    )
    t.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    t.add_argument("--score", type=float, default=18.0, help="The last-100 return whose first step and time are given.")
    t.add_argument("--png", default=None, help="Also draw the curves, one panel per env, into this PNG.")
    t.add_argument(
        "--steps_at",
        nargs="+",
        type=int,
        default=[],
        metavar="STEP",
        help="Also give the last-100 return at these agent steps.",
    )
    c = sub.add_parser(
        "collect",
        help="A committed summary (JSON, a few KB) of each run directory.",
        description="Writes <out>/<package>/<env>/<agent>_seed<S>[_<label>].json per run directory.",
    )
    c.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    c.add_argument("--out", default=os.path.join(REPO, "docs", "data"), help="Where the summaries go.")
    c.add_argument(
        "--machine", default=None, help="The machine the runs ran on, in words (meta.json does not record it)."
    )
    c.add_argument("--label", default="", help="Tells these runs apart from others of the same env, agent and seed.")
    c.add_argument(
        "--variant",
        default="",
        help="What these runs changed from the package's defaults (other flags, earlier defaults, a probe), in a few "
        "words: their rows go to docs/experiments/, not the results page's tables.",
    )
    c.add_argument(
        "--score",
        nargs="+",
        type=float,
        default=[],
        metavar="SCORE",
        help="Also keep the first row reaching these last-100 returns (the anchors' are kept).",
    )
    d = sub.add_parser(
        "render",
        help="The results page from the committed summaries.",
        description="Writes the tables and curves of the summaries into --out between "
        f"{MARKERS[0]} and {MARKERS[1]} (to stdout where it has none) and --img.",
    )
    d.add_argument("--data", default=os.path.join(REPO, "docs", "data"), help="The summaries' directory.")
    d.add_argument("--out", default=os.path.join(REPO, "docs", "results.md"), help="The page.")
    d.add_argument("--img", default=os.path.join(REPO, "docs", "img"), help="Where the PNGs go.")
    d.add_argument(
        "--experiments",
        default=None,
        help="The pages the rows link and the variants' tables go into (default: --out's directory's experiments/).",
    )
    return parser


COMMANDS = {"table": table, "collect": collect, "render": render}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = make_parser().parse_args(own)
    if extra and args.command != "run":
        make_parser().error("flags after -- are passed on by run only")
    try:
        if args.command == "run":
            args.savedir = os.path.abspath(os.path.expanduser(args.savedir))
            return run_suite(args, extra)
        return COMMANDS[args.command](args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
