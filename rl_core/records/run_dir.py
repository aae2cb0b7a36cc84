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
            raise UserError(
                f"run directory {rundir} is in use by another run ({holder}): wait for it to end, "
                f"or pass another --xpid"
            ) from None
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


def open_run_dir(savedir: str, xpid: str | None) -> tuple[str, str, RunDirLock]:
    """The run directory made (a new one without ``xpid``) or taken, and locked: ``(xpid, path, lock)``.
    A directory that cannot be made is one UserError naming --savedir."""
    savedir = os.path.expanduser(savedir)
    try:
        if xpid:
            rundir = os.path.join(savedir, xpid)
            os.makedirs(rundir, exist_ok=True)
        else:
            xpid, rundir = new_run_dir(savedir)
        return xpid, rundir, RunDirLock(rundir)
    except OSError as e:
        raise UserError(
            f"cannot create the run directory under --savedir {savedir}: {e.strerror or e}: choose another --savedir"
        ) from None


def read_meta(rundir: str) -> tuple[bytes, os.stat_result] | None:
    """meta.json's bytes and times as a run being resumed left them (``put_back_meta``), None without one."""
    path = os.path.join(rundir, "meta.json")
    if not os.path.exists(path):
        return None
    with open(path, "rb") as meta:
        return meta.read(), os.fstat(meta.fileno())


def put_back_meta(rundir: str, previous: tuple[bytes, os.stat_result] | None) -> None:
    """meta.json as ``read_meta`` found it (bytes and times), when a resume was refused."""
    if previous is not None:
        data, stat = previous
        path = os.path.join(rundir, "meta.json")
        with open(path + ".tmp", "wb") as meta:
            meta.write(data)
        os.utime(path + ".tmp", ns=(stat.st_atime_ns, stat.st_mtime_ns))
        os.replace(path + ".tmp", path)
