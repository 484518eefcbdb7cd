"""Help texts more than one subcommand shows, written once."""

from __future__ import annotations

TARGET_HELP = (
    "what to export: path/to/file.py:attr or package.module:attr, where attr is a multiexport.Target "
    "or a zero-argument function returning one (attr defaults to 'target'); omitted: the built-in "
    "seed example, fn(foo) = sum(foo.baz) on a dataclass Foo(bar, baz)"
)
EXTERNAL_WEIGHTS_HELP = (
    "where weights the target closes over go: auto (default: out of the module once they reach 16 MiB), "
    "always (the same at any size), never (embedded as constants; ONNX refuses past its 2 GB protobuf limit)")
PRECISION_HELP = ("fp16: float16 weights (and math where the runtime does it); int8-dynamic: int8 weights, "
                  "activations quantized per call; int8: static int8 calibrated from sample inputs. Each format uses "
                  "its own toolchain (ONNX Runtime's quantizer, the TFLite converter, OpenVINO, iree-compile)")
CALIBRATION_HELP = (".npz of sample inputs for int8: one array per input leaf, keyed by leaf name, with a leading "
                    "sample axis of at most 1024 samples, finite values (default: 16 synthetic samples in the "
                    "example's domain)")
OPTION_HELP = ("a backend's own option, BACKEND.NAME=VALUE, e.g. onnx.opset=21 (repeatable; `multiexport backends` "
               "lists each backend's options)")
