"""deploy/k8s: every kustomize overlay renders with `kubectl kustomize`, every rendered
object validates offline against the Kubernetes API schema (kubernetes-validate, strict:
unknown fields fail) or, for custom resources, against the vendored CRD schemas
(tests/data/k8s_crds, jsonschema), and the objects say what the deployment needs
(probes, GPU limits, tensor parallel, autoscaling, SSE ingress, non-root, read-only models).

kubectl comes from the host (/usr/bin/kubectl here). Without it these tests are skipped
locally and fail in CI (``TREESPEC_CI=1``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from common.config import config_keys, load_config
from treespec.cli import COMMANDS

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
CRDS = REPO / "tests" / "data" / "k8s_crds"
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if p.is_dir())
KUBERNETES_VERSION = "1.31"  # the oldest API the manifests promise to fit
CUSTOM_GROUPS = ("keda.sh/", "monitoring.coreos.com/")
WORKERS = ("treespec-draft", "treespec-verifier")


def kubectl() -> str:
    path = shutil.which("kubectl") or ("/usr/bin/kubectl" if Path("/usr/bin/kubectl").exists() else None)
    if path is None:
        if os.environ.get("TREESPEC_CI"):
            pytest.fail("kubectl not found (CI must render the kustomize overlays)")
        pytest.skip("kubectl not installed")
    return path


def render(directory: Path) -> list[dict]:
    out = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


@cache
def rendered(overlay: str) -> tuple[dict, ...]:
    return tuple(render(K8S / "overlays" / overlay))


def find(objs, kind: str, name: str | None = None) -> list[dict]:
    return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"].startswith(name))]


@cache
def crd_schemas() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> openAPIV3Schema of every vendored CRD version."""
    out = {}
    for path in CRDS.glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            out[(f"{group}/{version['name']}", kind)] = version["schema"]["openAPIV3Schema"]
    return out


def validate(obj: dict) -> None:
    """Raise when ``obj`` does not fit the Kubernetes API (or its vendored CRD) schema."""
    if obj["apiVersion"].startswith(CUSTOM_GROUPS):
        schema = crd_schemas()[(obj["apiVersion"], obj["kind"])]
        jsonschema.Draft7Validator(schema).validate(obj)
    else:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def containers(deploy: dict) -> list[dict]:
    return deploy["spec"]["template"]["spec"]["containers"]


def env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def render_with_curve(overlay: str, tmp_path: Path) -> list[dict]:
    """``overlay`` rendered with components/curve and freshly generated keys."""
    from common.transport import ensure_curve_keys
    shutil.copytree(K8S, tmp_path / "k8s")
    ensure_curve_keys(str(tmp_path / "k8s" / "components" / "curve" / "secrets"))
    kustomization = tmp_path / "k8s" / "overlays" / overlay / "kustomization.yaml"
    doc = yaml.safe_load(kustomization.read_text())
    doc["components"] = doc.get("components", []) + ["../../components/curve"]
    kustomization.write_text(yaml.safe_dump(doc))
    return render(tmp_path / "k8s" / "overlays" / overlay)


class TestRender:
    @pytest.mark.parametrize("overlay", OVERLAYS)
    def test_overlay_validates(self, overlay):
        """Every object of the overlay fits the Kubernetes 1.31 API (strict) or its CRD schema."""
        objs = rendered(overlay)
        assert {o["kind"] for o in objs} >= {"Namespace", "Deployment", "Service", "Ingress", "Job", "ConfigMap",
                                              "Secret", "PersistentVolumeClaim", "PodDisruptionBudget"}
        for obj in objs:
            validate(obj)

    def test_overlays_exist(self):
        """cpu, gpu (one GPU per worker), tp2 (KEDA) and tp2-hpa overlays are there."""
        assert set(OVERLAYS) >= {"cpu", "gpu", "tp2", "tp2-hpa"}

    @pytest.mark.parametrize("overlay", OVERLAYS)
    def test_with_curve_component(self, overlay, tmp_path):
        """With generated CURVE keys, adding components/curve gives each Deployment its own
        Secret at /etc/treespec/curve (one key pair per role) and the result still validates."""
        objs = render_with_curve(overlay, tmp_path)
        for obj in objs:
            validate(obj)
        for d in find(objs, "Deployment"):
            assert env(containers(d)[0])["TREESPEC_CURVE_DIR"] == "/etc/treespec/curve"
            mount = next(m for m in containers(d)[0]["volumeMounts"] if m["name"] == "curve")
            assert mount == {"name": "curve", "mountPath": "/etc/treespec/curve", "readOnly": True}

    @pytest.mark.parametrize("overlay", OVERLAYS)
    def test_each_service_mounts_only_its_own_keys(self, overlay, tmp_path):
        """Per Deployment, the mounted files are exactly common.control_keys.bundle_files(service):
        the scheduler its pair + every role's public key under authorized/; gateway, draft and
        verifier their own pair + the scheduler's public key (no other role's secret)."""
        from common.control_keys import bundle_files
        objs = render_with_curve(overlay, tmp_path)
        for d in find(objs, "Deployment"):
            service = d["metadata"]["name"].removeprefix("treespec-")
            (vol,) = [v for v in d["spec"]["template"]["spec"]["volumes"] if v["name"] == "curve"]
            (secret,) = find(objs, "Secret", vol["secret"]["secretName"])
            items = vol["secret"]["items"]
            assert sorted(i["path"] for i in items) == sorted(bundle_files(service)), service
            assert {i["key"] for i in items} == set(secret["data"]), service
            secrets = [i["path"] for i in items if i["path"].endswith("key_secret")]
            assert secrets == [f"{'server' if service == 'scheduler' else service}.key_secret"], service

    def test_validation_can_fail(self):
        """An unknown field in a Deployment and a bad ScaledObject are rejected."""
        deploy = dict(find(rendered("cpu"), "Deployment", "treespec-gateway")[0])
        deploy["spec"] = {**deploy["spec"], "replica": 2}
        with pytest.raises(kubernetes_validate.ValidationError):
            validate(deploy)
        (scaled,) = find(rendered("tp2"), "ScaledObject")
        bad = {**scaled, "spec": {**scaled["spec"], "minReplicaCount": "one"}}
        with pytest.raises(jsonschema.ValidationError):
            validate(bad)


class TestServices:
    def test_gateway_ingress_for_sse(self):
        """2+ gateways behind a Service; the nginx Ingress does not buffer and waits long."""
        objs = rendered("cpu")
        (gw,) = find(objs, "Deployment", "treespec-gateway")
        assert gw["spec"]["replicas"] >= 2
        (ing,) = find(objs, "Ingress")
        ann = ing["metadata"]["annotations"]
        assert ann["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
        assert int(ann["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 600
        assert ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] == "treespec-gateway"

    def test_scheduler_single_recreate(self):
        """One scheduler, replaced with Recreate (never two at once)."""
        (sched,) = find(rendered("cpu"), "Deployment", "treespec-scheduler")
        assert sched["spec"]["replicas"] == 1 and sched["spec"]["strategy"]["type"] == "Recreate"

    @pytest.mark.parametrize("overlay", OVERLAYS)
    def test_probes_and_commands(self, overlay):
        """Every Deployment runs a real treespec subcommand whose flags parse, with /livez
        liveness and /readyz readiness on its HTTP or probe port, and only known config keys."""
        from treespec.cli import build_parser
        known_env = {var for _, _, var in config_keys()} | {"TREESPEC_MODEL_CACHE"}
        for d in find(rendered(overlay), "Deployment"):
            c = containers(d)[0]
            assert c["args"][0] == "treespec" and c["args"][1] in COMMANDS
            build_parser(c["args"][1]).parse_args(c["args"][1:])
            assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
            assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
            port = c["livenessProbe"]["httpGet"]["port"]
            assert port in {p["name"] for p in c["ports"]}
            names = {k for k in env(c) if k.startswith("TREESPEC_")}
            assert names <= known_env, names - known_env
            load_config(None, environ=env(c))  # values parse
            if d["metadata"]["name"] != "treespec-gateway":
                assert env(c)["TREESPEC_METRICS_PORT"] == "9101"

    @pytest.mark.parametrize("overlay", OVERLAYS)
    def test_non_root_and_read_only_models(self, overlay):
        """Pods run as a non-root numeric user without privilege escalation; only the models job
        writes the models volume."""
        objs = rendered(overlay)
        for obj in find(objs, "Deployment") + find(objs, "Job"):
            pod = obj["spec"]["template"]["spec"]
            assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] >= 1000
            for c in pod["containers"] + pod.get("initContainers", []):
                assert c["securityContext"]["allowPrivilegeEscalation"] is False
                assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
                for m in c["volumeMounts"]:
                    if m["name"] == "models":
                        assert m.get("readOnly", False) == (obj["kind"] != "Job"), (obj["metadata"]["name"], m)

    def test_models_job_converts_once(self):
        """The models job fetches, verifies, converts for the configured dtype and marks the
        volume ready; the other pods wait for that mark."""
        objs = rendered("cpu")
        (job,) = find(objs, "Job")
        script = job["spec"]["template"]["spec"]["containers"][0]["command"][-1]
        for step in ("models fetch", "models verify", "load_weights(model, cfg.dtype)", "touch /data/models/.treespec-ready"):
            assert step in script
        for d in find(objs, "Deployment"):
            inits = d["spec"]["template"]["spec"].get("initContainers", [])
            if d["metadata"]["name"] != "treespec-scheduler":
                assert ".treespec-ready" in " ".join(inits[0]["command"])

    def test_config_map_is_valid_config(self, tmp_path):
        """The ConfigMap's treespec.toml loads with the service's config loader."""
        (cm,) = find(rendered("cpu"), "ConfigMap", "treespec-config")
        (tmp_path / "treespec.toml").write_text(cm["data"]["treespec.toml"])
        assert load_config(tmp_path / "treespec.toml", environ={}).dtype == "bfloat16"


class TestGpuOverlays:
    def test_one_gpu_per_worker(self):
        """gpu: every draft and verifier pod asks for exactly one GPU and runs on cuda."""
        objs = rendered("gpu")
        for name in WORKERS:
            (d,) = find(objs, "Deployment", name)
            c = containers(d)[0]
            assert c["resources"]["limits"]["nvidia.com/gpu"] == "1" and env(c)["TREESPEC_DEVICE"] == "cuda"
            assert c["image"].startswith("treespec-gpu")
        assert all(containers(d)[0]["image"].startswith("treespec-cpu") for d in find(rendered("cpu"), "Deployment")
                   if d["metadata"]["name"] in WORKERS)

    @pytest.mark.parametrize("overlay", ["tp2", "tp2-hpa"])
    def test_tensor_parallel_in_one_pod(self, overlay):
        """tp2: verifier pods hold both ranks (tensor_parallel_size 2, two GPUs, shared memory)."""
        (v,) = find(rendered(overlay), "Deployment", "treespec-verifier")
        c = containers(v)[0]
        assert env(c)["TREESPEC_TENSOR_PARALLEL_SIZE"] == "2"
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "2"
        assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]

    def test_keda_scales_verifiers_on_queue_depth(self):
        """tp2: a KEDA ScaledObject scales the verifier Deployment on max(num_requests_waiting)."""
        (so,) = find(rendered("tp2"), "ScaledObject")
        assert so["spec"]["scaleTargetRef"]["name"] == "treespec-verifier"
        (trigger,) = so["spec"]["triggers"]
        assert trigger["type"] == "prometheus"
        assert trigger["metadata"]["query"].startswith("max(treespec:num_requests_waiting")
        assert not find(rendered("tp2"), "HorizontalPodAutoscaler")

    def test_hpa_alternative(self):
        """tp2-hpa: an autoscaling/v2 HPA on the external queue-depth metric, no ScaledObject."""
        objs = rendered("tp2-hpa")
        (hpa,) = find(objs, "HorizontalPodAutoscaler")
        assert hpa["spec"]["scaleTargetRef"]["name"] == "treespec-verifier"
        assert hpa["spec"]["metrics"][0]["external"]["metric"]["name"] == "treespec_num_requests_waiting"
        assert not find(objs, "ScaledObject")


class TestMonitoring:
    def test_prometheus_rule_matches_alerts_file(self):
        """The PrometheusRule carries exactly deploy/prometheus/alerts.yml's groups."""
        (rule,) = find(rendered("gpu"), "PrometheusRule")
        alerts = yaml.safe_load((REPO / "deploy" / "prometheus" / "alerts.yml").read_text())
        assert rule["spec"] == alerts

    def test_service_monitor_scrapes_every_service(self):
        """The ServiceMonitor selects the treespec Services and scrapes ports http and metrics;
        every Service exposes one of them, named after its Deployment (the job label)."""
        objs = rendered("gpu")
        (sm,) = find(objs, "ServiceMonitor")
        assert {e["port"] for e in sm["spec"]["endpoints"]} == {"http", "metrics"}
        assert sm["spec"]["jobLabel"] == "app.kubernetes.io/name"
        for svc in find(objs, "Service"):
            assert svc["metadata"]["labels"].items() >= sm["spec"]["selector"]["matchLabels"].items()
            assert {p["name"] for p in svc["spec"]["ports"]} & {"http", "metrics"}
            assert svc["metadata"]["labels"]["app.kubernetes.io/name"] == svc["metadata"]["name"]

    def test_disruption_budgets(self):
        """Gateways keep one pod up; draft and verifier lose at most one at a time."""
        pdbs = {p["metadata"]["name"]: p["spec"] for p in find(rendered("cpu"), "PodDisruptionBudget")}
        assert pdbs["treespec-gateway"]["minAvailable"] == 1
        assert pdbs["treespec-draft"]["maxUnavailable"] == pdbs["treespec-verifier"]["maxUnavailable"] == 1
