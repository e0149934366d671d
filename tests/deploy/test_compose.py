"""compose.yaml: valid Compose Specification, scalable, GPU-reserving, health-gated."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from common.config import config_keys
from treespec.cli import COMMANDS

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "compose.yaml"
SPEC = REPO / "tests" / "data" / "compose_spec" / "compose-spec.json"  # vendored, see SOURCE.txt
SPEC_COMPOSE_GO = SPEC.with_name("compose-spec.compose-go.json")
SCALABLE = ("draft", "verifier")
WORKERS = ("scheduler", "gateway", "draft", "verifier")
_VAR = re.compile(r"\$(?:\$|\{(\w+)(?::?-([^}]*))?\}|(\w+))")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's variable substitution: ${VAR}, ${VAR:-default}, ${VAR-default}, $VAR, $$."""
    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(3)
        default = m.group(2)
        value = env.get(name)
        return value if value not in (None, "") else (default or "")
    return _VAR.sub(sub, text)


def load(env: dict[str, str] | None = None) -> dict:
    """compose.yaml after interpolation with ``env`` (default: nothing set)."""
    return yaml.safe_load(interpolate(COMPOSE.read_text(), env or {}))


@pytest.fixture(scope="module")
def compose() -> dict:
    return load()


def treespec_invocations(command: list[str] | str) -> list[list[str]]:
    """Every ``treespec ...`` command line in a service command (list or ``sh -c`` script)."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if argv[:1] == ["sh"] and len(argv) >= 3 and argv[1].startswith("-") and "c" in argv[1]:
        return [shlex.split(line) for line in argv[2].splitlines() if line.strip().startswith("treespec ")]
    return [argv] if argv[:1] == ["treespec"] else []


class TestSchema:
    def test_valid_against_compose_spec(self, compose):
        """compose.yaml validates against the Compose Specification schema (draft 7)."""
        schema = json.loads(SPEC.read_text())
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose), key=str)
        assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)

    def test_valid_against_compose_go_schema(self, compose):
        """It also validates against compose-go's newer schema (2020-12)."""
        schema = json.loads(SPEC_COMPOSE_GO.read_text())
        errors = list(jsonschema.validators.validator_for(schema)(schema).iter_errors(compose))
        assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)

    def test_valid_with_tensor_parallel(self):
        """With TENSOR_PARALLEL_SIZE=2 the verifier reserves 2 GPUs and runs 2 ranks."""
        doc = load({"TENSOR_PARALLEL_SIZE": "2"})
        jsonschema.Draft7Validator(json.loads(SPEC.read_text())).validate(doc)
        verifier = doc["services"]["verifier"]
        assert verifier["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 2
        assert str(verifier["environment"]["TREESPEC_TENSOR_PARALLEL_SIZE"]) == "2"

    def test_interpolate_rules(self):
        """The test's interpolation follows Compose: defaults on unset/empty, $$ escapes."""
        assert interpolate("${A:-x} ${B-y} $$C ${D}", {"A": "", "D": "d"}) == "x y $C d"


class TestServices:
    def test_services_present(self, compose):
        """The four services plus the one-shot models job and the monitoring pair exist."""
        assert {"gateway", "scheduler", "draft", "verifier", "models", "prometheus", "grafana"} <= set(
            compose["services"])

    def test_commands_are_treespec_subcommands(self, compose):
        """Every treespec invocation names a subcommand registered in treespec/cli.py."""
        for name in (*WORKERS, "models"):
            calls = treespec_invocations(compose["services"][name]["command"])
            assert calls, f"{name} does not run treespec"
            for argv in calls:
                assert argv[1] in COMMANDS, f"{name}: unknown subcommand {argv[1]!r}"
        for name in WORKERS:
            assert compose["services"][name]["command"][1] == name

    def test_models_job_fetches_into_volume(self, compose):
        """The models job fetches and verifies into /data/models on the `models` volume."""
        models = compose["services"]["models"]
        calls = treespec_invocations(models["command"])
        assert ["treespec", "models", "fetch", "--cache-dir", "/data/models"] in calls
        assert ["treespec", "models", "verify", "--cache-dir", "/data/models"] in calls
        assert "models:/data/models" in models["volumes"]
        assert models["restart"] == "no"
        assert "models" in compose["volumes"]

    @pytest.mark.parametrize("name", SCALABLE)
    def test_scalable_services(self, compose, name):
        """Scalable services have no container_name and publish no host port."""
        svc = compose["services"][name]
        assert "container_name" not in svc
        assert "ports" not in svc

    def test_gateway_publishes_8000(self, compose):
        """The gateway publishes container port 8000 (host port overridable)."""
        assert compose["services"]["gateway"]["ports"] == ["8000:8000"]
        assert load({"TREESPEC_GATEWAY_PORT": "9000"})["services"]["gateway"]["ports"] == ["9000:8000"]

    def test_scheduler_binds_everyone_connects(self, compose):
        """The scheduler binds 0.0.0.0:5710; all services connect to scheduler:5710."""
        services = compose["services"]
        assert services["scheduler"]["environment"]["TREESPEC_SCHEDULER_BIND"] == "tcp://0.0.0.0:5710"
        for name in WORKERS:
            assert services[name]["environment"]["TREESPEC_SCHEDULER_ADDRESS"] == "tcp://scheduler:5710"

    def test_environment_names_are_config_keys(self, compose):
        """Every TREESPEC_* variable set or passed through is a key of common/config.py."""
        known = {env for _, _, env in config_keys()} | {"TREESPEC_MODEL_CACHE"}
        for name in WORKERS:
            env = compose["services"][name]["environment"]
            unknown = {k for k in env if k.startswith("TREESPEC_")} - known
            assert not unknown, f"{name}: {sorted(unknown)} are not config keys"

    def test_model_cache_matches_fetch(self, compose):
        """Workers resolve packaged model names in the directory `models fetch` fills."""
        for name in ("gateway", "draft", "verifier"):
            svc = compose["services"][name]
            assert svc["environment"]["TREESPEC_MODEL_CACHE"] == "/data/models"
            assert any(v.startswith("models:/data/models") for v in svc["volumes"])

    @pytest.mark.parametrize("name,count", [("verifier", 1), ("draft", 1)])
    def test_gpu_reservations(self, compose, name, count):
        """Draft and verifier reserve NVIDIA GPUs (verifier: TENSOR_PARALLEL_SIZE, default 1)."""
        (device,) = compose["services"][name]["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia"
        assert device["capabilities"] == ["gpu"]
        assert int(device["count"]) == count

    def test_healthchecks(self, compose):
        """Gateway checks /health over HTTP; the scheduler checks its socket."""
        gateway = compose["services"]["gateway"]["healthcheck"]["test"]
        assert "/health" in " ".join(gateway) and ":8000" in " ".join(gateway)
        assert "5710" in " ".join(compose["services"]["scheduler"]["healthcheck"]["test"])

    def test_depends_on_conditions(self, compose):
        """Workers wait for the models job to succeed and for a healthy scheduler."""
        services = compose["services"]
        for name in ("draft", "verifier", "gateway"):
            deps = services[name]["depends_on"]
            assert deps["models"]["condition"] == "service_completed_successfully"
            assert deps["scheduler"]["condition"] == "service_healthy"

    def test_restart_and_grace(self, compose):
        """Long-running services restart and get a grace period to drain on SIGTERM."""
        for name in WORKERS:
            svc = compose["services"][name]
            assert svc["restart"] == "unless-stopped"
            assert svc["stop_grace_period"].endswith("s")

    def test_config_file_mounted(self, compose):
        """The optional TOML file is mounted where the commands' --config points."""
        assert (REPO / compose["configs"]["treespec-toml"]["file"]).exists()
        for name in WORKERS:
            svc = compose["services"][name]
            assert svc["configs"][0]["target"] == "/etc/treespec/treespec.toml"
            assert svc["command"][-2:] == ["--config", "/etc/treespec/treespec.toml"]

    def test_monitoring_profile(self, compose):
        """Prometheus and Grafana start only with --profile monitoring; their files exist."""
        for name in ("prometheus", "grafana"):
            svc = compose["services"][name]
            assert svc["profiles"] == ["monitoring"]
            for volume in svc["volumes"]:
                source = volume.split(":")[0]
                if source.startswith("./"):
                    assert (REPO / source).exists(), volume


class TestImages:
    def test_dockerfiles_run_as_non_root(self):
        """Both images switch to an unprivileged user."""
        for name in ("Dockerfile.slim", "Dockerfile.gpu"):
            text = (REPO / "docker" / name).read_text()
            assert re.search(r"^USER treespec$", text, re.M), name

    def test_slim_requirements_have_no_torch(self):
        """The slim image's requirement list drops torch and everything that pulls it in."""
        out = subprocess.run(["python", str(REPO / "docker" / "requirements.py"), "--slim"],
                             capture_output=True, text=True, check=True).stdout.split()
        names = {re.split(r"[<>=\[]", r)[0].lower() for r in out}
        assert not names & {"torch", "triton", "transformers", "accelerate"}
        assert {"pyzmq", "aiohttp", "structlog", "tokenizers"} <= names

    def test_dockerignore_keeps_context_small(self):
        """The build context leaves out the venv, git history and model files."""
        ignored = (REPO / ".dockerignore").read_text().split()
        assert {".git", ".venv", "*.gguf"} <= set(ignored)


def _compose_v2() -> list[str] | None:
    """A Compose v2 command (`docker compose` plugin or docker-compose >= 2), if installed."""
    for cmd in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(cmd[0]) is None:
            continue
        out = subprocess.run([*cmd, "version", "--short"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip().lstrip("v").startswith("2"):
            return cmd
    return None


@pytest.mark.skipif(_compose_v2() is None, reason="no Docker Compose v2 binary installed "
                    "(no PyPI or Debian bookworm package ships one; schema validation above covers the file)")
def test_docker_compose_config():
    """`docker compose config` (no engine needed) accepts the file, with scaling."""
    cmd = _compose_v2()
    env = {**os.environ, "TENSOR_PARALLEL_SIZE": "2"}
    out = subprocess.run([*cmd, "-f", str(COMPOSE), "--profile", "monitoring", "config", "--quiet"],
                         capture_output=True, text=True, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr
