"""IREE configured as its vendor documents for llvm-cpu performance: data tiling, im2col for convolutions.

Measured here (iree-benchmark-module, 2 threads, both drivers, outputs bit-identical to the default flags):
- `--iree-opt-data-tiling` (IREE's CPU docs recommend it; off by default since late 2025): ResNet-50 and
  BERT-base 3x faster (issue 33); a ResNet-like net at 64x64 31.4 vs 37.8 ms; on the example CNN no
  change (25-26 us). Costs ~25 % more compile time. On by default.
- `--iree-global-opt-use-im2col-for-convs`: on the ResNet-like net 6.9 vs 31.4 ms with data tiling (4.6x),
  but on the example CNN (3 and 8 input channels) 45 vs 26 us at batch 2 and 815 vs 391 us at batch 32:
  convolutions whose contraction (window x input channels) is small get slower, whatever the batch. So
  `auto` turns it on only when a convolution contracts over at least IM2COL_MIN_CONTRACTION elements
  (ResNet's 3x3x64 = 576 and up; the CNN's largest is 3x3x8 = 72).
Both flags are global to one iree-compile run, so they are used only when llvm-cpu is the only target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import prod
from typing import Any

from multiexport.sdk import declared_options, option

DATA_TILING = "--iree-opt-data-tiling"
IM2COL = "--iree-global-opt-use-im2col-for-convs"
IM2COL_MIN_CONTRACTION = 256  # between the CNN's 72 (im2col 1.7-2x slower) and ResNet's 576 (4.6x faster)



@dataclass(frozen=True)
class IreeOptions:
    """IREE's options (`--backend-option iree.NAME=VALUE`).

    data_tiling: compile llvm-cpu code with data tiling.
    im2col: convolutions as im2col matmuls: on, off, or auto (by the largest convolution's contraction).
    driver: the runtime HAL driver for llvm-cpu code: local-sync, local-task, or auto (timed at export).
    """

    data_tiling: bool = option(True, f"compile llvm-cpu code with {DATA_TILING} (IREE's CPU docs recommend it: "
                               "ResNet-50 and BERT-base measured 3x faster, outputs bit-identical; ~25% longer compiles)")
    im2col: str = option("auto", f"{IM2COL}: on, off, or auto (on when a convolution contracts over >= "
                         f"{IM2COL_MIN_CONTRACTION} elements, window x input channels: 4.6x faster on a ResNet-like "
                         "net, 1.7-2x slower on the example CNN's 3-8 channel convolutions)",
                         choices=("auto", "on", "off"))
    driver: str = option("auto", "runtime HAL driver for llvm-cpu code: local-sync (the calling thread, no "
                         "hand-off), local-task (a worker pool), or auto (both timed on the example inputs at export, "
                         "the faster kept)", choices=("auto", "local-sync", "local-task"))


OPTIONS = declared_options(IreeOptions)

_CONV = re.compile(r"stablehlo\.convolution\(.*?dim_numbers = \[[^\]]*\]x\[([^\]]*)\].*?:\s*\(tensor<([^>]*)>,\s*"
                   r"tensor<([^>]*)>\)")


@dataclass(frozen=True)
class CpuConfig:
    """The performance flags chosen for one llvm-cpu compile, and why (recorded as format.cpu_config).

    flags: the flags added to compile_flags' (data tiling, im2col).
    data_tiling, im2col: whether each is on.
    why: one line per flag saying what chose it (an option, the rule and the module's property).
    largest_contraction: the largest window x input channels of the module's convolutions (0: none).
    """

    flags: tuple[str, ...] = ()
    data_tiling: bool = False
    im2col: bool = False
    why: dict[str, str] = field(default_factory=dict)
    largest_contraction: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"flags": list(self.flags), "data_tiling": self.data_tiling, "im2col": self.im2col,
                "why": dict(self.why), "largest_conv_contraction": self.largest_contraction}


def conv_contractions(stablehlo_text: str) -> list[int]:
    """Window x input channels of each `stablehlo.convolution` (the K of the matmul im2col makes of it);
    a dynamic kernel dimension counts as 1."""
    found = []
    for layout, _, kernel in _CONV.findall(stablehlo_text):
        dims = [d for d in kernel.split("x")[:-1]]  # the last is the element type
        names = [n.strip() for n in layout.split(",")]
        if len(names) != len(dims):
            continue
        found.append(prod(int(d) if d.isdigit() else 1 for n, d in zip(names, dims) if n != "o"))
    return found


def cpu_config(chosen: IreeOptions, targets: list[str], stablehlo_text: str) -> CpuConfig:
    """The data-tiling and im2col flags for this module under the backend's options."""
    if targets != ["llvm-cpu"]:
        off = ("off: compiling for " + ", ".join(targets) + " in one run, and both flags are global to it; IREE "
               "documents them for llvm-cpu")
        return CpuConfig(why={"data_tiling": off, "im2col": off})
    largest = max(conv_contractions(stablehlo_text), default=0)
    tiling = chosen.data_tiling
    why = {"data_tiling": ("on (default): IREE's CPU docs recommend it" if tiling else "off: iree.data_tiling=false")}
    mode = chosen.im2col
    if mode == "auto":
        im2col = largest >= IM2COL_MIN_CONTRACTION
        why["im2col"] = (f"{'on' if im2col else 'off'} (auto): the largest convolution contracts over {largest} "
                         f"elements, {'>=' if im2col else '<'} {IM2COL_MIN_CONTRACTION}" if largest else
                         "off (auto): the module has no convolution")
    else:
        im2col = mode == "on"
        why["im2col"] = f"{mode}: iree.im2col={mode}"
    flags = (*([DATA_TILING] if tiling else []), *([IM2COL] if im2col else []))
    return CpuConfig(flags=flags, data_tiling=tiling, im2col=im2col, why=why, largest_contraction=largest)
