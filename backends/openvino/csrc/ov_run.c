/* ov_run: runs an OpenVINO artifact of multiexport through OpenVINO's C API, with no Python.
 *
 * ov_core_read_model reads the artifact's model file (the ONNX file the export shipped; OpenVINO's ONNX
 * frontend converts it at load, as the Python runner does), ov_core_compile_model compiles it for the
 * CPU plugin with the properties the manifest's "native" section lists (one synchronous request, f32
 * inference precision: the same configuration the Python runner uses), each leaf is set on its input
 * port by the port's name (native.args[].tensor) from a .npy file, and each output read by name and
 * written as .npy. A symbolic batch stays dynamic: OpenVINO reshapes per call from the input tensors.
 * With --iters N it times N ov_infer_request_infer calls itself.
 *
 * Built against the openvino wheel's C headers (openvino/include) and libopenvino_c (openvino/libs),
 * linked with an rpath to the wheel so the program runs under `env -i`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mx_json.h"
#include "common/mx_npy.h"
#include "common/mx_util.h"
#include "openvino/c/openvino.h"

static const char *USAGE =
    "usage: ov_run [--artifact DIR] [--inputs DIR] [--outputs DIR] [--threads N] [--warmup N] [--iters N] [--times FILE]\n"
    "              [--no-outputs]\n"
    "  Runs the OpenVINO artifact in DIR (default .) on OpenVINO's CPU plugin through its C API. Inputs: one\n"
    "  .npy per model input, named as the manifest's native.args[].file, in --inputs (default inputs/).\n"
    "  Outputs go to --outputs (default outputs/). --threads N: INFERENCE_NUM_THREADS (default: the\n"
    "  plugin's choice). --iters N: time N calls (after --warmup untimed ones), print per-call figures as JSON.\n";

static void check(ov_status_e status, const char *what) {
  if (status != OK) mx_die("%s: %s (%s)", what, ov_get_error_info(status), ov_get_last_err_msg());
}

static ov_element_type_e ov_type(const char *dtype, const char *who) {
  static const struct { const char *name; ov_element_type_e type; } map[] = {
      {"float32", F32}, {"float64", F64}, {"float16", F16}, {"bfloat16", BF16}, {"int8", I8},
      {"int16", I16},   {"int32", I32},   {"int64", I64},   {"uint8", U8},      {"uint16", U16},
      {"uint32", U32},  {"uint64", U64},  {"bool", BOOLEAN},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(map[i].name, dtype) == 0) return map[i].type;
  mx_die("%s | dtype %s has no OpenVINO element type here", who, dtype);
}

int main(int argc, char **argv) {
  mx_set_program("ov_run");
  mx_options opts;
  int threads = 0;
  mx_parse_options(argc, argv, &opts, USAGE, mx_parse_threads, &threads);
  const mx_json *native;
  mx_json *manifest = mx_load_manifest(opts.artifact, &native, "openvino");
  const mx_json *args = mx_require(native, "args", "native"), *results = mx_require(native, "results", "native");
  size_t n_in = mx_json_len(args), n_out = mx_json_len(results);

  /* Inputs first: a bad feed fails before the (slow) read and compile. The arrays live until the end:
   * the tensors wrap their buffers without copying. */
  mx_sizes sizes = {0};
  mx_npy *arrays = (mx_npy *)calloc(n_in ? n_in : 1, sizeof *arrays);
  ov_tensor_t **in_tensors = (ov_tensor_t **)calloc(n_in ? n_in : 1, sizeof *in_tensors);
  for (size_t i = 0; i < n_in; i++) {
    const mx_json *a = mx_json_at(args, i);
    mx_read_leaf(opts.inputs, a, &sizes, &arrays[i]);
    const char *name = mx_json_str(mx_json_get(a, "leaf"), "?");
    /* ov_shape_create refuses rank 0; a zero shape {0, NULL} is OpenVINO's scalar shape (ov::Shape{}). */
    ov_shape_t shape = {0, NULL};
    if (arrays[i].ndim > 0) check(ov_shape_create(arrays[i].ndim, arrays[i].shape, &shape), "ov_shape_create");
    check(ov_tensor_create_from_host_ptr(ov_type(mx_json_str(mx_json_get(a, "dtype"), ""), name), shape,
                                         arrays[i].data, &in_tensors[i]),
          name);
    if (arrays[i].ndim > 0) ov_shape_free(&shape);
  }

  char *model_path = mx_join(opts.artifact, mx_json_str(mx_require(native, "model", "native"), ""));
  ov_core_t *core = NULL;
  ov_model_t *model = NULL;
  ov_compiled_model_t *compiled = NULL;
  ov_infer_request_t *request = NULL;
  int64_t t0 = mx_now_ns();
  check(ov_core_create(&core), "ov_core_create");
  check(ov_core_read_model(core, model_path, NULL, &model), "ov_core_read_model");
  /* The Python runner's configuration (backends/openvino/runner.py: config), spelled in the section. */
  const mx_json *props = mx_require(native, "properties", "native");
  const char *hint = mx_json_str(mx_require(props, "PERFORMANCE_HINT", "native.properties"), "LATENCY");
  const char *streams = mx_json_str(mx_require(props, "NUM_STREAMS", "native.properties"), "1");
  const char *precision = mx_json_str(mx_require(props, "INFERENCE_PRECISION_HINT", "native.properties"), "f32");
  char threads_text[16];
  snprintf(threads_text, sizeof threads_text, "%d", threads);
  const char *device = mx_json_str(mx_require(native, "device", "native"), "CPU");
  if (threads > 0)
    check(ov_core_compile_model(core, model, device, 8, &compiled, ov_property_key_hint_performance_mode, hint,
                                ov_property_key_num_streams, streams, ov_property_key_hint_inference_precision,
                                precision, ov_property_key_inference_num_threads, threads_text),
          "ov_core_compile_model");
  else
    check(ov_core_compile_model(core, model, device, 6, &compiled, ov_property_key_hint_performance_mode, hint,
                                ov_property_key_num_streams, streams, ov_property_key_hint_inference_precision,
                                precision),
          "ov_core_compile_model");
  /* Read back, as the Python runner does: a CPU with native bf16 may lower f32 math unless told not to. */
  char *got_precision = NULL;
  check(ov_compiled_model_get_property(compiled, ov_property_key_hint_inference_precision, &got_precision),
        "ov_compiled_model_get_property(INFERENCE_PRECISION_HINT)");
  if (strcmp(got_precision, precision) != 0)
    mx_die("asked OpenVINO for INFERENCE_PRECISION_HINT=%s, the compiled model reports %s", precision, got_precision);
  ov_free(got_precision);
  check(ov_compiled_model_create_infer_request(compiled, &request), "ov_compiled_model_create_infer_request");
  double load_ms = (double)(mx_now_ns() - t0) / 1e6;

  for (size_t i = 0; i < n_in; i++) {
    const mx_json *a = mx_json_at(args, i);
    const char *port = mx_json_str(mx_require(a, "tensor", "native.args[]"), "");
    check(ov_infer_request_set_tensor(request, port, in_tensors[i]), mx_json_str(mx_json_get(a, "leaf"), "?"));
  }
  for (int i = 0; i < opts.warmup; i++) check(ov_infer_request_infer(request), "ov_infer_request_infer");
  int64_t *times = (int64_t *)calloc(opts.iters ? (size_t)opts.iters : 1, sizeof *times);
  for (int i = 0; i < opts.iters; i++) {
    int64_t start = mx_now_ns();
    check(ov_infer_request_infer(request), "ov_infer_request_infer");
    times[i] = mx_now_ns() - start;
  }
  check(ov_infer_request_infer(request), "ov_infer_request_infer"); /* the call whose results are written */

  if (!opts.no_outputs) {
    mx_make_dir(opts.outputs);
    for (size_t i = 0; i < n_out; i++) {
      const mx_json *r = mx_json_at(results, i);
      const char *name = mx_json_str(mx_json_get(r, "leaf"), "?");
      const char *port = mx_json_str(mx_require(r, "tensor", "native.results[]"), "");
      ov_tensor_t *t = NULL;
      check(ov_infer_request_get_tensor(request, port, &t), name);
      ov_element_type_e type;
      check(ov_tensor_get_element_type(t, &type), name);
      if (type != ov_type(mx_json_str(mx_json_get(r, "dtype"), ""), name))
        mx_die("Output '%s' | OpenVINO element type %d differs from the manifest's %s", name, (int)type,
               mx_json_str(mx_json_get(r, "dtype"), ""));
      /* A 0-d output (the manifest's shape []) has no ov_shape_t: the C API's shapes have rank > 0. */
      ov_shape_t shape = {0, NULL};
      int scalar = mx_json_len(mx_require(r, "shape", "native.results[]")) == 0;
      if (!scalar) check(ov_tensor_get_shape(t, &shape), name);
      if (shape.rank > MX_NPY_MAX_DIMS) mx_die("Output '%s' | %lld dimensions", name, (long long)shape.rank);
      void *data = NULL;
      size_t nbytes = 0;
      check(ov_tensor_data(t, &data), name);
      check(ov_tensor_get_byte_size(t, &nbytes), name);
      int64_t none[1] = {0};
      mx_write_result(opts.outputs, r, (int)shape.rank, scalar ? none : shape.dims, data, nbytes);
      if (!scalar) ov_shape_free(&shape);
      ov_tensor_free(t);
    }
  }

  if (opts.iters > 0) {
    ov_version_t version;
    check(ov_get_openvino_version(&version), "ov_get_openvino_version");
    char extra[320];
    snprintf(extra, sizeof extra, "\"load_ms\": %.3f, \"openvino\": \"%s\"", load_ms, version.buildNumber);
    mx_print_timing("openvino_c_api", times, opts.iters, opts.warmup, extra);
    ov_version_free(&version);
  }
  for (size_t i = 0; i < n_in; i++) {
    ov_tensor_free(in_tensors[i]);
    mx_npy_free(&arrays[i]);
  }
  ov_infer_request_free(request);
  ov_compiled_model_free(compiled);
  ov_model_free(model);
  ov_core_free(core);
  free(arrays); free(in_tensors); free(times); free(model_path);
  mx_json_free(manifest);
  return 0;
}
