"""The import layering contract (cli → verbs/serve → executor → core → kube) holds, and what
a fresh interpreter imports (processes: import-linter, ``python -c``; the cli tier)."""
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cli
ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold():
    lint = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 9 kept, 0 broken" in proc.stdout
    assert "kube: client -> resources -> read -> transport" in proc.stdout  # kube/'s layers


def test_help_does_not_import_the_kubernetes_client():
    code = ("import sys; from kubectl_flux_plunger.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('kubernetes' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout + out.stderr


def test_the_client_loads_without_the_generated_models(tmp_path):
    """kube/ loads only configuration, kubeconfig parsing and the REST transport of the
    official client (not its ~1,000 generated model classes); other code importing the
    full client still works afterwards."""
    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\ncurrent-context: t\nclusters:\n"
                  "- name: t\n  cluster: {server: 'https://127.0.0.1:1'}\nusers:\n"
                  "- name: u\n  user: {token: abc}\ncontexts:\n"
                  "- name: t\n  context: {cluster: t, user: u, namespace: ns1}\n")
    code = (
        "import sys\n"
        "from kubectl_flux_plunger.kube import Kube, default_namespace\n"
        f"k = Kube.from_kubeconfig({str(kc)!r})\n"
        "print(k.host, default_namespace(" + repr(str(kc)) + ", None),\n"
        "      k._headers(None)['authorization'])\n"
        "print('kubernetes.client.models' in sys.modules)\n"
        "from kubernetes.client import CoreV1Api\n"
        "import kubernetes\n"
        "print(CoreV1Api.__name__, kubernetes.__version__.split('.')[0])\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "https://127.0.0.1:1 ns1 Bearer abc"
    assert lines[1] == "False"
    assert lines[2] == "CoreV1Api 36"
