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

from multiexport.sdk import (
    ArtifactError,
    Availability,
    Backend,
    ExportError,
    FormatResult,
    Manifest,
    RunError,
    RunOptions,
    Runner,
    embedded,
    plan,
    tpu_only,
)

from .convert import (
    checkpoint_files,
    describe_variables,
    exported_for_tf,
    jax_version,
    poly_shape,
    serving_function,
    tf_stablehlo_version,
    variables_for,
)
from .facts import SavedModelFacts, StableHLOReserialized, TensorNames
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

LEAF_FUNCTION = "serve_leaves"  # the same function restorable by attribute, positional in leaf order
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
    name = "savedmodel"
    summary = "TF SavedModel (jax2tf): serving_default keyed by leaf aliases"
    requires = ("tensorflow", "jax")
    extra = "tf"
    distributions = ("tensorflow-cpu", "tensorflow")  # either provides the module
    color = "#d62728"
    order = 20
    runtime_modules = ("tensorflow",)
    facts_type = SavedModelFacts
    precision_gaps = {p: ("TensorFlow quantizes for deployment through the TFLite converter, whose output is the "
                          "litert backend's (litert@" + p + "), not a SavedModel")
                      for p in ("fp16", "int8-dynamic", "int8")}
    carries_code = True

    def native_consumer(self):
        """tf_run on the TF C API (`native.TfConsumer`)."""

        return TfConsumer()

    def _export_impl(self, fn, signature, out_dir: Path, options, resolved, frontend) -> FormatResult:
        tf = import_tf()
        try:
            lifted = plan(fn, signature, options.external_weights)
            exported, written, reads = exported_for_tf(fn, signature, options, lifted)
        except ExportError:
            raise
        except Exception as exc:
            raise self._error(signature, "cannot be exported for TensorFlow", exc) from exc
        n = len(signature.inputs)
        kept = set(exported.module_kept_var_idx)
        used = [i in kept for i in range(n)]
        declared = [True] * n if options.keep_unused else used
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

        saved = read_saved_model(out_dir)
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
        files = {"saved_model": SAVED_MODEL}
        if lifted is not None:  # listed so that a copy missing its checkpoint is refused when read
            files.update(checkpoint_files(out_dir))
        weights = embedded(signature) if lifted is None else describe_variables(lifted, out_dir)
        by_alias = {leaf.alias: leaf.name for leaf in (*signature.inputs, *signature.outputs)}
        params = [leaf.alias if d else None for leaf, d in zip(signature.inputs, declared)]
        native = savedmodel_section(signature.inputs, params, signature.outputs, saved["input_tensors"],
                                    saved["output_tensors"], signature=SIGNATURE_KEY)
        return FormatResult(
            files=files, used=used, params=params,
            output_params=[leaf.alias for leaf in signature.outputs],
            versions={"tensorflow": tf.__version__, "xla_call_module_version": str(needed),
                      "xla_call_module_max_supported": str(supported), "stablehlo_written_by_jax": written,
                      "stablehlo_version": reads},
            requires={"xla_call_module_version": needed, "stablehlo_version": reads,
                      "note": (f"a TensorFlow whose XlaCallModule supports serialization version {needed} and reads "
                               f"StableHLO {reads} (TensorFlow {tf.__version__} or newer); jax {jax_version()} wrote "
                               f"StableHLO {written}, re-serialized for {reads} so that this TensorFlow reads it")},
            format=SavedModelFacts(
                signature=SIGNATURE_KEY,
                tag="serve",
                output_keys={leaf.name: leaf.alias for leaf in signature.outputs},
                # The graph tensors a TF C API caller feeds and fetches, read back from saved_model.pb.
                tensor_names=TensorNames(
                    inputs={by_alias[k]: v for k, v in saved["input_tensors"].items()},
                    outputs={by_alias[k]: v for k, v in saved["output_tensors"].items()},
                ),
                output_order="TF's StatefulPartitionedCall:<i> follows the output keys sorted, not manifest order",
                leaf_function=f"{LEAF_FUNCTION}(*declared tensors in manifest input order) -> dict by output key",
                platforms=list(saved["platforms"]),
                polymorphic_shapes=[poly_shape(leaf) for leaf in signature.inputs],
                stablehlo=StableHLOReserialized(
                    written_by_jax=written, serialized_for=reads,
                    why="re-serialized for the StableHLO the installed TensorFlow reads (jax.export writes for its "
                        "own 4-week window), then read back by TensorFlow's own reader"),
                weights={
                    "external": "tf.Variable per lifted weight (module.weights), saved in variables/ and restored "
                                "with the SavedModel; the XlaCallModule takes them after the leaves",
                    "embedded": "constants inside the XlaCallModule's serialized module (saved_model.pb)",
                    "none": "no baked weights",
                }[weights["storage"]],
            ),
            weights=weights, platforms=saved["platforms"], declared=_declared(tf, out_dir, signature, by_alias),
            native=native,
        )

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
