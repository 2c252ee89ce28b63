"""Holds ``sitecustomize.py``, which the launcher puts on PYTHONPATH (this folder,
not the package) so that every process of an emulated machine adapts DGL; see
:mod:`gnnbook.distributed.emulation`.  A package only so that it ships with gnnbook."""
