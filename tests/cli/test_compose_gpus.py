"""treespec compose-gpus: an override that gives each draft/verifier replica explicit GPUs."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from treespec import compose_gpus as cg

REPO = Path(__file__).resolve().parents[2]
SPECS = [REPO / "tests" / "data" / "compose_spec" / n for n in ("compose-spec.json", "compose-spec.compose-go.json")]
sys.path.insert(0, str(REPO / "tests" / "deploy"))
from test_compose import _compose_v2, compose_validator, load, merge  # noqa: E402  (the Compose helpers)


def render(verifiers, drafts) -> dict:
    replicas, _ = cg.plan(verifiers, drafts)
    return cg.render(yaml.safe_load((REPO / "compose.yaml").read_text()), replicas)


def reserved(svc: dict) -> list[str]:
    (device,) = svc["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"] and "count" not in device
    return device["device_ids"]


class TestPlan:
    def test_parse_gpus(self):
        """Indices and GPU UUIDs parse; empty, malformed or repeated ids are errors."""
        assert cg.parse_gpus("0,1") == ("0", "1")
        assert cg.parse_gpus("GPU-8f3a9c2e-1d4b-4e6f-9a7b-0c1d2e3f4a5b") == ("GPU-8f3a9c2e-1d4b-4e6f-9a7b-0c1d2e3f4a5b",)
        for bad in ("", "0,,1", "a", "0,0", "-1"):
            with pytest.raises(ValueError):
                cg.parse_gpus(bad)

    def test_verifiers_need_equal_tensor_parallel(self):
        """Verifier replicas with different GPU counts are refused."""
        with pytest.raises(ValueError, match="same number of GPUs"):
            cg.plan(["0,1", "2"], ["3"])

    def test_verifiers_cannot_share(self):
        """Two verifiers on one GPU are refused; a draft beside a verifier is only a warning."""
        with pytest.raises(ValueError, match="GPU 1"):
            cg.plan(["0,1", "1,2"], ["3"])
        _, warnings = cg.plan(["0"], ["0"])
        assert warnings == ["GPU 0 is shared by verifier-0 and draft-0 (they split its memory)"]

    def test_needs_both_roles(self):
        """Without a verifier or a draft there is nothing to serve."""
        with pytest.raises(ValueError, match="at least one"):
            cg.plan([], ["0"])


class TestRender:
    def test_one_service_per_replica_on_its_gpus(self):
        """--verifier 0,1 --draft 2 --draft 3: verifier-0 on GPUs 0+1 (TP 2), draft-0 on 2, draft-1 on 3."""
        doc = render(["0,1"], ["2", "3"])
        services = doc["services"]
        assert services["draft"] == {"scale": 0} and services["verifier"] == {"scale": 0}
        assert reserved(services["verifier-0"]) == ["0", "1"]
        assert services["verifier-0"]["environment"]["TREESPEC_TENSOR_PARALLEL_SIZE"] == "2"
        assert reserved(services["draft-0"]) == ["2"] and reserved(services["draft-1"]) == ["3"]
        assert services["draft-1"]["labels"]["ai.treespec.gpus"] == "3"

    def test_copies_keep_the_service_definition(self):
        """Each copy keeps its role's command, image, volumes and secrets from compose.yaml."""
        base = load()["services"]
        services = render(["0"], ["1"])["services"]
        for name, role in (("draft-0", "draft"), ("verifier-0", "verifier")):
            svc = services[name]
            assert svc["command"] == ["sh", "-c", base[role]["command"][2].replace("$", "$$")]
            assert svc["volumes"] == ["models:/data/models:ro"]
            assert svc["secrets"] == base[role]["secrets"] == [{"source": f"curve-{role}", "target": "curve"}]
            assert svc["environment"]["TREESPEC_DEVICE"] == "cuda"

    def test_valid_compose(self):
        """The override and compose.yaml merged with it validate against both Compose schemas."""
        text = yaml.safe_dump(render(["0,1", "2,3"], ["4", "5", "5"]))
        override = yaml.safe_load(text)
        merged = merge(load(), yaml.safe_load(text.replace("$$", "$")))
        for spec in SPECS:
            schema = json.loads(spec.read_text())
            validator = compose_validator(schema)
            for doc in (override, merged):
                errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(doc)]
                assert not errors, "\n".join(errors)
        gpus = {n: reserved(s) for n, s in merged["services"].items() if "-" in n}
        assert gpus == {"verifier-0": ["0", "1"], "verifier-1": ["2", "3"], "draft-0": ["4"],
                        "draft-1": ["5"], "draft-2": ["5"]}


class TestCommand:
    def args(self, tmp_path, **kw) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        cg.configure(parser)
        ns = parser.parse_args([])
        ns.compose_file, ns.output = str(REPO / "compose.yaml"), str(tmp_path / "compose.gpus.yaml")
        for k, v in kw.items():
            setattr(ns, k, v)
        return ns

    def test_writes_override(self, tmp_path, capsys):
        """The command writes the file with a header saying which service gets which GPU."""
        assert cg.run(self.args(tmp_path, verifier=["0"], draft=["1"])) == 0
        text = (tmp_path / "compose.gpus.yaml").read_text()
        assert text.startswith("# Generated by: treespec compose-gpus --verifier 0 --draft 1\n")
        assert "#   verifier-0   GPU 0\n#   draft-0      GPU 1\n" in text
        assert "draft-0" in capsys.readouterr().err
        assert reserved(yaml.safe_load(text)["services"]["draft-0"]) == ["1"]

    def test_bad_input_is_a_clear_error(self, tmp_path, capsys):
        """A bad GPU list exits 2 with the reason and writes nothing."""
        assert cg.run(self.args(tmp_path, verifier=["0,x"], draft=["1"])) == 2
        assert "bad GPU list '0,x'" in capsys.readouterr().err
        assert not (tmp_path / "compose.gpus.yaml").exists()


@pytest.mark.skipif(_compose_v2() is None, reason="no Docker Compose v2 binary installed (schema checks above)")
def test_docker_compose_accepts_override(tmp_path):
    """`docker compose config` merges compose.yaml with a generated override into device_ids per service."""
    out_file = tmp_path / "compose.gpus.yaml"
    ns = argparse.Namespace(verifier=["0,1"], draft=["2", "3"], compose_file=str(REPO / "compose.yaml"),
                            output=str(out_file))
    assert cg.run(ns) == 0
    out = subprocess.run([*_compose_v2(), "-f", str(REPO / "compose.yaml"), "-f", str(out_file), "config",
                          "--format", "json"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    services = json.loads(out.stdout)["services"]
    assert {n: reserved(s) for n, s in services.items() if "-" in n} == {
        "verifier-0": ["0", "1"], "draft-0": ["2"], "draft-1": ["3"]}
    assert services["draft"]["scale"] == 0 and services["verifier"]["scale"] == 0
