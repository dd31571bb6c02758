"""cli/progress.py: result lines in listing order as releases finish, the live progress line
on a terminal only, and what an interrupted run reports (the Ctrl-C behaviour itself runs
against the real apiserver in tests/apiserver/test_recover_stream.py)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kubectl_flux_plunger.cli.progress import Stream

pytestmark = pytest.mark.unit


def hr(name: str) -> dict:
    return {"metadata": {"namespace": "ns", "name": name}}


def outcome(name: str, shown: bool = True) -> SimpleNamespace:
    return SimpleNamespace(name=name, shown=shown)


def make(total: int, tty: bool) -> Stream:
    return Stream(verb="recover", total=total, prog="kubectl flux-plunger", tty=tty,
                  line=lambda o: f"line {o.name}" if o.shown else None)


def test_lines_come_in_listing_order_as_soon_as_every_earlier_one_is_done(capsys):
    s = make(4, tty=False)
    for i in range(4):
        s.started(i, hr(f"r{i}"))
    s.finished(2, outcome("r2"))
    s.finished(1, outcome("r1", shown=False))
    assert capsys.readouterr().out == ""          # r0 still runs: nothing may overtake it
    s.finished(0, outcome("r0"))
    assert capsys.readouterr().out == "line r0\nline r2\n"   # r1 is not shown
    s.finished(3, outcome("r3"))
    s.close()
    out = capsys.readouterr()
    assert out.out == "line r3\n" and out.err == ""          # no progress line off a terminal


def test_progress_line_on_a_terminal_is_cleared_before_each_result_line(capsys):
    s = make(3, tty=True)
    s.started(0, hr("r0"))
    s.started(1, hr("r1"))
    s.finished(1, outcome("r1"))
    err = capsys.readouterr().err
    assert err == "\rrecover: 1/3 done, 1 in progress\x1b[K"
    s.finished(0, outcome("r0"))
    captured = capsys.readouterr()
    assert captured.out == "line r0\nline r1\n"
    assert captured.err.startswith("\r\x1b[K")             # cleared before the lines
    s.close()
    assert capsys.readouterr().err.endswith("\r\x1b[K")     # and at the end


def test_report_after_an_interrupt_names_what_is_held_and_the_command_that_lifts_it(capsys):
    s = make(3, tty=False)
    s.report_left([("a", "x"), ("b", "y")], [("a", "x"), ("a", "z"), ("b", "y")])
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("interrupted: 2 HelmRelease(s) not done; run the same command again "
                      "to continue")
    assert "  -n a helmrelease.helm.toolkit.fluxcd.io/z" in err
    assert "  kubectl flux-plunger resume-owned -n a x z" in err
    assert "  kubectl flux-plunger resume-owned -n b y" in err
