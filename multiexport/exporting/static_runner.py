"""A static-sizes artifact on disk: where each size's model lives, and the runner that picks one per feed.

Apart from the fallback's export side (`static_fallback`) so that `Backend.load` can run such an artifact without
importing the export machinery: the contract imports this module, and this module imports no contract.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..errors import ArtifactError, RunError
from ..files import inside
from .facts import STATIC_FALLBACK_KEY, StaticSizesFacts
from .feed import check_feed
from .manifest import Manifest
from .options import RunOptions
from .runner import Runner

if TYPE_CHECKING:
    from .contract import Backend

FORMAT_KEY = STATIC_FALLBACK_KEY  # the manifest's format facts of a fallback artifact live under this key
STATIC_MODELS_DIR = "static"

def size_key(sizes: Mapping[str, int]) -> str:
    """`{"b": 8, "s": 16}` -> `"b=8,s=16"` (symbols sorted): how sizes are named in manifests and messages."""
    return ",".join(f"{name}={int(sizes[name])}" for name in sorted(sizes))


def size_dir(sizes: Mapping[str, int]) -> str:
    """Where the model for `sizes` lives inside the artifact: `static/b8`, `static/b8_s16`."""
    return f"{STATIC_MODELS_DIR}/" + "_".join(f"{name}{int(sizes[name])}" for name in sorted(sizes))


def parse_key(key: str) -> dict[str, int]:
    out = {}
    for part in key.split(","):
        name, _, value = part.partition("=")
        out[name] = int(value)
    return out


def models_of(manifest: "Manifest", directory: Path) -> dict[str, Path]:
    """Size key -> the sub-artifact directory of a fallback artifact, each checked to lie inside it."""
    models = StaticSizesFacts.from_json(manifest.format, f"Artifact '{directory}'").static_fallback.models
    if not models:
        raise ArtifactError(f"Artifact '{directory}' | format.{FORMAT_KEY}.models is empty, expected "
                            "size -> model directory")
    out = {}
    for key, rel in models.items():
        try:
            sizes = parse_key(key)
        except ValueError:
            raise ArtifactError(f"Artifact '{directory}' | format.{FORMAT_KEY}.models key {key!r}, expected "
                                "sizes like b=8") from None
        if set(sizes) != set(manifest.symbolic_dims):
            raise ArtifactError(f"Artifact '{directory}' | format.{FORMAT_KEY}.models key {key!r}, expected a size "
                                f"for each of {', '.join(manifest.symbolic_dims)}")
        model = inside(directory, rel, "static model")
        if model.resolve() == Path(directory).resolve():  # a link back to itself: loading it would never end
            raise ArtifactError(f"Artifact '{directory}' | format.{FORMAT_KEY}.models[{key!r}] is the artifact itself, "
                                "expected the directory of that size's model inside it")
        out[size_key(sizes)] = model
    return out


def holds_models(manifest: "Manifest") -> bool:
    """Whether `manifest` is a fallback artifact's (one model per size, no model of its own)."""
    return FORMAT_KEY in manifest.format


def held_sizes(manifest: "Manifest", directory: Path) -> list[dict[str, int]] | None:
    """The size bindings a fallback artifact holds a model for, in its order (the example's first); None for any
    other artifact."""
    if not holds_models(manifest):
        return None
    return [parse_key(key) for key in models_of(manifest, directory)]


def has_model(held: Sequence[Mapping[str, int]], dims: Mapping[str, int]) -> bool:
    """Whether a feed binding `dims` has a model among `held` (over two dims: that combination, not each size)."""
    return any(all(dims.get(d) == v for d, v in one.items()) for one in held)


def model_at(manifest: "Manifest", directory: Path, sizes: Mapping[str, int] | None, backend: str) -> Path:
    """The sub-artifact of a fallback artifact built for `sizes` (None: the first, the example's); RunError
    `size-unsupported` naming the sizes it holds when none was built for them. ArtifactError when that model is
    not a model of the artifact's own format with a model of its own (another format's artifact, or a fallback
    artifact again, which is no model of a size)."""
    models = models_of(manifest, directory)
    if sizes is None:
        key = next(iter(models))
    else:
        key = size_key({d: sizes[d] for d in manifest.symbolic_dims if d in sizes})
    if key not in models:
        raise RunError(f"Artifact '{directory}' | got {key}, expected one of the sizes it was built for: "
                       f"{'; '.join(models)} (its converter could not keep the symbolic dimension)",
                       backend=backend, category="size-unsupported")
    model = models[key]
    inner = Manifest.read(model)
    where = f"Artifact '{directory}' | its model of {key} ({model.relative_to(Path(directory).resolve())})"
    if inner.backend != manifest.backend:
        raise ArtifactError(f"{where} is a '{inner.backend}' artifact, expected '{manifest.backend}' as the artifact "
                            "holding it")
    if holds_models(inner):
        raise ArtifactError(f"{where} holds models per size itself, expected one model of that size")
    return model


class StaticSizesRunner(Runner):
    """Runs a fallback artifact: each feed goes to the model built for the sizes it binds.

    The per-size runners are loaded on first use (a compare that checks two sizes loads two models) and
    each is loaded through its backend's own `load`, so every check a single artifact gets applies.
    """

    def __init__(self, backend: "Backend", manifest: "Manifest", directory: Path, options: RunOptions):
        super().__init__(manifest, directory, options)
        self.backend = backend
        self.models = models_of(manifest, directory)
        self.runners: dict[str, Runner] = {}
        self.calling_path = f"one {backend.name} model per size ({', '.join(self.models)})"

    def runner_for(self, sizes: Mapping[str, int]) -> Runner:
        """The loaded runner of the model for `sizes` (RunError `size-unsupported` when none was built)."""
        key = size_key({d: sizes[d] for d in self.manifest.symbolic_dims if d in sizes})
        if key not in self.runners:
            model = model_at(self.manifest, self.directory, sizes, self.backend.name)
            self.runners[key] = self.backend.load(model, self.options)
        return self.runners[key]

    def prepare(self, feed: Mapping[str, Any]) -> Any:
        _, sizes = check_feed(self.manifest.inputs, feed)
        runner = self.runner_for(sizes)
        return runner, runner.prepare(feed)

    def run_prepared(self, prepared: Any) -> None:
        runner, inner = prepared
        runner.run_prepared(inner)

    def run_with_transfers(self, arrays: list[np.ndarray]) -> None:
        _, sizes = check_feed(self.manifest.inputs, {leaf.name: a for leaf, a in zip(self.manifest.inputs, arrays)})
        self.runner_for(sizes).run_with_transfers(arrays)

    def compile(self, prepared: Any) -> bool:
        runner, inner = prepared
        return runner.compile(inner)

    def compile_count(self) -> int | None:
        counts = [r.compile_count() for r in self.runners.values()]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)

    def _fetch_impl(self, prepared: Any) -> Sequence[Any]:
        runner, inner = prepared
        return runner._fetch_impl(inner)

    def _describe_impl(self) -> dict[str, Any]:
        described = {key: r.describe() for key, r in self.runners.items()}
        first = next(iter(described.values()), {})
        return {**{k: v for k, v in first.items() if k not in ("calling_path", "device")},
                "models_loaded": sorted(described)}
