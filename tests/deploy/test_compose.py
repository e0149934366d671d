"""compose*.yaml: valid Compose Specification, scalable, GPU-reserving, health-gated, safe defaults."""

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
CPU_OVERRIDE = REPO / "compose.cpu.yaml"
MONITORING = REPO / "compose.monitoring.yaml"
SPEC = REPO / "tests" / "data" / "compose_spec" / "compose-spec.json"  # vendored, see SOURCE.txt
SPEC_COMPOSE_GO = SPEC.with_name("compose-spec.compose-go.json")
SCALABLE = ("draft", "verifier")
WORKERS = ("scheduler", "gateway", "draft", "verifier")
_VAR = re.compile(r"\$(?:\$|\{(\w+)(?:(:?-|:\?)([^}]*))?\}|(\w+))")


class MissingVariable(ValueError):
    """A ``${VAR:?message}`` whose variable is unset or empty."""


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's variable substitution: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err}, $VAR, $$.

    Raises MissingVariable for ``${VAR:?message}`` with VAR unset or empty (Compose fails too).
    """
    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$$"  # kept for the second pass below, like Compose's escape
        name, op, arg = m.group(1) or m.group(4), m.group(2), m.group(3)
        value = env.get(name)
        if op == ":?" and value in (None, ""):
            raise MissingVariable(f"{name}: {arg}")
        if op == "-":
            return arg if value is None else value
        return value if value not in (None, "") else (arg or "")
    return _VAR.sub(sub, text).replace("$$", "$")


class ComposeLoader(yaml.SafeLoader):
    """safe_load plus Compose's ``!reset`` / ``!override`` merge tags."""


class Reset:
    """Marker for a ``!reset`` value: the merge removes the key."""


ComposeLoader.add_constructor("!reset", lambda loader, node: Reset())
ComposeLoader.add_constructor("!override", lambda loader, node: (
    loader.construct_mapping(node, deep=True) if isinstance(node, yaml.MappingNode)
    else loader.construct_sequence(node, deep=True)))


def load(env: dict[str, str] | None = None, path: Path = COMPOSE) -> dict:
    """A compose file after interpolation with ``env`` (default: nothing set)."""
    return yaml.load(interpolate(path.read_text(), env or {}), Loader=ComposeLoader)


def merge(base, override):
    """Compose's merge of an override file for the keys used here: mappings merge
    recursively, ``!reset`` removes, anything else replaces."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            if isinstance(value, Reset):
                out.pop(key, None)
            else:
                out[key] = merge(base.get(key), value)
        return out
    return override


def compose_validator(schema: dict):
    """A validator for a vendored Compose schema: the draft its ``$schema`` names; the compose-spec file names
    draft-07 by an https URL that jsonschema does not list (it would fall back to its latest draft, with a
    warning that this will become an error)."""
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)(schema)


def schema_errors(doc: dict) -> list[str]:
    """Errors of ``doc`` against both vendored Compose schemas."""
    errors = []
    for spec in (SPEC, SPEC_COMPOSE_GO):
        schema = json.loads(spec.read_text())
        errors += [f"{spec.name} {list(e.path)}: {e.message}"
                   for e in compose_validator(schema).iter_errors(doc)]
    return errors


@pytest.fixture(scope="module")
def compose() -> dict:
    return load()


def treespec_invocations(command: list[str] | str) -> list[list[str]]:
    """Every ``treespec ...`` command line in a service command (list or ``sh -c`` script)."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if argv[:1] == ["sh"] and len(argv) >= 3 and argv[1].startswith("-") and "c" in argv[1]:
        lines = [shlex.split(line.strip().removeprefix("exec ")) for line in argv[2].splitlines()]
        return [line for line in lines if line[:1] == ["treespec"]]
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
        assert interpolate("${B-y}", {"B": ""}) == ""
        with pytest.raises(MissingVariable, match="say why"):
            interpolate("${P:?say why}", {"P": ""})


class TestServices:
    def test_services_present(self, compose):
        """The four services plus the one-shot models job exist; monitoring lives in its own file."""
        assert set(compose["services"]) == {"gateway", "scheduler", "draft", "verifier", "models"}
        assert set(load({"GRAFANA_ADMIN_PASSWORD": "x"}, MONITORING)["services"]) == {"prometheus", "grafana"}

    def test_commands_are_treespec_subcommands(self, compose):
        """Every treespec invocation names a subcommand registered in treespec/cli.py."""
        for name in (*WORKERS, "models"):
            calls = treespec_invocations(compose["services"][name]["command"])
            assert calls, f"{name} does not run treespec"
            for argv in calls:
                assert argv[1] in COMMANDS, f"{name}: unknown subcommand {argv[1]!r}"
        for name in WORKERS:
            (argv,) = treespec_invocations(compose["services"][name]["command"])
            assert argv[1] == name

    def test_models_job_fetches_into_volume(self, compose):
        """The models job fetches, verifies and converts into /data/models on the `models` volume."""
        models = compose["services"]["models"]
        calls = treespec_invocations(models["command"])
        assert ["treespec", "models", "fetch", "--cache-dir", "/data/models"] in calls
        assert ["treespec", "models", "verify", "--cache-dir", "/data/models"] in calls
        (convert,) = [c for c in calls if c[:3] == ["treespec", "models", "convert"]]
        assert convert[convert.index("--only") + 1] in ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
        assert "models:/data/models" in models["volumes"]
        assert models["restart"] == "no"
        assert "models" in compose["volumes"]

    @pytest.mark.parametrize("name", ("gateway", "draft", "verifier"))
    def test_models_volume_read_only_in_services(self, compose, name):
        """Only the models job writes the models volume; services mount it read-only."""
        (volume,) = [v for v in compose["services"][name]["volumes"] if v.startswith("models:")]
        assert volume == "models:/data/models:ro"

    @pytest.mark.parametrize("name", SCALABLE)
    def test_replica_is_container_hostname(self, compose, name):
        """Each draft/verifier replica passes its container hostname as --replica (unique per replica)."""
        (argv,) = treespec_invocations(compose["services"][name]["command"])
        assert argv[argv.index("--replica") + 1] == "$HOSTNAME"

    @pytest.mark.parametrize("name", SCALABLE)
    def test_scalable_services(self, compose, name):
        """Scalable services have no container_name and publish no host port."""
        svc = compose["services"][name]
        assert "container_name" not in svc
        assert "ports" not in svc

    def test_gateway_publishes_on_localhost(self, compose):
        """The gateway publishes port 8000 on 127.0.0.1 unless a bind address is set."""
        assert compose["services"]["gateway"]["ports"] == ["127.0.0.1:8000:8000"]
        env = {"TREESPEC_GATEWAY_PORT": "9000", "TREESPEC_BIND_ADDRESS": "0.0.0.0"}
        assert load(env)["services"]["gateway"]["ports"] == ["0.0.0.0:9000:8000"]

    def test_secrets_mounted(self, compose):
        """API keys and CURVE keys come from Compose secrets the config keys point at."""
        services = compose["services"]
        assert "api_keys.json" in services["gateway"]["secrets"]
        assert services["gateway"]["environment"]["TREESPEC_API_KEYS_FILE"] == "/run/secrets/api_keys.json"
        for name in WORKERS:
            assert {"source": f"curve-{name}", "target": "curve"} in services[name]["secrets"], name
            assert services[name]["environment"]["TREESPEC_CURVE_DIR"] == "/run/secrets/curve"
            assert compose["secrets"][f"curve-{name}"]["file"] == f"./secrets/curve-{name}"
        assert "curve" not in compose["secrets"]  # the directory with every key pair is mounted nowhere

    @pytest.mark.parametrize("path", [COMPOSE, CPU_OVERRIDE])
    def test_each_service_mounts_only_its_own_keys(self, path):
        """Per service (compose.yaml, and merged with compose.cpu.yaml): exactly its own CURVE
        bundle (``curve-<service>``) plus, for the gateway, the API keys; the models job none."""
        services = load()["services"] if path == COMPOSE else merge(load(), load(path=CPU_OVERRIDE))["services"]
        expected = {"scheduler": {"curve-scheduler"}, "gateway": {"curve-gateway", "api_keys.json"},
                    "draft": {"curve-draft"}, "verifier": {"curve-verifier"}, "models": set()}
        for name, svc in services.items():
            mounted = {s["source"] if isinstance(s, dict) else s for s in svc.get("secrets", [])}
            assert mounted == expected[name], name

    def test_bundles_hold_only_what_each_service_needs(self, tmp_path):
        """The bundles compose_secrets.sh writes: a role gets its own pair + the scheduler's public
        key (no other secret); the scheduler its pair + every role's public key (no role secret)."""
        from common.control_keys import ensure_curve_keys, write_bundle
        full = ensure_curve_keys(str(tmp_path / "curve"))
        files = {}
        for service in WORKERS:
            out = write_bundle(str(full), service, str(tmp_path / f"curve-{service}"))
            files[service] = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
            assert oct(out.stat().st_mode & 0o777) == "0o700"
        roles = ("gateway", "draft", "verifier", "admin")
        assert files["scheduler"] == sorted(["server.key", "server.key_secret", *(f"authorized/{r}.key" for r in roles)])
        for role in ("gateway", "draft", "verifier"):
            assert files[role] == sorted(["server.key", f"{role}.key", f"{role}.key_secret"])
        moved = load({"TREESPEC_SECRETS_DIR": "/srv/ts"})["secrets"]["api_keys.json"]["file"]
        assert moved == "/srv/ts/api_keys.json"

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
        """Gateway checks /health over HTTP; scheduler, draft and verifier check /readyz on
        their probe port, which their environment turns on."""
        gateway = compose["services"]["gateway"]["healthcheck"]["test"]
        assert "/health" in " ".join(gateway) and ":8000" in " ".join(gateway)
        for name in ("scheduler", "draft", "verifier"):
            service = compose["services"][name]
            assert ":9101/readyz" in " ".join(service["healthcheck"]["test"])
            assert service["environment"]["TREESPEC_METRICS_PORT"] == "9101" and "9101" in service["expose"]

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
            (argv,) = treespec_invocations(svc["command"])
            assert argv[-2:] == ["--config", "/etc/treespec/treespec.toml"]


class TestMonitoring:
    ENV = {"GRAFANA_ADMIN_PASSWORD": "s3cret-long"}

    def test_valid(self):
        """compose.monitoring.yaml validates against both Compose schemas."""
        assert not schema_errors(load(self.ENV, MONITORING))

    def test_grafana_password_required(self):
        """Without GRAFANA_ADMIN_PASSWORD the file does not load (no `admin` default)."""
        with pytest.raises(MissingVariable, match="GRAFANA_ADMIN_PASSWORD"):
            load({}, MONITORING)
        grafana = load(self.ENV, MONITORING)["services"]["grafana"]
        assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "s3cret-long"

    def test_published_on_localhost(self):
        """Prometheus and Grafana publish on 127.0.0.1 unless a bind address is set."""
        services = load(self.ENV, MONITORING)["services"]
        assert services["prometheus"]["ports"] == ["127.0.0.1:9090:9090"]
        assert services["grafana"]["ports"] == ["127.0.0.1:3000:3000"]
        public = load({**self.ENV, "TREESPEC_BIND_ADDRESS": "0.0.0.0"}, MONITORING)["services"]
        assert public["grafana"]["ports"] == ["0.0.0.0:3000:3000"]

    def test_mounted_files_exist(self):
        """Every ./ path the monitoring services mount is in the repo."""
        for svc in load(self.ENV, MONITORING)["services"].values():
            for volume in svc["volumes"]:
                source = volume.split(":")[0]
                if source.startswith("./"):
                    assert (REPO / source).exists(), volume


@pytest.fixture(scope="module")
def merged() -> dict:
    """compose.yaml merged with compose.cpu.yaml."""
    return merge(load(), load(path=CPU_OVERRIDE))


class TestCpuOverride:
    def test_valid(self, merged):
        """compose.cpu.yaml and the merged result validate against both Compose schemas."""
        override = load(path=CPU_OVERRIDE)
        for svc in override["services"].values():  # the schema has no !reset: drop markers
            svc.pop("deploy", None)
        assert not schema_errors(override)
        assert not schema_errors(merged)

    @pytest.mark.parametrize("name", ("models", *SCALABLE))
    def test_cpu_image(self, merged, name):
        """Workers and the models job build the CPU image, torch from PyTorch's CPU index by default."""
        svc = merged["services"][name]
        assert svc["image"] == "treespec-cpu:latest"
        assert svc["build"]["dockerfile"] == "docker/Dockerfile.cpu"
        assert svc["build"]["args"]["TORCH_INDEX_URL"] == "https://download.pytorch.org/whl/cpu"
        assert (REPO / svc["build"]["dockerfile"]).exists()

    def test_index_url_can_be_emptied(self):
        """TORCH_INDEX_URL= (set, empty) leaves only PyPI + docker/wheels (the smoke run)."""
        doc = load({"TORCH_INDEX_URL": ""}, CPU_OVERRIDE)
        assert doc["services"]["draft"]["build"]["args"]["TORCH_INDEX_URL"] == ""

    @pytest.mark.parametrize("name", SCALABLE)
    def test_no_gpu(self, merged, name):
        """On CPU hosts draft and verifier run on the CPU and reserve no GPU."""
        svc = merged["services"][name]
        assert "deploy" not in svc
        assert svc["environment"]["TREESPEC_DEVICE"] == "cpu"
        assert svc["environment"]["TREESPEC_SCHEDULER_ADDRESS"] == "tcp://scheduler:5710"


class TestImages:
    def test_dockerfiles_run_as_non_root(self):
        """Every image switches to the numeric unprivileged uid 10001 (runAsNonRoot can check it)."""
        for path in sorted((REPO / "docker").glob("Dockerfile.*")):
            assert re.findall(r"^USER (.+)$", path.read_text(), re.M) == ["10001:10001"], path.name

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
@pytest.mark.parametrize("files", [("compose.yaml",), ("compose.yaml", "compose.cpu.yaml"),
                                   ("compose.yaml", "compose.monitoring.yaml")])
def test_docker_compose_config(files):
    """`docker compose config` (no engine needed) accepts the file combinations the README uses."""
    cmd = _compose_v2()
    env = {**os.environ, "TENSOR_PARALLEL_SIZE": "2", "GRAFANA_ADMIN_PASSWORD": "x" * 12}
    args = [a for f in files for a in ("-f", str(REPO / f))]
    out = subprocess.run([*cmd, *args, "config", "--quiet"], capture_output=True, text=True, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr
