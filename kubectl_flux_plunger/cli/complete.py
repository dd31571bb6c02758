"""Cobra's ``__complete`` protocol, which both callers of a plugin's completion speak.

* ``flux plunger <TAB>``: flux (>= 2.9) runs ``flux-plunger __complete WORD... INCOMPLETE``
  (internal/plugin/completion.go of fluxcd/flux2);
* ``kubectl flux-plunger <TAB>``: kubectl (>= 1.26) runs ``kubectl_complete-flux_plunger
  WORD... INCOMPLETE`` from PATH, which is ``kubectl-flux_plunger __complete "$@"``.

Output: one candidate per line, then ``:N``, a cobra ShellCompDirective (0 default, 1 error,
4 no file completion, 16 directories only).  Namespaces, HelmRelease names and contexts
come from the cluster/kubeconfig with a short per-request timeout; a cluster that cannot
be reached gives no candidates, never an error.
"""

from __future__ import annotations

import sys

import click

DEFAULT, ERROR, NO_FILE, DIRS = 0, 1, 4, 16


def cobra_complete(group: click.Group, prog: str, words: list[str]) -> int:
    from click.shell_completion import ShellComplete

    from .argv import hoist_global_flags

    if not words:
        words = [""]
    *args, incomplete = words
    try:
        args = hoist_global_flags(group, args)
        items = ShellComplete(group, {}, prog, "_FLUX_PLUNGER_COMPLETE").get_completions(
            args, incomplete
        )
    except Exception:  # noqa: BLE001 - a completion request never prints a traceback
        sys.stdout.write(f":{ERROR}\n")
        return 0
    directive = NO_FILE
    out = []
    for item in items:
        if item.type == "file":
            directive = DEFAULT
        elif item.type == "dir":
            directive = DIRS
        else:
            out.append(str(item.value))
    sys.stdout.write("".join(f"{v}\n" for v in out) + f":{directive}\n")
    return 0
