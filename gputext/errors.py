"""Errors the CLI turns into one line on stderr and exit code 2."""


class GputextError(Exception):
    """Bad input or an impossible request: the message names the offending thing,
    what was expected and what was received."""


class InputError(GputextError, ValueError):
    """A file, option or array that cannot be used as given."""


class FormatError(InputError):
    """An HDF5 file that is not a valid gputext corpus; the message names the HDF5 key."""


class BackendError(GputextError, RuntimeError):
    """A backend was asked for that cannot run here (e.g. --device cuda without a GPU)."""


class Terminated(BaseException):
    """SIGTERM, raised like KeyboardInterrupt so that clean-up runs; the CLI exits with 143."""
