"""The course itself: claims, lab checks and each lab's grading code, plots, release and autograding,
the course run and its website (these modules run the notebooks; some need the ``dev`` extras).

- ``claims``: every notebook's published-vs-measured record; ``viz``: source listings, tables, plot style;
  ``diagrams``: the concept figures the notebooks draw from code;
- ``labcheck``: reference implementations refused while a student's code runs; ``grading``: each lab's
  grading code that real processes import;
- ``release``: nbgrader release and autograding; ``course_run``: every notebook and one table of claims;
  ``site``: the course website; ``commands``: their ``python -m gnnbook`` subcommands;
- ``layout``: the package's map, its folders in layer order.
"""

__all__ = ["claims", "commands", "course_run", "diagrams", "grading", "labcheck", "layout", "release", "site", "viz"]
