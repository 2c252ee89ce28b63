"""The student's side of grading: a process that runs only the solution cells and answers the checker's calls.

Book: none (autograding).

Used in: no notebook directly (labs 2, 3, 5, 6, 10, 11 and 12 call :class:`Here` through their grading modules; the
autograder :class:`Sandboxed`).  The calls of the labs that run real ranks are in :mod:`.ranks`.

A lab's check (in ``gnnbook.course.grading.<lab>``) holds the inputs, the expected values, the
thresholds and the references; it never runs student code itself.  It asks a *student* to make
calls, ``student.run([("lab02.layer_forward", {...}), ...])``, and compares the replies with what it
computed.  A call (:data:`CALLS`) takes the solution's namespace and plain inputs (tensors, numbers,
a graph as :func:`graph_payload`), uses the student's classes or functions, and returns tensors.

- :class:`Sandboxed` (the autograder): the solution cells, and nothing else of the notebook, run in a
  fresh process in :func:`gnnbook.course.sandbox.run_sandboxed` (``python -m
  gnnbook.course.grading``, :mod:`.__main__`), which refuses to import the package beyond this module and
  answers the calls through files (``torch.save``; read back with ``weights_only=True``).  Whatever
  the solution patches is patched in that process only.
- :class:`Here` (the lab notebook's own check cells): the same calls on the notebook's namespace, so a
  student sees, while working, exactly the checks that will grade the lab.

Example:
    >>> import torch
    >>> namespace = {"double": lambda x: 2 * x}
    >>> CALLS["demo.apply"] = lambda ns, x: ns["double"](x)
    >>> Here(namespace).run([("demo.apply", {"x": torch.ones(2)})])[0]
    tensor([2., 2.])
"""
from __future__ import annotations

import copy
import importlib.abc
import subprocess
import sys
import time
import traceback
import weakref
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import dgl
import numpy
import torch
import torch.nn.functional as F

from ...base.seeding import set_seed
from ...base.memory import PeakMemory, exact_memory_unavailable_reason, track_freed_memory
from ...ch5_minibatch.feature_loading import allocated_bytes
from ..sandbox import Limits, start_sandboxed, stop_sandboxed

CALLS: dict[str, Callable[..., Any]] = {}
SOLUTION_FILE, PRELUDE_FILE, STOP_FILE = "solution.py", "prelude.py", "stop"


class StudentCodeError(AssertionError):
    """The student's code raised, or its process failed; the message is the innermost error, in words
    (``deadline``: the process was stopped at its deadline)."""

    def __init__(self, message: str, deadline: bool = False):
        super().__init__(message)
        self.deadline = deadline


def call(name: str) -> Callable:
    """Register a student-side call under ``name`` ("lab.what")."""
    def register(function: Callable) -> Callable:
        CALLS[name] = function
        return function
    return register


def graph_payload(g: dgl.DGLGraph, **tensors: torch.Tensor) -> dict[str, Any]:
    """A graph and node tensors as plain tensors, which cross a process boundary as data only."""
    src, dst = g.edges()
    return {"src": src, "dst": dst, "num_nodes": g.num_nodes(), "ndata": dict(tensors)}


def hide_test_labels(graph: dgl.DGLGraph) -> dict[str, Any]:
    """``graph`` as a payload for the student's process, every test node labelled 0 (the checks score test
    accuracy here, from the logits the student's process returns)."""
    labels = graph.ndata["label"].clone()
    if "test_mask" in graph.ndata:
        labels[graph.ndata["test_mask"]] = 0
    return graph_payload(graph, **{k: (labels if k == "label" else v) for k, v in graph.ndata.items()})


def graph_from_payload(payload: dict[str, Any]) -> dgl.DGLGraph:
    g = dgl.graph((payload["src"], payload["dst"]), num_nodes=payload["num_nodes"])
    for key, value in payload["ndata"].items():
        g.ndata[key] = value
    return g


CELL_MARK = "# ---- "          # the solution file's line before each solution cell: "# ---- task1-solution1"


def _innermost(error: BaseException) -> str:
    """The error's type and message, and the solution cell and line where it happened."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == SOLUTION_FILE]
    where = ""
    if frames:
        lineno, cell = frames[-1].lineno, "the solution"
        lines = Path(SOLUTION_FILE).read_text().splitlines() if Path(SOLUTION_FILE).exists() else []
        for at in range(min(lineno, len(lines)) - 1, -1, -1):
            if lines[at].startswith(CELL_MARK):
                cell, lineno = lines[at][len(CELL_MARK):], lineno - at - 1
                break
        where = f" ({cell}, line {lineno}: {frames[-1].line})"
    message = str(error).strip()
    if len(message) > 400:      # a rank's failure ends with its log: keep the start and the error at the end
        message = f"{message[:200]} ... {message[-200:]}"
    return f"{type(error).__name__}{': ' + message if message else ''}{where}"


_MEASURED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def once_per_submission(student: Any, key: Hashable, measure: Callable[[], Any]) -> Any:
    """``measure()`` the first time a check asks for ``key`` of this ``student`` (a :class:`Sandboxed` or a
    :class:`Here`), its result afterwards: two checks that read one launch of the ranks launch it once.  A
    measurement that raises is not kept."""
    measured = _MEASURED.setdefault(student, {})
    if key not in measured:
        measured[key] = measure()
    return measured[key]


class Here:
    """The calls run in this process, on ``namespace`` (a notebook's globals)."""

    def __init__(self, namespace: dict[str, Any]):
        self.namespace = namespace

    def run(self, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        replies = []
        for name, args in calls:
            try:
                replies.append(CALLS[name](self.namespace, **args))
            except Exception as error:
                raise StudentCodeError(f"{name.split('.')[-1]}: your code raised {_innermost(error)}") from error
        return replies


class Sandboxed:
    """The calls run in a sandboxed process that has run only ``prelude`` and ``source`` (the solution cells).
    One process serves a submission's checks one batch after another (starting torch costs seconds); a batch
    that fails, or runs past ``deadline_s``, ends it, and the next batch starts a fresh one.  :meth:`close` ends it."""

    def __init__(self, prelude: str, source: str, workdir: Path, deadline_s: float, threads: int = 1):
        self.prelude, self.source, self.workdir = prelude, source, Path(workdir)
        self.deadline_s, self.threads = deadline_s, threads
        self.process, self.folder, self.sessions, self.batches = None, None, 0, 0

    def _limits(self):
        # CPU seconds add up over the session's batches: a bound of a few checks at their deadline
        return Limits(deadline_s=self.deadline_s, cpu_s=int(8 * self.deadline_s * self.threads) + 10)

    def _start(self) -> None:
        self.sessions += 1
        self.folder, self.batches = self.workdir / f"session{self.sessions}", 0
        self.folder.mkdir(parents=True)
        (self.folder / PRELUDE_FILE).write_text(self.prelude)
        (self.folder / SOLUTION_FILE).write_text(self.source)
        env = {"PYTHONPATH": str(Path(__file__).resolve().parents[3]), "DGLBACKEND": "pytorch",
               "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": str(self.threads),
               "MKL_NUM_THREADS": str(self.threads)}
        self.process = start_sandboxed([sys.executable, "-m", __package__], self.folder, env=env, limits=self._limits())

    def _fail(self, returncode: int | None) -> StudentCodeError:
        result = stop_sandboxed(self.process, self.folder, self._limits(), returncode)
        self.process = None
        last = [line for line in result.output.strip().splitlines() if line.strip()][-1:]
        return StudentCodeError(f"your code's process failed: {result.reason or 'it wrote no replies'}"
                                + (f" (last output: {last[0][:300]})" if last else ""), returncode is None)

    def run(self, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
        if self.process is None:
            self._start()
        self.batches += 1
        staged = self.folder / f".calls-{self.batches}.pt"
        torch.save([[name, args] for name, args in calls], staged)
        staged.chmod(0o644)
        staged.rename(self.folder / f"calls-{self.batches}.pt")
        replies_path, end = self.folder / f"replies-{self.batches}.pt", time.monotonic() + self.deadline_s
        while not replies_path.exists():
            if self.process.poll() is not None:
                raise self._fail(self.process.returncode or 1)
            if time.monotonic() > end:
                raise self._fail(None)
            time.sleep(0.02)
        try:   # written by the student's process: data only, never code
            replies = torch.load(replies_path, weights_only=True)
        except Exception as error:
            raise StudentCodeError(f"your code's process left unreadable replies ({type(error).__name__})") from None
        if not isinstance(replies, list) or len(replies) != len(calls):
            raise StudentCodeError("your code's process left replies of the wrong shape")
        for (name, _), reply in zip(calls, replies):
            if isinstance(reply, dict) and reply.get("__error__"):
                raise StudentCodeError(f"{name.split('.')[-1]}: your code raised {reply['__error__']}")
        return [reply["value"] if isinstance(reply, dict) and "value" in reply else reply for reply in replies]

    def close(self) -> None:
        """End the process (it is told to stop; what is left of its sandbox is killed)."""
        if self.process is not None:
            (self.folder / STOP_FILE).touch()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                pass
            stop_sandboxed(self.process, self.folder, self._limits(), self.process.poll())
            self.process = None


class _RefusePackage(importlib.abc.MetaPathFinder):
    """In the student's process, importing the package (beyond what is loaded already) fails: it holds
    every lab's references."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "gnnbook" or fullname.startswith("gnnbook."):
            raise ImportError(f"{fullname}: the course package cannot be imported by a lab solution while it is graded")
        return None


def load_solution(prelude: Path, solution: Path) -> dict[str, Any]:
    """The namespace of the lab's prelude (the teacher's imports) and then, with the package refused, the
    solution; ``__solution__`` records the two files (a rank of a multi-process lab loads them again)."""
    namespace: dict[str, Any] = {"__name__": "solution", "__solution__": (str(prelude), str(solution))}
    exec(compile(Path(prelude).read_text(), PRELUDE_FILE, "exec"), namespace)
    for module in [m for m in sys.modules if m.startswith("gnnbook") and m not in (
            __name__, "gnnbook", "gnnbook.course", "gnnbook.course.grading", "gnnbook.base", "gnnbook.base.worker",
            "gnnbook.base.launch", "gnnbook.base.procs")]:
        sys.modules.pop(module, None)
    if not any(isinstance(finder, _RefusePackage) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RefusePackage())
    exec(compile(Path(solution).read_text(), SOLUTION_FILE, "exec"), namespace)
    return namespace


def serve(folder: Path) -> None:
    """The student's process: run the lab's prelude (the teacher's imports: the package's helpers a lab
    gives its students), then, with the package refused, the solution file; then, batch after batch, every
    call of ``calls-<k>.pt``, replies to ``replies-<k>.pt``, until the grader leaves the stop file."""
    try:
        namespace = load_solution(folder / PRELUDE_FILE, folder / SOLUTION_FILE)
        loaded = None
    except Exception as error:
        loaded = f"{_innermost(error)}, while your solution cells were run"
    batch = 0
    while True:
        batch += 1
        path = folder / f"calls-{batch}.pt"
        while not path.exists():
            if (folder / STOP_FILE).exists():
                return
            time.sleep(0.01)
        calls = torch.load(path, weights_only=True)
        path.unlink()       # a multi-process lab's inputs are in memory only, where its ranks cannot read them
        replies = []
        for name, args in calls:
            if loaded is not None:
                replies.append({"__error__": loaded})
                continue
            try:
                replies.append({"value": CALLS[name](namespace, **args)})
            except Exception as error:
                replies.append({"__error__": _innermost(error)})
        staged = folder / f".replies-{batch}.pt"
        torch.save(replies, staged)
        staged.rename(folder / f"replies-{batch}.pt")


# ---- the calls of the labs that are graded this way ---------------------------------------------------

LAB02_PRELUDE = ("import dgl\nimport dgl.function as fn\nimport torch\nimport torch.nn as nn\n"
                 "import torch.nn.functional as F\n")


@call("lab02.layer_forward")
def _lab02_layer_forward(ns, graph: dict, out_feats: int, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    g, feat = graph_from_payload(graph), graph["ndata"]["feat"]
    with torch.no_grad():
        layer = ns["MyGraphConv"](feat.shape[1], out_feats)
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
        out = layer(g, feat)
    return torch.as_tensor(out).detach().float()


@call("lab02.layer_gradients")
def _lab02_layer_gradients(ns, graph: dict, out_feats: int, weight: torch.Tensor, bias: torch.Tensor,
                           probe: torch.Tensor) -> dict[str, torch.Tensor | None]:
    g, feat = graph_from_payload(graph), graph["ndata"]["feat"]
    layer = ns["MyGraphConv"](feat.shape[1], out_feats)
    with torch.no_grad():
        layer.weight.copy_(weight)
        layer.bias.copy_(bias)
    (layer(g, feat) * probe).sum().backward()
    return {"weight": None if layer.weight.grad is None else layer.weight.grad.detach(),
            "bias": None if layer.bias.grad is None else layer.bias.grad.detach()}


def _gcn_layers(ns, model: torch.nn.Module, in_feats: int) -> list:
    layers = [m for m in model.modules() if isinstance(m, ns["MyGraphConv"])]
    return sorted(layers, key=lambda m: m.weight.shape[0] != in_feats)


@call("lab02.gcn_eval")
def _lab02_gcn_eval(ns, graph: dict, hidden: int, classes: int, biases: list[torch.Tensor], seed: int) -> dict:
    g, feat = graph_from_payload(graph), graph["ndata"]["feat"]
    torch.manual_seed(seed)
    model = ns["MyGCN"](feat.shape[1], hidden, classes)
    layers = _gcn_layers(ns, model, feat.shape[1])
    with torch.no_grad():
        for layer, bias in zip(layers, biases):
            if layer.bias.shape == bias.shape:
                layer.bias.copy_(bias)
        model.eval()
        out = model(g, feat)
    return {"layers": len(layers), "weights": [m.weight.detach() for m in layers],
            "biases": [m.bias.detach() for m in layers], "out": torch.as_tensor(out).detach().float()}


@call("lab02.train_gcn")
def _lab02_train_gcn(ns, graph: dict, classes: int, seed: int, epochs: int, hidden: int) -> dict:
    """The lab's loop (Adam, lr 0.01, weight decay 5e-4; the best validation epoch's weights) on the
    training and validation labels; the test labels are not here (the checker scores the logits)."""
    g, feat, labels = graph_from_payload(graph), graph["ndata"]["feat"], graph["ndata"]["label"]
    train, val = graph["ndata"]["train_mask"], graph["ndata"]["val_mask"]
    set_seed(seed)
    model = ns["MyGCN"](feat.shape[1], hidden, classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    best_val, best_state, curve = -1.0, None, []
    for _ in range(epochs):
        model.train()
        loss = F.cross_entropy(model(g, feat)[train], labels[train])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            val_acc = float((model(g, feat)[val].argmax(1) == labels[val]).float().mean())
        curve.append([float(loss), val_acc])
        if val_acc > best_val:
            best_val, best_state = val_acc, copy.deepcopy(model.state_dict())
    model.load_state_dict(best_state)
    model.eval()
    with torch.no_grad():
        logits = torch.as_tensor(model(g, feat)).detach().float()
    return {"logits": logits, "curve": torch.tensor(curve), "best_val": best_val,
            "layers": len(_gcn_layers(ns, model, feat.shape[1]))}


LAB05_PRELUDE = ("import dgl\nimport numpy as np\nimport torch\n"
                 "from gnnbook.base.seeding import set_seed\nfrom gnnbook.training.minibatch import neighbor_loader\n")


@call("lab05.cache")
def _lab05_cache(ns, graph: dict, seed_nodes: torch.Tensor, fanouts: list[int], batch_size: int, capacity: int,
                 epochs: int, seed: int) -> torch.Tensor:
    cached = ns["my_presample_cache"](graph_from_payload(graph), seed_nodes, list(fanouts), batch_size, capacity,
                                      epochs, seed)
    return cached if isinstance(cached, torch.Tensor) else torch.as_tensor(numpy.asarray(cached))


LAB12_PRELUDE = "import torch\n"


@call("lab12.gather")
def _lab12_gather(ns, features: torch.Tensor, ids: torch.Tensor, spare_rows: int) -> dict[str, Any]:
    """The student's gather into a fresh buffer, what it left there, what it allocated (torch's profiler),
    a second, smaller batch into the same buffer, and the error of a batch that does not fit."""
    gather = ns["my_gather_into"]
    staging = torch.empty(len(ids) + spare_rows, features.shape[1], dtype=features.dtype)
    rows = gather(features, ids, staging)
    is_view = isinstance(rows, torch.Tensor) and rows.data_ptr() == staging.data_ptr() and \
        tuple(rows.shape) == (len(ids), features.shape[1])
    reply = {"rows": torch.as_tensor(rows).clone(), "staging_head": staging[:len(ids)].clone(), "is_view": is_view}
    reply["allocated"] = allocated_bytes(lambda: gather(features, ids, staging))
    again = gather(features, ids[:5], staging)
    reply["reused"] = bool(torch.equal(torch.as_tensor(again), features[ids[:5]]) and
                           torch.equal(staging[:5], features[ids[:5]]))
    try:
        gather(features, torch.arange(len(staging) + 1) % features.shape[0], staging)
        reply["too_large"] = ""
    except Exception as error:
        reply["too_large"] = type(error).__name__
    return reply


@call("lab12.pcie_lines")
def _lab12_pcie_lines(ns, ids: torch.Tensor, width: int, itemsize: int) -> int:
    return int(ns["my_pcie_lines"](ids, width, itemsize))


LAB10_PRELUDE = "import torch\n"


@call("lab10.bpr")
def _lab10_bpr(ns, positive: torch.Tensor, negative: torch.Tensor) -> dict[str, Any]:
    positive = positive.clone().requires_grad_(True)
    loss = ns["my_bpr_loss"](positive, negative)
    loss = torch.as_tensor(loss)
    if loss.requires_grad:
        loss.backward()
    return {"loss": loss.detach().float(), "grad": None if positive.grad is None else positive.grad.detach()}


@call("lab10.bpr_error")
def _lab10_bpr_error(ns, positive: torch.Tensor, negative: torch.Tensor) -> str:
    try:
        ns["my_bpr_loss"](positive, negative)
    except Exception as error:
        return type(error).__name__
    return ""


@call("lab10.propagate")
def _lab10_propagate(ns, edge_index: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(ns["my_propagate"](edge_index, h)).detach().float()


LAB11_PRELUDE = ("import torch\nfrom gnnbook.applications.temporal import batch_order\n"
                 "from gnnbook.base.memory import PeakMemory\nseed = 0\n")


@call("lab11.windows")
def _lab11_windows(ns, series: torch.Tensor, past: int, horizon: int, start: int, stop: int | None,
                   indices: list[int], order: list[torch.Tensor]) -> dict[str, Any]:
    mine = ns["MyIndexDataset"](series, past, horizon, start, stop)
    n = len(mine)
    windows = [tuple(t.clone() for t in mine[i]) for i in indices]
    i = min(5, n - 1)
    x, y = mine[i]
    views = x.data_ptr() == series[start + i].data_ptr() and y.data_ptr() == series[start + i + past].data_ptr()
    out_of_range = []
    for i in (n, -n - 1):
        try:
            mine[i]
            out_of_range.append("")
        except Exception as error:
            out_of_range.append(type(error).__name__)
    return {"len": n, "windows": windows, "views": bool(views), "out_of_range": out_of_range,
            "batches": [tuple(t.clone() for t in mine.batch(b)) for b in order]}


class _Ballast:
    """A loader that holds ``held`` bytes from when it is built and makes ``per_batch`` bytes for every batch."""

    def __init__(self, held: int, per_batch: int, windows: int = 10):
        self.held, self.per_batch, self.windows = torch.ones(held // 4), per_batch, windows

    def __len__(self) -> int:
        return self.windows

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.ones(self.per_batch // 4), torch.ones(len(indices))


class _Materialised:
    """Every window copied up front (as the package's SnapshotDataset, which the student's process does not load)."""

    def __init__(self, series: torch.Tensor, past: int, horizon: int, start: int, stop: int):
        first = start + torch.arange(stop - start - past - horizon + 1).reshape(-1, 1)
        self.inputs, self.targets = series[first + torch.arange(past)], series[first + past + torch.arange(horizon)]

    def __len__(self) -> int:
        return len(self.inputs)

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[indices], self.targets[indices]


def _loader_peak(make: Callable[[], Any], batch_size: int) -> int:
    """The course's own measurement: build the loader and draw one epoch of batches in one PeakMemory block."""
    with PeakMemory() as peak:
        data = make()
        for indices in torch.arange(len(data) // batch_size * batch_size).split(batch_size):
            data.batch(indices)
    return peak.peak_bytes


@call("lab11.epoch_peaks")
def _lab11_epoch_peaks(ns, ballasts: list[list[int]], series: torch.Tensor, stop: int) -> dict[str, Any]:
    """The student's ``epoch_peak`` on loaders of known sizes; then one epoch of materialised windows and of the
    student's index windows (12 + 12 steps), each the smallest of 3 runs (the C heap's reuse of freed blocks moves a
    small peak by a few MiB), measured by :func:`_loader_peak`."""
    reason = exact_memory_unavailable_reason()
    if reason is None and not track_freed_memory():
        reason = "glibc refused mallopt(M_MMAP_THRESHOLD)"
    known = [int(ns["epoch_peak"](lambda held=held, per_batch=per_batch: _Ballast(held, per_batch), 4))
             for held, per_batch in ballasts]
    loaders = {"materialised": lambda: _Materialised(series, 12, 12, 0, stop),
               "index (yours)": lambda: ns["MyIndexDataset"](series, 12, 12, 0, stop)}
    peaks = {name: min(_loader_peak(make, 64) for _ in range(3)) for name, make in loaders.items()}
    return {"not_exact": reason or "", "known": known, "peaks": peaks}


def as_data(value: Any) -> Any:
    """An int (not a bool) or a str as it is, anything else as its text: a reply that the checker's message can show
    and that crosses the boundary as data."""
    return value if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)) else repr(value)


def choice_as_data(chosen: Any) -> tuple[Any, Any]:
    """A student's ``(setting, fanouts)`` choice as data: :func:`as_data` of the setting and of each fanout."""
    first, fanouts = chosen if isinstance(chosen, (tuple, list)) and len(chosen) == 2 else (chosen, None)
    return as_data(first), [as_data(f) for f in fanouts] if isinstance(fanouts, (list, tuple)) else as_data(fanouts)


LAB08_PRELUDE = "import json\nimport math\n\nimport torch\n"


@call("lab08.edge_cut")
def _lab08_edge_cut(ns, src: torch.Tensor, dst: torch.Tensor, owner: torch.Tensor) -> float:
    return float(ns["edge_cut_fraction"](src, dst, owner))


@call("lab08.choice")
def _lab08_choice(ns) -> dict[str, Any]:
    method, fanouts = choice_as_data(ns["choose_setup"]())
    return {"method": method, "fanouts": fanouts}


@call("lab08.steps")
def _lab08_steps(ns, shares: list[int], batch_size: int, epochs: int) -> Any:
    steps = ns["expected_steps"](list(shares), batch_size, epochs)
    return [as_data(v) for v in steps] if isinstance(steps, (list, tuple)) else as_data(steps)
