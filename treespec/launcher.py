"""``treespec up``: start scheduler, verifier(s), draft(s) and the gateway on this machine.

Each service runs as ``python -m treespec.cli <service>`` in its own process group, with
the launcher's resolved configuration passed as ``TREESPEC_*`` environment variables and
its JSON log written to ``<log_dir>/<service>-<replica>.log``. The launcher waits until
the scheduler reports ready; a service that exits before that aborts the start with its
last log line as the reason (exit 1). Once ready, a service that dies is restarted with
backoff while the others keep serving (``supervisor.RestartPolicy``); a crash loop stops
the deployment (exit 1) naming the service and its last log line. SIGINT / SIGTERM stop
every process group.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common.cli_args import add_config_args, config_or_report
from common.config import AUTO, Config, env_var
from common.control_keys import ensure_curve_keys, keys_dir
from treespec.supervisor import RestartPolicy, StopFlag

READY_TIMEOUT_S = 600.0  # loading real models can take minutes; a crash is reported at once
STOP_GRACE_S = 10.0  # SIGTERM -> SIGKILL
POLL_S = 0.5
GATEWAY_MAIN = Path(__file__).resolve().parent.parent / "services" / "gateway" / "main.py"


@dataclass
class Service:
    name: str  # e.g. "draft-1"
    proc: subprocess.Popen
    log_path: Path
    command: str = ""
    replica: str = "0"
    started: float = 0.0  # time.monotonic() of the (re)start

    def last_line(self) -> str:
        """The last non-empty line of the service's log ('' when none)."""
        try:
            lines = [ln for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return lines[-1][-500:] if lines else ""


def configure(parser) -> None:
    add_config_args(parser)


def child_env(cfg: Config) -> dict[str, str]:
    """This environment plus one TREESPEC_<KEY> per config key (the resolved config)."""
    env = dict(os.environ)
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        env[env_var(f.name)] = ",".join(value) if isinstance(value, tuple) else str(value)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def start(cfg: Config, command: str, replica: str, env: dict[str, str]) -> Service:
    """Start one service in a new process group; raises OSError when it cannot be spawned.

    With ``metrics_port`` set, the n-th service of ``plan(cfg)`` serves its probes on
    ``metrics_port + n`` (the processes share this host's ports).
    """
    if cfg.metrics_port:
        env = {**env, env_var("metrics_port"): str(cfg.metrics_port + plan(cfg).index((command, replica)))}
    log_path = Path(cfg.log_dir) / f"{command}-{replica}.log"
    argv = [sys.executable, "-m", "treespec.cli", command, "--replica", replica]
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return Service(f"{command}-{replica}", proc, log_path, command, replica, time.monotonic())


def plan(cfg: Config) -> list[tuple[str, str]]:
    """(command, replica) of every service to start, scheduler first."""
    services = [("scheduler", "0")]
    services += [("verifier", str(i)) for i in range(cfg.verifier_replicas)]
    if cfg.tree_size != 0:
        services += [("draft", str(i)) for i in range(cfg.draft_replicas)]
    if GATEWAY_MAIN.exists():
        services.append(("gateway", "0"))
    return services


def stop_all(services: list[Service]) -> None:
    """SIGTERM every process group, then SIGKILL what is left after STOP_GRACE_S."""
    for s in services:
        _signal_group(s.proc, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for s in services:
        try:
            s.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(s.proc, signal.SIGKILL)
            s.proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def first_dead(services: list[Service]) -> Service | None:
    return next((s for s in services if s.proc.poll() is not None), None)


def verifiers_joined(cfg: Config):
    """Stats predicate: every verifier has said hello (it has loaded, warmed up and timed
    its cost curve)."""
    from common import wire
    return lambda st: sum(w.role == wire.Role.VERIFIER for w in st.workers) >= cfg.verifier_replicas


def wait_ready(cfg: Config, services: list[Service], stop: StopFlag, until=None) -> str | None:
    """Block until the scheduler reports ready (or Stats satisfy ``until``); returns None,
    or why not (a service died, timeout, interrupted)."""
    from services.scheduler.client import SchedulerClient
    client = SchedulerClient(cfg.scheduler_address, keys_dir(cfg), name="launcher")
    deadline = time.monotonic() + READY_TIMEOUT_S
    try:
        while time.monotonic() < deadline and not stop.is_set():
            dead = first_dead(services)
            if dead is not None:
                return f"{dead.name} exited with status {dead.proc.returncode}: {dead.last_line()}"
            try:
                client.wait_stats(until, POLL_S * 2) if until else client.wait_ready(POLL_S * 2)
                return None
            except TimeoutError:
                continue
        return "interrupted" if stop.is_set() else f"not ready after {READY_TIMEOUT_S} s"
    finally:
        client.close()


def run(args) -> int:
    """Start everything, wait for ready, serve until a signal or a service dies."""
    cfg = config_or_report(args, "up")
    if cfg is None:
        return 2
    stop = StopFlag()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if keys_dir(cfg):
        ensure_curve_keys(keys_dir(cfg))
    else:
        print("treespec up: WARNING: insecure_control_plane = true: the control plane is plaintext and "
              "trusts any peer that can reach the scheduler port", file=sys.stderr, flush=True)
    Path(cfg.log_dir).mkdir(parents=True, exist_ok=True)
    env = child_env(cfg)
    services = [start(cfg, cmd, rep, env) for cmd, rep in plan(cfg) if cmd != "draft"]
    try:
        # Draft workers start once the verifiers are up: each worker times its forward
        # passes at start (tree_size auto), and on a shared CPU concurrent timing is wrong.
        why = wait_ready(cfg, services, stop, verifiers_joined(cfg)) if cfg.tree_size == AUTO else None
        if why is not None:
            print(f"treespec up: failed to start: {why} (logs in {cfg.log_dir}/)", file=sys.stderr)
            return 0 if why == "interrupted" else 1
        services += [start(cfg, cmd, rep, env) for cmd, rep in plan(cfg) if cmd == "draft"]
        return _supervise(cfg, services, stop, env)
    finally:
        if stop.is_set():
            print("treespec up: stopping every service", flush=True)
        stop_all(services)
        if stop.is_set():
            print("treespec up: stopped", flush=True)


def _supervise(cfg: Config, services: list[Service], stop: StopFlag, env: dict[str, str]) -> int:
    """Wait for ready, then restart dead services until a signal (0) or a crash loop (1)."""
    why = wait_ready(cfg, services, stop)
    if why is not None:
        print(f"treespec up: failed to start: {why} (logs in {cfg.log_dir}/)", file=sys.stderr)
        return 0 if why == "interrupted" else 1
    print(f"treespec up: ready (scheduler {cfg.scheduler_address}; http port {cfg.port}; "
          f"logs in {cfg.log_dir}/)", flush=True)
    policy = RestartPolicy()
    due: dict[str, float] = {}  # service name -> monotonic time of its restart
    while not stop.wait(POLL_S):
        if not _restart_dead(cfg, services, policy, due, env):
            return 1
    return 0


def _restart_dead(cfg: Config, services: list[Service], policy: RestartPolicy, due: dict[str, float],
                  env: dict[str, str]) -> bool:
    """One supervision pass: schedule a restart for each newly dead service, restart those
    whose delay is over (in place in ``services``). False when one is in a crash loop."""
    now = time.monotonic()
    for i, s in enumerate(services):
        if s.proc.poll() is None:
            continue
        if s.name not in due:
            delay = policy.on_exit(s.name, s.started, now)
            if delay is None:
                print(f"treespec up: giving up on {s.name}: it crashed {policy.crashes(s.name)} times within "
                      f"{policy.window_s:.0f} s (last status {s.proc.returncode}); its last log line: "
                      f"{s.last_line()}", file=sys.stderr, flush=True)
                return False
            print(f"treespec up: {s.name} exited with status {s.proc.returncode}; restarting in {delay:.1f} s "
                  f"(last log line: {s.last_line()})", file=sys.stderr, flush=True)
            due[s.name] = now + delay
        elif now >= due[s.name]:
            del due[s.name]
            services[i] = start(cfg, s.command, s.replica, env)
            print(f"treespec up: restarted {s.name} (pid {services[i].proc.pid})", file=sys.stderr, flush=True)
    return True
