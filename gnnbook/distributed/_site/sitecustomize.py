"""Run by Python at start-up in every process whose PYTHONPATH holds this folder
(the launcher puts it there).  Adapts DGL only when the launcher's variables
are set; see gnnbook/distributed/emulation.py for why and how."""
import os

if os.environ.get("GNNBOOK_MACHINE_ID") is not None or os.environ.get("GNNBOOK_SHM_PREFIX"):
    from gnnbook.distributed.emulation import install

    install()
