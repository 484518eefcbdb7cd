/* ort_run: runs an ONNX artifact of multiexport through ONNX Runtime's C API, with no Python.
 *
 * The program dlopens libonnxruntime (the onnxruntime wheel's capi/libonnxruntime.so.1.*, path fixed at
 * build time as MX_ORT_LIBRARY: the wheel ships it without the libonnxruntime.so.1 name its soname asks
 * for, so it cannot be linked and found by soname) and reaches the C API through its one exported symbol,
 * OrtGetApiBase, asking GetApi for the version the declaration was checked against (ort_api.h). It
 * creates a session over the manifest's model with the session options the "native" section lists (the
 * Python runner's: backends/onnx/runner.py session_options), checks the model's input and output names
 * against the section, binds each leaf .npy to its input name and every output to CPU memory through an
 * OrtIoBinding (the Python runner's calling path: inputs bound once, outputs left in ORT-allocated
 * memory), and writes the outputs as .npy. A symbolic batch stays symbolic: the session takes any size.
 * With --iters N it times N RunWithBinding calls itself. With --load-lanes N it is the bare C loop of
 * `multiexport load` (common/mx_load.h: the Offline, Server and MultiStream scenarios; benchmarks/load_overhead.py
 * and `multiexport load --driver native`): N threads, each with its own IO binding, call RunWithBinding on the one
 * session, the intra-op threads divided between them and the pools' spinning off (the Python runner's
 * throughput_lanes, backends/onnx/runner.py), and it prints the figures as JSON.
 */
#define _GNU_SOURCE /* sched_getaffinity: the default thread count is the Python runner's */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mx_json.h"
#include "common/mx_load.h"
#include "common/mx_npy.h"
#include "common/mx_util.h"
#include "ort_api.h"

#ifndef MX_ORT_LIBRARY
#error "MX_ORT_LIBRARY (the path of libonnxruntime.so) must be defined: the ONNX backend's build recipe sets it"
#endif

static const char *USAGE =
    "usage: ort_run [--artifact DIR] [--inputs DIR] [--outputs DIR] [--threads N] [--warmup N] [--iters N] [--times FILE]\n"
    "               [--no-outputs] [--log-level verbose|info|warning|error]\n"
    "  Runs the ONNX artifact in DIR (default .) on ONNX Runtime's CPU provider through its C API. Inputs: one\n"
    "  .npy per model input, named as the manifest's native.args[].file, in --inputs (default inputs/).\n"
    "  Outputs go to --outputs (default outputs/). --threads N: intra-op threads (default: the CPUs this\n"
    "  process may run on, as the Python runner). --iters N: time N calls (after --warmup untimed ones),\n"
    "  print per-call figures as JSON. --log-level: ONNX Runtime's log severity (default warning, as the Python\n"
    "  binding; info logs the session options ORT applied).\n"
    "  Under load (below) each lane has its own IO binding on the one session, threads/N intra-op threads, spinning\n"
    "  off (the Python runner's throughput configuration).\n" MX_LOAD_USAGE;

static const OrtApi *ort;

/* ORT's messages can span lines (a node's status, a stack): one line, as every failure here. */
static void check(OrtStatus *status, const char *what) {
  if (!status) return;
  char message[MX_ERR];
  snprintf(message, sizeof message, "%s", ort->GetErrorMessage(status));
  ort->ReleaseStatus(status);
  for (char *c = message; *c; c++)
    if (*c == '\n' || *c == '\r' || *c == '\t') *c = ' ';
  mx_die("%s | ONNX Runtime: %s", what, message);
}

static const struct {
  const char *name;
  ONNXTensorElementDataType type;
} TYPES[] = {
    {"float32", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT},     {"float64", ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE},
    {"float16", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16},   {"bfloat16", ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16},
    {"int8", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8},         {"int16", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16},
    {"int32", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32},       {"int64", ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64},
    {"uint8", ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8},       {"uint16", ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16},
    {"uint32", ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32},     {"uint64", ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64},
    {"bool", ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL},         {"complex64", ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64},
    {"complex128", ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX128},
};

static ONNXTensorElementDataType element_type(const char *dtype, const char *who) {
  for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
    if (strcmp(TYPES[i].name, dtype) == 0) return TYPES[i].type;
  mx_die("%s | dtype %s has no ONNX tensor element type here", who, dtype);
}

/* The section's session options by name: only the values ONNX Runtime documents are accepted. */
static int named_value(const mx_json *options, const char *key, const char *const *names, const int *values,
                       size_t n) {
  const char *got = mx_json_str(mx_require(options, key, "native.session_options"), "");
  for (size_t i = 0; i < n; i++)
    if (strcmp(got, names[i]) == 0) return values[i];
  mx_die("manifest.json: native.session_options.%s | got '%s', expected an ONNX Runtime name such as '%s'", key, got,
         names[0]);
}

typedef struct {
  int threads;
  OrtLoggingLevel log_level;
  mx_load_flags load; /* the load loop's (common/mx_load.h); lanes 0: none */
} flags;

static int parse_flag(const char *flag, const char *value, void *user) {
  flags *f = (flags *)user;
  if (mx_load_flag(flag, value, &f->load)) return 1;
  if (strcmp(flag, "--log-level") == 0) {
    static const char *const NAMES[] = {"verbose", "info", "warning", "error"};
    for (int i = 0; i < 4; i++)
      if (strcmp(value, NAMES[i]) == 0) {
        f->log_level = (OrtLoggingLevel)i; /* the documented values: VERBOSE 0 .. ERROR 3 */
        return 1;
      }
    mx_die("--log-level | got '%s', expected verbose, info, warning or error", value);
  }
  return mx_parse_threads(flag, value, &f->threads);
}

static int usable_cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return 1;
}

/* The model's input (or output) names, in its order, must be the section's `tensor`s in theirs: a name
 * that differs would otherwise surface as ORT's "invalid input name" mid-run, or bind the wrong leaf. */
static void check_names(OrtSession *session, OrtAllocator *allocator, const mx_json *entries, int outputs) {
  size_t count = 0;
  const char *role = outputs ? "outputs" : "inputs";
  check(outputs ? ort->SessionGetOutputCount(session, &count) : ort->SessionGetInputCount(session, &count),
        outputs ? "SessionGetOutputCount" : "SessionGetInputCount");
  if (count != mx_json_len(entries))
    mx_die("Model | has %zu %s, the manifest's native section lists %zu", count, role, mx_json_len(entries));
  for (size_t i = 0; i < count; i++) {
    char *name = NULL;
    check(outputs ? ort->SessionGetOutputName(session, i, allocator, &name)
                  : ort->SessionGetInputName(session, i, allocator, &name),
          outputs ? "SessionGetOutputName" : "SessionGetInputName");
    const mx_json *e = mx_json_at(entries, i);
    const char *want = mx_json_str(mx_require(e, "tensor", outputs ? "native.results[]" : "native.args[]"), "");
    if (strcmp(name, want) != 0)
      mx_die("%s '%s' | the model's %s %zu is named '%s', expected '%s'", outputs ? "Output" : "Input",
             mx_json_str(mx_json_get(e, "leaf"), "?"), outputs ? "output" : "input", i, name, want);
    check(ort->AllocatorFree(allocator, name), "AllocatorFree");
  }
}

/* One lane of the load loop: its own binding over the shared (read-only) inputs (common/mx_load.h runs them). */
typedef struct {
  OrtSession *session;
  OrtIoBinding *binding;
} lane;

static void lane_call(void *user) {
  lane *l = (lane *)user;
  check(ort->RunWithBinding(l->session, NULL, l->binding), "RunWithBinding");
}

static void load_loop(OrtSession *session, OrtMemoryInfo *cpu, OrtValue **in_values, const mx_json *args,
                      const mx_json *results, size_t n_in, size_t n_out, const mx_load_flags *load, int intra,
                      const char *version) {
  int lanes = load->lanes;
  lane *ls = (lane *)calloc((size_t)lanes, sizeof *ls);
  void **contexts = (void **)calloc((size_t)lanes, sizeof *contexts);
  for (int k = 0; k < lanes; k++) {
    ls[k].session = session;
    contexts[k] = &ls[k];
    check(ort->CreateIoBinding(session, &ls[k].binding), "CreateIoBinding");
    for (size_t i = 0; i < n_in; i++)
      check(ort->BindInput(ls[k].binding, mx_json_str(mx_json_get(mx_json_at(args, i), "tensor"), ""), in_values[i]),
            "BindInput");
    for (size_t j = 0; j < n_out; j++)
      check(ort->BindOutputToDevice(ls[k].binding, mx_json_str(mx_json_get(mx_json_at(results, j), "tensor"), ""), cpu),
            "BindOutputToDevice");
    lane_call(&ls[k]); /* each lane warm */
  }
  char extra[256];
  snprintf(extra, sizeof extra, "\"intra_op_threads\": %d, \"spinning\": \"0\", \"onnxruntime\": \"%s\"", intra,
           version);
  mx_load_run(load, contexts, lane_call, "onnxruntime_c_api", extra);
  for (int k = 0; k < lanes; k++) ort->ReleaseIoBinding(ls[k].binding);
  free(ls);
  free(contexts);
}

int main(int argc, char **argv) {
  mx_set_program("ort_run");
  mx_options opts;
  flags f = {0, ORT_LOGGING_LEVEL_WARNING};
  mx_parse_options(argc, argv, &opts, USAGE, parse_flag, &f);
  int threads = f.threads ? f.threads : usable_cpus();
  int intra = f.load.lanes ? (threads / f.load.lanes > 0 ? threads / f.load.lanes : 1) : threads;
  const mx_json *native;
  mx_json *manifest = mx_load_manifest(opts.artifact, &native, "onnx");
  const mx_json *args = mx_require(native, "args", "native"), *results = mx_require(native, "results", "native");
  size_t n_in = mx_json_len(args), n_out = mx_json_len(results);

  /* Inputs first: a bad feed fails before the (slow) session. The arrays live until the end: the tensors
   * wrap their buffers without copying. */
  mx_sizes sizes = {0};
  mx_npy *arrays = (mx_npy *)calloc(n_in ? n_in : 1, sizeof *arrays);
  for (size_t i = 0; i < n_in; i++) mx_read_leaf(opts.inputs, mx_json_at(args, i), &sizes, &arrays[i]);

  void *library = dlopen(MX_ORT_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (!library) mx_die("ONNX Runtime | cannot load %s: %s", MX_ORT_LIBRARY, dlerror());
  MxOrtGetApiBase get_api_base = (MxOrtGetApiBase)dlsym(library, "OrtGetApiBase");
  if (!get_api_base) mx_die("ONNX Runtime | %s exports no OrtGetApiBase: not an ONNX Runtime library", MX_ORT_LIBRARY);
  const OrtApiBase *base = get_api_base();
  const char *version = base->GetVersionString();
  ort = base->GetApi(MX_ORT_API_VERSION);
  if (!ort)
    mx_die("ONNX Runtime %s | serves no C API version %d, expected a runtime that does (1.%d or newer)", version,
           MX_ORT_API_VERSION, MX_ORT_API_VERSION);

  char *model_path = mx_join(opts.artifact, mx_json_str(mx_require(native, "model", "native"), ""));
  const mx_json *so = mx_require(native, "session_options", "native");
  static const char *const LEVELS[] = {"ORT_ENABLE_ALL", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_BASIC", "ORT_DISABLE_ALL"};
  static const int LEVEL_VALUES[] = {ORT_ENABLE_ALL, ORT_ENABLE_EXTENDED, ORT_ENABLE_BASIC, ORT_DISABLE_ALL};
  static const char *const MODES[] = {"ORT_SEQUENTIAL", "ORT_PARALLEL"};
  static const int MODE_VALUES[] = {ORT_SEQUENTIAL, ORT_PARALLEL};
  int level = named_value(so, "graph_optimization_level", LEVELS, LEVEL_VALUES, 4);
  int mode = named_value(so, "execution_mode", MODES, MODE_VALUES, 2);
  int inter = (int)mx_json_int(mx_require(so, "inter_op_threads", "native.session_options"), -1);
  if (inter < 0 || inter > 4096)
    mx_die("manifest.json: native.session_options.inter_op_threads | got %d, expected an integer >= 0", inter);
  const mx_json *entries = mx_require(so, "config_entries", "native.session_options");
  if (!mx_json_is(entries, MX_JSON_OBJECT))
    mx_die("manifest.json: native.session_options.config_entries | expected an object of strings");

  OrtEnv *env = NULL;
  OrtSessionOptions *options = NULL;
  OrtSession *session = NULL;
  int64_t t0 = mx_now_ns();
  /* By default WARNING: what the Python binding logs at (its log_severity_level 2). */
  check(ort->CreateEnv(f.log_level, "multiexport", &env), "CreateEnv");
  check(ort->CreateSessionOptions(&options), "CreateSessionOptions");
  check(ort->SetSessionGraphOptimizationLevel(options, (GraphOptimizationLevel)level), "SetSessionGraphOptimizationLevel");
  check(ort->SetIntraOpNumThreads(options, intra), "SetIntraOpNumThreads");
  check(ort->SetInterOpNumThreads(options, inter), "SetInterOpNumThreads");
  check(ort->SetSessionExecutionMode(options, (ExecutionMode)mode), "SetSessionExecutionMode");
  for (size_t i = 0; i < mx_json_len(entries); i++) {
    const char *key = entries->keys[i];
    const mx_json *value = &entries->items[i];
    if (!mx_json_is(value, MX_JSON_STRING))
      mx_die("manifest.json: native.session_options.config_entries.%s | expected a string", key);
    char what[256];
    snprintf(what, sizeof what, "manifest.json: native.session_options.config_entries.%.180s", key);
    /* under load the pools do not spin: a spinning pool takes the cores the other lanes need */
    int spinning = strstr(key, "allow_spinning") != NULL;
    check(ort->AddSessionConfigEntry(options, key, f.load.lanes && spinning ? "0" : value->string), what);
  }
  check(ort->CreateSession(env, model_path, options, &session), "CreateSession");
  double load_ms = (double)(mx_now_ns() - t0) / 1e6;

  OrtAllocator *allocator = NULL;
  check(ort->GetAllocatorWithDefaultOptions(&allocator), "GetAllocatorWithDefaultOptions");
  check_names(session, allocator, args, 0);
  check_names(session, allocator, results, 1);

  OrtMemoryInfo *cpu = NULL;
  check(ort->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &cpu), "CreateCpuMemoryInfo");
  OrtValue **in_values = (OrtValue **)calloc(n_in ? n_in : 1, sizeof *in_values);
  OrtIoBinding *binding = NULL;
  check(ort->CreateIoBinding(session, &binding), "CreateIoBinding");
  for (size_t i = 0; i < n_in; i++) {
    const mx_json *a = mx_json_at(args, i);
    const char *name = mx_json_str(mx_json_get(a, "leaf"), "?");
    /* shape_len 0 is ORT's scalar: a 0-d leaf stays 0-d. */
    check(ort->CreateTensorWithDataAsOrtValue(cpu, arrays[i].data, arrays[i].nbytes, arrays[i].shape,
                                              (size_t)arrays[i].ndim,
                                              element_type(mx_json_str(mx_json_get(a, "dtype"), ""), name),
                                              &in_values[i]),
          name);
    check(ort->BindInput(binding, mx_json_str(mx_json_get(a, "tensor"), ""), in_values[i]), name);
  }
  for (size_t j = 0; j < n_out; j++) {
    const mx_json *r = mx_json_at(results, j);
    check(ort->BindOutputToDevice(binding, mx_json_str(mx_json_get(r, "tensor"), ""), cpu),
          mx_json_str(mx_json_get(r, "leaf"), "?"));
  }

  for (int i = 0; i < opts.warmup; i++) check(ort->RunWithBinding(session, NULL, binding), "RunWithBinding");
  if (f.load.lanes) load_loop(session, cpu, in_values, args, results, n_in, n_out, &f.load, intra, version);
  int64_t *times = (int64_t *)calloc(opts.iters ? (size_t)opts.iters : 1, sizeof *times);
  for (int i = 0; i < opts.iters; i++) {
    int64_t start = mx_now_ns();
    check(ort->RunWithBinding(session, NULL, binding), "RunWithBinding");
    times[i] = mx_now_ns() - start;
  }
  check(ort->RunWithBinding(session, NULL, binding), "RunWithBinding"); /* the call whose results are written */

  if (!opts.no_outputs) {
    mx_make_dir(opts.outputs);
    OrtValue **values = NULL;
    size_t count = 0;
    check(ort->GetBoundOutputValues(binding, allocator, &values, &count), "GetBoundOutputValues");
    if (count != n_out) mx_die("ONNX Runtime | returned %zu outputs, expected %zu", count, n_out);
    for (size_t j = 0; j < n_out; j++) {
      const mx_json *r = mx_json_at(results, j);
      const char *name = mx_json_str(mx_json_get(r, "leaf"), "?");
      const char *dtype = mx_json_str(mx_json_get(r, "dtype"), "");
      OrtTensorTypeAndShapeInfo *info = NULL;
      check(ort->GetTensorTypeAndShape(values[j], &info), name);
      ONNXTensorElementDataType type;
      size_t ndim = 0;
      check(ort->GetTensorElementType(info, &type), name);
      if (type != element_type(dtype, name))
        mx_die("Output '%s' | ONNX element type %d differs from the manifest's %s", name, (int)type, dtype);
      check(ort->GetDimensionsCount(info, &ndim), name);
      if (ndim > MX_NPY_MAX_DIMS) mx_die("Output '%s' | %zu dimensions", name, ndim);
      int64_t shape[MX_NPY_MAX_DIMS + 1] = {0};
      check(ort->GetDimensions(info, shape, ndim), name);
      ort->ReleaseTensorTypeAndShapeInfo(info);
      void *data = NULL;
      check(ort->GetTensorMutableData(values[j], &data), name);
      const mx_dtype *dt = mx_dtype_find(dtype);
      size_t elements = 1;
      for (size_t d = 0; d < ndim; d++) elements *= (size_t)shape[d];
      mx_write_result(opts.outputs, r, (int)ndim, shape, data, elements * (size_t)(dt ? dt->itemsize : 0));
      ort->ReleaseValue(values[j]);
    }
    if (values) check(ort->AllocatorFree(allocator, values), "AllocatorFree");
  }

  if (opts.iters > 0) {
    char extra[512];
    snprintf(extra, sizeof extra,
             "\"load_ms\": %.3f, \"onnxruntime\": \"%s\", \"api_version\": %d, \"declaration\": \"%s\", "
             "\"intra_op_threads\": %d",
             load_ms, version, MX_ORT_API_VERSION, MX_ORT_DECLARATION, threads);
    mx_print_timing("onnxruntime_c_api", times, opts.iters, opts.warmup, extra);
  }
  ort->ReleaseIoBinding(binding);
  for (size_t i = 0; i < n_in; i++) {
    ort->ReleaseValue(in_values[i]);
    mx_npy_free(&arrays[i]);
  }
  ort->ReleaseMemoryInfo(cpu);
  ort->ReleaseSession(session);
  ort->ReleaseSessionOptions(options);
  ort->ReleaseEnv(env);
  free(arrays); free(in_values); free(times); free(model_path);
  mx_json_free(manifest);
  return 0;
}
