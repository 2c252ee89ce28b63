"""Tools for teachers: the labs' classroom release and autograding (nbgrader),
the whole course run with its table of claims, and the course website.

These modules sit above the rest of the package (they run the notebooks) and
need the ``dev`` extras (nbgrader, papermill, Sphinx with MyST-NB).
"""
