"""Teachers' commands for ``python -m gnnbook``: ``release``, ``autograde``, ``course``, ``site``.

Book: none (teachers' commands).

Used in: no notebook directly.

Example:
    $ python -m gnnbook release --out release
    $ python -m gnnbook autograde submissions/ --grades build/grades.csv
    $ python -m gnnbook course chapters/02_gnn_models.ipynb
    $ python -m gnnbook site
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..base.errors import UserError
from .course_run import CELL_TIMEOUT_S

REPO_ROOT = Path(__file__).resolve().parents[2]


def _release(args: argparse.Namespace) -> int:
    from .release import ReleaseError, default_labs, release

    try:
        labs = [Path(p) for p in args.labs] or default_labs(REPO_ROOT)
        for path in release(labs, Path(args.out)):
            print(f"student version: {path}")
    except ReleaseError as exc:
        raise UserError(str(exc)) from None
    return 0


def _autograde(args: argparse.Namespace) -> int:
    from .release import ReleaseError, autograde, default_labs, grades_summary

    try:
        labs = [Path(p) for p in args.labs] or default_labs(REPO_ROOT)
        if args.only:
            labs = select_labs(labs, args.only)
        timeout = {} if args.cell_timeout is None else {"cell_timeout_s": args.cell_timeout}
        rows = autograde(Path(args.submissions), labs, Path(args.grades), Path(args.autograded), jobs=args.jobs,
                         feedback=Path(args.feedback), **timeout)
    except ReleaseError as exc:
        raise UserError(str(exc)) from None
    print(grades_summary(rows))
    print(f"\ngrade table: {args.grades}; feedback per student: {args.feedback}; "
          f"executed submissions (labs graded by nbgrader): {args.autograded}")
    return 0


def select_labs(labs: list[Path], names: list[str]) -> list[Path]:
    """The labs named by their number (``lab03``) or whole name (``lab03_collectives``), as
    ``make autograde LABS="lab03 lab06"`` gives them.

    >>> [p.name for p in select_labs([Path("lab05_feature_cache.ipynb"), Path("lab05b_historical_embeddings.ipynb")],
    ...                              ["lab05"])]
    ['lab05_feature_cache.ipynb']
    """
    from .release import ReleaseError

    chosen = []
    for name in names:
        match = [lab for lab in labs if name in (lab.stem, lab.stem.split("_")[0])]
        if not match:
            raise ReleaseError(f"no lab is called {name!r}: give a lab's number or name, e.g. "
                               f"{', '.join(lab.stem.split('_')[0] for lab in labs)}")
        chosen += [lab for lab in match if lab not in chosen]
    return chosen


def _course(args: argparse.Namespace) -> int:
    from .course_run import default_notebooks, report, run_course

    notebooks = [Path(p) for p in args.notebooks] or default_notebooks(REPO_ROOT)
    runs = run_course(notebooks, Path(args.out), timeout_s=args.timeout)
    table, passed = report(runs)
    print("\n" + table)
    return 0 if passed else 1


def _site(args: argparse.Namespace) -> int:
    from .site import build_site

    print(f"site: {build_site(Path(args.executed), Path(args.out), solutions=args.solutions)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the teachers' commands to the course's command line."""
    p = sub.add_parser("release", help="student versions of the labs (nbgrader), solutions removed")
    p.add_argument("labs", nargs="*", help="lab notebooks (default: labs/*.ipynb)")
    p.add_argument("--out", default=str(REPO_ROOT / "release"),
                   help="folder for the student versions (default: release/)")
    p.set_defaults(func=_release)
    p = sub.add_parser("autograde",
                       help="grade submitted labs into a CSV of per-task points and a feedback file per student")
    p.add_argument("submissions", help="folder with one sub-folder per student holding <lab>.ipynb files")
    p.add_argument("--labs", nargs="*", default=[], help="the teacher's labs (default: labs/*.ipynb)")
    p.add_argument("--grades", default=str(REPO_ROOT / "build" / "grades.csv"),
                   help="the CSV of points per student, lab and task (default: build/grades.csv)")
    p.add_argument("--autograded", default=str(REPO_ROOT / "build" / "autograded"),
                   help="where the executed submissions are kept")
    p.add_argument("--cell-timeout", type=float, default=None,
                   help="seconds a cell may run before it is stopped and its check scores zero (default: 900)")
    p.add_argument("--jobs", type=int, default=1,
                   help="submissions graded at a time, one kernel each (default: 1; up to the number of cores)")
    p.add_argument("--only", nargs="*", default=[], metavar="LAB",
                   help="grade only these labs, by number or name (e.g. --only lab03 lab06)")
    p.add_argument("--feedback", default=str(REPO_ROOT / "build" / "feedback"),
                   help="one feedback file per student and lab: <student>/<lab>.md (default: build/feedback/)")
    p.set_defaults(func=_autograde)
    p = sub.add_parser("course", help="run every notebook with papermill and print the table of claims")
    p.add_argument("notebooks", nargs="*", help="notebooks to run (default: chapters/*.ipynb labs/*.ipynb)")
    p.add_argument("--out", default=str(REPO_ROOT / "build" / "course"),
                   help="folder for the executed notebooks and claims.json (default: build/course/)")
    p.add_argument("--timeout", type=float, default=CELL_TIMEOUT_S,
                   help=f"seconds one cell may run before it is stopped and named (default: {CELL_TIMEOUT_S:g})")
    p.set_defaults(func=_course)
    p = sub.add_parser("site", help="the course website from the executed notebooks of `course`")
    p.add_argument("--executed", default=str(REPO_ROOT / "build" / "course"),
                   help="the executed notebooks of `make course` (default: build/course/)")
    p.add_argument("--out", default=str(REPO_ROOT / "build" / "site"),
                   help="the website's folder (default: build/site/)")
    p.add_argument("--solutions", action="store_true",
                   help="the teachers' edition: each lab's solution on its page, folded (default: the students' "
                        "edition, without solutions)")
    p.set_defaults(func=_site)
