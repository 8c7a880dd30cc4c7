"""One way to fill a table of named functions (the adapters, the in-process calls, the datasets)."""
from __future__ import annotations


def registrar(table: dict, wrap=None):
    """A decorator factory: ``@registrar(TABLE)("name")`` stores the function in TABLE["name"]
    (``wrap(fn)`` instead where ``wrap`` is given) and returns the function unchanged."""
    def named(name: str):
        def register(fn):
            if name in table:
                raise ValueError(f"{name!r} registered twice")
            table[name] = fn if wrap is None else wrap(fn)
            return fn
        return register
    return named
