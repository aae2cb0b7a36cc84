"""Which run summaries are the results page's rows, what each row is named and the command it shows.

A summary (docs/data/<package>/<env>/<agent>_seed<S>[_<label>].json, benchmarks/suite.py collect) is either a row of
docs/results.md, at its package's defaults, or a variant: a summary whose ``variant`` key holds a text (``collect
--variant TEXT`` writes it) says what the run changed from the package's defaults (other flags, the defaults of an
earlier commit, a probe), and its row goes to the table of docs/experiments/ that its results row links to.  A
summary without one is the package-default row of its (env, agent, core); the core is what the launcher parses the
recorded command into (``--use_lstm`` / ``--use_elstm`` / ``--use_rtrl``, or the package's default for the agent),
not the summary's label, which only tells its file apart.  One rule needs no key: a row whose command needs a file of
the machine it ran on (an absolute path) is a variant.

A row's command gives only what differs from the package's defaults of today: the recorded argv (meta.json's) is
parsed as the launcher parses it (rl_core.runtime.entry.parse_flags), and each flag whose removal parses to the same
flags is dropped; the run's identity (--xpid, --savedir, --pipes_basename) always is, --env and --seed never are.  A
flag the run gave whose value is no longer the default stays.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import io
import re
import shlex

from rl_core.errors import UserError

IDENTITY_FLAGS = ("--xpid", "--savedir", "--pipes_basename")  # where and under which name: not the run's settings
IDENTITY_DESTS = tuple(flag.removeprefix("--") for flag in IDENTITY_FLAGS)
KEPT_FLAGS = ("--env", "--seed")  # what a row is: never dropped
LAST_FLAGS = ("--total_steps", "--seed")  # written last, in this order
CORE_WORDS = {"--use_rtrl": "rtrl_elstm", "--use_elstm": "elstm", "--use_quasi_lstm": "elstm", "--use_lstm": "lstm"}
FEEDFORWARD = "feedforward"
CORE_ORDER = (FEEDFORWARD, "lstm", "elstm", "rtrl_elstm")  # a package's rows of one env and agent, in this order
MACHINE_PATH = re.compile(r"(^|[=:])[~/]")  # an absolute path, alone or as a flag's value


def launcher_words(command: str) -> tuple[str, list[str]]:
    """``python -m torchbeast_X.polybeast FLAG ...`` -> ("torchbeast_X", [FLAG, ...])."""
    words = shlex.split(command)
    module = words[words.index("-m") + 1]
    return module.split(".")[0], words[words.index("-m") + 2 :]


@functools.lru_cache(maxsize=None)
def parsed(package: str, words: tuple[str, ...]) -> dict | None:
    """The flags the package's launcher parses ``words`` into at today's defaults, the run's identity left out; None
    where they do not parse (a flag since removed) or the package is not installed."""
    from rl_core.runtime.entry import parse_flags

    try:
        env_pkg = importlib.import_module(f"{package}.env")
    except ImportError:
        return None
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            flags = parse_flags(env_pkg, list(words), prog=f"python -m {package}.polybeast")
    except (SystemExit, UserError, ValueError):
        return None
    return {key: value for key, value in vars(flags).items() if key not in IDENTITY_DESTS}


def flag_units(words: list[str]) -> list[list[str]]:
    """A command line's words by flag: ``--flag value``, ``--flag=value`` or ``--flag`` alone (a word after a flag
    that does not start with ``--`` is its value)."""
    units: list[list[str]] = []
    for word in words:
        if units and not word.startswith("--") and len(units[-1]) == 1 and "=" not in units[-1][0]:
            units[-1].append(word)
        else:
            units.append([word])
    return units


def flag_name(unit: list[str]) -> str:
    """A flag unit's flag: ``--flag`` of ``--flag value`` and of ``--flag=value``."""
    return unit[0].split("=")[0]


def joined(units: list[list[str]]) -> list[str]:
    """The units' words, in order."""
    return [word for unit in units for word in unit]


def minimal_words(package: str, words: list[str]) -> list[str]:
    """``words`` without the run's identity and without each flag whose removal parses to the same flags (today's
    defaults give it), --total_steps and --seed last; only the identity dropped where the words do not parse."""
    units = [unit for unit in flag_units(words) if flag_name(unit) not in IDENTITY_FLAGS]
    full = parsed(package, tuple(joined(units)))
    if full is not None:
        for unit in list(units):
            trial = [u for u in units if u is not unit]
            if flag_name(unit) not in KEPT_FLAGS and parsed(package, tuple(joined(trial))) == full:
                units = trial
    units.sort(key=lambda u: LAST_FLAGS.index(flag_name(u)) + 1 if flag_name(u) in LAST_FLAGS else 0)
    return joined(units)


def page_command(summary: dict) -> str:
    """The results page's command of a run: the flags that differ from the package's defaults of today."""
    package, words = launcher_words(summary["command"])
    return f"python -m {package}.polybeast {shlex.join(minimal_words(package, words))}"


def machine_free(word: str) -> str:
    """A word with an absolute path in it given as ``SAVEDIR/<its last two parts>``."""
    match = MACHINE_PATH.search(word)
    if not match:
        return word
    head, path = word[: match.end() - 1], word[match.end() - 1 :]
    return head + "SAVEDIR/" + "/".join(path.rstrip("/").split("/")[-2:])


def variant_command(summary: dict) -> str:
    """A variant's command as recorded, without the run's identity, a path of the machine it ran on written as
    ``SAVEDIR/...``: every flag not given was the default of the commit it ran at."""
    package, words = launcher_words(summary["command"])
    units = [unit for unit in flag_units(words) if flag_name(unit) not in IDENTITY_FLAGS]
    return f"python -m {package}.polybeast {shlex.join(machine_free(w) for w in joined(units))}"


def needs_machine_path(summary: dict) -> bool:
    """Whether the run's page command names a file of the machine it ran on."""
    package, words = launcher_words(summary["command"])
    return any(MACHINE_PATH.search(word) for word in minimal_words(package, words))


def variant_reason(summary: dict) -> str | None:
    """What the run changed from its package's defaults (its summary's ``variant``), "its command needs a file of
    the machine it ran on" where that is so; None for a package-default row."""
    if summary.get("variant"):
        return summary["variant"]
    if needs_machine_path(summary):
        return "its command needs a file of the machine it ran on"
    return None


def core_of(summary: dict) -> str:
    """The run's recurrent core as its package's launcher parses the command (models.core_kind), ``feedforward``
    for none; read off the command's core flags where it does not parse."""
    from models import core_kind

    package, words = launcher_words(summary["command"])
    flags = parsed(package, tuple(words))
    if flags is None:
        return next((CORE_WORDS[w.split("=")[0]] for w in words if w.split("=")[0] in CORE_WORDS), FEEDFORWARD)
    return core_kind(argparse.Namespace(**flags)) or FEEDFORWARD


def row_names(summaries: list[tuple[str, dict]]) -> dict[str, str]:
    """Each package-default summary's row name, by path: ``agent [core]``, the core left out where it is feedforward
    and no other row of the same env and agent has a core."""
    cores = {path: core_of(summary) for path, summary in summaries}
    recurrent = {(s["package"], s["env"], s["agent"]) for path, s in summaries if cores[path] != FEEDFORWARD}
    names = {}
    for path, summary in summaries:
        shown = cores[path] != FEEDFORWARD or (summary["package"], summary["env"], summary["agent"]) in recurrent
        names[path] = f"{summary['agent']} [{cores[path]}]" if shown else summary["agent"]
    return names


def check_one_per_seed(summaries: list[tuple[str, dict]], names: dict[str, str]) -> None:
    """UserError where two package-default summaries are the same row's same seed: one of them is a variant."""
    seen: dict[tuple, str] = {}
    for path, summary in summaries:
        key = (summary["package"], summary["env"], names[path], summary["seed"])
        if key in seen:
            raise UserError(
                f"{seen[key]} and {path} are both the package-default row {names[path]} on {summary['env']}, seed "
                f'{summary["seed"]}: give the one that is not a "variant" (what it changed) in its summary'
            )
        seen[key] = path
