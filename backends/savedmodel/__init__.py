"""TF SavedModel: jax.export's module in one `XlaCallModule` op, with a named `serving_default` signature.

The function exported is the signature's flat function of named leaves. `serving_default` takes one
tensor per leaf the artifact takes, keyed by the leaf's alias, and returns a flat dict keyed by the output
leaves' aliases, so TF Serving, C++ `LoadSavedModel` and `saved_model_cli` all see the manifest's names;
export fails rather than let TF rename a key. The artifact directory is itself the SavedModel directory.
`format.tensor_names` gives the graph tensors a TF C API caller feeds and fetches
(`serving_default_<alias>:0`, `StatefulPartitionedCall:<i>`, where `<i>` follows the sorted output keys).

The module is written for the StableHLO the installed TensorFlow reads and read back by TensorFlow's own
reader before anything is saved (convert.py), so skew between the producing JAX and this TensorFlow is a
`version-skew` failure at export, naming both versions. Baked weights are by default serialized inside
the module; when `external_weights` lifts them they become one `tf.Variable` each, saved in the
SavedModel's own checkpoint (variables/) and restored by `tf.saved_model.load`. A SavedModel is a
program, so one multiexport did not just write is checked op by op before it is loaded (`tf.check_graph`)
unless the caller trusts it.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from multiexport.sdk import (
    ArtifactError,
    Availability,
    Backend,
    BackendFacts,
    ExportError,
    ExportJob,
    FormatResult,
    Intermediates,
    IntermediatesRequest,
    LiftedWeights,
    Manifest,
    NoOptions,
    Presentation,
    RunError,
    RunOptions,
    Runner,
    Signature,
    embedded,
    plan,
    tpu_only,
)

from .convert import (
    checkpoint_files,
    describe_variables,
    exported_for_tf,
    serving_function,
    tf_stablehlo_version,
    variables_for,
)
from .describe import LEAF_FUNCTION, facts_of, requires_of, versions_of
from .facts import SavedModelFacts
from .intermediates import savedmodel_intermediates
from .native import TfConsumer, savedmodel_section
from .runner import SavedModelRunner
from .tf import (
    SAVED_MODEL,
    SIGNATURE_KEY,
    check_graph,
    import_tf,
    max_supported_call_module_version,
    read_proto,
    read_saved_model,
    version_problem,
)

# Fragments of converter errors -> category (first match wins).
_CATEGORIES = (
    ("custom calls whose targets have no compatibility guarantees", "unsupported-op"),
    ("callback", "unsupported-op"),
    ("serialization version", "version-skew"),
    ("maximum protobuf size", "size-limit"),
    ("2GB", "size-limit"),
    ("dtype", "unsupported-dtype"),
)
# What TensorFlow says when it cannot read the StableHLO a newer JAX wrote (measured with TF 2.21).
_SKEW = ("failed to deserialize portable artifact", "unregistered operation", "vhlo.", "StableHLO_v")


class SavedModelBackend(Backend):
    spec = BackendFacts(
        name="savedmodel",
        requires=("tensorflow", "jax"),
        extra="tf",
        distributions=("tensorflow-cpu", "tensorflow"),  # either provides the module
        runtime_modules=("tensorflow",),
        facts_type=SavedModelFacts,
        precision_gaps={p: ("TensorFlow quantizes for deployment through the TFLite converter, whose output is the "
                            "litert backend's (litert@" + p + "), not a SavedModel")
                        for p in ("fp16", "int8-dynamic", "int8")},
        carries_code=True,
        export_memory=(1.5, 1.0), runner_memory=(1.5, 1.0),  # measured peaks, docs/large-models.md "Memory"
        export_cost=3.5,  # median export seconds over the compare_time zoo (benchmarks/README.md)
        needs_target=False, export_modules=("tensorflow",),
    )
    presentation = Presentation(summary="TF SavedModel (jax2tf): serving_default keyed by leaf aliases",
                                color="#d62728", order=20)

    def native_consumer(self):
        """tf_run on the TF C API (`native.TfConsumer`)."""

        return TfConsumer()

    def _intermediates_impl(self, request: IntermediatesRequest) -> Intermediates:
        """The SavedModel's own module with every op result returned, run by TF's XlaCallModule
        (`intermediates.savedmodel_intermediates`)."""
        return savedmodel_intermediates(request)

    def _export_impl(self, job: ExportJob[NoOptions]) -> FormatResult:
        tf = import_tf()
        signature, out_dir = job.signature, job.out_dir
        lifted, exported, written, reads = self._exported(job)
        n = len(signature.inputs)
        kept = set(exported.module_kept_var_idx)
        used = [i in kept for i in range(n)]
        declared = [True] * n if job.options.keep_unused else used
        self._save(tf, exported, signature, lifted, declared, out_dir)
        saved = read_saved_model(out_dir)
        needed, supported = self._check_saved(tf, saved, signature, declared)
        files = {"saved_model": SAVED_MODEL}
        if lifted is not None:  # listed so that a copy missing its checkpoint is refused when read
            files.update(checkpoint_files(out_dir))
        weights = embedded(signature) if lifted is None else describe_variables(lifted, out_dir)
        by_alias = {leaf.alias: leaf.name for leaf in (*signature.inputs, *signature.outputs)}
        params = [leaf.alias if d else None for leaf, d in zip(signature.inputs, declared)]
        native = savedmodel_section(signature.inputs, params, signature.outputs, saved["input_tensors"],
                                    saved["output_tensors"], signature=SIGNATURE_KEY)
        return FormatResult(
            files=files, used=used, params=params, output_params=[leaf.alias for leaf in signature.outputs],
            versions=versions_of(tf, needed, supported, written, reads),
            requires=requires_of(tf, needed, written, reads),
            format=facts_of(signature, saved, written, reads, weights["storage"]),
            weights=weights, platforms=saved["platforms"], declared=_declared(tf, out_dir, signature, by_alias),
            native=native,
        )

    def _exported(self, job: ExportJob[NoOptions]) -> tuple[LiftedWeights | None, Any, str, str]:
        """The lifted weights (or None) and the module exported for this TensorFlow, with the StableHLO versions
        jax wrote and TensorFlow reads; a failure is one ExportError naming the target."""
        try:
            lifted = plan(job.fn, job.signature, job.options.external_weights)
            exported, written, reads = exported_for_tf(job.fn, job.signature, job.options, lifted)
        except ExportError:
            raise
        except Exception as exc:
            raise self._error(job.signature, "cannot be exported for TensorFlow", exc) from exc
        return lifted, exported, written, reads

    def _save(self, tf: Any, exported: Any, signature: Signature, lifted: LiftedWeights | None,
              declared: list[bool], out_dir: Path) -> None:
        """`serving_default` (and the leaf function) saved as a SavedModel in `out_dir`, lifted weights as
        variables."""
        module = tf.Module()
        variables = variables_for(tf, lifted) if lifted is not None else []
        if variables:
            module.weights = variables  # tracked: saved to variables/, restored by tf.saved_model.load
        try:
            function = serving_function(tf, exported, signature, variables, declared)
            setattr(module, LEAF_FUNCTION, function)
            tf.saved_model.save(module, str(out_dir), signatures={SIGNATURE_KEY: function})
        except ExportError:
            raise
        except Exception as exc:
            raise self._error(signature, "cannot be saved as a SavedModel", exc) from exc
        del module, function, variables
        gc.collect()  # TF's traced graphs are reference cycles: free their copies of the module now

    def _check_saved(self, tf: Any, saved: dict[str, Any], signature: Signature, declared: list[bool]
                     ) -> tuple[int, int]:
        """The saved signature's keys are the leaves' aliases and this TensorFlow reads the module's
        XlaCallModule version: (the version needed, the newest supported)."""
        keys = {"inputs": sorted(leaf.alias for leaf, d in zip(signature.inputs, declared) if d),
                "outputs": sorted(leaf.alias for leaf in signature.outputs)}
        for role in ("inputs", "outputs"):  # TF must not have renamed or merged any key
            if saved[role] != keys[role]:
                raise ExportError(
                    f"Backend '{self.name}' | signature {role} of '{signature.name}' | got keys {saved[role]}, "
                    f"expected the leaves' aliases {keys[role]}", backend=self.name, category="converter-error")
        needed, supported = max(saved["versions"]), max_supported_call_module_version()
        problem = version_problem(needed, supported, tf.__version__)
        if problem:
            raise ExportError(f"Backend '{self.name}' | {problem}", backend=self.name, category="version-skew")
        return needed, supported

    def _error(self, signature, what: str, exc: Exception) -> ExportError:

        if (pallas := tpu_only(exc, "a SavedModel on the CPU")) is not None:
            return ExportError(f"Backend '{self.name}' | {pallas[1]}", backend=self.name, category=pallas[0])
        text = f"{type(exc).__name__}: {exc}".strip()
        known = self.classify(exc, "export")
        category = known[0] if known else next(
            (c for fragment, c in _CATEGORIES if fragment.lower() in text.lower()), "converter-error")
        reason = " ".join(text.split())[:800]
        return ExportError(f"Backend '{self.name}' | '{signature.name}' {what}: {reason}", backend=self.name,
                           category=category)

    def classify(self, exc: BaseException, stage: str) -> tuple[str, str] | None:
        text = " ".join(str(exc).split())
        if any(s in text for s in _SKEW):
            import tensorflow as tf

            detail = next((line for line in str(exc).splitlines() if any(s in line for s in _SKEW)), text)[:400]

            return ("version-skew", f"TensorFlow {tf.__version__}'s XlaCallModule (StableHLO {tf_stablehlo_version()}) "
                    f"cannot read the artifact's module ({detail.strip()}): re-export it with this TensorFlow installed "
                    "(multiexport writes the module for the StableHLO the installed TensorFlow reads), or run it with "
                    "the TensorFlow it was exported with")
        return None

    def _gpu_status_impl(self) -> Availability:
        tf = import_tf()
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            return Availability(False, f"TensorFlow {tf.__version__} sees no GPU (tensorflow-cpu, or no CUDA): "
                                       "install 'multiexport[gpu]' for tensorflow[and-cuda]")
        return Availability(True, f"{len(gpus)} GPU(s): {', '.join(g.name for g in gpus)}")

    def _check_untrusted_impl(self, manifest: Manifest, directory: Path) -> None:
        self.require()  # the graph is read with TF's own protobuf classes: without TF, one line saying so
        check_graph(directory)  # the protobuf read without running anything: TF's own loader runs the graph

    def _load_impl(self, manifest: Manifest, directory: Path, options: RunOptions) -> Runner:
        tf = import_tf(options.thread_count)  # the graph was checked by the contract's load (check_untrusted)
        saved = read_saved_model(directory)
        problem = version_problem(max(saved["versions"]), max_supported_call_module_version(), tf.__version__)
        if problem:
            raise RunError(f"Artifact '{directory}' | {problem}", backend=self.name, category="version-skew")
        if options.device == "gpu" and not tf.config.list_physical_devices("GPU"):
            raise RunError(f"Device 'gpu' | TensorFlow {tf.__version__} sees none (tensorflow-cpu, or no CUDA)",
                           category="no-gpu")
        tf_device = "/GPU:0" if options.device == "gpu" else "/CPU:0"
        try:
            with tf.device(tf_device):
                loaded = tf.saved_model.load(str(directory))
            serving = loaded.signatures[SIGNATURE_KEY]
        except Exception as exc:
            known = self.classify(exc, "load")
            if known:
                raise RunError(f"Artifact '{directory}' | {known[1]}", backend=self.name, category=known[0]) from exc
            raise ArtifactError(f"Artifact '{directory}' | tf.saved_model.load failed: {type(exc).__name__}: "
                                f"{' '.join(str(exc).split())[:800]}") from exc
        keys = sorted(serving.structured_input_signature[1])
        if keys != sorted(leaf.param for leaf in manifest.inputs if leaf.param is not None):
            raise ArtifactError(f"Artifact '{directory}' | signature keys {keys} do not match the manifest's parameters")
        return SavedModelRunner(manifest, directory, options, loaded, serving, tf_device)


def _declared(tf, out_dir: Path, signature, by_alias: dict[str, str]) -> dict[str, str]:
    """The dtypes saved_model.pb's serving signature declares, by leaf name."""

    sig = read_proto(out_dir).signature_def[SIGNATURE_KEY]
    found: dict[str, str] = {}
    for spec in (sig.inputs, sig.outputs):
        for key, info in spec.items():
            found[by_alias[key]] = tf.as_dtype(info.dtype).name
    return found


BACKEND = SavedModelBackend
