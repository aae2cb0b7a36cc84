"""Threads whose first error ends the run, whichever thread raised it."""

from __future__ import annotations

import ctypes
import sys
import threading
import traceback
from typing import Callable

from rl_core.errors import Stopped


class ErrorBox:
    """Holds the first exception raised by any supervised thread and sets ``stop``."""

    def __init__(self, stop: threading.Event):
        self.stop = stop
        self._lock = threading.Lock()
        self.error: BaseException | None = None
        self.thread_name = ""
        self.text = ""

    def put(self, thread_name: str, error: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = error
                self.thread_name = thread_name
                self.text = "".join(traceback.format_exception(error))
        self.stop.set()

    def raise_if_set(self) -> None:
        if self.error is not None:
            raise self.error


def start_thread(name: str, target: Callable[[], None], errors: ErrorBox) -> threading.Thread:
    """Run ``target`` in a daemon thread; an exception goes to ``errors`` and stops the run."""

    def body():
        name_os_thread(name)
        try:
            target()
        except Stopped:
            pass
        except BaseException as e:  # noqa: BLE001 - every error must reach the main thread
            errors.put(name, e)

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    return thread


def name_os_thread(name: str) -> None:
    """Name the calling OS thread (its first 15 bytes; Linux), so that top -H, py-spy and
    /proc/PID/task/*/comm tell the learner, inference and actor threads apart."""
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def where_they_wait(threads: list[threading.Thread], frames: int = 4, named: bool = True) -> str:
    """Where each of ``threads`` that is still alive is now: its innermost ``frames`` calls, after its name
    (``named``) (the log of a shutdown that a thread outlived says what it waits for)."""
    current = sys._current_frames()
    lines = []
    for thread in threads:
        frame = current.get(thread.ident) if thread.is_alive() else None
        if frame is None:
            continue
        calls = reversed(traceback.extract_stack(frame)[-frames:])
        where = " <- ".join(f"{c.name} ({c.filename.rsplit('/', 1)[-1]}:{c.lineno})" for c in calls)
        lines.append(f"{thread.name}: {where}" if named else where)
    return "; ".join(lines)
