#!/usr/bin/python3
"""OCI runtime wrapper: drop capabilities the host cannot grant, then exec the real runc.

Registered by hack/kind/engine.sh as dockerd's default runtime **only** on hosts whose
capability bounding set lacks some capability (e.g. CAP_SYS_RESOURCE in some microVMs):
there `docker run --privileged` — which kind always uses — fails in runc with "unable to
apply caps: operation not permitted".  For `create`/`run` it rewrites the bundle's
config.json, for `exec` the --process file, removing from all five capability sets every
capability absent from this process's own bounding set.  All arguments go to the real runc
unchanged.  The real runc's path is the REAL_RUNC line below (engine.sh fills it in).
"""
from __future__ import annotations

import json
import os
import sys

REAL_RUNC = "@REAL_RUNC@"

# linux/capability.h, index = capability number
CAP_NAMES: tuple[str, ...] = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID",
    "SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST",
    "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO",
    "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
    "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE",
    "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM",
    "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
)
CAP_SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")


def missing_caps() -> set[str]:
    """Names (CAP_X) of known capabilities absent from this process's bounding set."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("CapBnd:"):
                mask = int(line.split()[1], 16)
                return {f"CAP_{n}" for i, n in enumerate(CAP_NAMES) if not mask >> i & 1}
    return set()


def filter_caps(process: dict[str, object], missing: set[str]) -> bool:
    """Remove ``missing`` from every capability set of an OCI process; True if changed."""
    caps = process.get("capabilities")
    if not isinstance(caps, dict):
        return False
    changed = False
    for key in CAP_SETS:
        have = caps.get(key)
        if isinstance(have, list):
            kept = [c for c in have if c not in missing]
            if len(kept) != len(have):
                caps[key] = kept
                changed = True
    return changed


def rewrite(path: str, missing: set[str], key: str | None) -> None:
    """Filter the JSON document at ``path`` (its ``key`` member when given) in place."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return  # runc reports the real problem
    target = doc.get(key) if key else doc
    if isinstance(target, dict) and filter_caps(target, missing):
        tmp = f"{path}.capfilter"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
        os.replace(tmp, path)


def option(args: list[str], *names: str) -> str | None:
    """Value of the first ``--name VALUE`` / ``--name=VALUE`` among ``args``."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg[len(name) + 1:]
    return None


COMMANDS = {"create", "run", "exec", "delete", "start", "kill", "state", "features",
            "checkpoint", "restore", "events", "pause", "resume", "ps", "update", "list",
            "spec", "help"}


def main(argv: list[str]) -> None:
    missing = missing_caps()
    cmd_at = next((i for i, a in enumerate(argv) if a in COMMANDS), None)
    if missing and cmd_at is not None:
        cmd, rest = argv[cmd_at], argv[cmd_at + 1:]
        if cmd in ("create", "run"):
            bundle = option(rest, "--bundle", "-b") or os.getcwd()
            rewrite(os.path.join(bundle, "config.json"), missing, "process")
        elif cmd == "exec":
            proc = option(rest, "--process", "-p")
            if proc:
                rewrite(proc, missing, None)
    os.execv(REAL_RUNC, [REAL_RUNC, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
