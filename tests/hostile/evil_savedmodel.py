"""Hostile SavedModels built with TensorFlow directly from a real multiexport export (issue 16, item 4).

    python -m tests.hostile.evil_savedmodel WORKDIR PWNED_PREFIX MODE [MODE ...]

exports the seed example with the savedmodel backend into WORKDIR/src, then for each MODE writes
WORKDIR/<MODE>: a SavedModel whose serving signature still calls the real XlaCallModule, and also:

serving      tf.io.write_file(PWNED_PREFIX-serving) inside the serving function (runs when called)
load         tf.io.write_file in a resource initializer (runs inside tf.saved_model.load)
traced_save  the serving function calls a tf.function whose Python name is `_traced_save` holding SaveV2
load_save    SaveV2 in a resource initializer whose graph function is renamed `__inference__traced_save_N`
             (the same length, so the protobuf stays valid byte for byte): TF's own saver name

manifest.json and example_inputs.npz are copied and the inventory recomputed, as someone who edits an
artifact on purpose would. Run in a subprocess: TensorFlow's tracing stays out of the test process.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path


def build(src: Path, dst: Path, pwned: str, mode: str) -> None:
    import tensorflow as tf

    loaded = tf.saved_model.load(str(src))
    serving = loaded.signatures["serving_default"]
    keys = sorted(serving.structured_input_signature[1])
    specs = [tf.TensorSpec(serving.structured_input_signature[1][k].shape,
                           serving.structured_input_signature[1][k].dtype, name=k) for k in keys]

    class EvilResource(tf.saved_model.experimental.TrackableResource):
        def _create_resource(self):
            return tf.raw_ops.VarHandleOp(dtype=tf.int32, shape=[], shared_name=f"evil_{mode}")

        def _initialize(self):
            if mode == "load_save":
                op = tf.raw_ops.SaveV2(prefix=pwned, tensor_names=["x"], shape_and_slices=[""],
                                       tensors=[tf.constant([1.0])])
                with tf.control_dependencies([op]):
                    return tf.constant(0)
            tf.io.write_file(pwned, "written while the SavedModel loaded")

    @tf.function
    def _traced_save():
        op = tf.raw_ops.SaveV2(prefix=pwned, tensor_names=["x"], shape_and_slices=[""], tensors=[tf.constant([1.0])])
        with tf.control_dependencies([op]):
            return tf.constant(0)

    module = tf.Module()
    module.inner = loaded
    if mode in ("load", "load_save"):
        module.res = EvilResource()

    def body(*args):
        kwargs = dict(zip(keys, args))
        if mode == "serving":
            with tf.control_dependencies([tf.io.write_file(pwned, "written by the serving function")]):
                kwargs = {k: tf.identity(v) for k, v in kwargs.items()}
        elif mode == "traced_save":
            with tf.control_dependencies([_traced_save()]):
                kwargs = {k: tf.identity(v) for k, v in kwargs.items()}
        else:
            _ = module.res.resource_handle
        return serving(**kwargs)

    fn = tf.function(body, input_signature=specs)
    module.serve = fn
    tf.saved_model.save(module, str(dst), signatures={"serving_default": fn.get_concrete_function()})
    if mode == "load_save":
        from tensorflow.core.protobuf import saved_model_pb2

        pb = dst / "saved_model.pb"
        proto = saved_model_pb2.SavedModel()
        proto.ParseFromString(pb.read_bytes())
        for f in proto.meta_graphs[0].graph_def.library.function:
            if f.signature.name.startswith("__inference__initializer_"):
                f.signature.control_output.append("evil_save")  # SaveV2 alone is pruned: make it a control output
                f.control_ret["evil_save"] = next(n.name for n in f.node_def if n.op == "SaveV2")
        data = proto.SerializeToString()
        pb.write_bytes(data.replace(b"__inference__initializer_", b"__inference__traced_save_"))
    for name in ("manifest.json", "example_inputs.npz"):
        shutil.copy(src / name, dst / name)
    manifest = json.loads((src / "manifest.json").read_text())
    manifest["inventory"] = {p.relative_to(dst).as_posix(): p.stat().st_size for p in sorted(dst.rglob("*"))
                             if p.is_file() and p.name != "manifest.json"}
    (dst / "manifest.json").write_text(json.dumps(manifest))
    for leftover in Path(pwned).parent.glob(Path(pwned).name + "*"):  # saving may run an initializer once
        leftover.unlink()


def main(argv: list[str]) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    work, prefix, modes = Path(argv[0]), argv[1], argv[2:]
    from multiexport import export
    from multiexport.examples import seed

    src = work / "src"
    export(seed(), src, "savedmodel")
    for mode in modes:
        build(src, work / mode, f"{prefix}-{mode}", mode)
    shutil.rmtree(src)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
