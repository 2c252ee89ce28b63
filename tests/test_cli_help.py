"""Every option of ``python -m gnnbook <command>`` explains itself: a help text, and choices where the values are a
fixed set (issue 23: a newcomer starts without help)."""
import argparse
import subprocess
import sys
from pathlib import Path

from gnnbook.cli import build_parser
from gnnbook.data import dataset_names

ROOT = Path(__file__).resolve().parents[1]


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def name(action: argparse.Action) -> str:
    return action.option_strings[-1] if action.option_strings else action.dest


def test_every_subcommand_has_a_help_line():
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helped = {c.dest for c in sub._choices_actions if c.help}
    assert set(subcommands(parser)) == helped, f"subcommands without help: {set(subcommands(parser)) - helped}"


def test_every_option_of_every_subcommand_has_help():
    missing = [f"{cmd} {name(a)}" for cmd, p in subcommands(build_parser()).items() for a in arguments(p)
               if not a.help or a.help == argparse.SUPPRESS or not a.help.strip()]
    assert not missing, f"options without a help text: {missing}"


def test_model_has_choices_and_dataset_names_every_dataset():
    """--model's values are a fixed set: argparse refuses others.  --dataset takes the shipped and synthetic names,
    spelt freely (case, - or _) and answered with the closest name when unknown, so its help lists them all."""
    problems = []
    for cmd, p in subcommands(build_parser()).items():
        for a in arguments(p):
            if name(a) == "--model" and not a.choices:
                problems.append(f"{cmd} --model has no choices")
            if name(a) == "--dataset" and not a.choices:
                missing = [n for n in dataset_names() if n not in (a.help or "")]
                if missing:
                    problems.append(f"{cmd} --dataset's help does not name {missing}")
    assert not problems, problems


def test_every_help_page_formats():
    """What `python -m gnnbook <command> --help` prints, for every command (a stray % would break it)."""
    for cmd, p in subcommands(build_parser()).items():
        text = p.format_help()
        assert all(a.option_strings[-1] in text for a in arguments(p) if a.option_strings), cmd


def test_help_as_a_user_runs_it():
    run = subprocess.run([sys.executable, "-m", "gnnbook", "train", "--help"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert "--device" in run.stdout and "cuda" in run.stdout and "{gcn,gat" in run.stdout
