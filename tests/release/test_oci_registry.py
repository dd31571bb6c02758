"""The image and the chart through a real OCI registry: the CNCF distribution registry
(github.com/distribution/distribution/v3 v3.0.0, built from its Go module) started on
loopback by the test, crane (go-containerregistry v0.22.1) and helm v4.

* `crane push` of the release's OCI layout: the registry serves it under the digest the
  chart pins (image-digest.txt), as an index of linux/amd64 and linux/arm64;
* `helm push` of the packaged chart, `helm pull oci://…` back: the same bytes as dist/'s,
  and the pulled chart's values pin the pushed image's digest."""
from __future__ import annotations

import json
import os
import subprocess
import tarfile

import pytest
import yaml

from testplane import binaries

from .conftest import VERSION

X_Y_Z = VERSION.lstrip("v")


@pytest.fixture(scope="module")
def tools_env(tmp_path_factory) -> dict:
    home = tmp_path_factory.mktemp("oci-home")
    env = {**os.environ, "HOME": str(home), "DOCKER_CONFIG": str(home / "docker"),
           "HELM_CACHE_HOME": str(home / "helm-cache"), "HELM_CONFIG_HOME": str(home / "helm-config"),
           "HELM_DATA_HOME": str(home / "helm-data")}
    return env


def tool(name: str, *args: str, env: dict) -> str:
    proc = subprocess.run([str(binaries.ensure(name)), *args], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, f"{name} {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def pushed_image(dist, registry, tools_env, tmp_path_factory) -> str:
    layout = tmp_path_factory.mktemp("layout")
    with tarfile.open(dist / f"kubectl-flux-plunger-{VERSION}.oci.tar") as tar:
        tar.extractall(layout, filter="data")
    ref = f"{registry}/cozystack/kubectl-flux-plunger:{VERSION}"
    tool("crane", "push", "--insecure", str(layout), ref, env=tools_env)
    return ref


def test_crane_push_serves_the_image_under_the_digest_the_chart_pins(dist, pushed_image,
                                                                     tools_env):
    want = (dist / "image-digest.txt").read_text().strip()
    assert tool("crane", "digest", "--insecure", pushed_image, env=tools_env).strip() == want
    repo = pushed_image.rsplit(":", 1)[0]
    index = json.loads(tool("crane", "manifest", "--insecure", f"{repo}@{want}", env=tools_env))
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert sorted(m["platform"]["architecture"] for m in index["manifests"]) == ["amd64", "arm64"]
    config = json.loads(tool("crane", "config", "--insecure", "--platform", "linux/arm64",
                             f"{repo}@{want}", env=tools_env))
    assert config["architecture"] == "arm64"
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == VERSION


def test_helm_push_and_pull_oci_round_trips_the_chart(dist, registry, pushed_image, tools_env,
                                                      tmp_path):
    chart = dist / f"flux-plunger-{X_Y_Z}.tgz"
    pushed = tool("helm", "push", str(chart), f"oci://{registry}/charts", "--plain-http",
                  env=tools_env)
    assert f"Pushed: {registry}/charts/flux-plunger:{X_Y_Z}" in pushed
    digest = next(line.split()[1] for line in pushed.splitlines() if line.startswith("Digest:"))
    assert tool("crane", "digest", "--insecure", f"{registry}/charts/flux-plunger:{X_Y_Z}",
                env=tools_env).strip() == digest
    out = tmp_path / "pulled"
    out.mkdir()
    tool("helm", "pull", f"oci://{registry}/charts/flux-plunger", "--version", X_Y_Z,
         "--plain-http", "--destination", str(out), env=tools_env)
    pulled = out / chart.name
    assert pulled.read_bytes() == chart.read_bytes()
    shown = subprocess.run([str(binaries.ensure("helm")), "show", "values",
                            f"oci://{registry}/charts/flux-plunger", "--version", X_Y_Z,
                            "--plain-http"], capture_output=True, text=True, env=tools_env,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    values = yaml.safe_load(shown.stdout)
    assert values["image"]["digest"] == (dist / "image-digest.txt").read_text().strip()
