"""The workers' OpenMP wait policy: a shorter spin by default, the user's own setting kept."""

from __future__ import annotations

import subprocess
import sys

from common.openmp_env import WORKER_SPIN_COUNT, set_worker_wait_policy, wait_policy


def test_sets_the_worker_spin_count_when_nothing_is_set():
    """With neither variable set, GOMP_SPINCOUNT becomes the worker default and is reported."""
    env: dict[str, str] = {"PATH": "/bin"}
    assert set_worker_wait_policy(env) == WORKER_SPIN_COUNT
    assert env["GOMP_SPINCOUNT"] == WORKER_SPIN_COUNT
    assert wait_policy(env) == {"GOMP_SPINCOUNT": WORKER_SPIN_COUNT}


def test_keeps_a_spin_count_the_user_set():
    """A GOMP_SPINCOUNT from the user is left exactly as it was."""
    env = {"GOMP_SPINCOUNT": "300000"}
    assert set_worker_wait_policy(env) is None
    assert env == {"GOMP_SPINCOUNT": "300000"}


def test_keeps_an_omp_wait_policy_the_user_set():
    """OMP_WAIT_POLICY from the user means no GOMP_SPINCOUNT is added (it would override it)."""
    env = {"OMP_WAIT_POLICY": "PASSIVE"}
    assert set_worker_wait_policy(env) is None
    assert "GOMP_SPINCOUNT" not in env
    assert wait_policy(env) == {"OMP_WAIT_POLICY": "PASSIVE"}


def test_empty_values_count_as_unset():
    """An empty variable (e.g. Compose passing an unset key through) gets the default."""
    env = {"GOMP_SPINCOUNT": "", "OMP_WAIT_POLICY": ""}
    assert set_worker_wait_policy(env) == WORKER_SPIN_COUNT
    assert wait_policy(env) == {"GOMP_SPINCOUNT": WORKER_SPIN_COUNT}


def test_the_cli_sets_it_for_workers_before_torch_loads():
    """`treespec draft|verifier` set the spin count before torch (and libgomp) is imported; other
    commands (the in-process engine) keep libgomp's default."""
    probe = ("import os, sys; from treespec import cli; import common.openmp_env as m; seen = {}\n"
             "orig = m.set_worker_wait_policy\n"
             "def spy(*a): seen['torch'] = 'torch' in sys.modules; return orig(*a)\n"
             "m.set_worker_wait_policy = spy\n"
             "try: cli.main([sys.argv[1], '--help'])\n"
             "except SystemExit: pass\n"
             "print(os.environ.get('GOMP_SPINCOUNT'), seen.get('torch'))\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    for command, expected in (("draft", f"{WORKER_SPIN_COUNT} False"), ("verifier", f"{WORKER_SPIN_COUNT} False"),
                              ("generate", "None None")):
        out = subprocess.run([sys.executable, "-c", probe, command], capture_output=True, text=True, env=env,
                             timeout=120, check=True).stdout
        assert out.strip().splitlines()[-1] == expected, command
