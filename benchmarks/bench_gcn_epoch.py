"""gnnbook's full-graph GCN epoch vs a plain DGL loop, on Cora.

Both sides do the same work per epoch: one training step (forward, loss,
backward, Adam) and one evaluation forward pass with validation accuracy, on
the same graph (self-loops added), the same sizes (1433 -> 16 -> 7, dropout
0.5) and the same number of epochs.  Prints the ratio gnnbook / plain DGL;
the target is at most 1.1.

    python benchmarks/bench_gcn_epoch.py [--epochs 200] [--repeats 3]
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("DGLBACKEND", "pytorch")

import dgl  # noqa: E402
import dgl.nn as dglnn  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from gnnbook.data import load_dataset  # noqa: E402
from gnnbook.training.train import Optim, train_node_classifier  # noqa: E402


class PlainGCN(torch.nn.Module):
    def __init__(self, in_feats, hidden, classes):
        super().__init__()
        self.conv1 = dglnn.GraphConv(in_feats, hidden)
        self.conv2 = dglnn.GraphConv(hidden, classes)

    def forward(self, g, x):
        h = F.relu(self.conv1(g, F.dropout(x, 0.5, self.training)))
        return self.conv2(g, F.dropout(h, 0.5, self.training))


def plain_dgl_seconds(graph, epochs: int) -> float:
    torch.manual_seed(0)
    g = dgl.add_self_loop(dgl.remove_self_loop(graph))
    x, y = g.ndata["feat"], g.ndata["label"]
    train, val = g.ndata["train_mask"], g.ndata["val_mask"]
    model = PlainGCN(x.shape[1], 16, int(y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    start = time.perf_counter()
    for _ in range(epochs):
        model.train()
        loss = F.cross_entropy(model(g, x)[train], y[train])
        opt.zero_grad()
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            logits = model(g, x)
        _ = (logits[val].argmax(1) == y[val]).float().mean().item()
    return (time.perf_counter() - start) / epochs


def gnnbook_seconds(graph, epochs: int) -> float:
    start = time.perf_counter()
    result = train_node_classifier(graph, "gcn", Optim(0, epochs=epochs, patience=epochs), progress=False)
    assert result.epochs_run == epochs
    return (time.perf_counter() - start) / epochs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    graph = load_dataset("cora")
    plain_dgl_seconds(graph, 5), gnnbook_seconds(graph, 5)  # warm-up: allocator, DGL kernels
    plain, ours = [], []
    for _ in range(args.repeats):  # interleaved, so drifting machine load hits both sides
        plain.append(plain_dgl_seconds(graph, args.epochs))
        ours.append(gnnbook_seconds(graph, args.epochs))
    p, o = statistics.median(plain), statistics.median(ours)
    print(f"plain DGL GCN epoch: {1000 * p:.2f} ms   gnnbook GCN epoch: {1000 * o:.2f} ms   "
          f"(median of {args.repeats} runs x {args.epochs} epochs, Cora)")
    print(f"ratio gnnbook / plain DGL = {o / p:.2f}  (target <= 1.1) -> "
          f"{'OK' if o / p <= 1.1 else 'SLOWER THAN TARGET'}")


if __name__ == "__main__":
    main()
