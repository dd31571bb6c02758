"""What a child the tests start inherits of SIGINT.

A shell's background job (``cmd &``) starts with SIGINT and SIGQUIT ignored, the ignore is
inherited through fork and exec, and Python keeps an inherited SIG_IGN for SIGINT (no
KeyboardInterrupt).  A test that sends SIGINT to a process it started — Ctrl-C, as a person
would — must not depend on how the runner started pytest: each such child gets SIGINT's
default disposition before it execs (``preexec_fn=default_sigint``), which the program it
runs then handles as it would on a terminal (issue 36)."""
from __future__ import annotations

import signal


def default_sigint() -> None:
    """``preexec_fn`` of a child that will be sent SIGINT: the default disposition (a
    handler does not survive exec; an ignore would)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
