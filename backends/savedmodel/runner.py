"""The SavedModel runner: the restored `serving_default` signature, its inputs bound once per feed."""

from __future__ import annotations

from typing import Any, Callable, Sequence, cast

import numpy as np

from multiexport.sdk import Runner

SIGNATURE_KEY = "serving_default"


class SavedModelRunner(Runner):
    """Calls the restored `serving_default` signature with its keyword arguments bound once, in `prepare`.

    Chosen by benchmarks/savedmodel_calling_paths.py (per-call p50, same prepared TF tensors, interleaved
    rounds, 2 shared CPU cores, TF 2.21; ratio to the public `signature(**tensors)`):

        path                                   mlp (7 leaves)   transformer (17 leaves)
        signature bound once, _call_flat        332 us 0.55x      741 us 0.53x   <- this runner
        restored concrete function(*t)          579 us 0.96x     1214 us 0.86x
        serving signature(**tensors)            604 us 1.00x     1404 us 1.00x
        tf.function(jit_compile) wrapper        588 us 0.97x     1640 us 1.17x
        tf.function(signature) wrapper          799 us 1.32x     1732 us 1.23x
        restored tf.function serve_leaves(*t)  1063 us 1.76x     2446 us 1.74x
        (jax.jit of the same function           110 us           301 us)

    The public call spends about as long binding and checking its keyword arguments in Python as the
    graph takes to run (~35 us per leaf). So `prepare` binds them once with TF's own code
    (`canonicalize_function_inputs` + `unpack_inputs`, what `signature(**tensors)` runs on every call)
    and the timed call is `signature._call_flat` on those tensors: the same graph and inputs, no
    re-binding. Where those TF internals are missing the runner falls back to `signature(**tensors)`.
    """

    threads_key = "intra_op_threads"

    calling_path = (
        "restored serving_default signature; keyword inputs bound once in prepare, timed call "
        "ConcreteFunction._call_flat on prepared TF tensors"
    )

    def __init__(self, manifest, directory, options, loaded, serving, tf_device):
        super().__init__(manifest, directory, options)
        self._loaded = loaded  # keeps the restored objects alive
        self._serving = serving
        self._tf_device = tf_device
        self._bind = _flat_binder(serving)
        self._captured = serving.captured_inputs  # the variables' handles: fixed for the loaded object
        if self._bind is None:
            self.calling_path = "restored serving_default signature called as signature(**tensors)"

    def _prepare_impl(self, arrays: list[np.ndarray]) -> Any:
        import tensorflow as tf

        with tf.device(self._tf_device):
            tensors = {leaf.param: _to_tensor(tf, a, self._tf_device)
                       for leaf, a in zip(self.manifest.inputs, arrays) if leaf.param is not None}
        return self._bind(tensors) if self._bind else tensors

    def _call(self, prepared: Any) -> dict[str, Any]:
        if self._bind is None:
            return self._serving(**prepared)
        return self._serving._call_flat(prepared, self._captured)

    def _run_impl(self, prepared: Any) -> None:
        self._call(prepared)
        if self.device == "gpu":  # eager GPU kernels are queued asynchronously: wait for them
            import tensorflow as tf

            tf.test.experimental.sync_devices()

    def _fetch_impl(self, prepared: Any) -> Sequence[Any]:
        outputs = self._call(prepared)
        # an output's param is its key in the serving signature's outputs (a name)
        return [outputs[cast(str, leaf.param)].numpy() for leaf in self.manifest.outputs]

    def _describe_impl(self) -> dict[str, Any]:
        import tensorflow as tf

        return {"tensorflow": tf.__version__, "tf_device": self._tf_device,
                "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
                "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads()}


_NO_DEEP_COPY = ("float8", "float6", "float4", "int4", "uint4", "int2", "uint2")  # ml_dtypes DeepCopy lacks


def _to_tensor(tf, array: np.ndarray, device: str):
    """`array` as a TF tensor of its own on `device` (the runner's prepared input), its bytes held once.

    `tf.constant(array)` holds them twice: measured with TF 2.21 on a 256 MB float32 array it kept
    512 MB and took ~1 s, which with weights fed as inputs was a whole extra copy of the model per
    prepared feed. On the CPU a `DeepCopy` op fed the array keeps 256 MB (0.1-0.26 s) and, unlike an
    `Identity` (which forwards the array's own buffer when it is 64-byte aligned), never aliases the
    caller's array. Dtypes DeepCopy lacks (the 8- and 4-bit floats and ints) and GPU tensors, which are
    copies by nature, keep `tf.constant`.
    """
    if device == "/CPU:0" and not array.dtype.name.startswith(_NO_DEEP_COPY):
        try:
            return tf.raw_ops.DeepCopy(x=array)
        except (tf.errors.InvalidArgumentError, tf.errors.NotFoundError):  # no kernel for this dtype
            pass
    return tf.constant(array)


def _flat_binder(serving) -> Callable[[dict[str, Any]], list[Any]] | None:
    """TF's own keyword binding for `serving`, to run once per prepared feed; None if TF lacks it."""
    try:
        from tensorflow.python.eager.polymorphic_function import function_type_utils
    except ImportError:
        return None
    function_type = getattr(serving, "function_type", None)
    if function_type is None or not hasattr(serving, "_call_flat"):
        return None

    def bind(tensors: dict[str, Any]) -> list[Any]:
        bound = function_type_utils.canonicalize_function_inputs((), tensors, function_type)
        return list(function_type.unpack_inputs(bound))

    return bind
