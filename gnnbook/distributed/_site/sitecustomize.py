"""Run by Python at start-up in every process whose PYTHONPATH holds this folder
(the launcher puts it there).  Adapts DGL only when the launcher's variables
are set; see gnnbook/distributed/emulation.py for why and how.  Then runs the
sitecustomize this one shadows (the next one on sys.path), if there is one."""
import os
import sys

if os.environ.get("GNNBOOK_MACHINE_ID") is not None or os.environ.get("GNNBOOK_SHM_PREFIX"):
    import faulthandler
    import signal

    # The launcher sends SIGUSR1 before it kills a hung job: every thread's stack
    # goes to the log (DGL replaces the handlers of SIGTERM and SIGINT, not this one).
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    try:
        from gnnbook.distributed.emulation import install
    except ImportError as err:
        if os.environ.get("GNNBOOK_EMULATION") == "required":
            # Unadapted, this process would quietly use machine 0's shared memory: stop it now.
            sys.stderr.write(f"gnnbook: this process is part of an emulated DistDGL job but its interpreter "
                             f"({sys.executable}) cannot import gnnbook ({err}); run the job with a Python "
                             "that has gnnbook installed or on PYTHONPATH\n")
            sys.stderr.flush()
            os._exit(2)
    else:
        install()


def _run_shadowed() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    entries = [os.path.abspath(p or os.getcwd()) for p in sys.path]
    later = sys.path[entries.index(here) + 1:] if here in entries else []
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", later)
    if spec is not None and spec.loader is not None and os.path.dirname(os.path.abspath(spec.origin or "")) != here:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_run_shadowed()
