"""The settings of one distributed training run, shared by the trainer, the
single-process baseline and the command line.

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

MODELS = ("sage", "gat")


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
    # None: 0.003 (sage) or 0.005 (gat).  With 0.01 a 20-epoch SAGE run on Cora oscillated
    # (final-epoch test accuracy sd 1.3 points over 10 seeds, 0.3 with 0.003).
    lr: float | None = None
    weight_decay: float = 5e-4
    hidden: int | None = None  # None: the paper's default (gnnbook.models.MODEL_DEFAULTS)
    seed: int = 0
    checkpoint_dir: str | None = None  # a checkpoint after every epoch when set
    resume: bool = False  # continue from the checkpoint in checkpoint_dir
    out: str | None = None  # where trainer rank 0 writes the JSON result
    fail_after_epoch: int | None = None  # fault injection for the course: rank 0 kills itself after that epoch

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"unknown model '{self.model}' for the distributed trainer; use one of {', '.join(MODELS)}")
        if self.epochs < 1 or self.batch_size < 1 or not self.fanouts:
            raise ValueError("epochs and batch_size must be >= 1 and fanouts non-empty (one per layer)")
        if self.resume and not self.checkpoint_dir:
            raise ValueError("resume needs checkpoint_dir (where the last run saved its checkpoints)")

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else (0.005 if self.model == "gat" else 0.003)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_argv(self) -> list[str]:
        argv = []
        for f in fields(self):
            value = getattr(self, f.name)
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                argv += [flag] if value else []
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
            if isinstance(value, bool):
                parser.add_argument(flag, action="store_true")
            elif f.name == "fanouts":
                parser.add_argument(flag, type=lambda s: [int(x) for x in s.split(",")], default=value,
                                    help="neighbours sampled per layer, e.g. 10,10")
            elif f.name in ("lr",):
                parser.add_argument(flag, type=float, default=None)
            elif f.name in ("hidden", "fail_after_epoch"):
                parser.add_argument(flag, type=int, default=None)
            elif f.name in ("checkpoint_dir", "out"):
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


def make_model(config: TrainConfig, in_feats: int, num_classes: int) -> torch.nn.Module:
    """The model ``config`` names, seeded so every rank and the baseline start equal."""
    torch.manual_seed(config.seed)
    options = {"num_layers": len(config.fanouts)}
    if config.hidden is not None:
        options["hidden"] = config.hidden
    assert config.model in MODEL_DEFAULTS
    return build_model(config.model, in_feats, num_classes, **options)
