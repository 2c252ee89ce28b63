"""The course itself: claims, lab checks and each lab's grading code, plots, release and autograding,
the course run and its website (these modules run the notebooks; some need the ``dev`` extras).

- ``claims``: every notebook's published-vs-measured record; ``viz``: source listings, tables, plot style;
  ``diagrams``: the concept figures the notebooks draw from code;
- ``labcheck``: reference implementations refused while a student's code runs; ``grading``: each lab's
  grading code that real processes import, and the engine that grades a lab outside the student's kernel;
- ``conventions``: which cells of a lab are solutions and checks; ``vetting``: what a solution may import
  and call; ``sandbox``: where a submission's code runs when graded;
- ``release``: nbgrader release and autograding; ``course_run``: every notebook and one table of claims;
  ``site``: the course website; ``commands``: their ``python -m gnnbook`` subcommands;
- ``layout``: the package's map, its folders in layer order.
"""

__all__ = ["claims", "commands", "conventions", "course_run", "diagrams", "grading", "labcheck", "layout",
           "release", "sandbox", "site", "vetting", "viz"]
