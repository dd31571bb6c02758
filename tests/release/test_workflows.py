"""The GitHub workflows (.github/workflows/ci.yml, release.yml, mutation.yml) pass actionlint v1.7.12
(built from its Go module): syntax, expressions, job dependencies, action inputs, runner
labels.  Also: the release workflow runs hack/release.py and publishes what the krew manifest
names, and ci.yml runs the README's test command."""
from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from testplane import binaries

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"


def test_actionlint_accepts_the_workflows(tmp_path):
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert [f.name for f in files] == ["ci.yml", "mutation.yml", "release.yml"]
    proc = subprocess.run([str(binaries.ensure("actionlint")), "-no-color",
                           *[str(f) for f in files]], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_fails_a_broken_workflow(tmp_path):
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text("on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    needs: nothing\n"
                   "    steps:\n      - run: echo ${{ github.nosuchthing }}\n")
    proc = subprocess.run([str(binaries.ensure("actionlint")), "-no-color", str(bad)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1
    assert "nothing" in proc.stdout and "nosuchthing" in proc.stdout


def test_ci_runs_the_readme_test_command_and_release_builds_with_hack_release():
    readme = (ROOT / "README.md").read_text()
    assert "./hack/test.sh     # set-up + the whole test suite" in readme
    ci = yaml.safe_load((WORKFLOWS / "ci.yml").read_text())
    runs = [s.get("run", "") for s in ci["jobs"]["test"]["steps"]]
    assert "./hack/test.sh" in runs
    release = yaml.safe_load((WORKFLOWS / "release.yml").read_text())
    steps = "\n".join(s.get("run", "") for job in release["jobs"].values() for s in job["steps"])
    assert 'hack/release.py "$GITHUB_REF_NAME"' in steps
    assert 'gh release create "$GITHUB_REF_NAME" dist/* ' in steps  # the krew archive's uri
    uses = {s.get("uses", "").split("@")[0] for job in release["jobs"].values()
            for s in job["steps"]}
    assert "pypa/gh-action-pypi-publish" in uses
    assert release["jobs"]["pypi"]["permissions"] == {"id-token": "write"}


def test_mutation_testing_runs_on_a_schedule_and_never_in_ci():
    """Issue 40: ./hack/mutation.sh runs weekly and by hand, from its own workflow; ci.yml,
    .ci/run and hack/requirements-test.txt know nothing of it (too slow for every push)."""
    mutation = yaml.safe_load((WORKFLOWS / "mutation.yml").read_text())
    triggers = mutation[True]  # YAML 1.1 reads the key `on` as True
    assert set(triggers) == {"schedule", "workflow_dispatch"}
    assert triggers["schedule"][0]["cron"].split()[4] != "*"  # weekly, not daily
    runs = [s.get("run", "") for s in mutation["jobs"]["mutation"]["steps"]]
    assert any(r.startswith("./hack/mutation.sh ") for r in runs)
    ci = (WORKFLOWS / "ci.yml").read_text() + (ROOT / ".ci" / "run").read_text()
    assert "mutation" not in ci
    assert "mutmut" not in (ROOT / "hack" / "requirements-test.txt").read_text()
    assert "mutmut==" in (ROOT / "hack" / "requirements-mutation.txt").read_text()


def test_release_pulls_the_base_the_containerfile_pins():
    import re

    pinned = re.search(r"^ARG PYTHON_IMAGE=python:3\.12-slim@(sha256:[0-9a-f]{64})$",
                       (ROOT / "controller" / "Containerfile").read_text(), re.M)
    assert pinned
    release = yaml.safe_load((WORKFLOWS / "release.yml").read_text())
    assert release["env"]["BASE_IMAGE"] == f"docker.io/library/python@{pinned.group(1)}"


def test_release_builds_and_smoke_tests_every_platform_on_its_own_runner():
    release = yaml.safe_load((WORKFLOWS / "release.yml").read_text())
    jobs = release["jobs"]
    matrix = {m["platform"]: m["runner"] for m in jobs["binaries"]["strategy"]["matrix"]["include"]}
    assert matrix == {"darwin-amd64": "macos-15-intel", "darwin-arm64": "macos-14",
                      "windows-amd64": "windows-2022"}
    linux = {m["platform"]: m["runner"]
             for m in jobs["linux-binaries"]["strategy"]["matrix"]["include"]}
    assert linux == {"linux-amd64": "ubuntu-24.04", "linux-arm64": "ubuntu-24.04-arm"}
    assert jobs["build"]["runs-on"] == "ubuntu-24.04"  # hack/release.py
    for job in ("build", "binaries", "linux-binaries"):
        runs = [s.get("run", "") for s in jobs[job]["steps"]]
        assert [r for r in runs if r.startswith("bash hack/smoke-binary.sh ")], job
    binaries_runs = "\n".join(s.get("run", "") for s in jobs["binaries"]["steps"])
    assert "python krew/build.py" in binaries_runs
    final = jobs["krew-manifest"]
    assert set(final["needs"]) == {"build", "binaries", "linux-binaries"}
    final_runs = "\n".join(s.get("run", "") for s in final["steps"])
    assert "krew/build.py --from-sums" in final_runs and "SHA256SUMS" in final_runs
    uploads = [s for s in final["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert uploads and uploads[0]["with"]["name"] == "dist" and uploads[0]["with"]["overwrite"]
    assert "krew-manifest" in jobs["github-release"]["needs"]


def test_release_builds_linux_with_a_glibc_2_28_floor_and_checks_the_macos_minimum():
    """Issue 37: the Linux archives are frozen in an AlmaLinux 8 container (glibc 2.28) with
    its own python3.11, and krew/floor.py holds every ELF file to 2.28 where each is built and
    again on the final dist/, whose linux/amd64 archive is that one, not build's; macOS builds
    with its deployment target and checks every Mach-O's minos against it with otool."""
    jobs = yaml.safe_load((WORKFLOWS / "release.yml").read_text())["jobs"]

    def runs(job: str) -> list[str]:
        return [s.get("run", "") for s in jobs[job]["steps"]]

    linux = jobs["linux-binaries"]
    assert linux["container"] == "docker.io/library/almalinux:8"
    steps = runs("linux-binaries")
    assert any("dnf install" in r and "python3.11" in r for r in steps)
    build = next(i for i, r in enumerate(steps) if "krew/build.py --host" in r)
    check = next(i for i, r in enumerate(steps) if "krew/floor.py" in r)
    assert build < check and "--glibc 2.28" in steps[check]
    final = runs("krew-manifest")
    drop = next(i for i, r in enumerate(final) if r.startswith("rm dist/") and "linux-amd64" in r)
    floor = next(i for i, r in enumerate(final) if "krew/floor.py" in r)
    sums = next(i for i, r in enumerate(final) if "--from-sums" in r)
    assert drop < floor < sums and "--glibc 2.28" in final[floor]
    targets = {m["platform"]: m["macos"]
               for m in jobs["binaries"]["strategy"]["matrix"]["include"]}
    assert targets == {"darwin-amd64": "10.15", "darwin-arm64": "11.0", "windows-amd64": ""}
    assert jobs["binaries"]["env"]["MACOSX_DEPLOYMENT_TARGET"] == "${{ matrix.macos }}"
    macho = next(s for s in jobs["binaries"]["steps"] if "otool -l" in s.get("run", ""))
    assert macho["if"] == "runner.os == 'macOS'"
    assert "LC_BUILD_VERSION" in macho["run"] and "minos" in macho["run"]


def test_release_signs_keyless_by_digest_and_attests_provenance_and_the_sbom():
    """Issue 31: only the signing jobs get an OIDC token; the image and the chart are signed by
    digest (hack/release_sign.py refuses a tag), the image's SBOM attested, every krew
    archive and SHA256SUMS signed as blobs, build provenance for every asset, the image and
    the chart; the bundles are release assets."""
    release = yaml.safe_load((WORKFLOWS / "release.yml").read_text())
    jobs = release["jobs"]
    oidc = {name for name, job in jobs.items()
            if (job.get("permissions") or {}).get("id-token") == "write"}
    assert oidc == {"pypi", "sign", "ghcr"}
    assert "id-token" not in (release.get("permissions") or {})
    setup = next(s for s in jobs["build"]["steps"] if "TESTBIN_TARGETS" in s.get("env", {}))
    assert {"cosign", "syft"} <= set(setup["env"]["TESTBIN_TARGETS"].split())  # the release tier's

    def runs(job: str) -> str:
        return "\n".join(s.get("run", "") for s in jobs[job]["steps"])

    def attests(job: str) -> list[dict]:
        return [s.get("with", {}) for s in jobs[job]["steps"]
                if s.get("uses", "").startswith("actions/attest-build-provenance@")]

    assert "hack/release_sign.py sign-blobs dist" in runs("sign")
    assert attests("sign") == [{"subject-path": "dist/*"}]
    assert jobs["sign"]["permissions"]["attestations"] == "write"
    ghcr = runs("ghcr")
    assert 'release_sign.py sign "$IMAGE@$IMAGE_DIGEST"' in ghcr
    assert 'release_sign.py sign "${CHARTS#oci://}/flux-plunger@$CHART_DIGEST"' in ghcr
    assert 'release_sign.py attest "$IMAGE@$IMAGE_DIGEST"' in ghcr
    assert ".image.spdx.json" in ghcr
    assert [a.get("push-to-registry") for a in attests("ghcr")] == [True, True]
    assert {a["subject-digest"] for a in attests("ghcr")} == {
        "${{ steps.push.outputs.image-digest }}", "${{ steps.push.outputs.chart-digest }}"}
    assert "sign" in jobs["github-release"]["needs"]
    downloaded = [s["with"]["name"] for s in jobs["github-release"]["steps"]
                  if s.get("uses", "").startswith("actions/download-artifact@")]
    assert downloaded == ["dist", "signatures"]


def test_no_job_downloads_dist_while_krew_manifest_overwrites_it():
    """krew-manifest replaces the build's ``dist`` artifact (overwrite: delete, then upload);
    every other job that downloads ``dist`` runs after it, never beside it."""
    jobs = yaml.safe_load((WORKFLOWS / "release.yml").read_text())["jobs"]

    def needs(name: str) -> set[str]:
        direct = jobs[name].get("needs") or []
        direct = [direct] if isinstance(direct, str) else direct
        return set(direct).union(*(needs(n) for n in direct)) if direct else set()

    readers = [name for name, job in jobs.items()
               if any(s.get("uses", "").startswith("actions/download-artifact@")
                      and (s.get("with") or {}).get("name") == "dist" for s in job["steps"])]
    assert {"pypi", "ghcr", "sign", "github-release"} <= set(readers)
    for name in readers:
        if name != "krew-manifest":
            assert "krew-manifest" in needs(name), name
