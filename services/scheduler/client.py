"""A small synchronous client of the scheduler (tests, CLI): submit prompt ids, read deltas.

Speaks the gateway's side of the protocol over a DEALER: Hello(role=gateway), Submit,
Abort, and receives TokenDelta / Rejected / Stats. Torch-free. Not thread-safe.
"""

from __future__ import annotations

import os
import time
from typing import Iterator

import zmq

from common import transport, wire

RECV_POLL_MS = 100
BEAT_S = 0.2  # longest gap between messages to the scheduler while waiting


class SchedulerClient:
    """One DEALER connection; remembers the latest Stats it received."""

    def __init__(self, address: str, curve_dir: str = "", name: str = "client",
                 ctx: zmq.Context | None = None, cert: str = transport.ADMIN_CERT) -> None:
        self.ctx = ctx or zmq.Context.instance()
        self.sock = transport.connect_dealer(self.ctx, address, curve_dir, cert)
        self.name = name
        self.stats: wire.Stats | None = None
        self.inbox: dict[str, list[wire.Message]] = {}
        self._beat_at = 0.0
        self.send(wire.Hello(role=wire.Role.GATEWAY, replica=name, pid=os.getpid()))

    def send(self, msg: wire.Message) -> None:
        self.sock.send(wire.encode(msg))
        self._beat_at = time.monotonic()

    def close(self) -> None:
        self.sock.close(linger=0)

    def poll(self, timeout_s: float) -> wire.Message | None:
        """Receive one message within ``timeout_s`` seconds (Stats are recorded) or None.
        Sends a heartbeat first when none went out for ``BEAT_S`` (the scheduler aborts
        the requests of a silent gateway)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if time.monotonic() - self._beat_at > BEAT_S:
                self.send(wire.Heartbeat(role=wire.Role.GATEWAY, replica=self.name))
            left = deadline - time.monotonic()
            if self.sock.poll(int(max(0.0, min(BEAT_S, left)) * 1000)):
                break
            if left <= BEAT_S:
                return None
        msg = wire.decode(self.sock.recv())
        if isinstance(msg, wire.Stats):
            self.stats = msg
        elif isinstance(msg, (wire.TokenDelta, wire.Rejected)):
            self.inbox.setdefault(msg.request_id, []).append(msg)
        return msg

    def wait_ready(self, timeout_s: float = 60.0) -> wire.Stats:
        """Block until Stats says ready; raises TimeoutError after ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.send(wire.Heartbeat(role=wire.Role.GATEWAY, replica=self.name))
            end = time.monotonic() + 1.0
            while time.monotonic() < end:
                self.poll(0.2)
                if self.stats is not None and self.stats.ready:
                    return self.stats
        raise TimeoutError(f"scheduler not ready after {timeout_s} s (last stats: {self.stats})")

    def wait_stats(self, predicate, timeout_s: float = 30.0) -> wire.Stats:
        """Block until a Stats satisfies ``predicate``; raises TimeoutError."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.send(wire.Heartbeat(role=wire.Role.GATEWAY, replica=self.name))
            msg = self.poll(0.5)
            if isinstance(msg, wire.Stats) and predicate(msg):
                return msg
        raise TimeoutError(f"stats condition not met after {timeout_s} s (last stats: {self.stats})")

    def submit(self, request_id: str, prompt: list[int], params: wire.SamplingParams) -> None:
        self.send(wire.Submit(request_id=request_id, prompt=list(prompt), params=params))

    def abort(self, request_id: str) -> None:
        self.send(wire.Abort(request_id=request_id))

    def stream(self, request_id: str, timeout_s: float = 60.0) -> Iterator[wire.TokenDelta | wire.Rejected]:
        """Yield the request's deltas until its last (finish set) or a Rejected.

        Raises TimeoutError when nothing arrives for ``timeout_s`` seconds.
        """
        while True:
            queued = self.inbox.get(request_id)
            if queued:
                msg = queued.pop(0)
                yield msg
                if isinstance(msg, wire.Rejected) or msg.finish is not None:
                    return
                continue
            if self.poll(timeout_s) is None:
                raise TimeoutError(f"no message for {request_id} in {timeout_s} s")

    def generate(self, request_id: str, prompt: list[int], params: wire.SamplingParams,
                 timeout_s: float = 60.0) -> tuple[list[int], wire.TokenDelta | wire.Rejected]:
        """Submit and collect: (output tokens, the final delta or Rejected)."""
        self.submit(request_id, prompt, params)
        tokens, last = [], None
        for last in self.stream(request_id, timeout_s):
            if isinstance(last, wire.TokenDelta):
                tokens += last.tokens
        return tokens, last
