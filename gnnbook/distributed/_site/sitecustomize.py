"""Run by Python at start-up in every process whose PYTHONPATH holds this folder
(the launcher puts it there).  Adapts DGL only when the launcher's variables
are set; see gnnbook/distributed/emulation.py for why and how."""
import os

if os.environ.get("GNNBOOK_MACHINE_ID") is not None or os.environ.get("GNNBOOK_SHM_PREFIX"):
    import faulthandler
    import signal

    # The launcher sends SIGUSR1 before it kills a hung job: every thread's stack
    # goes to the log (DGL replaces the handlers of SIGTERM and SIGINT, not this one).
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    from gnnbook.distributed.emulation import install

    install()
