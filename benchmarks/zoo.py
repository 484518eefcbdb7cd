"""The benchmark model zoo: each entry is a TARGET that `multiexport compare` can load by name.

Every model is built from seeded random weights (no downloads). Entries cover the cases users hit:
the seed dataclass, an MLP, a CNN, a transformer block, a dataclass with static fields + int token
indices + a mask (dict outputs), a bf16 model and a symbolic batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ZooModel:
    name: str
    spec: str  # TARGET string
    what: str
    val_ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    batch_sizes: tuple[int, ...] = ()
    quick: bool = False  # part of the CI-sized run


ZOO: tuple[ZooModel, ...] = (
    ZooModel("seed", "multiexport.examples:seed", "flax.struct dataclass, one unused leaf", quick=True),
    ZooModel("mlp", "multiexport.examples:mlp", "flax.linen MLP, fn(params, batch)", quick=True),
    ZooModel("cnn", "multiexport.examples:cnn", "flax.linen CNN, 2 convs + mean pool + dense"),
    ZooModel("transformer", "multiexport.examples:transformer", "pre-norm attention + MLP block"),
    ZooModel("embedding", "multiexport.examples:embedding",
             "dataclass with a static field, int32 token ids, bool mask, dict outputs",
             val_ranges={"batch.tokens": (0, 50)}, quick=True),
    ZooModel("mlp_bf16", "multiexport.examples:mlp_bf16", "the MLP in bfloat16", quick=True),
    ZooModel("mlp_dynamic", "multiexport.examples:mlp_dynamic", "the MLP with a symbolic batch b",
             batch_sizes=(1, 8, 64), quick=True),
)


def select(quick: bool, names: list[str] | None = None) -> list[ZooModel]:
    chosen = [m for m in ZOO if (m.quick or not quick)]
    if names:
        unknown = set(names) - {m.name for m in ZOO}
        if unknown:
            raise SystemExit(f"unknown zoo model(s): {', '.join(sorted(unknown))}; known: {', '.join(m.name for m in ZOO)}")
        chosen = [m for m in ZOO if m.name in names]
    return chosen
