"""The run directory: a new one for every run started without --xpid, and a lock while a run uses it.

Without --xpid the directory is ``torchbeast-<date>-<time>``, created with ``os.mkdir`` (which fails
when it exists): a second run in the same second takes ``...-2``, a third ``...-3``, so two runs
never share one.  With --xpid the directory is shared on purpose (a resume), and ``RunDirLock``
refuses a second run while the first is alive: an ``fcntl.flock`` on ``<rundir>/.lock``, which the
OS releases when the process ends however it ends, so a crashed run's lock file is stale but free.
"""

from __future__ import annotations

import datetime
import fcntl
import itertools
import os
import socket

from rl_core.errors import UserError

LOCK_NAME = ".lock"


def new_run_dir(savedir: str) -> tuple[str, str]:
    """Create a run directory no other run has: ``(xpid, path)``."""
    base = "torchbeast-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    os.makedirs(savedir, exist_ok=True)
    for n in itertools.count(1):
        xpid = base if n == 1 else f"{base}-{n}"
        path = os.path.join(savedir, xpid)
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        return xpid, path
    raise AssertionError("unreachable")


class RunDirLock:
    """Held from the run's start to its end; a second run on the directory is one UserError naming
    the holder.  Nothing in the directory is written before it is held (an absent lock file aside)."""

    def __init__(self, rundir: str):
        self.path = os.path.join(rundir, LOCK_NAME)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown process"
            finally:
                os.close(fd)
            raise UserError(f"run directory {rundir} is in use by another run ({holder}): wait for it to end, "
                            f"or pass another --xpid") from None
        self.fd: int | None = fd

    def record_holder(self) -> None:
        """Write who holds the lock into the file (what a refused run names); done once the run is
        accepted, so that a refused one leaves even the lock file as it was."""
        since = datetime.datetime.now().isoformat(timespec="seconds")
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"pid {os.getpid()} on {socket.gethostname()} since {since}\n".encode(), 0)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
