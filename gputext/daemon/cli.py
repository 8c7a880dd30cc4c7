"""``gputext daemon status | start | stop``: the warm server of this environment (package
docstring). These always run in their own process, never through a server. The hidden
``gputext daemon call`` is the other way round: the server runs it for a library call (library.py)."""
from __future__ import annotations

import time

import click

from . import client, key, protocol


def _ask(server_key: str, message: dict) -> dict | None:
    sock = client.connect(server_key)
    if sock is None:
        return None
    with sock:
        protocol.send(sock, message)
        reply, _ = protocol.receive(sock)
        return reply


@click.group("daemon")
def daemon():
    """The warm server that answers every command after the first (GPUTEXT_DAEMON=0: none)."""


@daemon.command("status")
def status():
    """Whether this environment's server runs, and what it preloaded."""
    server_key = key.server_key()
    path, _ = key.paths(server_key)
    if not key.enabled():
        click.echo("warm server: off (GPUTEXT_DAEMON=0, or no fork/SCM_RIGHTS on this system)")
        return
    reply = _ask(server_key, {"status": True})
    if reply is None:
        state = key.server_state(server_key)
        then = "warming up" if state == "starting" else "the next command starts one"
        click.echo(f"warm server: {state} (socket {path}; {then})")
        return
    took = reply.get("preload", {})
    click.echo(f"warm server: running, pid {reply['pid']}, {reply['commands']} commands answered, "
               f"{reply['running']} running, exits after {reply['idle_s']:.0f} s idle")
    click.echo(f"  socket {path}")
    click.echo(f"  preloaded {took.get('modules', 0)} modules in {took.get('imports_s', 0)} s, numba's registries in "
               f"{took.get('registries_s', 0)} s, {took.get('cpu_overloads', 0)} CPU overloads in {took.get('cpu_loads_s', 0)} s")
    res = reply.get("resident")
    if res is None:
        click.echo("  resident: none (each command forks)")
    else:
        warm = res.get("warm") or {}
        gpu = f"GPU {warm['gpu']} started in {warm.get('cuda_s', 0)} s" if warm.get("gpu") else "no GPU"
        click.echo(f"  resident: pid {res['pid']}, {res['state']}, {res['commands']} commands answered"
                   + (f"; {gpu}, {warm.get('cpu_overloads', 0)} CPU overloads in {warm.get('cpu_loads_s', 0)} s"
                      if warm else ""))


@daemon.command("start")
@click.option("--timeout", default=300.0, show_default=True, help="Seconds to wait for it to answer.")
def start(timeout):
    """Start the server (if none runs) and wait until it and its resident answer."""
    if not key.enabled():
        raise click.ClickException("the warm server is off (GPUTEXT_DAEMON=0, or no fork/SCM_RIGHTS here)")
    server_key = key.server_key()
    t0 = time.perf_counter()
    client.start_server(server_key)
    while True:
        reply = _ask(server_key, {"status": True})
        res = (reply or {}).get("resident") or {}
        if reply is not None and res.get("state") != "warming up":
            break  # answering, and its resident (if any) ready or busy
        if time.perf_counter() - t0 > timeout:
            _, lock = key.paths(server_key)
            raise click.ClickException(f"no answer after {timeout:.0f} s; its log: {lock[:-5]}.log")
        time.sleep(0.05)
    click.echo(f"warm server: answering after {time.perf_counter() - t0:.2f} s")


@daemon.command("call", hidden=True)
def call():
    """(internal) Answer a library call sent through the server (daemon/library.py)."""
    from .library import answer
    answer(0)


@daemon.command("stop")
def stop():
    """Stop this environment's server (commands running in it finish)."""
    server_key = key.server_key()
    path, _ = key.paths(server_key)
    import os
    if _ask(server_key, {"status": True}) is None:
        click.echo("warm server: not running")
        return
    _ask(server_key, {"stop": True})
    for _ in range(600):
        if not os.path.exists(path):
            break
        time.sleep(0.05)
    click.echo("warm server: stopped")
