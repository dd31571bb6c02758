"""Build (once) and locate the real binaries the test tiers run.

Every binary is compiled from its Go module through a tiny wrapper module under
``hack/testbin/<name>/`` (committed ``go.mod``/``go.sum``), then cached outside the
work tree keyed by (name, module version, Go version, GOOS/GOARCH).  A later call
finds the cached binary and builds nothing.

``KUBEBUILDER_ASSETS`` (a directory holding envtest's ``kube-apiserver`` and
``etcd``) short-cuts the two control-plane builds.

Versions (issue 19): ``hack/testbin/<wrapper>/`` pins the default (newest) version; an older
supported one has its own wrapper ``hack/testbin/<wrapper>-<version>/``, made from that
version's own requirements and replace directives.  ``FLUX_PLUNGER_KUBE_VERSION`` chooses
the kube-apiserver, ``FLUX_PLUNGER_HELM_CONTROLLER_VERSION`` the helm-controller (and the
Flux CRDs the tests install, which follow it); unset means the default.

Run ``python -m testplane.binaries [NAME ...]`` to build and print the paths.
"""
from __future__ import annotations

import fcntl
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WRAPPERS = ROOT / "hack" / "testbin"


class BuildError(RuntimeError):
    """A binary could not be produced; the message names what is missing."""


@dataclass(frozen=True)
class Target:
    name: str          # file name of the binary
    wrapper: str       # directory under hack/testbin
    module: str        # module whose version keys the cache
    package: str       # package to build
    ldflags: tuple[str, ...] = ()
    # built from a writable copy of ``module`` with this placeholder file written into it
    # (flux's cmd/flux embeds generated manifests absent from the module zip)
    placeholder: str = ""
    # build tags (`go build -tags`); part of the cache key
    tags: tuple[str, ...] = ()


def _k8s_ldflags(version: str) -> tuple[str, ...]:
    major, minor = version.lstrip("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.gitVersion={version}", f"-X {pkg}.gitMajor={major}",
                  f"-X {pkg}.gitMinor={minor}"]
    return tuple(flags)


TARGETS = {
    "kube-apiserver": Target("kube-apiserver", "kube-apiserver", "k8s.io/kubernetes",
                             "k8s.io/kubernetes/cmd/kube-apiserver"),
    "etcd": Target("etcd", "etcd", "go.etcd.io/etcd/server/v3", "go.etcd.io/etcd/server/v3"),
    "helm-controller": Target("helm-controller", "helm-controller",
                              "github.com/fluxcd/helm-controller", "github.com/fluxcd/helm-controller"),
    # the e2e tier of Flux notifications (tests/e2e/test_notify.py)
    "notification-controller": Target("notification-controller", "notification-controller",
                                      "github.com/fluxcd/notification-controller",
                                      "github.com/fluxcd/notification-controller"),
    "krew": Target("krew", "krew", "sigs.k8s.io/krew", "sigs.k8s.io/krew/cmd/krew"),
    "validate-krew-manifest": Target("validate-krew-manifest", "krew", "sigs.k8s.io/krew",
                                     "sigs.k8s.io/krew/cmd/validate-krew-manifest"),
    "helm": Target("helm", "helm", "helm.sh/helm/v4", "helm.sh/helm/v4/cmd/helm"),
    # the kind tier (testplane/images.py): node binaries, kind, crictl, source-controller
    **{cmd: Target(cmd, "k8s-node", "k8s.io/kubernetes", f"k8s.io/kubernetes/cmd/{cmd}")
       for cmd in ("kubelet", "kubeadm", "kubectl", "kube-controller-manager",
                   "kube-scheduler", "kube-proxy")},
    "kind": Target("kind", "kind", "sigs.k8s.io/kind", "sigs.k8s.io/kind"),
    "crictl": Target("crictl", "crictl", "sigs.k8s.io/cri-tools", "sigs.k8s.io/cri-tools/cmd/crictl"),
    "source-controller": Target("source-controller", "source-controller",
                                "github.com/fluxcd/source-controller",
                                "github.com/fluxcd/source-controller"),
    # the release checks (hack/release.py, tests/release/): a real OCI registry, crane, actionlint
    "registry": Target("registry", "registry", "github.com/distribution/distribution/v3",
                       "github.com/distribution/distribution/v3/cmd/registry"),
    "crane": Target("crane", "crane", "github.com/google/go-containerregistry",
                    "github.com/google/go-containerregistry/cmd/crane"),
    "actionlint": Target("actionlint", "actionlint", "github.com/rhysd/actionlint",
                         "github.com/rhysd/actionlint/cmd/actionlint"),
    # the chart's alert rules (tests/apiserver/test_promtool_rules.py, hack/lint.sh): promtool's
    # `check rules` and `test rules` -- only cmd/promtool, not the Prometheus server, and
    # without the service-discovery plugins (Prometheus's own remove_all_sd tag: no cloud
    # SDKs to compile; only `promtool check config` of such an SD would notice)
    "promtool": Target("promtool", "promtool", "github.com/prometheus/prometheus",
                       "github.com/prometheus/prometheus/cmd/promtool",
                       tags=("remove_all_sd",)),
    # signing and SBOMs (issue 31): cosign signs and verifies the image, the chart and the
    # blobs with a test key; syft writes the SPDX SBOMs
    "cosign": Target("cosign", "cosign", "github.com/sigstore/cosign/v3",
                     "github.com/sigstore/cosign/v3/cmd/cosign",
                     ldflags=("-X sigs.k8s.io/release-utils/version.gitVersion={version}",)),
    "syft": Target("syft", "syft", "github.com/anchore/syft", "github.com/anchore/syft/cmd/syft",
                   ldflags=("-X main.version={bare}",)),
    # the Flux CLI as a plugin host (tests/cli); only `flux install` reads the embedded
    # manifests, so one placeholder stands in for them
    "flux": Target("flux", "flux", "github.com/fluxcd/flux2/v2", "github.com/fluxcd/flux2/v2/cmd/flux",
                   ldflags=("-X main.VERSION={bare}",),
                   placeholder="cmd/flux/manifests/placeholder.yaml"),
}

# wrapper directory -> the environment variable choosing its version (issue 19)
VERSION_ENV = {
    "kube-apiserver": "FLUX_PLUNGER_KUBE_VERSION",
    "helm-controller": "FLUX_PLUNGER_HELM_CONTROLLER_VERSION",
}

# CRDs taken from module sources in the Go module cache: (module, version source, files).
CRD_SOURCES = {
    "github.com/fluxcd/helm-controller": ["helm.toolkit.fluxcd.io_helmreleases.yaml"],
    "github.com/fluxcd/source-controller": [
        "source.toolkit.fluxcd.io_helmcharts.yaml",
        "source.toolkit.fluxcd.io_ocirepositories.yaml",
        "source.toolkit.fluxcd.io_externalartifacts.yaml",
    ],
}


def cache_root() -> Path:
    env = os.environ.get("FLUX_PLUNGER_TESTBIN_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kubectl-flux-plunger" / "testbin"


def _go() -> str:
    go = shutil.which("go")
    if not go:
        raise BuildError("Go is not installed (needed to build the real test binaries); "
                         "install Go >= 1.26 or set KUBEBUILDER_ASSETS")
    return go


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CGO_ENABLED", "0")
    flags = env.get("GOFLAGS", "")
    if "-modcacherw" not in flags:
        env["GOFLAGS"] = (flags + " -modcacherw").strip()
    return env


def module_version(wrapper: str, module: str) -> str:
    """The version the wrapper's go.mod requires for ``module``."""
    text = (WRAPPERS / wrapper / "go.mod").read_text()
    m = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.M)
    if not m:
        raise BuildError(f"hack/testbin/{wrapper}/go.mod does not require {module}")
    return m.group(1)


def supported_versions(wrapper: str, module: str) -> dict[str, str]:
    """Version -> wrapper directory, for every committed wrapper of ``wrapper``."""
    out = {module_version(wrapper, module): wrapper}
    for d in sorted(WRAPPERS.glob(f"{wrapper}-v*")):
        if (d / "go.mod").is_file():
            out[module_version(d.name, module)] = d.name
    return out


def chosen_wrapper(wrapper: str, module: str) -> str:
    """The wrapper directory for the version the environment chooses (VERSION_ENV), the
    default one when it chooses none; an unsupported version is a BuildError."""
    env = VERSION_ENV.get(wrapper)
    wanted = os.environ.get(env, "").strip() if env else ""
    if not wanted:
        return wrapper
    versions = supported_versions(wrapper, module)
    found = versions.get("v" + wanted.lstrip("v"))
    if found is None:
        raise BuildError(f"{env}={wanted} is not a supported version; "
                         f"supported: {', '.join(sorted(versions))} (hack/testbin/{wrapper}*/)")
    return found


def wrapper_of(target: Target) -> str:
    return chosen_wrapper(target.wrapper, target.module)


def version(name: str) -> str:
    """The version of binary ``name`` the environment chooses (the default without one)."""
    target = TARGETS[name]
    return module_version(wrapper_of(target), target.module)


def _go_version() -> str:
    out = subprocess.run([_go(), "env", "GOVERSION"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def cache_dir_for(target: Target) -> Path:
    version = module_version(wrapper_of(target), target.module)
    arch = f"{platform.system().lower()}-{platform.machine().lower()}"
    tags = "".join(f"+{t}" for t in target.tags)
    return cache_root() / f"{target.name}-{version}{tags}-{_go_version()}-{arch}"


def _from_assets(name: str) -> Path | None:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and name in ("kube-apiserver", "etcd"):
        p = Path(assets) / name
        if p.is_file() and os.access(p, os.X_OK):
            return p
        raise BuildError(f"KUBEBUILDER_ASSETS={assets} has no executable {name}")
    return None


def cached(name: str) -> Path | None:
    """Path of binary ``name`` when it is already built (or given by KUBEBUILDER_ASSETS),
    else None; never builds (for checks that must stay fast, e.g. hack/lint.sh)."""
    found = _from_assets(name)
    if found:
        return found
    binary = cache_dir_for(TARGETS[name]) / name
    return binary if binary.is_file() else None


def ensure(name: str, log=sys.stderr) -> Path:
    """Path of binary ``name``, building it into the cache first when it is missing."""
    found = _from_assets(name)
    if found:
        return found
    target = TARGETS[name]
    out_dir = cache_dir_for(target)
    binary = out_dir / name
    if binary.is_file():
        return binary
    out_dir.mkdir(parents=True, exist_ok=True)
    # one build of a binary at a time: hack/test.sh builds the later tiers' binaries in the
    # background while the first tiers run, and a test that needs one meanwhile waits here
    # for that build instead of starting a second one
    with open(out_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.is_file():
            return binary
        return _build(target, name, out_dir, binary, log)


def _build(target: Target, name: str, out_dir: Path, binary: Path, log) -> Path:
    wrapper = wrapper_of(target)
    version = module_version(wrapper, target.module)
    ldflags = ["-s", "-w"]
    if target.module == "k8s.io/kubernetes":
        ldflags += list(_k8s_ldflags(version))
    ldflags += [f.format(bare=version.lstrip("v"), version=version) for f in target.ldflags]
    tmp = out_dir / f".{name}.tmp{os.getpid()}"
    tags = ["-tags", ",".join(target.tags)] if target.tags else []
    cmd = [_go(), "build", "-trimpath", *tags, "-ldflags", " ".join(ldflags), "-o", str(tmp),
           target.package]
    print(f"building {name} ({target.module} {version}) into {out_dir} ...", file=log, flush=True)
    started = time.monotonic()
    cwd = WRAPPERS / wrapper
    src = None
    if target.placeholder:
        src = out_dir / f".src{os.getpid()}"
        cwd = _writable_copy(target, wrapper, version, src)
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=_go_env(), capture_output=True, text=True)
    finally:
        if src is not None:
            shutil.rmtree(src, ignore_errors=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise BuildError(f"building {name} from {target.module} failed:\n{tail}")
    tmp.rename(binary)
    print(f"built {name} in {time.monotonic() - started:.0f}s", file=log, flush=True)
    return binary


def _writable_copy(target: Target, wrapper: str, version: str, src: Path) -> Path:
    """A build directory: the wrapper's go.mod/go.sum replacing ``target.module`` by a
    writable copy of its source with ``target.placeholder`` written in; returns it."""
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    for f in ("go.mod", "go.sum"):
        shutil.copyfile(WRAPPERS / wrapper / f, src / f)
    copy = src / "module"
    shutil.copytree(module_dir(target.module, wrapper, version), copy)
    for d, _, _ in os.walk(copy):
        os.chmod(d, 0o755)
    placeholder = copy / target.placeholder
    placeholder.parent.mkdir(parents=True, exist_ok=True)
    placeholder.write_text("# placeholder: the real manifests are generated, not in the module\n")
    subprocess.run([_go(), "mod", "edit", f"-replace={target.module}=./module"], cwd=src,
                   env=_go_env(), check=True)
    return src


def module_dir(module: str, wrapper: str, version: str | None = None) -> Path:
    """Source directory of ``module`` (at ``version``, by default the wrapper's pinned
    version) in the module cache."""
    if version is None:
        version = module_version(wrapper, module) if module != "github.com/fluxcd/source-controller" \
            else source_controller_version()
    proc = subprocess.run([_go(), "mod", "download", "-json", f"{module}@{version}"],
                          cwd=WRAPPERS / wrapper, env=_go_env(), capture_output=True, text=True)
    try:
        info = json.loads(proc.stdout)
    except ValueError:
        info = {}
    if proc.returncode != 0 or "Dir" not in info:
        raise BuildError(f"cannot download Go module {module}@{version}: "
                         f"{info.get('Error') or proc.stderr.strip()}")
    return Path(info["Dir"])


def source_controller_version(wrapper: str = "helm-controller") -> str:
    """The source-controller release matching helm-controller's source API requirement."""
    text = (WRAPPERS / wrapper / "go.sum").read_text()
    versions = re.findall(r"^github\.com/fluxcd/source-controller/api (v[\d.]+) ", text, re.M)
    if not versions:
        raise BuildError(f"hack/testbin/{wrapper}/go.sum has no source-controller/api entry")
    return versions[-1]


def crd_dir() -> Path:
    """A cached directory holding the Flux CRD YAMLs the tests install: those of the
    helm-controller version chosen (FLUX_PLUNGER_HELM_CONTROLLER_VERSION) and of the
    source-controller its source API matches."""
    wrapper = wrapper_of(TARGETS["helm-controller"])
    hc = module_version(wrapper, "github.com/fluxcd/helm-controller")
    sc = source_controller_version(wrapper)
    out = cache_root() / f"crds-{hc}-{sc}"
    wanted = [f for files in CRD_SOURCES.values() for f in files]
    if all((out / f).is_file() for f in wanted):
        return out
    out.mkdir(parents=True, exist_ok=True)
    for module, files in CRD_SOURCES.items():
        src = module_dir(module, wrapper, hc if module.endswith("helm-controller") else sc) \
            / "config" / "crd" / "bases"
        for f in files:
            if not (src / f).is_file():
                raise BuildError(f"{module} has no CRD {f} under config/crd/bases")
            shutil.copyfile(src / f, out / f)
    return out


NOTIFICATION_CRDS = (
    "notification.toolkit.fluxcd.io_alerts.yaml",
    "notification.toolkit.fluxcd.io_providers.yaml",
    "notification.toolkit.fluxcd.io_receivers.yaml",
)


def notification_crd_dir() -> Path:
    """A cached directory holding notification-controller's CRDs (Alert, Provider and the
    Receiver its manager watches), from the wrapper's pinned module.  Apart from
    :func:`crd_dir`: only the notification tests install them."""
    module = "github.com/fluxcd/notification-controller"
    version = module_version("notification-controller", module)
    out = cache_root() / f"crds-notification-controller-{version}"
    if all((out / f).is_file() for f in NOTIFICATION_CRDS):
        return out
    out.mkdir(parents=True, exist_ok=True)
    src = module_dir(module, "notification-controller") / "config" / "crd" / "bases"
    for f in NOTIFICATION_CRDS:
        if not (src / f).is_file():
            raise BuildError(f"{module} has no CRD {f} under config/crd/bases")
        shutil.copyfile(src / f, out / f)
    return out


def _one(name: str) -> Path:
    if name == "crds":
        return crd_dir()
    if name == "notification-crds":
        return notification_crd_dir()
    return ensure(name)


def main(argv: list[str]) -> int:
    """``python -m testplane.binaries [--jobs N] [NAME ...]``: build (once) and print
    ``NAME: PATH`` for each, in the order given.  ``--jobs N`` builds up to N at a time: a Go
    build keeps both cores busy only part of the time (module downloads wait on the network,
    the link of a large binary runs on one core), so two side by side finish sooner than one
    after the other."""
    jobs = 1
    if argv[:1] == ["--jobs"] and len(argv) > 1 and argv[1].isdigit() and int(argv[1]) > 0:
        jobs, argv = int(argv[1]), argv[2:]
    elif argv[:1] == ["--jobs"]:
        print("error: --jobs needs a positive number", file=sys.stderr)
        return 2
    names = argv or list(TARGETS)
    unknown = [n for n in names if n not in TARGETS and n not in ("crds", "notification-crds")]
    if unknown:
        print(f"error: no such binary: {', '.join(unknown)} (known: crds, notification-crds, "
              f"{', '.join(TARGETS)})", file=sys.stderr)
        return 2
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [(name, pool.submit(_one, name)) for name in names]
        failed = False
        for name, future in futures:
            try:
                print(f"{name}: {future.result()}", flush=True)
            except BuildError as exc:
                print(f"error: {exc}", file=sys.stderr, flush=True)
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
