"""The house limits (issue 33), checked on the package's source with the AST: no function
in kubectl_flux_plunger/ longer than 80 lines, none taking more than 8 parameters (``self``
and ``cls`` not counted; a click command callback may take its flags — it only builds the
config and calls), no module longer than 500 lines.

Where one must stay longer, the reason is written next to it: a ``# house-limit: <why>``
comment on the line(s) just above the ``def`` (above its decorators, or between them), or,
for a module, in its first 5 lines.  The checker is tried on synthetic sources first, so
the test can fail."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "kubectl_flux_plunger"
MAX_FUNCTION_LINES = 80
MAX_PARAMS = 8
MAX_MODULE_LINES = 500
MARK = "# house-limit:"


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    named = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
    return len(named) + sum(x is not None for x in (a.vararg, a.kwarg))


def _is_command(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated ``@click.command(...)``, ``@click.group(...)`` or ``@<group>.command(...)``."""
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in ("command", "group"):
            return True
    return False


def _exempt(lines: list[str], fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A ``# house-limit:`` comment in the comment lines just above the ``def`` or its
    decorators (or among the decorators)."""
    first = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
    above = lines[first - 1 : fn.lineno - 1]  # the decorators (and comments between them)
    i = first - 2
    while i >= 0 and lines[i].strip().startswith("#"):
        above.append(lines[i])
        i -= 1
    return any(MARK in line for line in above)


def offences(source: str, name: str = "<source>") -> list[str]:
    """Every limit ``source`` breaks without a ``# house-limit:`` reason, one line each."""
    lines = source.splitlines()
    found = []
    if len(lines) > MAX_MODULE_LINES and not any(MARK in line for line in lines[:5]):
        found.append(f"{name}: module {len(lines)} lines (> {MAX_MODULE_LINES})")
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        assert node.end_lineno is not None
        length = node.end_lineno - node.lineno + 1
        params = _params(node)
        too_long = length > MAX_FUNCTION_LINES
        too_many = params > MAX_PARAMS and not _is_command(node)
        if (too_long or too_many) and not _exempt(lines, node):
            found.append(f"{name}:{node.lineno} {node.name}: {length} lines, {params} params")
    return found


def _function(lines: int, params: int = 0, above: str = "", decorator: str = "") -> str:
    args = ", ".join(f"a{i}" for i in range(params))
    body = "".join(f"    x{i} = {i}\n" for i in range(lines - 1))
    return f"{above}{decorator}def f({args}):\n{body}"


def test_the_checker_finds_what_breaks_a_limit():
    assert offences(_function(80, 8)) == []
    assert offences(_function(81)) == ["<source>:1 f: 81 lines, 0 params"]
    assert offences(_function(10, 9)) == ["<source>:1 f: 10 lines, 9 params"]
    method = "class C:\n" + textwrap.indent(_function(5, 9).replace("(a0", "(self, a0"), "    ")
    assert offences(method) == ["<source>:2 f: 5 lines, 9 params"]  # self not counted
    assert offences("def f(a, *args, b, **kw):\n    pass\n") == []
    assert offences("def f(a, b, c, d, e, f, g, *args, **kw):\n    pass\n") != []
    nested = "def outer():\n" + textwrap.indent(_function(81), "    ")
    assert [o.split(":")[1] for o in offences(nested)] == ["1 outer", "2 f"]
    assert offences("x = 1\n" * 501) == ["<source>: module 501 lines (> 500)"]
    assert offences("x = 1\n" * 500) == []


def test_click_callbacks_may_take_their_flags_but_not_grow_long():
    assert offences(_function(10, 14, decorator="@click.command('x')\n")) == []
    assert offences(_function(10, 14, decorator="@cli.command()\n")) == []
    assert offences(_function(10, 14, decorator="@functools.cache\n")) != []
    assert offences(_function(81, 14, decorator="@click.command('x')\n")) != []


def test_an_exemption_needs_its_reason_right_above():
    reason = "# house-limit: one state machine, read at once\n"
    assert offences(_function(81, above=reason)) == []
    assert offences(_function(81, above=reason + "# more words\n")) == []
    assert offences(_function(81, above=reason, decorator="@deco\n")) == []
    assert offences(_function(81, decorator="@deco\n" + reason)) == []
    assert offences(_function(81, above=reason + "\n")) != []  # not just above
    assert offences(_function(81, above="# house limit: no colon\n")) != []
    module = '"""Doc."""\n# house-limit: generated tables\n' + "x = 1\n" * 600
    assert offences(module) == []
    late = '"""Doc."""\n' + "x = 1\n" * 10 + "# house-limit: too late\n" + "x = 1\n" * 600
    assert offences(late) != []


def test_the_package_keeps_the_house_limits():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        found += offences(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    assert found == [], "over the house limits (issue 33):\n" + "\n".join(found)
