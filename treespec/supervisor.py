"""Restart policy of ``treespec up``: backoff after a crash, give up on a crash loop; its stop flag.

A service that exits after the deployment became ready is restarted after a delay that
doubles with each quick failure (``BASE_DELAY_S`` .. ``MAX_DELAY_S``); one that ran for
``STABLE_S`` seconds before dying starts again from the base delay. A service that dies
``MAX_CRASHES`` times within ``WINDOW_S`` seconds is in a crash loop: the launcher gives up
(stops the deployment, exit 1) and names the service and its last log line. This is the
policy of systemd's ``Restart=on-failure`` with ``StartLimitBurst`` / ``StartLimitIntervalSec``.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

BASE_DELAY_S = 0.5
MAX_DELAY_S = 10.0
STABLE_S = 30.0  # a service that ran this long before dying resets its backoff
MAX_CRASHES = 5  # crashes within WINDOW_S that count as a crash loop
WINDOW_S = 120.0


@dataclass
class RestartPolicy:
    """Per-service restart bookkeeping; times are ``time.monotonic()`` seconds."""

    base_delay_s: float = BASE_DELAY_S
    max_delay_s: float = MAX_DELAY_S
    stable_s: float = STABLE_S
    max_crashes: int = MAX_CRASHES
    window_s: float = WINDOW_S
    _crashes: dict[str, deque] = field(default_factory=dict)
    _streak: dict[str, int] = field(default_factory=dict)

    def on_exit(self, name: str, started: float, now: float) -> float | None:
        """Record that ``name`` (started at ``started``) exited at ``now``; returns the
        delay in seconds before restarting it, or None when it is in a crash loop."""
        crashes = self._crashes.setdefault(name, deque())
        crashes.append(now)
        while crashes and now - crashes[0] > self.window_s:
            crashes.popleft()
        if len(crashes) >= self.max_crashes:
            return None
        streak = 0 if now - started >= self.stable_s else self._streak.get(name, 0)
        self._streak[name] = streak + 1
        return min(self.max_delay_s, self.base_delay_s * 2 ** streak)

    def crashes(self, name: str) -> int:
        """Crashes of ``name`` inside the current window."""
        return len(self._crashes.get(name, ()))


class StopFlag:
    """Set by a SIGINT / SIGTERM handler, polled by the launcher's main thread. A plain attribute,
    no lock: ``threading.Event.set`` takes the condition lock that the interrupted main thread may
    hold inside ``Event.wait``, and ``treespec up`` deadlocked on SIGTERM that way (CI, 2026-12-05)."""

    def __init__(self, poll_s: float = 0.05) -> None:
        self.poll_s = poll_s  # s between checks while waiting
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout_s: float) -> bool:
        """Sleep until set or ``timeout_s`` seconds have passed; whether it is set."""
        deadline = time.monotonic() + timeout_s
        while not self._set and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, self.poll_s))
        return self._set
