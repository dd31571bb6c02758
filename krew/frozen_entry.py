"""The script krew/binary.py freezes: the console scripts' entry point, ``kubectl_flux_plunger.
entry:main``, with its return value as the exit code (what pip's console-script wrapper does)."""

import sys

from kubectl_flux_plunger.entry import main

sys.exit(main())
