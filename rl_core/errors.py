"""Errors that end a run with one clear line."""


class UserError(Exception):
    """An error the user can fix (bad flag, unknown env, ...): shown as one line."""


class EnvServerError(RuntimeError):
    """An environment raised inside an env server; carries the env's traceback text."""
