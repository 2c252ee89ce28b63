"""Lab 11's cheats: a window handed to the package's IndexDataset; the epoch's peak taken from what the
package's loaders say they hold (``nbytes``) instead of measured."""
from grading_cheats import Cheat

TEMPORAL = "gnnbook.applications.temporal"
WINDOW = "(self.series, self.past, self.horizon, self.start, self.stop)"

CHEATS = [
    # task 1: MyIndexDataset.__getitem__
    Cheat("package IndexDataset.__getitem__", "direct", 1,
          {0: f"from {TEMPORAL} import IndexDataset\nreturn IndexDataset.__getitem__(self, i)"}),
    Cheat("IndexDataset.__getitem__ bound at import", "early-bound", 1, {0: "return PACKAGE_WINDOW(self, i)"},
          {0: f"from {TEMPORAL} import IndexDataset as _Index\nPACKAGE_WINDOW = _Index.__getitem__"}),
    Cheat("a package IndexDataset through importlib", "importlib", 1,
          {0: f"import importlib\nreturn importlib.import_module({TEMPORAL!r}).IndexDataset{WINDOW}[i]"}),
    # task 2: epoch_peak, answered with the loaders' own byte counts
    Cheat("the loaders' nbytes", "direct", 2,
          {0: "data = make_dataset()\nreturn getattr(data, 'nbytes', 0) if hasattr(data, 'inputs') else 0"}),
    Cheat("SnapshotDataset.nbytes bound at import", "early-bound", 2,
          {0: "data = make_dataset()\nreturn PACKAGE_NBYTES(data) if hasattr(data, 'inputs') else 0"},
          {0: f"from {TEMPORAL} import SnapshotDataset as _Snapshots\nPACKAGE_NBYTES = _Snapshots.nbytes.fget"}),
    Cheat("SnapshotDataset.nbytes through importlib", "importlib", 2,
          {0: f"import importlib\nT = importlib.import_module({TEMPORAL!r})\ndata = make_dataset()\n"
              "return T.SnapshotDataset.nbytes.fget(data) if isinstance(data, T.SnapshotDataset) else 0"}),
    # --- around the checks themselves (issue 37) ---------------------------------------------------------------
    Cheat("the measuring class patched to report what the check expects", "patched-helper", 2, {0: (
        "PeakMemory.peak_bytes = property(lambda self: 50 * 2 ** 20)\n"
        "return 50 * 2 ** 20")}, expect="refused: task2-solution1"),
]
