"""Env server processes started, watched and restarted by the launcher."""

from __future__ import annotations

import logging
import os
import signal
import shutil
import subprocess
import sys
import tempfile
import time

from rl_core.errors import RunFailure, UserError
from rl_core.runtime import affinity
from rl_core.runtime import transport as tp
from rl_core.runtime.env_server import ENV_ERROR_EXIT_CODE

log = logging.getLogger("supervisor")

USER_ERROR_EXIT_CODE = 2
FAILURE_FILE_ENV = "POLYBEAST_FAILURE_FILE"  # where a server that cannot start writes its one-line reason
MAX_RESTARTS_PER_MINUTE = 5


class ServerSupervisor:
    """Runs ``python -m <module> <argv> --server_index first_index + i * splits`` for i in range(num_servers //
    splits): a process per ``splits`` servers (``--server_splits``; ``first_index``: a torchrun rank's share of
    the run's servers starts there).  Process i is "env server i" in what it reports: with splits, the servers
    from ``first_index + i * splits`` on."""

    def __init__(
        self,
        module: str,
        argv: list[str],
        num_servers: int,
        basename: str,
        secret: str | None,
        first_index: int = 0,
        splits: int = 1,
    ):
        self.module = module
        self.argv = list(argv)
        self.splits = splits
        self.num_processes = num_servers // splits
        self.first_index = first_index
        self.addresses = [
            [tp.server_address(basename, first_index + i * splits + h) for h in range(splits)]
            for i in range(self.num_processes)
        ]
        self.env = dict(os.environ, POLYBEAST_PARENT_PID=str(os.getpid()))
        if secret:
            self.env["POLYBEAST_SECRET"] = secret
        self.procs: list[subprocess.Popen | None] = [None] * num_servers
        self._failure_dir = tempfile.mkdtemp(prefix="polybeast-")
        self.restarts = 0
        self._recent: list[list[float]] = [[] for _ in range(num_servers)]
        self._env_error_since: float | None = None
        self._terminated: set[int] = set()  # pids sent SIGTERM
        self.cpus: list[int] | None = None  # --cpu_affinity's cores for the servers (rl_core/runtime/affinity.py)

    def _start(self, i: int) -> None:
        cmd = [sys.executable, "-m", self.module, *self.argv, "--server_index", str(self.first_index + i * self.splits)]
        env = dict(self.env, **{FAILURE_FILE_ENV: self._failure_path(i)})
        # Its own process group: a terminal's Ctrl-C (SIGINT to the foreground group) reaches
        # only the launcher, which stops the servers in order.  Not a new session: with the
        # kernel's autogroup (sched_autogroup_enabled) every session is scheduled as one
        # entity, so a server in its own session would get the CPU share of the whole
        # learner process (learner, inference and actor threads) under contention.
        self.procs[i] = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, process_group=0)
        if self.cpus:
            try:
                affinity.pin(self.procs[i].pid, self.cpus)
            except OSError:
                pass

    def _failure_path(self, i: int) -> str:
        return os.path.join(self._failure_dir, f"server{i}")

    def _failure_reason(self, i: int) -> str:
        try:
            with open(self._failure_path(i)) as f:
                return f.read().strip()
        except OSError:
            return "its error is above"

    def start_all(self) -> None:
        for i in range(self.num_processes):
            self._start(i)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None]

    def poll(self, env_error_reported: bool = False) -> None:
        """Restart servers that died; raise when one cannot be kept running."""
        now = time.monotonic()
        for i, proc in enumerate(self.procs):
            if proc is None or proc.poll() is None:
                continue
            code = proc.returncode
            if code == USER_ERROR_EXIT_CODE:
                raise UserError(f"env server {i} could not start: {self._failure_reason(i)}")
            if code == ENV_ERROR_EXIT_CODE:
                # The traceback travels to the learner as an ERROR message; give it a moment.
                self._env_error_since = self._env_error_since or now
                if not env_error_reported and now - self._env_error_since > 3.0:
                    raise RunFailure(f"env server {i} exited after an environment raised (traceback above)")
                continue
            recent = [t for t in self._recent[i] if now - t < 60.0] + [now]
            self._recent[i] = recent
            if len(recent) > MAX_RESTARTS_PER_MINUTE:
                raise RunFailure(
                    f"env server {i} died {len(recent)} times within a minute (last exit code {code}), more than the "
                    f"{MAX_RESTARTS_PER_MINUTE} restarts a minute allowed: the env crashes its process; run "
                    f"`python -m {self.module}` alone with the same flags to see why"
                )
            log.warning("env server %d (pid %d) exited with code %s; restarting it", i, proc.pid, code)
            self._cleanup_socket(i)
            self.restarts += 1
            self._start(i)

    def _cleanup_socket(self, i: int) -> None:
        """Remove server i's socket file if nobody listens on it (ours is dead); a file another
        process's server listens on (this run was refused its address) stays."""
        for address in self.addresses[i]:
            tp.remove_stale_socket(address)

    def terminate_all(self) -> None:
        """SIGTERM every server still running, once (stop_all then waits for them): a second SIGTERM
        would interrupt a server's own clean exit."""
        for proc in self.procs:
            if proc is not None and proc.poll() is None and proc.pid not in self._terminated:
                self._terminated.add(proc.pid)
                try:
                    proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def stop_all(self, timeout: float = 5.0) -> None:
        """SIGTERM every server, SIGKILL what is left after ``timeout``, remove socket files."""
        self.terminate_all()
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            if proc is None:
                continue
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for i in range(self.num_processes):
            self._cleanup_socket(i)
        shutil.rmtree(self._failure_dir, ignore_errors=True)
