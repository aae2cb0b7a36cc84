"""Checkpoints: written atomically, loaded with ``torch.load(weights_only=True)``."""

from __future__ import annotations

import os
import pickle
import tempfile
import zipfile

import torch

from rl_core.errors import UserError


TEMP_SUFFIX = ".partial"


def save(path: str, payload: dict) -> None:
    """Write ``payload`` to ``path`` via a temporary file, fsync and a rename.

    A failure while writing removes the temporary file and leaves ``path`` as it
    was; a process killed while writing leaves ``path`` as it was and a stale
    ``.<name>.*.partial`` file, which :func:`remove_partial_writes` deletes.
    A write the file system refuses (no space, a quota, a file size limit) raises the ``OSError``
    of that write, whichever layer (torch's archive writer) it passed through.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=TEMP_SUFFIX, dir=directory)
    out = None
    try:
        with os.fdopen(fd, "wb") as f:
            out = _Writes(f)
            torch.save(payload, out)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if out is not None and out.error is not None and not isinstance(e, OSError):
            raise out.error from None  # torch reports a failed write as a RuntimeError of its own
        raise


class _Writes:
    """A file for ``torch.save`` that keeps the ``OSError`` of a failed write."""

    def __init__(self, f):
        self.f = f
        self.error: OSError | None = None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def describe_write_error(path: str, error: OSError) -> str:
    """``path`` could not be written: the OS's reason, the free space where it goes, and what to do."""
    import errno
    import shutil

    directory = os.path.dirname(os.path.abspath(path))
    try:
        free = f"{shutil.disk_usage(directory).free / 2**20:,.1f} MiB free there"
    except OSError:
        free = "free space unknown"
    if error.errno == errno.EFBIG:
        fix = "raise the file size limit (ulimit -f) or pass --savedir on another file system"
    elif error.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free space there or pass --savedir on another disk"
    else:
        fix = "check the directory's permissions and disk, or pass another --savedir"
    return f"could not write {path}: {error.strerror or error} ({free}); {fix}"


def remove_partial_writes(directory: str) -> list[str]:
    """Delete the temporary files of saves that a killed process left in ``directory``; returns them.

    Call it only while no save into ``directory`` is under way (a run's start).
    """
    removed = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return removed
    for name in names:
        if name.startswith(".") and name.endswith(TEMP_SUFFIX):
            try:
                os.unlink(os.path.join(directory, name))
                removed.append(name)
            except FileNotFoundError:
                pass
    return removed


RESUME_FIX = "move it away to start afresh, or pass another --xpid"


def load(path: str, map_location="cpu", fix: str = RESUME_FIX, key: str = "model_state_dict") -> dict:
    """Load a checkpoint written by :func:`save` with ``weights_only=True``.

    A bad file is one UserError: the path, what is wrong with it (missing, truncated or not a
    PyTorch file, holding objects a safe load refuses, not one of this project's checkpoints)
    and ``fix``, what to do.  PyTorch's own advice to load unsafely is never passed on.
    """
    if not os.path.exists(path):
        raise UserError(f"checkpoint {path} does not exist: check the path")
    if not zipfile.is_zipfile(path):
        raise UserError(f"checkpoint {path} cannot be read: it is truncated or not a PyTorch checkpoint; {fix}")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        raise UserError(
            f"checkpoint {path} cannot be read: it holds objects a safe load refuses, so this project "
            f"did not write it; {fix}"
        ) from None
    except Exception as e:  # noqa: BLE001 - a damaged archive
        raise UserError(f"checkpoint {path} cannot be read: it is damaged ({type(e).__name__}); {fix}") from None
    if not isinstance(payload, dict) or key not in payload:
        raise UserError(
            f"checkpoint {path} cannot be read: it is a PyTorch file but not one of this project's "
            f"checkpoints (no {key}); {fix}"
        )
    return payload


SECRET_FLAGS = ("server_secret",)


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` with the value of every secret flag (``--server_secret X`` or ``=X``) replaced."""
    out, hide_next = [], False
    for arg in argv:
        if hide_next:
            out.append("<redacted>")
            hide_next = False
            continue
        name = arg.split("=", 1)[0]
        if name in tuple(f"--{flag}" for flag in SECRET_FLAGS):
            if "=" in arg:
                out.append(f"{name}=<redacted>")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def flags_dict(flags) -> dict:
    """Flags as plain values, loadable with weights_only=True; secrets left out."""
    return {
        k: v
        for k, v in vars(flags).items()
        if k not in SECRET_FLAGS and (v is None or isinstance(v, (bool, int, float, str)))
    }
