"""Dygraph gloo groups that rendezvous on a TCPStore of their own (fix ``gloo-group-rendezvous``).

Paddle 3.3.1's ``ProcessGroupGloo.create`` connects the group's comm context on store keys
prefixed by the group id, then its constructor connects a second gloo context with
``connectFullMesh`` on the *un-prefixed* global TCPStore: member i writes its addresses under key
"i" and reads key "j" of every peer. Those keys outlive the group, and the store cannot delete
keys, so a later group of members 0..n-1 finds the previous group's values (on 4 ranks: the
world group of ``init_parallel_env``, then the group of the same four ranks that ``fleet.init``
builds in every ``dist.to_static``). A member that reads key "j" before member j has overwritten
it connects to an address whose listening socket closed once the old group connected:
"connect [127.0.0.1]:PORT: Connection refused", and a gloo TIMEOUT on the peers waiting for it.
Members leave the first (prefixed) rendezvous together, so whether one reads too early is down to
scheduling: 2 of 7 4-rank static launches failed so.

The fix gives each gloo group a TCPStore hosted by its rank 0 on a free port, published in the
global store under a key naming the group; no member can read what an earlier group wrote.
Applied by ``paddle_ext.install()`` (see docs/static_engine.md, "Gloo groups at start-up").

A store's server runs on a daemon thread that outlives the interpreter: it is still serving during
the C library's exit, after glog's globals are destroyed. Its read callback logs a peer's
disconnect through ``VLOG(5)``, whose call site initialises itself on first use under a glog mutex,
so a *first* disconnect that arrives while the host process exits aborts it (SIGABRT from
``google::InitVLOG3__`` in ``LibUVClient::readCallback``, seen on rank 0 after every rank had
returned its result, about 1 launch in 10 of the demo). :func:`_initialise_disconnect_logging`
connects to each store this module starts and hangs up, cleanly and by reset, while the process
is healthy, so both disconnect sites are initialised before anyone exits.
"""
from __future__ import annotations

import os
import socket
import struct
import time

from ...errors import CompatError
from ..version import require_paddle

GROUP_STORE_TIMEOUT = 900  # seconds, Paddle's TCPStore default
_GROUP_STORES: dict = {}  # (group name, id) -> its TCPStore; ProcessGroupGloo holds it as well


def group_store(store, group_id: int, group_name: str, rank: int, size: int):
    """A fresh TCPStore for one gloo group's rendezvous, hosted by its rank 0.

    Rank 0 starts the server on a free port and publishes ``host:port`` in ``store`` under a key
    naming the group; the other members connect to it. No key a previous group wrote can be read."""
    # stays here: `import paddle_ext` loads this module and imports no Paddle
    from paddle.base import core

    key = f"paddle_ext/gloo_group_store/{group_name}/{int(group_id)}/{int(size)}"
    if rank == 0:
        endpoint = os.environ.get("PADDLE_CURRENT_ENDPOINT", "")
        host = endpoint.rsplit(":", 1)[0] if ":" in endpoint else "127.0.0.1"
        errors = []
        own = None
        for _ in range(5):  # a port taken between probe and bind: try another
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.bind(("", 0))
                port = probe.getsockname()[1]
            try:
                own = core.TCPStore(host, port, True, 0, GROUP_STORE_TIMEOUT)
                break
            except Exception as exc:  # noqa: BLE001 - reported below with every port tried
                errors.append(f"port {port}: {exc}")
        if own is None:
            store.set(key, "error: " + "; ".join(errors))
            raise CompatError(f"gloo group {group_name} (id {group_id}): could not start its rendezvous store "
                              f"on {host}: {'; '.join(errors)}")
        _initialise_disconnect_logging(host, port)
        store.set(key, f"{host}:{port}")
    else:
        value = bytes(store.get(key)).decode()
        if value.startswith("error: "):
            raise CompatError(f"gloo group {group_name} (id {group_id}): its rank 0 could not start the "
                              f"rendezvous store ({value[7:]})")
        host, port = value.rsplit(":", 1)
        own = core.TCPStore(host, int(port), False, 0, GROUP_STORE_TIMEOUT)
    _GROUP_STORES[(group_name, int(group_id))] = own
    return own


def _initialise_disconnect_logging(host: str, port: int) -> None:
    """Hang up on the store at ``host:port`` twice, by FIN and by RST (the read callback's two
    disconnect branches), so its log sites are initialised now and not during exit (module doc).
    Best effort: a failed connection here changes nothing the rendezvous needs."""
    for reset in (False, True):
        try:
            with socket.create_connection((host, port), timeout=5) as conn:
                if reset:
                    time.sleep(0.05)  # let the server accept first, so the reset reaches a read
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass


def apply():
    # stays here: `import paddle_ext` loads this module and imports no Paddle
    from paddle.distributed import collective

    original = collective._new_process_group_impl

    def _new_process_group_impl(backend, store, rank, world_size, group_name, pg_options, group_id=0,
                                *args, **kwargs):
        if backend == "gloo" and world_size > 1:
            store = group_store(store, group_id, group_name, rank, world_size)
        return original(backend, store, rank, world_size, group_name, pg_options, group_id, *args, **kwargs)

    _new_process_group_impl.__wrapped__ = original
    collective._new_process_group_impl = _new_process_group_impl  # new_group looks it up here
    return [(collective, "_new_process_group_impl", original)]


def needed() -> bool:
    require_paddle("gloo process groups")
    # stays here: `import paddle_ext` loads this module and imports no Paddle
    from paddle.base import core

    return hasattr(core, "ProcessGroupGloo")
