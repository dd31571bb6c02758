"""hack/kind/runc-capfilter.py, the runtime wrapper engine.sh registers where the host's
capability bounding set lacks capabilities: pure logic, no engine needed."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _wrapper() -> ModuleType:
    spec = importlib.util.spec_from_file_location("capfilter", ROOT / "hack" / "kind" / "runc-capfilter.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_missing_capabilities_leave_every_set() -> None:
    w = _wrapper()
    caps = {k: ["CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_NET_ADMIN"] for k in w.CAP_SETS}
    process = {"capabilities": caps}
    assert w.filter_caps(process, {"CAP_SYS_RESOURCE"}) is True
    assert all(v == ["CAP_CHOWN", "CAP_NET_ADMIN"] for v in process["capabilities"].values())
    assert w.filter_caps(process, {"CAP_SYS_RESOURCE"}) is False  # nothing left to drop


def test_create_rewrites_the_bundle_and_exec_the_process_file(tmp_path: Path) -> None:
    w = _wrapper()
    (tmp_path / "config.json").write_text(json.dumps(
        {"process": {"capabilities": {"bounding": ["CAP_SYS_RESOURCE", "CAP_KILL"]}}}))
    w.rewrite(str(tmp_path / "config.json"), {"CAP_SYS_RESOURCE"}, "process")
    assert json.loads((tmp_path / "config.json").read_text())["process"]["capabilities"] == {
        "bounding": ["CAP_KILL"]}
    proc = tmp_path / "process.json"
    proc.write_text(json.dumps({"capabilities": {"effective": ["CAP_SYS_RESOURCE"]}}))
    w.rewrite(str(proc), {"CAP_SYS_RESOURCE"}, None)
    assert json.loads(proc.read_text())["capabilities"] == {"effective": []}


def test_options_are_found_in_both_spellings() -> None:
    w = _wrapper()
    assert w.option(["--bundle", "/b", "id"], "--bundle", "-b") == "/b"
    assert w.option(["--bundle=/c", "id"], "--bundle", "-b") == "/c"
    assert w.option(["-p", "/p.json", "id"], "--process", "-p") == "/p.json"
    assert w.option(["id"], "--process", "-p") is None


def test_the_bounding_set_is_read_from_proc() -> None:
    w = _wrapper()
    mask = next(int(line.split()[1], 16) for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("CapBnd:"))
    expected = {f"CAP_{n}" for i, n in enumerate(w.CAP_NAMES) if not (mask >> i) & 1}
    assert w.missing_caps() == expected
