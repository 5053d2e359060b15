"""The static Engine's point-to-point channels on plain TCP sockets (``PADDLE_EXT_P2P_SOCKETS``).

One connected socket per one-direction channel ``sender -> receiver`` (the channels
:func:`static_collectives.wanted_communicators` names ``paddle_ext:p2p:<s>><r>``). The send op
writes the tensor's bytes into the socket from the compute thread and returns; the kernel's
socket buffer keeps a message the receiver has not asked for yet, and the receive op reads it
straight into its output (``paddle_ext/csrc/gloo_ops.cc``, ``SocketChannel``). Through gloo a
message wakes a send thread, gloo's I/O thread on each side and a receive thread, each a context
switch on the rank's one CPU (0.20-0.27 ms of CPU per message measured on a 2-CPU VM:
docs/static_engine.md, "Eleventh pass"); through the socket it is one write and one read.

Each rank connects its ends when the Engine creates its communicators, receivers listening
first (so no rank waits for a peer that waits for it); the descriptors reach the C++ ops as
``PADDLE_EXT_P2P_FD_<sender>_<receiver>``. ``PADDLE_EXT_P2P_SOCKETS=0`` keeps every channel on
gloo (posted-ahead receives and the send thread); every rank of a launch must agree (they share
the launcher's environment).
"""
from __future__ import annotations

import os
import socket

from ...errors import CompatError

SWITCH = "PADDLE_EXT_P2P_SOCKETS"
#: socket buffer each way (bytes): what a sender may have in flight before its channel's thread
#: takes over the writing (the op never waits)
BUFFER = 8 << 20
#: how long a rank waits for its peer to connect (seconds)
CONNECT_TIMEOUT_S = 300.0
_OPEN: dict = {}   # channel key -> its connected socket, kept open for the process


def enabled() -> bool:
    """Whether point-to-point channels run on sockets (``PADDLE_EXT_P2P_SOCKETS``, default on)."""
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def fd_variable(sender: int, receiver: int) -> str:
    """The environment variable that names channel ``sender -> receiver``'s descriptor."""
    return f"PADDLE_EXT_P2P_FD_{int(sender)}_{int(receiver)}"


def _keep(key: str, sock: socket.socket, sender: int, receiver: int) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(True)
    _OPEN[key] = sock
    os.environ[fd_variable(sender, receiver)] = str(sock.fileno())


def connect(store, rank: int, channels) -> list:
    """Connect this rank's ends of ``channels`` (``[(key, (sender, receiver)), ...]`` in the
    global order every rank uses) through the launch's TCP ``store``; returns the keys connected
    now (a channel already open is kept). A peer that does not connect within
    :data:`CONNECT_TIMEOUT_S` is a :class:`CompatError` naming the channel."""
    host = os.environ.get("PADDLE_CURRENT_ENDPOINT", "127.0.0.1:0").rsplit(":", 1)[0] or "127.0.0.1"
    listening = {}
    for key, (s, r) in channels:   # every receiver listens and publishes before any rank connects
        if r == rank and key not in _OPEN:
            family = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0][0]   # IPv4 or IPv6, as the launch's
            srv = socket.socket(family, socket.SOCK_STREAM)
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)
            srv.bind((host, 0))
            srv.listen(1)
            srv.settimeout(CONNECT_TIMEOUT_S)
            listening[key] = (srv, s, r)
            store.set(f"pe_p2p_socket:{key}", f"{host}:{srv.getsockname()[1]}")
    made = []
    for key, (s, r) in channels:
        if s == rank and key not in _OPEN:
            peer_host, port = store.get(f"pe_p2p_socket:{key}").decode().rsplit(":", 1)
            sock = socket.create_connection((peer_host, int(port)), timeout=CONNECT_TIMEOUT_S)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER)
            _keep(key, sock, s, r)
            made.append(key)
    for key, (srv, s, r) in listening.items():
        try:
            sock, _ = srv.accept()
        except socket.timeout as exc:
            raise CompatError(f"p2p channel {key}: rank {s} did not connect within {CONNECT_TIMEOUT_S:.0f} s; "
                              f"every rank must run the same Engine set-up ({SWITCH}=0 uses gloo's channels)") from exc
        finally:
            srv.close()
        _keep(key, sock, s, r)
        made.append(key)
    return made
