"""Global flags typed before the verb.

The Flux CLI runs a plugin with every word after ``flux`` except the plugin's name, so
``flux -n team-b plunger status`` runs ``flux-plunger -n team-b status`` (cobra's
``Find`` strips only the command name; the plugin command has ``DisableFlagParsing``).
kubectl's and flux's connection flags are global there: this moves them behind the verb,
where the verbs declare them.  ``-n``/``-A`` are dropped for a verb that has no
namespace (``version``), as kubectl's global flags are ignored by commands that do not
use them; any other flag a verb does not take stays an error of that verb.

Also the name the program was run as (``prog_name``), from ``argv[0]``.
"""

from __future__ import annotations

import os
import sys

import click

from .options import OVERRIDE_FLAG_NAMES

# long name -> takes a value
GLOBAL_FLAGS: dict[str, bool] = {
    "--namespace": True,
    "--all-namespaces": False,
    "--kubeconfig": True,
    "--context": True,
    "--request-timeout": True,
    **{f: f != "--insecure-skip-tls-verify" for f in OVERRIDE_FLAG_NAMES},
}
SHORT = {"-n": "--namespace", "-A": "--all-namespaces"}
CONTEXTUAL = {"--namespace", "--all-namespaces"}
# flux's own global flags, which mean nothing to flux-plunger: refused by name
FLUX_ONLY = {
    "--timeout",
    "--verbose",
    "--kube-api-qps",
    "--kube-api-burst",
    "--cache-dir",
    "--disable-compression",
}


def _split(token: str) -> tuple[str, str | None] | None:
    """(long flag name, attached value or None) when ``token`` is a global flag."""
    if token.startswith("--"):
        name, eq, value = token.partition("=")
        if name in GLOBAL_FLAGS:
            return name, (value if eq else None)
        return None
    if token[:2] in SHORT:
        rest = token[2:]
        if rest.startswith("="):
            rest = rest[1:]
        return SHORT[token[:2]], (rest or None)
    return None


def hoist_global_flags(group: click.Group, args: list[str]) -> list[str]:
    """``args`` with the global flags before the verb moved right after it."""
    moved: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--" or not token.startswith("-"):
            break
        hit = _split(token)
        if hit is None:
            if token.partition("=")[0] in FLUX_ONLY:
                raise click.UsageError(
                    f"{token.partition('=')[0]} is a flag of flux itself, which flux-plunger "
                    "does not take; leave it out (the verbs have their own timeouts)"
                )
            break  # --help, --version, or unknown: click decides
        name, value = hit
        words = [token]
        if GLOBAL_FLAGS[name] and value is None:
            if i + 1 >= len(args):
                raise click.UsageError(f"flag needs an argument: {token}")
            words.append(args[i + 1])
            i += 1
        moved.append((name, words))
        i += 1
    if not moved:
        return args
    if i >= len(args) or args[i].startswith("-"):
        # no verb follows: kubectl prints its help for a bare `kubectl -n x`
        return args[i:]
    verb = args[i]
    cmd = group.commands.get(verb)
    if cmd is None:
        return args[i : i + 1] + [w for _, ws in moved for w in ws] + args[i + 1 :]
    takes = {opt for p in cmd.params if isinstance(p, click.Option) for opt in p.opts}
    hoisted: list[str] = []
    for name, words in moved:
        if name in CONTEXTUAL and name not in takes:
            continue
        hoisted += words
    return [verb, *hoisted, *args[i + 1 :]]


def prog_name() -> str:
    base = os.path.basename(sys.argv[0] or "")
    if base.startswith("flux-"):
        return "flux plunger"
    return "kubectl flux-plunger"
