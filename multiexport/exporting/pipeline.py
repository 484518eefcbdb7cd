"""The export pipeline every backend goes through: one place for core policy.

    options -> claimed staging directory -> [the stage it builds on] -> backend._export_impl
    -> example inputs -> manifest (common fields + the backend's FormatResult) -> dtype audit
    -> load check with the format's own runtime -> swapped into place

A backend writes only its format's files and reports them; the core writes example_inputs.npz for every
artifact, builds every manifest's common fields the same way, refuses an artifact whose declared dtypes
differ from its leaves', and proves the installed consumer can load and run what was written, so an
artifact a consumer cannot read fails here (`version-skew`), not later as a confusing run failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..dtypes import parse_dtype
from ..errors import ExportError, MultiexportError, leaf_message
from ..versions import base_versions, utc_now
from .contract import EXPORT_DRIVER, Artifact, Backend, ExportOptions, FormatResult, RunOptions
from .facts import FallbackFacts, StageMade, StaticSizesFacts
from .format_result import check_result
from .inventory import (  # noqa: F401  (re-exported: they were defined here)
    EXAMPLE_INPUTS,
    EXAMPLE_LIMIT_BYTES,
    inventory,
    inventory_sha256,
    write_example_inputs,
    write_native_inputs,
)
from .job import ExportJob
from .manifest import LeafBinding, Manifest
from .manifest_records import Supports, Weights
from .outdir import claimed, disk_error
from .precision import FP32, calibrated_at, check_weights_quantizable, remove_calibration_scratch
from .registry import get_backend
from .static_fallback import describe_failure, manifest_for, plan, size_dir, size_key, specialize
from .static_runner import holds_models, models_of
from .symbolic_check import wrong_result

if TYPE_CHECKING:
    from ..leaves import Signature




def export_artifact(backend: Backend, fn: Callable[..., Any], signature: "Signature", out_dir: Path,
                    options: ExportOptions) -> Artifact:
    """Export `fn` with `backend` into `out_dir`: validated options, one manifest, a proven load.

    When the export of a symbolic signature fails in a way a fixed size may avoid, the function is exported
    once per requested size instead (`static_fallback`): one artifact holding a model per size, its
    manifest saying which sizes it takes and why.
    """
    backend.require()
    resolved = backend.resolve_options(options.backend_options)
    check_weights_quantizable(signature, options.precision, backend.name, backend.check_precision)
    with claimed(out_dir) as staging:
        try:
            export_into(backend, fn, signature, staging, options, resolved)
        except ExportError as exc:
            fallback = plan(backend, signature, options, exc.category)
            if fallback is None:
                raise
            _empty(staging)
            _export_sizes(backend, fn, signature, staging, options, resolved, fallback, exc)
    return Artifact(backend.name, out_dir, Manifest.read(out_dir))


def export_into(backend: Backend, fn: Callable[..., Any], signature: "Signature", staging: Path,
                options: ExportOptions, resolved: dict[str, Any]) -> Manifest:
    """One export into the (empty) directory `staging`: the stage it builds on, the format's files, the
    manifest, the dtype audit and the load check. Returns the manifest written."""
    stage = _frontend(backend, fn, signature, options, staging.parent, backend.stage_options(backend.options_object(resolved)))
    with stage as frontend:
        try:
            result = backend._export_impl(ExportJob(fn, signature, staging, options,
                                                    backend.options_object(resolved), frontend))
        except MultiexportError:
            raise
        except OSError as exc:
            error = disk_error(exc, staging)
            if error is exc:
                raise _unexpected(backend, exc) from exc
            raise error from exc
        except Exception as exc:
            raise _unexpected(backend, exc) from exc
    manifest = build_manifest(backend, signature, options, resolved, result, staging, stage.how)
    audit_dtypes(backend.name, manifest, result)
    manifest.write(staging)
    if options.check_load:
        notes = load_check(backend, staging, manifest, signature, fn)
        if notes:
            manifest = dataclasses.replace(manifest, warnings=[*manifest.warnings, *notes])
            manifest.write(staging)
    return manifest


def _export_sizes(backend: Backend, fn: Callable[..., Any], signature: "Signature", staging: Path,
                  options: ExportOptions, resolved: dict[str, Any], fallback: Any, symbolic: ExportError) -> None:
    """The static-size fallback: one sub-artifact per size under static/, then the top-level manifest.

    The example's size comes first; when it fails too, a fixed size does not help and the symbolic
    export's error stands (with the static one's words beside it). A later size that fails is listed as
    not built, and compare reports it `size-unsupported`.
    """
    sized = dataclasses.replace(options, static_sizes={}, fallback_sizes={})
    staged = _stage_models(options.stage_artifact)
    built: dict[str, Manifest] = {}
    not_built = {key: "not attempted" for key in fallback.dropped}
    for sizes in fallback.sizes:
        key = size_key(sizes)
        sub = staging / size_dir(sizes)
        sub.mkdir(parents=True)
        # A stage that holds fixed sizes itself gives each size its own model (reused when made as this size's
        # stage would be), instead of converting the stage again at every size.
        at_size = dataclasses.replace(sized, stage_artifact=staged.get(key)) if staged else sized
        try:  # int8's calibration samples resized to this model's sizes
            built[key] = export_into(backend, fn, specialize(signature, sizes), sub,
                                     calibrated_at(at_size, signature, dict(sizes), staging), resolved)
        except ExportError as exc:
            if not built:
                raise ExportError(f"{symbolic} (a static export at {key} failed too: {describe_failure(exc)})",
                                  backend=backend.name, category=symbolic.category) from symbolic
            shutil.rmtree(sub, ignore_errors=True)
            not_built[key] = describe_failure(exc)
    remove_calibration_scratch(staging)  # before the inventory: not part of the artifact
    manifest = manifest_for(backend, signature, options, resolved, built, not_built, symbolic, staging)
    manifest.write(staging)


def _stage_models(directory: str | None) -> dict[str, str]:
    """A static-sizes stage artifact's models: size key ("b=2") -> its sub-artifact directory, each checked to lie
    inside it (`static_runner.models_of`); {} for any other stage, or one that cannot be read (the stage is then
    exported afresh, as for any stage not reused)."""
    if not directory:
        return {}
    try:
        manifest = Manifest.read(directory)
        if not holds_models(manifest):
            return {}
        return {key: str(path) for key, path in models_of(manifest, Path(directory)).items()}
    except (MultiexportError, OSError, ValueError):
        return {}


def _fixed_sizes(manifest: Manifest) -> FallbackFacts | None:
    """What a static-sizes artifact holds (its format.static_fallback, read typed), else None. Facts that do not
    read (a stage manifest edited by hand) are ArtifactError naming the field: the artifact says it holds fixed
    sizes, so it cannot be taken as one that keeps the symbolic dims."""
    if not holds_models(manifest):
        return None
    return StaticSizesFacts.from_json(manifest.format, f"Artifact '{manifest.backend}'").static_fallback


def _empty(directory: Path) -> None:
    """Remove what a failed attempt left in a staging directory (the directory itself stays claimed)."""
    for child in directory.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _unexpected(backend: Backend, exc: Exception) -> ExportError:
    known = backend.classify(exc, "export")
    if known:
        return ExportError(f"Backend '{backend.name}' | {known[1]}", backend=backend.name, category=known[0])
    text = " ".join(f"{type(exc).__name__}: {exc}".split())[:1500]
    return ExportError(f"Backend '{backend.name}' | export failed: {text}", backend=backend.name)


class _frontend:
    """The stage a backend builds on (`builds_on`): the given finished export of it when that was made as the
    stage would be (`ExportOptions.stage_artifact`), else exported into a temporary directory; or None.
    `how` says which, for the manifest's format.stage."""

    def __init__(self, backend: Backend, fn, signature, options: ExportOptions, parent: Path,
                 stage_options: dict[str, Any] | None = None):
        self.backend, self.fn, self.signature, self.options, self.parent = backend, fn, signature, options, parent
        self.stage_options = dict(stage_options or {})
        self.tmp: Path | None = None
        self.how: StageMade | None = None

    def __enter__(self) -> Artifact | None:
        if not self.backend.builds_on:
            return None
        stage = get_backend(self.backend.builds_on)
        stage_options = dataclasses.replace(self.options, backend_options=self.stage_options, check_load=False,
                                            stage_artifact=None, precision=FP32, calibration=None)
        reused = reusable_stage(stage, self.signature, stage_options, self.options.stage_artifact)
        if reused is not None:
            self._symbolic_or_refuse(stage.name, reused)
            self.how = StageMade(stage.name, "reused the stage artifact exported beside this one",
                                 os.path.relpath(reused.directory, self.parent))
            return reused
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.backend.name}-stage-", dir=self.parent))
        try:
            made = export_artifact(stage, self.fn, self.signature, self.tmp / stage.name, stage_options)
        except ExportError as exc:
            # The row is the building backend's: say so, keep the stage's own words and category.
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise ExportError(f"Backend '{self.backend.name}' | its {stage.name} stage failed: {exc}",
                              backend=self.backend.name, category=exc.category) from exc
        except BaseException:  # NeedsTarget (the export starts again from the built target), a signal: nothing left
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        self._symbolic_or_refuse(stage.name, made)
        self.how = StageMade(stage.name, "exported for this artifact (its export time includes it)")
        return made

    def _symbolic_or_refuse(self, stage: str, artifact: Artifact) -> None:
        """A stage that fell back to fixed sizes cannot carry this export's symbolic dimensions: an ExportError
        with the stage's own reason and category, so this export falls back to fixed sizes too (from the stage's
        models where it was exported beside this one), instead of failing inside the format on files it lacks."""
        if not self.signature.symbolic_dims:
            return
        try:
            fixed = _fixed_sizes(artifact.manifest)
        except MultiexportError as exc:
            self.__exit__()
            raise ExportError(f"Backend '{self.backend.name}' | its {stage} stage says it holds fixed sizes, but its "
                              f"manifest does not say which: {exc}", backend=self.backend.name,
                              category="export-failed") from None
        if fixed is None:
            return
        self.__exit__()  # the refused stage's temporary directory, if it has one
        raise ExportError(
            f"Backend '{self.backend.name}' | its {stage} stage holds fixed sizes only ({'; '.join(fixed.models)}), "
            f"so it cannot keep the symbolic dimension(s) {', '.join(self.signature.symbolic_dims)} either; the "
            f"{stage} export said: {fixed.why}", backend=self.backend.name, category=fixed.category or "export-failed")

    def __exit__(self, *exc_info) -> None:
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)


def export_stage(backend: Backend, fn: Callable[..., Any], signature: "Signature", options: ExportOptions,
                 parent: Path, stage_options: dict[str, Any]) -> "_frontend":
    """A context manager giving a fresh export of `backend`'s stage with `stage_options` (e.g. the ONNX stage's
    other route when the first one's file fails in the building backend), removed on exit."""
    return _frontend(backend, fn, signature, dataclasses.replace(options, stage_artifact=None), parent, stage_options)


def reusable_stage(stage: Backend, signature: "Signature", options: ExportOptions,
                   directory: str | None) -> Artifact | None:
    """The finished stage artifact in `directory` when its manifest shows it was made as `stage` with
    `options` would make it for `signature` (same target, leaves and shapes, default backend options, keep_unused,
    every platform asked for, the stage's backend options in `options`) and it passes the trust gate; None
    otherwise, or when it cannot be read (then the stage is exported afresh)."""
    if not directory:
        return None
    try:
        manifest = Manifest.read(directory)
    except (MultiexportError, OSError, ValueError):
        return None
    platforms = list(options.platforms or ("cpu",))
    same = (manifest.backend == stage.name and manifest.target == signature.name
            and [leaf.name for leaf in manifest.inputs] == [leaf.name for leaf in signature.inputs]
            and [leaf.name for leaf in manifest.outputs] == [leaf.name for leaf in signature.outputs]
            and [leaf.shape for leaf in manifest.inputs] == [list(leaf.shape) for leaf in signature.inputs]
            and manifest.options == stage.resolve_options(options.backend_options)
            and manifest.keep_unused == options.keep_unused
            and set(platforms) <= set(manifest.supports.get("platforms") or ["cpu"]))
    if not same:
        return None
    try:  # the building converter loads the stage (TF loads a SavedModel): through the one trust gate first
        stage.check_untrusted(directory, manifest)
    except MultiexportError:
        return None
    return Artifact(stage.name, Path(directory), manifest)


def build_manifest(backend: Backend, signature: "Signature", options: ExportOptions, resolved: dict[str, Any],
                   result: FormatResult, staging: Path, stage: StageMade | None = None) -> Manifest:
    """The manifest: the core's common fields, the backend's facts, and the inventory of what was written
    (stage: how the stage it builds on was made, recorded as format.stage)."""
    files = dict(result.files)
    if write_example_inputs(signature, staging):
        files["example_inputs"] = EXAMPLE_INPUTS
    native = result.native
    if native is not None:
        # A consumer reads inputs/ only where the export wrote it: never a section naming files that are not there.
        native = {**native, "inputs_written": write_native_inputs(signature, staging, native)}
    dims = dict.fromkeys(signature.symbolic_dims, "any")
    check_result(backend, options.precision, result)
    fmt = result.format.with_core(stage, result.setup).to_json()
    return Manifest(
        backend=backend.name,
        target=signature.name,
        inputs=bindings(signature.inputs, result.used, result.params),
        outputs=bindings(signature.outputs, [True] * len(signature.outputs), result.output_params),
        keep_unused=options.keep_unused,
        symbolic_dims=list(signature.symbolic_dims),
        files=files,
        versions={**base_versions(), **result.versions},
        created=utc_now(),
        inventory=inventory(staging),
        inventory_sha256=inventory_sha256(staging),
        requires=dict(result.requires),
        supports=Supports.coerce({"dims": dims, "platforms": list(result.platforms), "x64": signature.x64},
                                 "Manifest.supports"),
        format=fmt,
        warnings=[*signature.warnings, *result.warnings],
        weights=Weights.coerce({**signature.weights, **result.weights}, "Manifest.weights"),
        options=resolved,
        native=native,
        precision=result.precision,
    )


def bindings(leaves: Sequence[Any], used: Sequence[bool], params: Sequence[int | str | None]) -> list[LeafBinding]:
    """LeafBindings for signature leaves, with the format's used flags and parameter ids."""
    return [LeafBinding(name=leaf.name, alias=leaf.alias, shape=list(leaf.shape), dtype=leaf.dtype, used=bool(u),
                        param=p, weak_type=leaf.weak_type, key_impl=leaf.key_impl)
            for leaf, u, p in zip(leaves, used, params, strict=True)]


def audit_dtypes(backend: str, manifest: Manifest, result: FormatResult) -> None:
    """Refuse an artifact whose own declared dtypes differ from the manifest's leaves (no false claims)."""
    if result.declared is None:
        return
    for kind, leaves in (("Input", [leaf for leaf in manifest.inputs if leaf.param is not None]),
                         ("Output", manifest.outputs)):
        for leaf in leaves:
            got = result.declared.get(leaf.name)
            if got is not None and got != leaf.dtype:
                raise ExportError(f"Backend '{backend}' | " + leaf_message(
                    kind, leaf.name, f"{got} in the artifact", f"{leaf.dtype} as the function has it") +
                    ": the format changed the leaf's dtype, so the artifact is refused", backend=backend,
                    category="unsupported-dtype")


def load_check(backend: Backend, directory: Path, manifest: Manifest, signature: "Signature",
               fn: Callable[..., Any] | None = None) -> list[str]:
    """Load the artifact with the format's own runtime and run it once; a failure is an ExportError.

    A symbolic artifact of a backend with the static-size fallback is also compared with jax.jit of `fn` at
    the example (exporting/symbolic_check.py): a grossly wrong one fails as `parity-failed`, so the fallback
    builds the static sizes instead.
    Returns notes for the manifest (e.g. that the check was skipped because no platform runs here).
    """
    if "cpu" not in manifest.supports.get("platforms", ["cpu"]):
        return [f"load check skipped: the artifact is for {', '.join(manifest.supports['platforms'])} only"]
    feed = _check_feed(manifest, signature)
    runner = None
    try:
        try:
            runner = backend.load(directory, RunOptions(device="cpu", threads=1, trust_artifact=True))
            got = runner(feed)
        except Exception as exc:
            known = backend.classify(exc, "load")
            if known:
                raise ExportError(f"Backend '{backend.name}' | {known[1]}", backend=backend.name,
                                  category=known[0]) from exc
            category = getattr(exc, "category", "load-failed")
            text = " ".join(str(exc).split())[:1500]
            raise ExportError(f"Backend '{backend.name}' | the installed runtime cannot load and run the artifact it "
                              f"just wrote: {type(exc).__name__}: {text}", backend=backend.name,
                              category=category if category not in ("run-failed", "export-failed")
                              else "load-failed") from exc
        if fn is not None and signature.symbolic_dims and backend.static_fallback:
            why = wrong_result(fn, signature, feed, got, manifest.precision_name)
            if why:
                raise ExportError(f"Backend '{backend.name}' | the model converted with symbolic dimensions "
                                  f"({', '.join(signature.symbolic_dims)}) runs but computes a wrong result: {why}",
                                  backend=backend.name, category="parity-failed")
    finally:
        # its runtime's handles (a session, an interpreter's threads, onnx-web's browser) released once its outputs
        # are judged: the process goes on exporting, or is the reference's worker that times jax.jit next (run.serve)
        if runner is not None:
            with contextlib.suppress(Exception):  # a runtime that fails to let go does not fail the export
                runner.close()
    return []


def _check_feed(manifest: Manifest, signature: "Signature") -> dict[str, np.ndarray]:
    """The example values when they fit the artifact, else zeros at its shapes (symbolic dims at 2)."""
    examples = signature.example_feed()
    taken = [leaf for leaf in manifest.inputs if leaf.param is not None]
    fits = all(leaf.name in examples and len(examples[leaf.name].shape) == len(leaf.shape) and all(
        isinstance(d, str) or d == n for d, n in zip(leaf.shape, examples[leaf.name].shape)) for leaf in taken)
    if fits:
        return {leaf.name: examples[leaf.name] for leaf in taken}
    return {leaf.name: np.zeros(tuple(d if isinstance(d, int) else 2 for d in leaf.shape), parse_dtype(leaf.dtype))
            for leaf in taken}


EXPORT_DRIVER["export_artifact"] = export_artifact  # Backend.export's old spelling goes through the one driver
