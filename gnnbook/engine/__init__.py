"""Execution-engine optimisations of minibatch and distributed GNN training
(book chapter 5.2), one module per idea.  Modules are imported by name, for
example ``from gnnbook.engine import prefetch``.
"""
