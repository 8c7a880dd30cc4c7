"""The messages between a ``gputext`` client and its server: a 4-byte big-endian length, then that
many bytes of JSON. The client's first message carries its stdin, stdout and stderr as
SCM_RIGHTS descriptors. Client -> server: the request ({"argv", "cwd", "env", "umask",
"rlimits", "affinity"}), then {"signal": n} for each signal to forward. Server -> client:
{"pid": n} once the command's process exists, then {"exit": code} or {"signal": n} (the
command was killed by signal n)."""
from __future__ import annotations

import json
import socket
import struct

_HEAD = struct.Struct(">I")
MAX_MESSAGE = 16 << 20


def send(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    body = json.dumps(message).encode()
    head = _HEAD.pack(len(body))
    if fds:
        socket.send_fds(sock, [head], fds)
        sock.sendall(body)
    else:
        sock.sendall(head + body)


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks, have = [], 0
    while have < n:
        chunk = sock.recv(n - have)
        if not chunk:
            return None
        chunks.append(chunk)
        have += len(chunk)
    return b"".join(chunks)


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    """(message, descriptors); (None, []) when the other side closed the connection."""
    fds: list[int] = []
    if max_fds:
        head, fds, _flags, _addr = socket.recv_fds(sock, _HEAD.size, max_fds)
        if head and len(head) < _HEAD.size:
            rest = _exactly(sock, _HEAD.size - len(head))
            head = None if rest is None else head + rest
    else:
        head = _exactly(sock, _HEAD.size)
    if not head:
        return None, fds
    (n,) = _HEAD.unpack(head)
    if n > MAX_MESSAGE:
        raise ValueError(f"message of {n} bytes")
    body = _exactly(sock, n)
    return (None if body is None else json.loads(body)), fds
