"""Container images for the kind tier, built on this machine from Debian packages and Go
modules when no registry can be reached; each is built once and found again by its tag.

What is built (all tags are local; nothing is pushed):

* Debian rootfs images (``hack/kind/rootfs.sh`` → ``docker import``): the node's base, a
  Python base for ``controller/Containerfile``.
* kind's base node image from that rootfs plus kind's own ``images/base/files``
  (``hack/kind/node-base.Dockerfile``), then the node image: kubeadm/kubelet/kubectl/crictl
  copied in, a static CNI config, and the control-plane images imported into the node's
  containerd under the names ``kubeadm config images list`` prints.
* Flux's source-controller and helm-controller (the binaries of ``testplane.binaries``), each
  a tiny rootfs around one static binary.

Images live in the Docker engine's data root (``hack/kind/engine.sh`` keeps it under
``~/.cache/kubectl-flux-plunger/docker``); tags carry the component versions plus a short
hash of the recipe, so a changed recipe builds anew and an unchanged one builds nothing.

    python -m testplane.images [node|flux|python|plunger|all]   # build, print the tags
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from . import binaries

ROOT = binaries.ROOT
HACK = ROOT / "hack" / "kind"
PREFIX = "kfp.local"
SUITE = "bookworm"
# Bump when the assembly below changes what ends up in an image with an unchanged tag.
RECIPE = "1"

NODE_PACKAGES = ("systemd", "containerd", "runc", "containernetworking-plugins", "conntrack",
                 "iptables", "nftables", "iproute2", "ethtool", "util-linux", "mount", "kmod",
                 "libseccomp2", "pigz", "bash", "ca-certificates", "curl", "jq", "procps",
                 "e2fsprogs")
PYTHON_PACKAGES = ("python3", "python3-venv", "ca-certificates")

# A single-node pod network without kindnetd (whose image no registry here serves).
CNI_CONFLIST = {
    "cniVersion": "0.3.1", "name": "kfp-ptp",
    "plugins": [
        {"type": "ptp", "ipMasq": True, "mtu": 1500,
         "ipam": {"type": "host-local", "dataDir": "/run/cni-ipam-state",
                  "routes": [{"dst": "0.0.0.0/0"}],
                  "ranges": [[{"subnet": "10.244.0.0/24"}]]}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}
# kind always applies /kind/manifests/default-cni.yaml; the network is the static config above.
DEFAULT_CNI_MANIFEST = """apiVersion: v1
kind: ConfigMap
metadata:
  name: kfp-static-cni
  namespace: kube-system
data:
  note: "pod network: static ptp + host-local (10.244.0.0/24) in /etc/cni/net.d, single node"
"""

PASSWD = ("root:x:0:0:root:/root:/sbin/nologin\n"
          "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
          "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
GROUP = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"


class ImageError(RuntimeError):
    """An image could not be built; the message says which step failed and why."""


def log(message: str) -> None:
    print(f"[images] {message}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    return binaries.cache_root().parent / "kind"


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def docker_bin() -> str:
    found = shutil.which("docker")
    if not found:
        raise ImageError("the docker CLI is not installed")
    return found


def docker(*args: str, stdin: bytes | None = None, timeout: float = 1800,
           env: dict[str, str] | None = None) -> str:
    """Run ``docker ARGS``; its stdout, or ImageError with the tail of its stderr."""
    proc = subprocess.run([docker_bin(), *args], input=stdin, capture_output=True,
                          timeout=timeout, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.decode(errors="replace").strip().splitlines()[-15:])
        raise ImageError(f"docker {' '.join(args[:2])} failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout.decode(errors="replace")


def has_image(ref: str) -> bool:
    return subprocess.run([docker_bin(), "image", "inspect", ref], capture_output=True).returncode == 0


def _nice(argv: list[str]) -> list[str]:
    return ["nice", "-n", "19", *argv] if shutil.which("nice") else argv


def classic_build(context: Path, tag: str, dockerfile: Path | None = None,
                  build_args: dict[str, str] | None = None, timeout: float = 1800) -> None:
    """``docker build`` with the classic builder (docker 20.10's BuildKit needs buildx)."""
    argv = ["build", "--quiet", "-t", tag]
    if dockerfile:
        argv += ["-f", str(dockerfile)]
    for k, v in (build_args or {}).items():
        argv += ["--build-arg", f"{k}={v}"]
    docker(*argv, str(context), timeout=timeout, env={"DOCKER_BUILDKIT": "0"})


# -- versions ---------------------------------------------------------------------------

def k8s_version() -> str:
    return binaries.module_version("k8s-node", "k8s.io/kubernetes")


def kind_version() -> str:
    return binaries.module_version("kind", "sigs.k8s.io/kind")


def etcd_image_tag() -> str:
    """The etcd the project builds (kubeadm is told this tag in the kind config)."""
    return binaries.module_version("etcd", "go.etcd.io/etcd/server/v3").lstrip("v") + "-0"


def flux_versions() -> dict[str, str]:
    return {"source-controller": binaries.module_version(
                "source-controller", "github.com/fluxcd/source-controller"),
            "helm-controller": binaries.module_version(
                "helm-controller", "github.com/fluxcd/helm-controller")}


# -- rootfs images ----------------------------------------------------------------------

DEBIAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def rootfs_image(name: str, packages: tuple[str, ...]) -> str:
    """A ``docker import`` of a debootstrap minbase rootfs with ``packages`` (PATH set in the
    image: containerd inside the node supplies none)."""
    key = _key(SUITE, *packages, DEBIAN_PATH)
    tag = f"{PREFIX}/rootfs-{name}:{SUITE}-{key}"
    if has_image(tag):
        return tag
    tar = cache_dir() / "rootfs" / f"{name}-{SUITE}-{key}.tar"
    if not tar.is_file():
        log(f"debootstrap {SUITE} rootfs '{name}' ({len(packages)} packages) ...")
        started = time.monotonic()
        proc = subprocess.run(_nice([str(HACK / "rootfs.sh"), str(tar), SUITE, ",".join(packages)]),
                              capture_output=True, text=True, timeout=2400)
        if proc.returncode != 0:
            raise ImageError(f"building the {name} rootfs failed:\n{proc.stderr.strip()[-2000:]}")
        log(f"rootfs '{name}' in {time.monotonic() - started:.0f}s")
    docker("import", "--change", f"ENV PATH={DEBIAN_PATH}", str(tar), tag)
    tar.unlink()
    return tag


def python_base_image() -> str:
    """Debian's python3 (+ venv) as the PYTHON_IMAGE of controller/Containerfile."""
    return rootfs_image("python", PYTHON_PACKAGES)


# -- images around static binaries -------------------------------------------------------

def _add_bytes(tar: tarfile.TarFile, path: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(path)
    info.size, info.mode, info.mtime = len(data), mode, 1700000000
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, path: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(path)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, 1700000000
    tar.addfile(info)


def binary_image(tag: str, files: dict[str, Path], *, entrypoint: list[str] | None = None,
                 user: str | None = None) -> str:
    """An image holding only ``files`` (image path → host file, made executable), plus
    /tmp, /etc/passwd and /etc/group; ``docker import`` with PATH set."""
    if has_image(tag):
        return tag
    with tempfile.NamedTemporaryFile(suffix=".tar") as fh:
        with tarfile.open(fileobj=fh, mode="w") as tar:
            for d in ("etc", "usr", "usr/local", "usr/local/bin", "home", "home/nonroot"):
                _add_dir(tar, d)
            _add_dir(tar, "tmp", 0o1777)
            _add_bytes(tar, "etc/passwd", PASSWD.encode())
            _add_bytes(tar, "etc/group", GROUP.encode())
            _add_bytes(tar, "etc/nsswitch.conf", b"hosts: files dns\n")
            for dest, src in files.items():
                info = tar.gettarinfo(str(src), arcname=dest.lstrip("/"))
                info.mode, info.uid, info.gid, info.uname, info.gname = 0o755, 0, 0, "", ""
                with open(src, "rb") as data:
                    tar.addfile(info, data)
        fh.flush()
        changes = ["ENV PATH=/usr/local/bin:/usr/bin:/bin"]
        if entrypoint:
            changes.append("ENTRYPOINT " + json.dumps(entrypoint))
        if user:
            changes.append(f"USER {user}")
        argv = ["import"]
        for c in changes:
            argv += ["--change", c]
        docker(*argv, fh.name, tag)
    return tag


def _pause_binary() -> Path:
    """Kubernetes' pause.c compiled statically (it has no Go module of its own)."""
    out = binaries.cache_root() / f"pause-{k8s_version()}" / "pause"
    if out.is_file():
        return out
    src = binaries.module_dir("k8s.io/kubernetes", "k8s-node") / "build" / "pause" / "linux" / "pause.c"
    gcc = shutil.which("gcc")
    if not gcc:
        raise ImageError("gcc is needed to build the pause binary (apt-get install gcc libc6-dev)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    proc = subprocess.run([gcc, "-Os", "-static", "-DVERSION=kfp", "-o", str(tmp), str(src)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageError(f"compiling pause.c failed:\n{proc.stderr.strip()[-1500:]}")
    tmp.rename(out)
    return out


def kubeadm_images() -> list[str]:
    """``kubeadm config images list`` for the project's Kubernetes version."""
    kubeadm = binaries.ensure("kubeadm")
    proc = subprocess.run([str(kubeadm), "config", "images", "list",
                           "--kubernetes-version", k8s_version()], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ImageError(f"kubeadm config images list failed: {proc.stderr.strip()}")
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()]


def control_plane_images() -> list[str]:
    """The images kubeadm runs, built here and tagged as kubeadm names them (etcd: the
    project's own version, which the kind config passes to kubeadm); coredns only when a
    coredns image exists (otherwise the kind config skips that add-on)."""
    tags: list[str] = []
    for ref in kubeadm_images():
        repo, _, _version = ref.rpartition(":")
        name = repo.rsplit("/", 1)[-1]
        if name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            tags.append(binary_image(ref, {f"/usr/local/bin/{name}": binaries.ensure(name)}))
        elif name == "kube-proxy":
            if not has_image(ref):
                base = rootfs_image("node", NODE_PACKAGES)
                with tempfile.TemporaryDirectory() as ctx:
                    shutil.copy(binaries.ensure("kube-proxy"), Path(ctx) / "kube-proxy")
                    (Path(ctx) / "Dockerfile").write_text(
                        f"FROM {base}\nCOPY kube-proxy /usr/local/bin/kube-proxy\n")
                    classic_build(Path(ctx), ref)
            tags.append(ref)
        elif name == "etcd":
            ref = f"{repo}:{etcd_image_tag()}"
            tags.append(binary_image(ref, {"/usr/local/bin/etcd": binaries.ensure("etcd")}))
        elif name == "pause":
            pause = _pause_binary()
            tags.append(binary_image(ref, {"/pause": pause}, entrypoint=["/pause"]))
        elif name == "coredns":
            if has_image(ref):
                tags.append(ref)
        else:
            raise ImageError(f"kubeadm lists an image this recipe does not build: {ref}")
    return tags


def coredns_in(tags: list[str]) -> bool:
    return any("/coredns:" in t for t in tags)


# -- the node image ------------------------------------------------------------------------

def node_base_image() -> str:
    rootfs = rootfs_image("node", NODE_PACKAGES)
    dockerfile = (HACK / "node-base.Dockerfile").read_text()
    tag = f"{PREFIX}/kind-base:{kind_version()}-{_key(rootfs, RECIPE, dockerfile)}"
    if has_image(tag):
        return tag
    files = binaries.module_dir("sigs.k8s.io/kind", "kind") / "images" / "base" / "files"
    log(f"building kind's base image {tag} ...")
    with tempfile.TemporaryDirectory() as ctx:
        shutil.copytree(files, Path(ctx) / "files")
        for p in Path(ctx).rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        (Path(ctx) / "Dockerfile").write_text(dockerfile)
        classic_build(Path(ctx), tag, build_args={"ROOTFS": rootfs})
    return tag


def _exec(cid: str, script: str, stdin: bytes | None = None) -> str:
    try:
        return docker("exec", "-i", cid, "bash", "-euc", script, stdin=stdin)
    except ImageError as exc:
        raise ImageError(f"{exc}\n(in the node build container: {script})") from None


def node_image() -> str:
    """The kind node image (tag printed; pass it as KIND_NODE_IMAGE / --image)."""
    base = node_base_image()
    node_bins = {"/usr/bin/kubeadm": binaries.ensure("kubeadm"),
                 "/usr/bin/kubelet": binaries.ensure("kubelet"),
                 "/usr/bin/kubectl": binaries.ensure("kubectl"),
                 "/usr/local/bin/crictl": binaries.ensure("crictl")}
    images = control_plane_images()
    tag = f"{PREFIX}/kind-node:{k8s_version()}-{_key(base, RECIPE, *images, json.dumps(CNI_CONFLIST))}"
    if has_image(tag):
        return tag
    pause = next(t for t in images if "/pause:" in t)
    log(f"assembling node image {tag} ...")
    started = time.monotonic()
    cid = docker("run", "-d", "--privileged", "--entrypoint=sleep", base, "infinity").strip()
    try:
        for dest, src in node_bins.items():
            docker("cp", str(src), f"{cid}:{dest}")
        _exec(cid, "chmod 0755 /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl /usr/local/bin/crictl; "
                   "chown root:root /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl /usr/local/bin/crictl")
        _exec(cid, "mkdir -p /kind/manifests && cat > /kind/version", k8s_version().encode())
        _exec(cid, "cat > /etc/cni/net.d/10-kfp-ptp.conflist",
              json.dumps(CNI_CONFLIST, indent=2).encode())
        _exec(cid, "cat > /kind/manifests/default-cni.yaml", DEFAULT_CNI_MANIFEST.encode())
        _exec(cid, f"sed -i 's#sandbox_image = .*#sandbox_image = \"{pause}\"#' "
                   "/etc/containerd/config.toml")
        docker("exec", "-d", cid, "bash", "-c", "containerd >/tmp/containerd.log 2>&1")
        deadline = time.monotonic() + 60
        while True:
            probe = subprocess.run([docker_bin(), "exec", cid, "ctr", "--namespace=k8s.io", "version"],
                                   capture_output=True)
            if probe.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise ImageError("containerd inside the node build container did not answer in 60s: "
                                 + _exec(cid, "tail -n 20 /tmp/containerd.log"))
            time.sleep(0.5)
        save = subprocess.Popen([docker_bin(), "save", *images], stdout=subprocess.PIPE)
        load = subprocess.run([docker_bin(), "exec", "-i", cid, "ctr", "--namespace=k8s.io",
                               "images", "import", "--label=io.cri-containerd.pinned=pinned",
                               "--all-platforms", "--no-unpack", "--digests", "-"],
                              stdin=save.stdout, capture_output=True)
        save.wait()
        if save.returncode != 0 or load.returncode != 0:
            raise ImageError(f"importing the control-plane images into the node failed: "
                             f"{load.stderr.decode(errors='replace')[-1500:]}")
        listed = set(_exec(cid, "ctr --namespace=k8s.io images list -q").split())
        missing = [i for i in images if i not in listed and f"docker.io/{i}" not in listed]
        if missing:
            raise ImageError(f"the node's containerd lacks {missing} after the import")
        _exec(cid, "pkill containerd; for i in $(seq 1 50); do pgrep containerd >/dev/null || exit 0; "
                   "sleep 0.2; done; exit 1")
        _exec(cid, "rm -f /tmp/containerd.log")
        docker("commit", "--change", 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]',
               "--change", "CMD []", cid, tag)
    finally:
        subprocess.run([docker_bin(), "rm", "-f", "-v", cid], capture_output=True)
    log(f"node image assembled in {time.monotonic() - started:.0f}s")
    return tag


# -- Flux and helper images ------------------------------------------------------------------

def flux_images() -> dict[str, str]:
    """source-controller and helm-controller images from the project's own builds."""
    out = {}
    for name, version in flux_versions().items():
        tag = f"{PREFIX}/{name}:{version}"
        out[name] = binary_image(tag, {f"/usr/local/bin/{name}": binaries.ensure(name)},
                                 entrypoint=[name], user="65534:65534")
    return out


def notification_image() -> str:
    """notification-controller (the e2e tier's build) as an image: the kind tier's Flux
    notifications (tests/kind/test_notify_in_kind.py)."""
    version = binaries.module_version("notification-controller",
                                      "github.com/fluxcd/notification-controller")
    return binary_image(f"{PREFIX}/notification-controller:{version}",
                        {"/usr/local/bin/notification-controller":
                         binaries.ensure("notification-controller")},
                        entrypoint=["notification-controller"], user="65534:65534")


def http_image() -> str:
    """A static file server (python3 -m http.server) for charts served inside the cluster."""
    return python_base_image()


# -- the project's own image ------------------------------------------------------------------

def wheelhouse(python_version: str) -> Path:
    """The locked wheels for ``python_version`` (X.Y), downloaded once with hash checking."""
    lock = ROOT / "controller" / "requirements.lock"
    out = cache_dir() / f"wheels-py{python_version}-{_key(lock.read_text())}"
    done = out / ".complete"
    if done.is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                           "--require-hashes", "--only-binary=:all:",
                           "--python-version", python_version, "-d", str(out), "-r", str(lock)],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise ImageError(f"downloading the locked wheels failed:\n{proc.stderr.strip()[-2000:]}")
    done.write_text("ok\n")
    return out


def plunger_image(python_image: str | None = None, *, wheels: bool = True) -> str:
    """Build controller/Containerfile (the build is the test: it runs every time; Docker's
    layer cache makes an unchanged tree quick).  ``python_image`` is the PYTHON_IMAGE build
    argument (default: the Containerfile's); ``wheels`` serves the lock from a local
    wheel directory instead of an index."""
    from kubectl_flux_plunger import __version__
    base = python_image or None
    files = ["pyproject.toml", "LICENSE", "README.md", "controller/Containerfile",
             "controller/requirements.lock"]
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory() as tmp:
        ctx = Path(tmp)
        for f in files:
            (ctx / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / f, ctx / f)
            digest.update((ROOT / f).read_bytes())
        shutil.copytree(ROOT / "kubectl_flux_plunger", ctx / "kubectl_flux_plunger",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for p in sorted((ctx / "kubectl_flux_plunger").rglob("*.py")):
            digest.update(p.read_bytes())
        if wheels:
            ref = base or "python:3.12-slim"
            pyver = docker("run", "--rm", "--entrypoint", "python3", ref, "-c",
                           "import sys; print('%d.%d' % sys.version_info[:2])").strip()
            shutil.copytree(wheelhouse(pyver), ctx / "controller" / "wheels",
                            ignore=shutil.ignore_patterns(".complete"))
        tag = f"{PREFIX}/kubectl-flux-plunger:{__version__}-{digest.hexdigest()[:12]}"
        args = {"PYTHON_IMAGE": base} if base else {}
        classic_build(ctx, tag, dockerfile=ctx / "controller" / "Containerfile", build_args=args)
    return tag


def main(argv: list[str]) -> int:
    what = argv or ["all"]
    try:
        for item in what:
            if item in ("node", "all"):
                print(f"node: {node_image()}")
            if item in ("flux", "all"):
                for name, tag in flux_images().items():
                    print(f"{name}: {tag}")
            if item in ("python", "all"):
                print(f"python: {python_base_image()}")
            if item == "plunger":
                print(f"plunger: {plunger_image(python_base_image())}")
            if item not in ("node", "flux", "python", "plunger", "all"):
                print(f"error: unknown image set {item!r} (node|flux|python|plunger|all)",
                      file=sys.stderr)
                return 2
    except (ImageError, binaries.BuildError, subprocess.TimeoutExpired) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
