"""The flag set shared by every entry point (launcher, env server, learner).

Names follow torchbeast and the R2AC code.  One parser per environment package:
these common flags plus the package's own; the three entry modules all parse the
full set, so the launcher passes its command line to its env servers unchanged.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from rl_core.flag_types import ranged


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """--help shows every flag's default (the package's and the chosen agent's, see entry.py)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if not action.option_strings or action.default is argparse.SUPPRESS or "%(default)" in text:
            return text
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            on = action.default if isinstance(action, argparse._StoreTrueAction) else not action.default
            return f"{text} (default: {'on' if on else 'off'})"
        if action.default is None:
            return text if "default" in text.lower() else f"{text} (default: unset)"
        return f"{text} (default: %(default)s)"


def expand_flag_files(argv: list[str], _seen: tuple[str, ...] = ()) -> list[str]:
    """``@FILE`` arguments replaced by the flags the file holds (argparse's ``fromfile_prefix_chars``, as SEED RL's
    gin files or RND's config.yaml hold a setting beside an experiment's script): each line split as a shell would,
    ``#`` starting a comment, flags written one or several to a line, ``@OTHER`` within expanded too; flags after
    ``@FILE`` on the command line win over the file's.  A file that cannot be read is a UserError naming it."""
    import os
    import shlex

    from rl_core.errors import UserError

    out = []
    for arg in argv:
        if not (arg.startswith("@") and len(arg) > 1):
            out.append(arg)
            continue
        path = os.path.abspath(os.path.expanduser(arg[1:]))
        if path in _seen:
            raise UserError(f"flag file {arg[1:]} includes itself (through {' -> '.join(_seen)}): drop the loop")
        try:
            with open(path) as f:
                words = shlex.split(f.read(), comments=True)
        except OSError as e:
            raise UserError(f"flag file {arg[1:]}: {e.strerror or e}: give an existing file after @") from None
        except ValueError as e:
            raise UserError(f"flag file {arg[1:]}: {e}: quote it as a shell would") from None
        out += expand_flag_files(words, (*_seen, path))
    return out


# Flags that changed name: a checkpoint's saved flags under the old name are read under the new one.
RENAMED = {"use_quasi_lstm": "use_elstm"}


class Renamed(argparse.Action):
    """An old flag name, still accepted: it sets the new flag (``dest``) and says so in one line on stderr."""

    def __init__(self, option_strings, dest, new: str, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"{parser.prog}: note: {option_string} is now called {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, True)


class FlagParser(argparse.ArgumentParser):
    """argparse whose refusals are one line naming the cause and pointing to --help, not the usage dump."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> "NoReturn":  # noqa: F821
        self.exit(2, f"{self.prog}: error: {message}{self.closest(message)} (all flags: {self.prog} --help)\n")

    def closest(self, message: str) -> str:
        """For unrecognized flags, the known ones nearest each in spelling: ``; did you mean --learning_rate?``."""
        if not message.startswith("unrecognized arguments:"):
            return ""
        known = [option for action in self._actions for option in action.option_strings if option.startswith("--")]
        guesses = []
        for word in message.split(":", 1)[1].split():
            flag = word.split("=", 1)[0]
            if flag.startswith("--"):
                guesses += [g for g in difflib.get_close_matches(flag, known, n=1, cutoff=0.75) if g not in guesses]
        return f"; did you mean {' or '.join(guesses)}?" if guesses else ""


def make_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = FlagParser(
        prog=prog,
        usage="%(prog)s [--env ENV] [--agent AGENT] [flags]",
        description="PolyBeast-style distributed RL. Flags not given take the package's defaults for the chosen --agent (shown below with it).",
    )
    a = p.add_argument

    a("--env", type=str, default=None, help="Environment name.")
    a(
        "--mode",
        default="train",
        choices=["train", "test"],
        help="train, or test: run the final-test protocol on --checkpoint.",
    )
    a("--checkpoint", default=None, metavar="PATH", help="With --mode test: the model.tar to evaluate.")
    a(
        "--dry_run",
        nargs="?",
        const="read",
        default=False,
        choices=("read", "all"),
        help="Parse and check the flags, print the configuration grouped by each value's source, exit: the flags "
        "this run reads (--dry_run=all: every flag).",
    )
    a("--xpid", default=None, help="Experiment id (default: env-date-time).")
    a("--savedir", default="~/logs/torchbeast", help="Root dir where experiment data will be saved.")
    a("--seed", type=ranged(int, "[0, inf)"), default=1, help="Seeds torch, numpy and every environment.")
    a("--disable_checkpoint", action="store_true", help="Disable saving checkpoint.")
    a("--checkpoint_every", type=ranged(float, "(0, inf)"), default=10.0, metavar="MINUTES", help="Checkpoint period.")
    a(
        "--log_interval",
        type=ranged(float, "(0, inf)"),
        default=5.0,
        metavar="SECONDS",
        help="Console line and logs.csv row period.",
    )
    a(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="Reproducible run: acting and learning alternate in one thread in a fixed order (inference for every "
        "env at once, then the batches that data makes), so that two runs of one command on one machine write "
        "the same logs.csv rows (steps, returns, losses; timings aside), and each batch trains the weights that "
        "collected it (PPO on Atari runs so by default, as cleanrl's). Slower than the asynchronous runtime "
        "(--no-deterministic; README, Reproducible runs); rows come every --log_step_interval steps instead of "
        "--log_interval seconds.",
    )
    a(
        "--log_step_interval",
        type=ranged(int, "[1, inf)"),
        default=10_000,
        metavar="STEPS",
        help="With --deterministic: a console line and logs.csv row after the learner batch that crosses each "
        "multiple of this many steps.",
    )

    g = p.add_argument_group("dashboards, validation and the final test")
    g.add_argument("--use_wandb", action="store_true", help="Log to Weights & Biases (WANDB_MODE=offline works).")
    g.add_argument("--project_name", default="torchbeast", help="wandb project.")
    g.add_argument(
        "--validate_every",
        type=ranged(float, "[0, inf)"),
        default=0.0,
        metavar="MINUTES",
        help="Validate this often (0: off).",
    )
    g.add_argument(
        "--validate_step_every",
        type=ranged(int, "[0, inf)"),
        default=0,
        metavar="STEPS",
        help="Validate each time the step count crosses a multiple of this (0: off).",
    )
    g.add_argument("--disable_validation", action="store_true", help="No validation during training.")
    g.add_argument("--valid_num_episodes", type=ranged(int, "[1, inf)"), default=10, help="Episodes per validation.")
    g.add_argument(
        "--valid_sample", action="store_true", help="Sample actions in validation and test (default: greedy)."
    )
    g.add_argument(
        "--save_extra_checkpoint",
        type=ranged(int, "[0, inf)"),
        default=0,
        metavar="STEPS",
        help="Keep model_extra.tar from when the step count first reaches this (0: off).",
    )
    g.add_argument("--record_video", action="store_true", help="Save the first validation and test episodes as video.")
    g.add_argument("--disable_final_test", action="store_true", help="Skip the final test when training ends.")
    g.add_argument(
        "--test_runs", type=ranged(int, "[0, inf)"), default=0, help="Final test: runs per group (0: the protocol's)."
    )
    g.add_argument(
        "--test_episodes",
        type=ranged(int, "[0, inf)"),
        default=0,
        help="Final test: episodes per run (0: the protocol's).",
    )
    g.add_argument(
        "--test_num_envs",
        type=ranged(int, "[1, inf)"),
        default=8,
        help="Envs played in parallel in validation and test.",
    )

    g = p.add_argument_group("actors and env servers")
    g.add_argument(
        "--num_actors",
        type=ranged(int, "[1, inf)"),
        default=8,
        metavar="N",
        help="Total number of environments. Not given, polybeast sizes it (and --num_servers, and "
        "IMPALA's --batch_size) to the machine's cores, its GPU and the agent (rl_core/config/sizing.py; "
        "the package's defaults on 2 cores); the run's first lines say what and why.",
    )
    g.add_argument(
        "--num_servers",
        type=ranged(int, "[1, inf)"),
        default=2,
        metavar="S",
        help="Env servers; each hosts num_actors/num_servers envs over its own connection, in a process of "
        "its own, or --server_splits of them to a process (not given: see --num_actors).",
    )
    g.add_argument(
        "--server_splits",
        type=ranged(int, "[1, inf)"),
        default=1,
        metavar="H",
        help="Env servers per process, stepped in turn: one steps its envs while the others' actions are "
        "in flight (sample-factory's double-buffered sampling); --num_servers / H processes.  Not "
        "given, polybeast chooses (rl_core/config/sizing.py).",
    )
    g.add_argument(
        "--pipes_basename",
        default=None,
        help="unix:/path (server i at /path.i) or host:port (server i at port+i). Default: "
        "polybeast: unix:/tmp/polybeast-<its pid>, its own per run; polybeast_env and "
        "polybeast_learner started apart: unix:/tmp/polybeast, where they meet.",
    )
    g.add_argument(
        "--server_index",
        type=ranged(int, "[0, inf)"),
        default=None,
        help="polybeast_env: run only this server (default: all).",
    )
    g.add_argument(
        "--server_secret",
        default=None,
        help="Shared secret for TCP (default: $POLYBEAST_SECRET; the launcher generates one).",
    )
    g.add_argument(
        "--connect_timeout",
        type=ranged(float, "(0, inf)"),
        default=60.0,
        metavar="SECONDS",
        help="How long the learner retries connecting to a server.",
    )
    g.add_argument(
        "--env_timeout",
        type=ranged(float, "(0, inf)"),
        default=300.0,
        metavar="SECONDS",
        help="A server that has not answered an action for this long (an env's step or reset hangs) "
        "ends the run naming it; a warning comes at half of it, and the server logs the slot.",
    )
    g.add_argument(
        "--max_message_bytes",
        type=ranged(int, "[1, inf)"),
        default=256 * 1024 * 1024,
        help="Larger messages are refused.",
    )
    g.add_argument(
        "--shared_memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Servers on this host (unix: addresses) write their steps into shared memory that the learner reads, "
        "and read its actions there; the socket carries only notices (--no-shared_memory: every array on the socket, "
        "as over TCP).",
    )
    g.add_argument(
        "--num_actions",
        type=ranged(int, "[1, inf)"),
        default=None,
        help="Default: from the env; a different value is an error.",
    )

    g = p.add_argument_group("learner")
    g.add_argument(
        "--total_steps",
        type=ranged(int, "[1, inf)"),
        default=100_000,
        metavar="T",
        help="Total environment steps to train for.",
    )
    g.add_argument(
        "--batch_size", type=ranged(int, "[1, inf)"), default=32, metavar="B", help="Learner batch size (unrolls)."
    )
    g.add_argument(
        "--unroll_length",
        type=ranged(int, "[1, inf)"),
        default=20,
        metavar="T",
        help="The unroll length (time dimension).",
    )
    g.add_argument(
        "--num_learner_threads", type=ranged(int, "[1, inf)"), default=1, metavar="N", help="Number of learner threads."
    )
    g.add_argument(
        "--acting_loop",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Act for every env server in one thread that also runs inference (rl_core/runtime/acting_loop.py), in "
        "the learner process where --acting_process is off; --no-acting_loop --no-acting_process: a thread per server "
        "and --num_inference_threads inference threads.",
    )
    g.add_argument(
        "--acting_process",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Run the acting loop and central inference in a process of their own, the inference weights in shared "
        "memory (rl_core/runtime/acting_process.py): acting off the learner's GIL.  Unset: on where central "
        "inference runs on the CPU in one process (not under torchrun, not --deterministic).  Given on a GPU learner: "
        "the acting processes infer on the learner's GPU, on its copy of the weights (CUDA IPC).",
    )
    g.add_argument(
        "--cpu_affinity",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="With acting processes: the learner process on as many cores as its torch threads, the acting processes "
        "and the local env servers on the others (rl_core/runtime/affinity.py).  Unset: the env package's choice "
        "(its CPU_AFFINITY: on where its envs are cheap beside the update), but not where $POLYBEAST_CORES sets the "
        "cores.  Two runs on one machine, or env servers that keep their cores busy: --no-cpu_affinity.",
    )
    g.add_argument(
        "--acting_processes",
        type=ranged(int, "[1, inf)"),
        default=1,
        metavar="N",
        help="With --acting_process: N acting processes, each the acting loop and central inference for its share of "
        "the env servers (at most one each), on the one copy of the weights in shared memory: more than one where a "
        "single process's acting and inference cannot keep up with the servers (a machine of many cores, no GPU).",
    )
    g.add_argument(
        "--num_inference_threads",
        type=ranged(int, "[1, inf)"),
        default=1,
        metavar="N",
        help="With --no-acting_loop: inference threads.",
    )
    g.add_argument(
        "--max_inference_batch_size",
        type=ranged(int, "[0, inf)"),
        default=0,
        help="Envs per inference batch (0: all of them).",
    )
    g.add_argument(
        "--inference_batch_timeout_ms",
        type=ranged(float, "[0, inf)"),
        default=1.0,
        help="How long a batch waits for more requests.",
    )
    g.add_argument(
        "--inference_precision",
        default="float32",
        choices=["float32", "bfloat16"],
        help="Precision of central inference. bfloat16 runs the inference copy's stem (convolutions, "
        "fc) in bf16; its core, state and heads stay float32. On a CPU with native bf16 "
        "(avx512_bf16 or AMX) an AtariNet batch costs ~40%% less and leaves more cache to the env "
        "servers and the learner. The logits are recorded as computed; V-trace corrects for the "
        "difference from the learner's policy. The learner always trains in float32.",
    )
    g.add_argument(
        "--max_learner_queue_size",
        type=ranged(int, "[1, inf)"),
        default=None,
        metavar="N",
        help="Unroll chunks queued for the learner (default: 2 batches).",
    )
    g.add_argument("--disable_cuda", action="store_true", help="Disable CUDA.")
    g.add_argument(
        "--single_gpu",
        action="store_true",
        help="Learner and inference on one device (what this learner always does; "
        "accepted so the R2AC scripts run unchanged).",
    )
    g.add_argument(
        "--torch_threads",
        type=ranged(int, "[0, inf)"),
        default=0,
        help="torch intra-op threads in the learner process (0: the cores that local env servers leave).",
    )

    g = p.add_argument_group("model")
    g.add_argument(
        "--model",
        default="atari",
        choices=["atari", "resnet", "grid", "minatar"],
        help="Image stem: AtariNet (Mnih et al. 2015), the IMPALA deep ResNet, grid: two 3x3 convs for "
        "symbolic grids one-hot per cell (MiniGrid's view), or minatar: MinAtar's one 3x3 conv of 16 channels and "
        "a 128-unit layer (Young & Tian 2019); grid and minatar use values as given.",
    )
    g.add_argument(
        "--resnet_channels",
        default="16,32,32",
        metavar="C1,C2,...",
        help="--model resnet: channels of each stage (a conv, a max-pool, two residual blocks); "
        "torchbeast's and IMPALA's three stages by default, SEED RL's Football network has four.",
    )
    g.add_argument("--use_lstm", action="store_true", help="LSTM core.")
    g.add_argument("--use_quasi_lstm", action=Renamed, new="--use_elstm", dest="use_elstm")
    g.add_argument(
        "--use_elstm",
        action="store_true",
        help="eLSTM (R2AC's published code calls it QuasiLSTM) core trained by truncated BPTT.",
    )
    g.add_argument("--use_rtrl", action="store_true", help="eLSTM core trained by exact RTRL.")
    g.add_argument(
        "--feedforward",
        action="store_true",
        help="No recurrent core, where the package's defaults for --agent give one (R2D2 on Atari: "
        "an LSTM, as the paper's agent).",
    )
    g.add_argument("--hidden_size", type=ranged(int, "[1, inf)"), default=256, help="Recurrent core size.")
    g.add_argument(
        "--forget_bias",
        type=ranged(float, "finite"),
        default=0.0,
        help="Added to the recurrent core's forget-gate bias at initialisation (Gers et al. 2000; "
        "Jozefowicz et al. 2015 use 1): a positive value lets memory last longer from the start.",
    )
    g.add_argument(
        "--no_last_action",
        action="store_true",
        help="Leave the one-hot last action out of the core's (and heads') input, which torchbeast and "
        "R2AC feed in; then the agent's memory is only the core's state, not its own last action.",
    )
    g.add_argument(
        "--load_conv_net_from",
        default=None,
        metavar="PATH",
        help="Initialise the image stem from this model.tar (conv, and fc unless --not_load_fc).",
    )
    g.add_argument("--not_load_fc", action="store_true", help="With --load_conv_net_from: keep the stem's fc fresh.")
    g.add_argument("--freeze_conv", action="store_true", help="Do not train the stem's conv layers.")
    g.add_argument("--freeze_fc", action="store_true", help="Do not train the stem's fc layer.")
    g.add_argument("--mlp_sizes", default="64,64", help="Hidden sizes of the MLP stem for vector observations.")
    g.add_argument(
        "--value_net",
        default="shared",
        choices=["shared", "separate"],
        help="Feedforward models: the baseline shares the policy's stem, or has its own.",
    )

    g = p.add_argument_group("loss")
    g.add_argument("--entropy_cost", type=ranged(float, "[0, inf)"), default=0.0006, help="Entropy cost/multiplier.")
    g.add_argument("--baseline_cost", type=ranged(float, "[0, inf)"), default=0.5, help="Baseline cost/multiplier.")
    g.add_argument("--discounting", type=ranged(float, "[0, 1]"), default=0.99, help="Discounting factor.")
    g.add_argument("--reward_clipping", default="abs_one", choices=["abs_one", "none"], help="Reward clipping.")
    g.add_argument("--clip_rho_threshold", type=ranged(float, "(0, inf)"), default=1.0, help="V-trace rho-bar.")
    g.add_argument(
        "--clip_pg_rho_threshold",
        type=ranged(float, "(0, inf)"),
        default=1.0,
        help="V-trace rho-bar for the policy gradient.",
    )
    g.add_argument("--clip_c_threshold", type=ranged(float, "(0, inf)"), default=1.0, help="V-trace c-bar.")
    g.add_argument("--vtrace_lambda", type=ranged(float, "[0, 1]"), default=1.0, help="V-trace lambda.")

    g = p.add_argument_group("optimizer")
    g.add_argument(
        "--learning_rate", type=ranged(float, "[0, inf)"), default=0.00048, metavar="LR", help="Learning rate."
    )
    g.add_argument("--alpha", type=ranged(float, "[0, 1]"), default=0.99, help="RMSProp smoothing constant.")
    g.add_argument("--momentum", type=ranged(float, "[0, 1]"), default=0, help="RMSProp momentum.")
    g.add_argument("--epsilon", type=ranged(float, "[0, inf)"), default=0.01, help="RMSProp epsilon.")
    g.add_argument(
        "--grad_norm_clipping", type=ranged(float, "[0, inf)"), default=40.0, help="Global gradient norm clip (0: off)."
    )
    g.add_argument(
        "--recycle_period",
        type=ranged(int, "[0, inf)"),
        default=0,
        metavar="N",
        help="Every N learner batches recycle the stem's dormant units (ReDo, Sokar et al. 2023: fresh "
        "incoming weights, outgoing ones zeroed; models/recycling.py); 0: never.",
    )
    g.add_argument(
        "--recycle_tau",
        type=ranged(float, "[0, 1)"),
        default=0.025,
        metavar="TAU",
        help="--recycle_period: a unit is dormant when its mean |activation| is at most TAU times its "
        "layer's mean (ReDo's tau; 0.025 its Atari value).",
    )
    g.add_argument(
        "--publish_interval",
        type=ranged(int, "[1, inf)"),
        default=1,
        metavar="K",
        help="Publish the learner's weights to the inference model after every K-th learner batch: "
        "a replay agent's many small updates (SAC, R2D2) then copy the weights less often, and "
        "acting lags the learner by at most K batches (safe for off-policy agents; on-policy "
        "ones correct the lag by importance weights only with V-trace, so keep 1 there).",
    )

    from rl_core import agents

    agents.add_flags(p)
    return p


def check(parser: argparse.ArgumentParser, flags: argparse.Namespace) -> None:
    """Inconsistent flags end with one line naming the cause (parser.error exits 2); each numeric
    flag's own range (declared with it, ``rl_core/flag_types.py``) is checked before, by ``rl_core.config.flag_ranges``."""
    if flags.num_actors % flags.num_servers:
        parser.error(
            f"--num_actors ({flags.num_actors}) must be a multiple of --num_servers ({flags.num_servers}): "
            f"each env server hosts num_actors / num_servers environments"
        )
    if flags.server_index is not None and not 0 <= flags.server_index < flags.num_servers:
        parser.error(f"--server_index {flags.server_index} is not in [0, --num_servers={flags.num_servers})")
    if flags.num_servers % flags.server_splits:
        parser.error(
            f"--num_servers ({flags.num_servers}) must be a multiple of --server_splits "
            f"({flags.server_splits}): each process hosts server_splits servers"
        )
    if flags.server_index is not None and flags.server_index % flags.server_splits:
        parser.error(
            f"--server_index {flags.server_index} must be a multiple of --server_splits "
            f"({flags.server_splits}): a process hosts the servers from its index on"
        )
    from models import resnet_channels
    from rl_core.errors import UserError

    try:
        resnet_channels(flags)
    except UserError as e:
        parser.error(str(e))
    if flags.use_lstm and (flags.use_elstm or flags.use_rtrl):
        parser.error("--use_lstm cannot be combined with --use_elstm/--use_rtrl: choose one core")
    if flags.feedforward and (flags.use_lstm or flags.use_elstm or flags.use_rtrl):
        parser.error("--feedforward cannot be combined with --use_lstm/--use_elstm/--use_rtrl: choose one")
    if (
        flags.deterministic
        and (flags.validate_every > 0 or flags.validate_step_every > 0)
        and not flags.disable_validation
    ):
        parser.error(
            "--deterministic runs no validation during training (its episodes would draw from the run's "
            "random numbers at times the clock decides): drop --validate_every / --validate_step_every "
            "(the final test still runs), or run asynchronously with --no-deterministic"
        )
    if flags.mode == "test" and not flags.checkpoint:
        parser.error("--mode test needs --checkpoint PATH (a model.tar)")
    if flags.not_load_fc and not flags.load_conv_net_from:
        parser.error("--not_load_fc needs --load_conv_net_from PATH")
    from rl_core import agents

    agents.check_flags(parser, flags)
    check_budget(parser, flags)


def check_budget(parser: argparse.ArgumentParser, flags: argparse.Namespace) -> None:
    """A budget that cannot fill one learner batch would train nothing and say nothing: refused.

    Only where the steps per batch are certain: an unroll-based agent (impala, the on-policy
    agents) counts --batch_size x --unroll_length env steps a batch.  A replay agent's first batch
    depends on its replay's filling and --replay_ratio; it is left alone here."""
    from rl_core.agents import agent_traits

    if flags.mode != "train" or agent_traits(flags).replays:
        return
    per_batch = flags.batch_size * flags.unroll_length
    if per_batch > flags.total_steps:
        parser.error(
            f"one learner batch is --batch_size {flags.batch_size} x --unroll_length {flags.unroll_length} = "
            f"{per_batch:,} env steps, more than the whole budget --total_steps {flags.total_steps:,}: the run "
            f"would end without one update; lower --batch_size or --unroll_length, or raise --total_steps"
        )
