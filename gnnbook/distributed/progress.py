"""A running job's epochs, shown in the launching process: a bar with the loss, the validation
accuracy, the time elapsed and the time left before the job's deadline.

Book: 8.3.3 (what a distributed trainer reports while it runs).

Used in: no notebook directly (``gnnbook dist-train``).

The trainers run in other processes (on other hosts in cluster mode), so the launcher does not see
their loop.  Rank 0 already prints one line per epoch to its log (``epoch 3: loss 0.512 val 0.781
test 0.790 0.84s``); :class:`EpochProgress` follows that log from a thread while the job runs, the
way ``tail -f`` would, and turns each line into a step of a tqdm bar.  Nothing is sent over the
job's own connections, and a job whose log never shows an epoch line leaves the bar at zero.

Example:
    >>> parse_epoch_line("epoch 3: loss 0.512 val 0.781 test 0.790 0.84s")
    {'run': 0, 'epoch': 3, 'loss': 0.512, 'val_acc': 0.781, 'test_acc': 0.79, 'seconds': 0.84}
"""
from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["EpochProgress", "format_epoch_line", "parse_epoch_line"]

_EPOCH = re.compile(r"^(?:run (\d+) )?epoch (\d+): loss ([-\d.e+naif]+) val ([\d.]+) test ([\d.]+) ([\d.]+)s$")


def format_epoch_line(epoch: int, loss: float, val_acc: float, test_acc: float, seconds: float,
                      run: int = 0) -> str:
    """The line rank 0 prints after each epoch (the trainer's log; :func:`parse_epoch_line` reads it back);
    runs after the first of a job (``TrainConfig.runs``) are named: ``run 1 epoch 3: ...``."""
    return (("" if run == 0 else f"run {run} ")
            + f"epoch {epoch}: loss {loss:.3f} val {val_acc:.3f} test {test_acc:.3f} {seconds:.2f}s")


def parse_epoch_line(line: str) -> dict[str, Any] | None:
    """The numbers of one of rank 0's epoch lines (``None`` for any other line)."""
    match = _EPOCH.match(line.strip())
    if not match:
        return None
    run, epoch, loss, val, test, seconds = match.groups()
    return dict(run=int(run or 0), epoch=int(epoch), loss=float(loss), val_acc=float(val), test_acc=float(test),
                seconds=float(seconds))


class EpochProgress:
    """Follow ``log`` (rank 0's log file, which may not exist yet) while a job of ``runs`` runs of
    ``epochs`` epochs each runs, as a context manager around the job; ``deadline_s`` is shown as the time left.  The
    epochs seen are kept in :attr:`epochs_seen` (a test reads them)."""

    def __init__(self, log: Path, epochs: int, deadline_s: float, enabled: bool = True, poll_s: float = 0.5,
                 runs: int = 1):
        self.log, self.epochs, self.deadline_s, self.poll_s = Path(log), epochs, deadline_s, poll_s
        self.runs = runs
        self.enabled = enabled
        self.epochs_seen: list[dict[str, Any]] = []
        self._offset, self._partial = 0, ""     # how far the log was read; an unfinished last line
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar = None

    def __enter__(self) -> "EpochProgress":
        from tqdm.auto import tqdm    # the launcher's bar only: the trainers import this module too

        self._start = time.monotonic()
        self._bar = tqdm(total=self.epochs * self.runs, desc="epochs", unit="epoch", disable=not self.enabled,
                         leave=True)
        self._thread = threading.Thread(target=self._follow, name="gnnbook-epoch-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._read_new_lines()            # the last epochs, written just before the job ended
        self._bar.close()

    def _follow(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._read_new_lines()
            left = self.deadline_s - (time.monotonic() - self._start)
            self._bar.set_description(f"epochs (deadline in {max(0, left):.0f} s)", refresh=False)
            self._bar.refresh()

    def _read_new_lines(self) -> None:
        try:
            with open(self.log, "rb") as f:
                if f.seek(0, 2) < self._offset:   # a new log (the job restarted on fresh ports)
                    self._offset, self._partial = 0, ""
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return
        self._offset += len(chunk)
        text = self._partial + chunk.decode(errors="replace")
        lines = text.split("\n")
        self._partial = lines.pop()       # an unfinished line waits for its end
        for line in lines:
            row = parse_epoch_line(line)
            if row is None or any((seen["run"], seen["epoch"]) == (row["run"], row["epoch"])
                                  for seen in self.epochs_seen):
                continue
            self.epochs_seen.append(row)
            self._bar.n = row["run"] * self.epochs + row["epoch"] + 1       # a resumed job starts past zero
            self._bar.set_postfix(loss=f"{row['loss']:.3f}", val=f"{row['val_acc']:.3f}", refresh=False)
