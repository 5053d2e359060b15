"""The gloo-group store fix hangs up on each store it starts, once cleanly and once by reset, so
the server's two disconnect log sites are initialised while the process is healthy (a first
disconnect during interpreter exit aborts a Paddle 3.3.1 process: paddle_ext/compat/fixes/gloo_groups.py).
Here a plain socket server stands in for the store and records what each connection ended with."""
import socket
import threading

from paddle_ext.compat.fixes.gloo_groups import _initialise_disconnect_logging


def _serve(server: socket.socket, endings: list) -> None:
    for _ in range(2):
        conn, _ = server.accept()
        with conn:
            try:
                endings.append("eof" if conn.recv(16) == b"" else "data")
            except ConnectionResetError:
                endings.append("reset")


def test_hangs_up_once_cleanly_and_once_by_reset():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        endings: list = []
        thread = threading.Thread(target=_serve, args=(server, endings), daemon=True)
        thread.start()
        _initialise_disconnect_logging("127.0.0.1", server.getsockname()[1])
        thread.join(timeout=10)
    assert endings == ["eof", "reset"]


def test_a_store_that_is_gone_is_no_error():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    _initialise_disconnect_logging("127.0.0.1", port)  # best effort: returns quietly
