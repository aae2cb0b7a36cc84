"""Errors that end a run with one clear line, and ``Stopped``: a wait its stop event ended."""


class UserError(Exception):
    """An error the user can fix (bad flag, unknown env, ...): shown as one line."""


class EnvServerError(RuntimeError):
    """An environment raised inside an env server; carries the env's traceback text."""


class RunFailure(RuntimeError):
    """A failure of the run's machinery the log explains in one line, e.g. an env server that keeps
    dying: the run ends (status 1) with that line and no Python traceback."""


class TrainingDiverged(RunFailure):
    """A non-finite loss, gradient norm or parameter: the update is not published or saved, the run
    ends (status 1) naming what diverged and at which step; model.tar keeps the last good checkpoint."""


class CheckpointWriteError(RunFailure):
    """A checkpoint could not be written (disk full, file size limit, ...): the previous one is kept,
    the run stops (status 1) with one line naming the path and the free space."""


class Stopped(Exception):
    """A wait was abandoned because the caller's stop event was set."""
