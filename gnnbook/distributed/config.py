"""The settings of one distributed training run, shared by the trainer, the
single-process baseline and the command line.

Book: 8.3 distributed training (a run's settings).

Used in: chapters/05a_minibatch_training_and_sampling.ipynb, chapters/05f_distributed_cache.ipynb,
chapters/08_dgl_practice.ipynb.

Example:
    >>> config = TrainConfig(model="sage", epochs=5)
    >>> TrainConfig.from_argv(config.to_argv()) == config
    True
"""
from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch

from ..models import MODEL_DEFAULTS, build_model
from ..training.train import MINIBATCH_LR

MODELS = ("sage", "gat")

# The trainer's feature-cache policies (gnnbook.distributed.feature_cache), checked here with the other settings.
CACHE_POLICIES = ("none", "degree", "presample")


def check_cache_options(policy: str, fraction: float) -> None:
    """ValueError naming the value and the choices for a policy or fraction the cache cannot take."""
    if policy not in CACHE_POLICIES:
        raise ValueError(f"unknown cache policy '{policy}'; use one of {', '.join(CACHE_POLICIES)} "
                         "(--cache-policy)")
    if not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ValueError(f"cache fraction {fraction!r} is outside (0, 1]: it is the share of all nodes whose "
                         "rows each trainer caches, e.g. --cache-fraction 0.1")


@dataclass
class TrainConfig:
    """``batch_size`` is per trainer; the single-process baseline uses
    ``batch_size * num_trainers`` so both take the same number of steps."""

    model: str = "sage"
    epochs: int = 20
    fanouts: list[int] = field(default_factory=lambda: [10, 10])
    # Per trainer.  On Cora (140 training nodes, 2x2 trainers) 4 gives 9 steps an epoch.  With the
    # default lr, 11 runs on fresh partitions: distributed test accuracy 0.805-0.819, gap to the
    # single-process mean (3 or 5 seeds) -0.010..+0.014.  (Batch 8 and lr 0.01 once gave 0.774 vs 0.810.)
    batch_size: int = 4
    eval_batch_size: int = 256
    # None: every neighbour when evaluating.  On a power-law graph of a million nodes a batch's full 2-hop
    # neighbourhood reaches the hubs' hundreds of thousands of nodes: sampled evaluation bounds its memory.
    eval_fanouts: list[int] | None = None
    # None: the model's minibatch learning rate (gnnbook.training.train.MINIBATCH_LR: 0.003 sage, 0.005 gat),
    # smaller than full-graph training's (TRAIN_DEFAULTS) for the reason given there.
    lr: float | None = None
    weight_decay: float = 5e-4
    hidden: int | None = None  # None: the paper's default (gnnbook.models.MODEL_DEFAULTS)
    # sage only: False drops out between layers only, as DGL's distributed GraphSAGE example does
    # (benchmarks/bench_scale.py trains that model); --no-input-dropout.
    input_dropout: bool = True
    # Count each step's sampled neighbours that live on another machine (the result's remote_neighbour_fraction).
    # It reads every sampled edge: at 1M nodes about 3-4% of an epoch.  --no-neighbour-stats leaves it out (fractions
    # None), for timing the trainer against DGL's example, which counts nothing (benchmarks/bench_scale.py).
    neighbour_stats: bool = True
    seed: int = 0
    # Train this many times in one job, with seeds seed, seed + 1, ...: the servers and processes start once (a
    # job's start-up, ~25 s on 2 cores, costs more than a Cora run); OGB's example scripts call it --runs.
    runs: int = 1
    checkpoint_dir: str | None = None  # a checkpoint after every epoch when set
    resume: bool = False  # continue from the checkpoint in checkpoint_dir (an error if there is none)
    resume_if_present: bool = False  # continue from it if there is one, else start at epoch 0
    # Node data names; None: detected ('feat' or 'features', 'label' or 'labels', as DGL's examples name them).
    feat_name: str | None = None
    label_name: str | None = None
    out: str | None = None  # where trainer rank 0 writes the JSON result
    fail_after_epoch: int | None = None  # fault injection for the course: rank 0 kills itself after that epoch
    # Each trainer's cache of remote feature rows (gnnbook.distributed.feature_cache): none, degree or presample,
    # holding round(cache_fraction x all nodes) rows of other partitions.
    cache_policy: str = "none"
    cache_fraction: float = 0.1
    verify_cache: bool = False  # also fetch every row from the servers and count rows that differ (tests)
    # Seed the graph servers' sampling each epoch (gnnbook.distributed.repeatable), so that two runs with the
    # same seed draw the same neighbours: for A/B comparisons of two jobs; 2 machines x 1 trainer only.
    repeatable_sampling: bool = False
    # Before training, every trainer exercises DistGraph, DistTensor, DistEmbedding and the key-value store
    # (gnnbook.distributed.demo_interfaces, book 8.3.2); the result's 'interfaces' lists what each rank saw.
    exercise_interfaces: bool = False

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"unknown model '{self.model}' for the distributed trainer; "
                             f"use one of {', '.join(MODELS)}")
        if self.epochs < 1 or self.batch_size < 1 or not self.fanouts:
            raise ValueError("epochs and batch_size must be >= 1 and fanouts non-empty (one per layer)")
        if self.eval_fanouts is not None and (len(self.eval_fanouts) != len(self.fanouts)
                                              or min(self.eval_fanouts) < 1):
            raise ValueError(f"eval_fanouts needs one positive count per layer ({len(self.fanouts)}), "
                             f"got {self.eval_fanouts}")
        check_cache_options(self.cache_policy, self.cache_fraction)
        if not self.input_dropout and self.model != "sage":
            raise ValueError(f"input_dropout=False (--no-input-dropout) is a GraphSAGE option; model is {self.model}")
        if self.runs < 1:
            raise ValueError(f"runs must be >= 1 (trainings with seeds seed, seed + 1, ...), got {self.runs}")
        if self.runs > 1 and self.checkpoint_dir:
            raise ValueError("a checkpoint holds one run: use runs=1 with checkpoint_dir (--checkpoint-dir), "
                             "or several jobs with their own checkpoint folders")
        if (self.resume or self.resume_if_present) and not self.checkpoint_dir:
            raise ValueError("resume needs checkpoint_dir (where the last run saved its checkpoints)")

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else MINIBATCH_LR[self.model]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_argv(self) -> list[str]:
        argv = []
        for f in fields(self):
            value = getattr(self, f.name)
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                argv += [] if value == f.default else [flag if value else "--no-" + flag[2:]]
            elif isinstance(value, list):
                argv += [flag, ",".join(map(str, value))]
            elif value is not None:
                argv += [flag, str(value)]
        return argv

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        default = cls()
        for f in fields(cls):
            flag = "--" + f.name.replace("_", "-")
            value = getattr(default, f.name)
            if isinstance(value, bool):  # --flag, or --no-flag for what is on by default
                parser.add_argument(flag, action=argparse.BooleanOptionalAction if value else "store_true",
                                    default=value)
            elif f.name in ("fanouts", "eval_fanouts"):
                parser.add_argument(flag, type=lambda s: [int(x) for x in s.split(",")], default=value,
                                    help="neighbours sampled per layer, e.g. 10,10" if f.name == "fanouts" else None)
            elif f.name in ("lr",):
                parser.add_argument(flag, type=float, default=None)
            elif f.name in ("hidden", "fail_after_epoch"):
                parser.add_argument(flag, type=int, default=None)
            elif f.name in ("checkpoint_dir", "out", "feat_name", "label_name"):
                parser.add_argument(flag, default=None)
            else:
                parser.add_argument(flag, type=type(value), default=value)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "TrainConfig":
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})

    @classmethod
    def from_argv(cls, argv: list[str]) -> "TrainConfig":
        parser = argparse.ArgumentParser()
        cls.add_arguments(parser)
        return cls.from_args(parser.parse_args(argv))


FEAT_NAMES = ("feat", "features")  # gnnbook's partitions; DGL's distributed examples
LABEL_NAMES = ("label", "labels")
MASK_NAMES = ("train_mask", "val_mask", "test_mask")


def node_data_keys(available: list[str], feat_name: str | None = None,
                   label_name: str | None = None) -> tuple[str, str]:
    """The (feature, label) node-data names to train on, among ``available``:
    the ones asked for, else the one of :data:`FEAT_NAMES` / :data:`LABEL_NAMES`
    present.  A clear error lists what there is otherwise.

    Example:
        >>> node_data_keys(["features", "labels", "train_mask", "val_mask", "test_mask"])
        ('features', 'labels')
    """
    names = sorted(available)
    chosen = []
    for asked, known, option in ((feat_name, FEAT_NAMES, "--feat-name"), (label_name, LABEL_NAMES, "--label-name")):
        found = [asked] if asked else [k for k in known if k in names]
        if not found or found[0] not in names:
            wanted = repr(asked) if asked else " or ".join(map(repr, known))
            raise ValueError(f"the partition has no node data {wanted}; it has {', '.join(names) or 'none'}. "
                             f"Name the one to use with {option} NAME (feat_name= / label_name= in TrainConfig)")
        chosen.append(found[0])
    missing = [m for m in MASK_NAMES if m not in names]
    if missing:
        raise ValueError(f"the partition has no node data {', '.join(missing)} (boolean node masks of the "
                         f"training, validation and test nodes); it has {', '.join(names)}")
    return chosen[0], chosen[1]


def make_model(config: TrainConfig, in_feats: int, num_classes: int) -> torch.nn.Module:
    """The model ``config`` names, seeded so every rank and the baseline start equal."""
    torch.manual_seed(config.seed)
    options = {"num_layers": len(config.fanouts)}
    if config.hidden is not None:
        options["hidden"] = config.hidden
    if not config.input_dropout:
        options["input_dropout"] = False
    assert config.model in MODEL_DEFAULTS
    return build_model(config.model, in_feats, num_classes, **options)
