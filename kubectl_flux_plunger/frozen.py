"""What the frozen binary (the krew archive: krew/binary.py, PyInstaller) says about itself.

``runs_on`` reads the line krew/binary.py writes into the bundle after the freeze — what the
binary needs of the system it runs on, measured then (``linux/amd64, glibc 2.30 or newer``,
issue 37) — for ``version``.  Standard library only, and ``os``/``sys`` alone: the fast
``version --client`` path of :mod:`.entry` reads it without importing anything else.
"""

from __future__ import annotations

import os
import sys

RUNS_ON = "flux-plunger-runs-on.txt"  # krew/binary.py's RUNS_ON, in the frozen bundle


def runs_on() -> str | None:
    """What the frozen binary needs of the system it runs on; None outside a frozen bundle
    (a pip install) or in one without the file."""
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle is None:
        return None
    try:
        with open(os.path.join(bundle, RUNS_ON), encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None
