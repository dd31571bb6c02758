"""The script krew/binary.py freezes: the console scripts' entry point, ``kubectl_flux_plunger.
entry:main``, with its return value as the exit code (what pip's console-script wrapper does).

First it gives back the environment the user started the binary with.  PyInstaller's
bootloader restarts itself once with LD_LIBRARY_PATH pointing at the bundle (the value it found
saved as LD_LIBRARY_PATH_ORIG) and a few ``_PYI_*`` variables of its own.  The dynamic loader of
this process read LD_LIBRARY_PATH when it started, so undoing it now changes nothing here; it
only keeps the processes we start — a kubeconfig's exec credential plugin (aws,
gke-gcloud-auth-plugin, kubelogin, …) — from loading the bundle's libssl or libpython, or, when
the plugin is itself a PyInstaller program (the AWS CLI v2 is), from taking our variables for
its own."""

import os
import sys


def restore_environment() -> None:
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle is None:
        return
    for var in ("LD_LIBRARY_PATH", "LIBPATH"):
        saved = os.environ.pop(var + "_ORIG", None)
        if saved is not None:
            os.environ[var] = saved
        elif os.environ.get(var, "").split(os.pathsep)[0] == bundle:
            del os.environ[var]
    for var in [v for v in os.environ if v.startswith("_PYI_")]:
        del os.environ[var]


restore_environment()

from kubectl_flux_plunger.entry import main  # noqa: E402

sys.exit(main())
