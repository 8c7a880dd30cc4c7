"""Library calls answered by the warm server: a fresh Python process's estimator calls without
importing numba or numba-cuda or starting the GPU there (docs/python.md, "A fresh process").

A method marked ``@served`` runs in the warm server (its resident, which holds the GPU's context
and the loaded kernels, or a process forked for the call when the resident is busy) when all of:

- this environment's server is running. Any ``gputext`` command starts one, and so does
  ``gputext daemon start``; a library call never starts one. "This environment" is the same key
  as the command line's (key.py): the same Python, the same code, the same keyed variables.
- ``GPUTEXT_DAEMON`` is not 0.
- this process has not imported numba. Once it has, it has an engine of its own, and its later
  calls are faster in it than through a copy of their data.
- the call's pickled size is at most ``GPUTEXT_SERVE_BYTES`` (default 256 MiB). Above that,
  copying the data costs more than this process's own start (about 2 s).

Otherwise, or when the server fails the call (stopped, killed, a protocol error), the method runs
here as it always did.

The call travels in one anonymous memory file (``memfd``; elsewhere a temporary file), which the
server's command ``gputext daemon call`` (``answer``) gets as its stdin. Its stdout and stderr are
this process's. The file holds ASK, then a pickle of (the estimator, the method's name, its
arguments, whether it changes the estimator). The estimator is pickled with its parameters and
fitted state; device buffers are left out. The command runs the method and writes ANSWER and a
pickle of a dict over the same file (``{"here": why}`` when it cannot unpickle the call, say a
weights function defined in the caller's ``__main__``: the call then runs in the caller). The
dict holds:

- the result (``SELF`` when it is the estimator);
- the estimator's new ``__dict__``, for the methods that change it;
- the warnings raised, each with its category, file and line;
- the exception, if the method raised one.

Here, the warnings are issued again through this process's filters, the exception is raised again,
and the state replaces the estimator's, so a caller sees what the same call in its own process would
give.
"""
from __future__ import annotations

import functools
import os
import pickle
import sys

ASK = b"gputext-call-1\n"
ANSWER = b"gputext-answer-1\n"
SELF = "__gputext_self__"
DEFAULT_LIMIT = 256 << 20


def limit_bytes(environ=os.environ) -> int:
    try:
        return int(float(environ.get("GPUTEXT_SERVE_BYTES", DEFAULT_LIMIT)))
    except ValueError:
        return DEFAULT_LIMIT


def through_server_wanted() -> bool:
    """Whether a call may go to the server at all (before its size and the server are looked at)."""
    from .key import enabled
    return "numba" not in sys.modules and enabled()


def served(changes_state: bool = False):
    """Mark an estimator method whose work may be answered by the warm server (module docstring).
    ``changes_state``: the method changes the estimator (fit), whose new state comes back."""
    def wrap(method):
        name = method.__name__

        @functools.wraps(method)
        def call(self, *args, **kwargs):
            if through_server_wanted():
                answered, value = ask(self, name, args, kwargs, changes_state)
                if answered:
                    return value
            return method(self, *args, **kwargs)
        return call
    return wrap


def _pickled_size(obj) -> int | None:
    """Bytes of ``obj``'s pickle, counting large buffers without copying them; None when it cannot
    be pickled (a lambda in an argument: the call runs here)."""
    sizes: list[int] = []

    def out_of_band(buffer) -> bool:
        sizes.append(buffer.raw().nbytes)
        return False  # False: kept out of the stream, only counted
    try:
        return len(pickle.dumps(obj, protocol=5, buffer_callback=out_of_band)) + sum(sizes)
    except Exception:
        return None


def _memory_file():
    """A read-write file object that lives in memory (Linux) or in a removed temporary file."""
    if hasattr(os, "memfd_create"):
        return open(os.memfd_create("gputext-call", os.MFD_CLOEXEC), "w+b")
    import tempfile
    return tempfile.TemporaryFile()


def ask(estimator, name: str, args: tuple, kwargs: dict, changes_state: bool):
    """(True, the method's result) when the server answered; (False, None) when the call is to run here."""
    request = (estimator, name, args, kwargs, changes_state)
    size = _pickled_size(request)
    if size is None or size > limit_bytes():
        return False, None
    from .client import through_server
    with _memory_file() as f:
        f.write(ASK)
        pickle.dump(request, f, protocol=5)
        f.flush()
        f.seek(0)
        code = through_server(["gputext", "daemon", "call"], fds=(f.fileno(), 1, 2), start=False)
        if code in (("exit", 130), ("signal", 2)):
            raise KeyboardInterrupt
        if code != ("exit", 0):
            return False, None  # no server, or it failed the call: run here
        f.seek(0)
        if f.read(len(ANSWER)) != ANSWER:
            return False, None
        reply = pickle.load(f)
    if "here" in reply:  # the server could not unpickle the call: it runs here
        return False, None
    import warnings
    for message, category, filename, lineno in reply["warnings"]:
        warnings.warn_explicit(message, category, filename, lineno)
    if reply["error"] is not None:
        raise reply["error"]
    if changes_state:
        vars(estimator).clear()
        if hasattr(estimator, "__setstate__"):
            estimator.__setstate__(reply["state"])
        else:
            vars(estimator).update(reply["state"])
    result = reply["result"]
    return True, estimator if isinstance(result, str) and result == SELF else result


def answer(fd: int = 0) -> None:
    """In the server: read the call in ``fd`` (ASK ...), run it, write the reply over the same file."""
    import io
    import traceback
    import warnings
    from ..errors import InputError

    f = open(fd, "r+b", closefd=False)
    try:
        asked = f.read(len(ASK)) == ASK
    except (OSError, io.UnsupportedOperation):  # a terminal, a pipe
        asked = False
    if not asked:
        raise InputError("gputext daemon call answers the library's calls through the warm server; "
                         "it is not run by hand")
    try:
        estimator, name, args, kwargs, changes_state = pickle.load(f)
    except Exception as exc:  # a class or function this process cannot import (one defined in the caller's __main__)
        _reply(f, pickle.dumps({"here": f"{type(exc).__name__}: {exc}"}, protocol=5))
        return
    error = result = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # the caller's filters decide what it shows
        try:
            result = getattr(estimator, name)(*args, **kwargs)
        except Exception as exc:
            error = exc
            exc.__traceback__ = None  # tracebacks do not pickle
            if os.environ.get("GPUTEXT_DEBUG"):
                traceback.print_exception(exc)
    reply = {"result": SELF if result is estimator else result,
             "state": estimator.__getstate__() if changes_state and error is None else None,  # as pickle keeps it
             "warnings": [(w.message, w.category, w.filename, w.lineno) for w in caught], "error": error}
    try:
        body = pickle.dumps(reply, protocol=5)
    except Exception as exc:  # an exception or a result that does not pickle
        body = pickle.dumps({"result": None, "state": None, "warnings": reply["warnings"],
                             "error": RuntimeError(f"{name}'s reply does not pickle: {type(exc).__name__}: {exc}; "
                                                   f"{type(error).__name__ if error else 'result'}: {error}")},
                            protocol=5)
    _reply(f, body)


def _reply(f, body: bytes) -> None:
    """Write ANSWER and ``body`` (a pickled dict) over the call's file."""
    f.seek(0)
    f.truncate()
    f.write(ANSWER)
    f.write(body)
    f.flush()
