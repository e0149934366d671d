"""Restart policy of ``treespec up``: backoff after crashes, crash-loop detection."""

from __future__ import annotations

import signal
import time

from treespec.supervisor import RestartPolicy, StopFlag


class TestRestartPolicy:
    def test_backoff_doubles_for_quick_failures(self):
        """A service that keeps dying right after start waits 0.5, 1, 2, ... s before each restart."""
        pol = RestartPolicy(max_crashes=10, window_s=1000)
        delays = [pol.on_exit("draft-0", started=t, now=t + 1) for t in (0, 10, 20, 30)]
        assert delays == [0.5, 1.0, 2.0, 4.0]

    def test_backoff_is_capped(self):
        """The delay never exceeds max_delay_s."""
        pol = RestartPolicy(max_crashes=100, window_s=1000, max_delay_s=3.0)
        delays = [pol.on_exit("v", started=t, now=t + 1) for t in range(10)]
        assert max(delays) == 3.0

    def test_stable_run_resets_backoff(self):
        """A service that ran stable_s seconds before dying restarts after the base delay again."""
        pol = RestartPolicy(max_crashes=10, window_s=10)
        pol.on_exit("s", 0, 1)
        pol.on_exit("s", 2, 3)
        assert pol.on_exit("s", 100, 200) == 0.5

    def test_crash_loop_gives_up(self):
        """max_crashes crashes inside window_s return None (give up); services are counted apart."""
        pol = RestartPolicy(max_crashes=3, window_s=60)
        assert pol.on_exit("draft-0", 0, 1) is not None
        assert pol.on_exit("draft-0", 2, 3) is not None
        assert pol.on_exit("verifier-0", 2, 3) is not None
        assert pol.on_exit("draft-0", 4, 5) is None
        assert pol.crashes("draft-0") == 3

    def test_old_crashes_leave_the_window(self):
        """Crashes older than window_s no longer count toward a crash loop."""
        pol = RestartPolicy(max_crashes=3, window_s=60)
        pol.on_exit("g", 0, 1)
        pol.on_exit("g", 2, 3)
        assert pol.on_exit("g", 200, 300) is not None
        assert pol.crashes("g") == 1


class TestStopFlag:
    def test_a_signal_handler_sets_it_while_the_main_thread_waits(self):
        """A SIGALRM handler calling set() during wait(10) ends the wait within a second (the handler takes
        no lock the interrupted wait could hold; threading.Event's does, and `treespec up` deadlocked)."""
        flag = StopFlag()
        previous = signal.signal(signal.SIGALRM, lambda *_: flag.set())
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            start = time.monotonic()
            assert flag.wait(10.0) is True
            assert time.monotonic() - start < 1.0
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def test_wait_times_out_unset(self):
        """Without set(), wait returns False after about its timeout."""
        flag = StopFlag(poll_s=0.01)
        start = time.monotonic()
        assert flag.wait(0.1) is False and not flag.is_set()
        assert 0.1 <= time.monotonic() - start < 1.0
