"""The static Engine's point-to-point channels on sockets (``compat/ports/p2p_sockets.py`` and
``gloo_ops.cc``'s ``SocketChannel``), in one process: two ranks' set-up against one store, and
the send and receive ops on a connected pair."""
import os
import socket
import threading

import numpy as np
import paddle
import pytest

from paddle_ext.compat.ports import p2p_sockets
from paddle_ext.errors import CompatError


class DictStore:
    """The TCP store's ``set``/``get`` (``get`` waits for the key), in one process."""

    def __init__(self):
        self.data, self.cv = {}, threading.Condition()

    def set(self, key, value):
        with self.cv:
            self.data[key] = value.encode()
            self.cv.notify_all()

    def get(self, key):
        with self.cv:
            assert self.cv.wait_for(lambda: key in self.data, timeout=30), key
            return self.data[key]


@pytest.fixture
def clean(monkeypatch):
    monkeypatch.setattr(p2p_sockets, "_OPEN", {})
    for name in [n for n in os.environ if n.startswith("PADDLE_EXT_P2P_FD_")]:
        monkeypatch.delenv(name)
    yield
    for sock in p2p_sockets._OPEN.values():
        sock.close()


def test_two_ranks_connect_each_channel_once_and_name_its_descriptor(clean, monkeypatch):
    # both directions between ranks 3 and 5, set up by two "ranks" at once (each its own ends)
    channels = [("paddle_ext:p2p:3>5", (3, 5)), ("paddle_ext:p2p:5>3", (5, 3))]
    store, made = DictStore(), {}
    monkeypatch.setenv("PADDLE_CURRENT_ENDPOINT", "127.0.0.1:6170")
    threads = [threading.Thread(target=lambda r=r: made.__setitem__(r, p2p_sockets.connect(store, r, channels)))
               for r in (3, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # each rank holds both channels: one end it sends on, one it receives on (one dict in one process:
    # the later rank's ends overwrite the variables; the sockets are both kept)
    assert sorted(made[3]) == sorted(made[5]) == sorted(k for k, _ in channels)
    a = socket.socket(fileno=int(os.environ[p2p_sockets.fd_variable(3, 5)]))
    try:
        assert a.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        a.detach()
    assert p2p_sockets.connect(store, 3, channels) == []   # open already: kept


def test_a_peer_that_never_connects_is_named(clean, monkeypatch):
    monkeypatch.setattr(p2p_sockets, "CONNECT_TIMEOUT_S", 0.5)
    with pytest.raises(CompatError, match=r"p2p channel paddle_ext:p2p:1>0: rank 1 did not connect within"):
        p2p_sockets.connect(DictStore(), 0, [("paddle_ext:p2p:1>0", (1, 0))])


def test_switch(monkeypatch):
    monkeypatch.delenv(p2p_sockets.SWITCH, raising=False)
    assert p2p_sockets.enabled()
    monkeypatch.setenv(p2p_sockets.SWITCH, "0")
    assert not p2p_sockets.enabled()


def test_a_send_the_socket_cannot_take_returns_at_once_and_arrives_whole(clean, monkeypatch):
    """A 24 MB message into a socket whose buffers hold far less: the send op writes what fits
    and returns before anything is read (its channel's thread writes the rest); two messages
    behind it stay in order; the receive op reads each whole into its output."""
    from paddle_ext.compat.ports.static_collectives import load_gloo_ops

    ops = load_gloo_ops()
    a, b = socket.socketpair()
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 16)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    # this process sends on channel 7>8 (end a) and receives on 9>7 (end b): the pair's two ends
    monkeypatch.setenv(p2p_sockets.fd_variable(7, 8), str(a.fileno()))
    monkeypatch.setenv(p2p_sockets.fd_variable(9, 7), str(b.fileno()))
    big = paddle.arange(6 << 20, dtype="float32")
    small = [paddle.full([3, 5], float(i), dtype="float32") for i in (1, 2)]
    sent = threading.Event()

    def send_all():
        for x in [big, *small]:
            ops.pe_gloo_send(x, "paddle_ext:p2p:7>8", 1)
        sent.set()

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    try:
        # nothing has been read yet: a send that waited for its reader would never get here
        assert sent.wait(30), "a send waited for its receiver"
        got = [ops.pe_gloo_recv(paddle.empty_like(x), "paddle_ext:p2p:9>7", 0, []) for x in [big, *small]]
        for want, have in zip([big, *small], got):
            np.testing.assert_array_equal(have.numpy(), want.numpy())
    finally:
        a.close()
        b.close()
