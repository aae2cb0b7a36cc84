"""How a run ended, and the exit status that says so: 0 finished or interrupted after training began, 1 a
failure (an error in a thread, a lost peer, a checkpoint that could not be written), 2 the user's error (one
line: cause and fix), 128 + the signal when stopped before anything was trained."""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading

from rl_core.errors import RunFailure, UserError
from rl_core.errors import Stopped

log = logging.getLogger("learner")


@dataclasses.dataclass(frozen=True)
class Outcome:
    reason: str  # "finished", "interrupted", "error...": run_log's reason, the last log line's
    status: int  # the exit status
    one_line: str | None = None  # the error a user reads last, after the shutdown's own log lines

    @property
    def finished(self) -> bool:
        return self.status == 0 and self.reason == "finished"


FINISHED = Outcome("finished", 0)
INTERRUPTED = Outcome("interrupted", 0)


def failed(error: UserError | RunFailure) -> Outcome:
    reason = f"error: {error}"
    return Outcome(reason, 2 if isinstance(error, UserError) else 1, reason)


def outcome_of_error(error: BaseException, errors) -> Outcome:
    """The outcome of an exception that ended the run's main phase (raised there, or the first error of a
    thread, kept in ``errors``: an ``ErrorBox``); an unexpected one's traceback is logged here."""
    if isinstance(error, Stopped):
        return INTERRUPTED
    if isinstance(error, (UserError, RunFailure)):
        return failed(error)
    where = errors.thread_name or threading.current_thread().name
    if errors.error is error:
        log.error("error in thread %s:\n%s", where, errors.text)
    else:
        log.exception("error in %s", where, exc_info=error)
    return Outcome(f"error in {where}: {type(error).__name__}: {error}", 1)


def after_shutdown(outcome: Outcome, save_error, errors, peers, trained: bool, signum: int) -> Outcome:
    """The outcome once the parts are stopped: a final checkpoint that could not be written, a torchrun peer lost
    while this rank stopped (torchrun signals the others when one dies) or one that stopped first (``peers``),
    or a stop before anything was built to train (``trained`` False)."""
    if outcome.status == 0 and save_error is not None:
        outcome = failed(save_error)
    if outcome.status == 0 and peers is not None and isinstance(errors.error, RunFailure):
        outcome = failed(errors.error)
    if peers is not None and outcome.finished and peers.stopping:
        ranks = ", ".join(map(str, peers.stopping))
        outcome = Outcome(f"stopped with rank {ranks} (a signal or an error there: its log says which)", 0)
    if outcome.reason == "interrupted" and not trained:
        status = 128 + (signum or signal.SIGINT)  # stopped before anything was trained: not a success
        log.info("interrupted before training began: nothing was trained or saved (exit status %d)", status)
        outcome = Outcome(outcome.reason, status, outcome.one_line)
    return outcome
