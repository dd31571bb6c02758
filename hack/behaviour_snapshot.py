"""What the command line shows without a cluster, as one text: every verb's --help, cobra
__complete answers, usage errors and bad input (text and exit code), and the one-line
errors against an unreachable server.  For reshapings that must not change behaviour
(issue 33): run it in two checkouts and diff.

    PY=.venv/bin/python python3 hack/behaviour_snapshot.py > before.txt

Deterministic (temporary paths are written <TMP>)."""

import os
import subprocess
import sys
import tempfile

PY = os.environ.get("PY", sys.executable)
tmp = tempfile.mkdtemp()
env = dict(
    os.environ,
    KUBECONFIG=os.path.join(tmp, "none"),
    HOME=tmp,
    XDG_CACHE_HOME=tmp,
    COLUMNS="100",
    NO_COLOR="1",
    PYTHONHASHSEED="0",
)
env.pop("KUBERNETES_SERVICE_HOST", None)
bad = os.path.join(tmp, "unreach")
open(bad, "w").write("""apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: ns1}}]
current-context: x
""")
VERBS = ["status", "recover", "resume-owned", "release-fence", "restore", "version", "serve"]
runs = [["--help"], [], ["--version"], ["nosuch"]]
for v in VERBS:
    runs += [[v, "--help"], [v, "-h"], [v, "--bogus"]]
for w in [
    [""],
    ["s"],
    ["r"],
    ["status", "-"],
    ["status", "--"],
    ["recover", "--"],
    ["serve", "--"],
    ["release-fence", "--"],
    ["resume-owned", "--"],
    ["restore", "--"],
    ["status", "-o", ""],
    ["status", "--output", ""],
    ["serve", "--log-format", ""],
    ["status", "-n", ""],
    ["recover", "-n", "x", ""],
    ["--context", ""],
    ["status", "--kubeconfig", ""],
    ["version", "-"],
    ["restore", ""],
    ["serve", "--leader-elect", ""],
    ["release-fence", ""],
]:
    runs += [["__complete", *w], ["__completeNoDesc", *w]]
# usage errors / bad input decided before any API call
runs += [
    ["status", "-o", "yaml"],
    ["status", "-A", "-n", "x"],
    ["status", "-l", "a=="],
    ["recover", "--no-headers"],
    ["recover"],
    ["recover", "-A", "name"],
    ["recover", "--timeout", "xs"],
    ["resume-owned"],
    ["release-fence"],
    ["release-fence", "--bogus"],
    ["restore"],
    ["restore", "/nonexistent"],
    ["serve", "--handshake-timeout", "0"],
    ["serve", "--drain-timeout", "-1"],
    ["serve", "--metrics-bind-address", "nope"],
    ["serve", "--health-probe-bind-address", "x:y"],
    ["serve", "--lease-duration", "5s", "--renew-deadline", "10s"],
    ["serve", "--renew-deadline", "5s", "--retry-period", "10s"],
    ["serve", "--leader-elect=false", "--log-format", "xml"],
    ["serve", "-l", "a in (b"],
    ["serve", "--namespace", "BAD_NS"],
    ["serve", "--drain-timeout", "100s", "--termination-grace-period", "30s"],
    ["version", "--client", "-o", "json"],
    ["version", "--client"],
    ["version", "-o", "bad"],
    ["--kubeconfig", bad, "status"],
    ["--kubeconfig", bad, "recover", "-n", "a", "b"],
    ["--kubeconfig", bad, "status", "-A", "--request-timeout", "1s"],
    ["--kubeconfig", bad, "resume-owned", "-A"],
    ["--kubeconfig", bad, "release-fence", "--all-namespaces"],
]
for args in runs:
    p = subprocess.run(
        [PY, "-m", "kubectl_flux_plunger", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    out = p.stdout.replace(tmp, "<TMP>")
    err = p.stderr.replace(tmp, "<TMP>")
    print(f"=== {' '.join(a.replace(tmp, '<TMP>') for a in args)} -> {p.returncode}")
    print(out, end="")
    print("--- stderr")
    print(err, end="")
