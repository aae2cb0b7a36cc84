"""Ctrl-C and SIGTERM: the first stops the run (final checkpoint, then exit); a repeat a second later exits now."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

log = logging.getLogger("learner")


class StopSignals:
    """``on_stop()`` at the first SIGINT / SIGTERM; ``on_force_exit()`` (servers stopped, no checkpoint) and exit
    status 130 at a repeat more than a second later.  The same signal often arrives twice at once (a terminal's
    process group, ``timeout``): only a later repeat means "stop now"."""

    def __init__(self, on_stop, on_force_exit):
        self.on_stop = on_stop
        self.on_force_exit = on_force_exit
        self.interrupted = False
        self.signum = 0  # the signal that stopped the run
        self._first = 0.0

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._handle)
            signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame) -> None:
        now = time.monotonic()
        if self.interrupted:
            if now - self._first > 1.0:
                log.warning("received %s again: exiting now without a final checkpoint", signal.Signals(signum).name)
                self.on_force_exit()
                logging.shutdown()
                os._exit(130)
            return
        self._first = now
        self.interrupted, self.signum = True, signum
        log.info("received %s: stopping (final checkpoint, then exit)", signal.Signals(signum).name)
        self.on_stop()
