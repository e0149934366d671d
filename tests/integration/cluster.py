"""Helpers for tests with real service processes on loopback (tiny models)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from common import wire

BASE = {"main_model_path": "tiny-random:0", "draft_model_path": "tiny-random:1", "dtype": "float32",
        "tree_size": "4", "max_accept_length": "4", "max_model_len": "256", "max_running": "8",
        "heartbeat_interval_s": "0.25", "heartbeat_timeout_s": "1.5", "draft_vocab_size": "0"}
PROMPTS = [[1, 2, 3], [7, 8, 9, 10, 11, 12, 13], [42] * 11, [5, 100, 1000, 10000]]
MAX_TOKENS = [12, 20, 7, 16]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    """A scheduler plus workers; ``procs[name]`` are Popen objects in their own groups."""

    address: str
    log_dir: Path
    extra: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        cfg = dict(BASE, scheduler_address=self.address, log_dir=str(self.log_dir), **self.extra)
        env.update({f"TREESPEC_{k.upper()}": v for k, v in cfg.items()})
        return env

    def start(self, command: str, replica: str = "0") -> subprocess.Popen:
        argv = [sys.executable, "-m", "treespec.cli", command]
        if command != "scheduler":
            argv += ["--replica", replica]
        out = open(self.log_dir / f"{command}-{replica}.log", "ab")
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env(),
                                start_new_session=True)
        out.close()
        self.procs[f"{command}-{replica}"] = proc
        return proc

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(10)

    def stop(self) -> None:
        for name in list(self.procs):
            self.kill(name, signal.SIGTERM)

    def client(self, name: str = "test"):
        from services.scheduler.client import SchedulerClient
        return SchedulerClient(self.address, self.keys_dir(), name=name)

    def keys_dir(self) -> str:
        """The control-plane keys directory the services use ('' when plaintext)."""
        from common.config import load_config
        from common.control_keys import keys_dir
        return keys_dir(load_config(environ=self.env()))


def start_cluster(tmp: Path, drafts: int = 1, verifiers: int = 1, **extra: str) -> Cluster:
    cluster = Cluster(f"tcp://127.0.0.1:{free_port()}", tmp, extra)
    cluster.start("scheduler")
    for i in range(verifiers):
        cluster.start("verifier", str(i))
    for i in range(drafts):
        cluster.start("draft", str(i))
    return cluster


def wait_workers(client, drafts: int, verifiers: int, timeout_s: float = 90.0) -> wire.Stats:
    """Block until the scheduler sees the given numbers of draft and verifier workers."""
    def enough(st: wire.Stats) -> bool:
        roles = [w.role for w in st.workers]
        return st.ready and roles.count(wire.Role.DRAFT) >= drafts and roles.count(wire.Role.VERIFIER) >= verifiers
    return client.wait_stats(enough, timeout_s)


def submit_all(client, prefix: str) -> None:
    for i, (prompt, n) in enumerate(zip(PROMPTS, MAX_TOKENS)):
        client.submit(f"{prefix}{i}", prompt, wire.SamplingParams(max_tokens=n, ignore_eos=True))


def collect(client, prefix: str, timeout_s: float = 60.0) -> tuple[list[list[int]], list[wire.TokenDelta]]:
    """Output tokens and final deltas of the PROMPTS requests submitted under ``prefix``."""
    outs, finals = [], []
    for i in range(len(PROMPTS)):
        toks, last = [], None
        for last in client.stream(f"{prefix}{i}", timeout_s):
            toks += getattr(last, "tokens", [])
        outs.append(toks)
        finals.append(last)
    return outs, finals


def wait_until(pred, timeout_s: float, step_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step_s)
    return False


def reference_outputs() -> list[list[int]]:
    """Greedy outputs of PROMPTS from the in-process LocalEngine (the same tiny pair)."""
    from common.config import load_config
    from treespec.engine import build_local_engine
    cfg = load_config(overrides={k: v for k, v in BASE.items() if not k.startswith("heartbeat")})
    engine, _ = build_local_engine(cfg, slots=4, tree=(4, 4))
    outs = []
    for i, (prompt, n) in enumerate(zip(PROMPTS, MAX_TOKENS)):
        params = wire.SamplingParams(max_tokens=n, ignore_eos=True)
        outs.append([t for d in engine.generate(f"ref{i}", prompt, params) for t in d.tokens])
    return outs
