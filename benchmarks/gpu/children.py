"""The GPU suite's children: a stage's subprocess in its own session, stopped (SIGINT to its group) at its share's
end, at a target or at the suite's own signal, and killed after a grace."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POLL_S = 1.0


class Stopper:
    """SIGINT / SIGTERM: recorded, and passed on to the child under way (as a terminal's Ctrl-C would reach it;
    the children run in their own sessions so that only this reaches them)."""

    def __init__(self, install: bool = True):
        self.signum: int | None = None
        self.proc: subprocess.Popen | None = None
        self.first = 0.0
        for sig in (signal.SIGINT, signal.SIGTERM) if install else ():
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        now = time.monotonic()
        if self.signum is not None and now - self.first > 1.0 and self.proc is not None:
            signal_group(self.proc, signal.SIGKILL)  # a repeat: stop waiting
            return
        if self.signum is None:
            self.signum, self.first = signum, now
            if self.proc is not None:
                signal_group(self.proc, signal.SIGINT)


def signal_group(proc: subprocess.Popen, signum: int) -> None:
    """Signal the child's process group (it leads one: start_new_session), if it still runs."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass


@dataclasses.dataclass
class Ended:
    status: int
    why: str  # "exited", "target", "budget", "signal"
    seconds: float  # from the start to the exit
    target_s: float | None = None  # from the start to when the target was seen


def run_child(cmd: list[str], out_path: str, stop_at: float, kill_at: float, stopper: Stopper, target=None) -> Ended:
    """Run ``cmd`` (cwd: the repository) to its exit, its output into ``out_path``; SIGINT to its group at
    ``stop_at`` (time.monotonic()), or as soon as ``target()`` is true, or at the suite's own signal; SIGKILL
    at ``kill_at``."""
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p),
    )
    start = time.monotonic()
    why, target_s = "exited", None
    if stopper.signum is not None:  # the suite was stopped: start nothing more (a SIGINT sent while a child
        return Ended(-signal.SIGINT, "signal", 0.0)  # starts can be lost, if it inherited SIGINT ignored)
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        stopper.proc = proc
        if stopper.signum is not None:  # a signal came while it started
            signal_group(proc, signal.SIGINT)
        try:
            while proc.poll() is None:
                now = time.monotonic()
                if stopper.signum is not None and why == "exited":
                    why = "signal"
                elif why == "exited" and target is not None and target():
                    why, target_s = "target", now - start
                    signal_group(proc, signal.SIGINT)
                elif why == "exited" and now >= stop_at:
                    why = "budget"
                    signal_group(proc, signal.SIGINT)
                if now >= kill_at:
                    signal_group(proc, signal.SIGKILL)
                try:
                    proc.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            stopper.proc = None
            if proc.poll() is None:
                signal_group(proc, signal.SIGKILL)
                proc.wait()
    if why == "exited" and stopper.signum is not None:  # it ended of the signal before the loop saw it
        why = "signal"
    return Ended(proc.returncode, why, time.monotonic() - start, target_s)
