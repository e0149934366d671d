"""ZeroMQ socket helpers shared by every service (sync and asyncio). Torch-free.

Topology: the scheduler binds one ROUTER; gateways and workers connect DEALERs. One
message = one frame holding ``wire.encode(msg)``; a ROUTER additionally sees/prepends the
peer's identity frame. With a keys directory (``control_keys.keys_dir(cfg)``; every
deployment has one unless ``insecure_control_plane = true``), every socket uses CURVE
encryption, each peer connects with the key pair of its role, and the scheduler accepts
only the keys under ``<dir>/authorized/`` and learns each peer's role (see control_keys.py).
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Callable

import zmq
import zmq.asyncio
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from common import wire
from common.control_keys import (AUTHORIZED, SECRET_MODE, SERVER_CERT, RoleAuthenticator,  # noqa: F401
                                 ensure_curve_keys, usable_keys)

LINGER_MS = 0  # close without waiting for unsent frames
HWM = 10000  # frames queued per peer before zmq drops / blocks
POLL_MS = 50  # I/O thread poll granularity (ms): bounds tick latency and shutdown time
DRAIN_MAX = 256  # messages moved per poll wake-up
ADMIN_CERT = "admin"  # the key of CLI tools and tests (may do what a gateway does)


def _load(curve_dir: str, name: str) -> tuple[bytes, bytes | None]:
    """(public, secret) of certificate ``name``; raises OSError/ValueError when unreadable."""
    base = Path(curve_dir) / name
    path = base.with_suffix(".key_secret")
    return zmq.auth.load_certificate(str(path if path.exists() else base.with_suffix(".key")))


def _secure_server(ctx: zmq.Context, sock: zmq.Socket, curve_dir: str) -> ThreadAuthenticator:
    usable_keys(curve_dir, "scheduler")
    auth = RoleAuthenticator(ctx, curve_dir)
    auth.start()
    auth.configure_curve(domain="*", location=str(Path(curve_dir) / AUTHORIZED))
    pub, sec = _load(curve_dir, SERVER_CERT)
    sock.curve_publickey, sock.curve_secretkey, sock.curve_server = pub, sec, True
    return auth


def _secure_client(sock: zmq.Socket, curve_dir: str, cert: str) -> None:
    usable_keys(curve_dir, cert)  # services started by hand on one machine share the default dir
    pub, sec = _load(curve_dir, cert)
    server_pub, _ = _load(curve_dir, SERVER_CERT)
    sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = pub, sec, server_pub


def _tune(sock: zmq.Socket) -> None:
    sock.linger = LINGER_MS
    sock.sndhwm = sock.rcvhwm = HWM
    sock.maxmsgsize = wire.MAX_FRAME_BYTES  # oversized frames are refused by libzmq itself


def bind_router(ctx: zmq.Context, address: str, curve_dir: str = "") -> tuple[zmq.Socket, ThreadAuthenticator | None]:
    """A ROUTER bound to ``address`` (CURVE server when ``curve_dir``); returns (socket,
    authenticator or None; stop it after closing the socket). Raises zmq.ZMQError when
    the address is in use or invalid."""
    sock = ctx.socket(zmq.ROUTER)
    _tune(sock)
    auth = _secure_server(ctx, sock, curve_dir) if curve_dir else None
    sock.bind(address)
    return sock, auth


def connect_dealer(ctx: zmq.Context, address: str, curve_dir: str = "", cert: str = ADMIN_CERT) -> zmq.Socket:
    """A DEALER connected to ``address`` (CURVE client when ``curve_dir``, with the key pair
    ``cert``: the peer's role). Works with a ``zmq.asyncio.Context`` too, returning an
    asyncio socket."""
    sock = ctx.socket(zmq.DEALER)
    _tune(sock)
    if curve_dir:
        _secure_client(sock, curve_dir, cert)
    sock.connect(address)
    return sock


def async_dealer(ctx: zmq.asyncio.Context, address: str, curve_dir: str = "",
                 cert: str = "gateway") -> zmq.asyncio.Socket:
    """An asyncio DEALER (for the gateway); see :func:`connect_dealer`."""
    return connect_dealer(ctx, address, curve_dir, cert)


def frame(msg: wire.Message) -> bytes:
    """One message -> its single wire frame."""
    return wire.encode(msg)


async def async_send(sock: zmq.asyncio.Socket, msg: wire.Message) -> None:
    """Send one message on an asyncio DEALER."""
    await sock.send(wire.encode(msg))


async def async_recv(sock: zmq.asyncio.Socket) -> wire.Message:
    """Receive one message on an asyncio DEALER; raises wire.WireError when malformed."""
    frames = await sock.recv_multipart()
    if len(frames) != 1:
        raise wire.WireError(f"expected 1 frame, got {len(frames)}")
    return wire.decode(frames[0])


def split_router(frames: list[bytes]) -> tuple[bytes, wire.Message]:
    """ROUTER frames ``[identity, payload]`` -> (identity, message); raises WireError."""
    if len(frames) != 2:
        raise wire.WireError(f"expected identity + 1 frame, got {len(frames)} frames")
    return frames[0], wire.decode(frames[1])


def _user_id(f: zmq.Frame) -> bytes:
    """The ZAP User-Id of a received frame (b"" when the socket has no authentication)."""
    try:
        return (f.get("User-Id") or "").encode()
    except zmq.ZMQError:
        return b""


class SocketPump:
    """Owns one socket in a background I/O thread, so that the caller's synchronous loop
    never touches it: received frame lists land in ``inbox`` (a queue.Queue); ``send``
    hands frames to the thread through an inproc pipe. ``send`` must be called from one
    thread only (the loop). ``on_tick`` (called every ``tick_s`` seconds in the I/O
    thread) may return frame lists to send, e.g. heartbeats while the loop computes.
    ``user_ids``: append to each received frame list one more frame, the ZAP User-Id of
    the sender (its role under CURVE, see control_keys.py; b"" without authentication).
    """

    def __init__(self, ctx: zmq.Context, sock: zmq.Socket, on_tick: Callable[[], list[list[bytes]]] | None = None,
                 tick_s: float = 1.0, user_ids: bool = False) -> None:
        self.inbox: queue.Queue[list[bytes]] = queue.Queue()
        self._sock, self._on_tick, self._tick_s, self._user_ids = sock, on_tick, tick_s, user_ids
        addr = f"inproc://pump-{id(self)}"
        self._rx = ctx.socket(zmq.PAIR)
        self._rx.bind(addr)
        self._tx = ctx.socket(zmq.PAIR)
        self._tx.connect(addr)
        self._rx.linger = self._tx.linger = LINGER_MS
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zmq-io", daemon=True)
        self._thread.start()

    def send(self, frames: list[bytes]) -> None:
        """Queue ``frames`` (one multipart message) for the socket."""
        self._tx.send_multipart(frames)

    def alive(self) -> bool:
        """True while the I/O thread runs (a liveness probe's answer)."""
        return self._thread.is_alive()

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._rx, zmq.POLLIN)
        next_tick = 0.0
        while not self._stop.is_set():
            events = dict(poller.poll(POLL_MS))
            if self._sock in events:
                self._drain(self._sock, self.inbox.put, self._user_ids)
            if self._rx in events:
                self._drain(self._rx, self._sock.send_multipart)
            if self._on_tick is not None:
                next_tick = self._tick(next_tick)

    @staticmethod
    def _drain(src: zmq.Socket, sink: Callable[[list[bytes]], None], user_ids: bool = False) -> None:
        """Move every multipart message ready on ``src`` to ``sink`` (bounded batch)."""
        for _ in range(DRAIN_MAX):
            try:
                if not user_ids:
                    sink(src.recv_multipart(zmq.NOBLOCK))
                    continue
                frames = src.recv_multipart(zmq.NOBLOCK, copy=False)
                sink([f.bytes for f in frames] + [_user_id(frames[-1])])
            except zmq.Again:
                return

    def _tick(self, next_tick: float) -> float:
        now = time.monotonic()
        if now < next_tick:
            return next_tick
        for frames in self._on_tick():
            self._sock.send_multipart(frames)
        return now + self._tick_s

    def close(self) -> None:
        """Stop the thread and close the sockets (the pump's and the caller's)."""
        self._stop.set()
        self._thread.join(timeout=2.0)
        for s in (self._tx, self._rx, self._sock):
            s.close(linger=LINGER_MS)
