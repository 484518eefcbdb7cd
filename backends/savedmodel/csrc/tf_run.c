/* tf_run: runs a SavedModel artifact of multiexport through the TensorFlow C API, with no Python.
 *
 * TF_LoadSessionFromSavedModel loads the artifact directory (tag and signature from the manifest's
 * "native" section), each leaf is fed to its tensor (`serving_default_<alias>:0`) from a .npy file and
 * each output fetched from its tensor (`StatefulPartitionedCall:<i>`, i in sorted-key order: the
 * section spells out every name, so nothing here depends on that rule), then written as .npy.
 * With --iters N it times N TF_SessionRun calls itself. With --load-lanes N it runs the load loops of `multiexport
 * load` (common/mx_load.h: Offline, Server, MultiStream): N threads calling TF_SessionRun on the one session (thread-safe,
 * as the Python runner's lanes call its one runner), each with its own outputs and status, the inputs shared.
 *
 * Links against libtensorflow_cc.so.2 / libtensorflow_framework.so.2 of the tensorflow wheel.
 */
#define _GNU_SOURCE /* clock_nanosleep (common/mx_load.h) under -std=c99 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mx_json.h"
#include "common/mx_load.h"
#include "common/mx_npy.h"
#include "common/mx_util.h"
#include "tensorflow/c/c_api.h"

static const char *USAGE =
    "usage: tf_run [--artifact DIR] [--inputs DIR] [--outputs DIR] [--warmup N] [--iters N] [--times FILE] [--no-outputs]\n"
    "  Runs the SavedModel artifact in DIR (default .) through the TensorFlow C API. Inputs: one .npy per\n"
    "  signature input, named as the manifest's native.args[].file, in --inputs (default inputs/); every\n"
    "  input key must be fed, read by the model or not. Outputs go to --outputs (default outputs/).\n"
    "  --iters N: time N calls (after --warmup untimed ones), print per-call min/median/p90 as JSON.\n"
    "  Under load (below) the lanes call TF_SessionRun on the one session, each with its own outputs.\n" MX_LOAD_USAGE;

static void check(TF_Status *status, const char *what) {
  if (TF_GetCode(status) != TF_OK) mx_die("%s: %s", what, TF_Message(status));
}

static TF_DataType tf_type(const char *dtype, const char *who) {
  static const struct { const char *name; TF_DataType type; } map[] = {
      {"float32", TF_FLOAT},   {"float64", TF_DOUBLE}, {"float16", TF_HALF},     {"bfloat16", TF_BFLOAT16},
      {"int8", TF_INT8},       {"int16", TF_INT16},    {"int32", TF_INT32},      {"int64", TF_INT64},
      {"uint8", TF_UINT8},     {"uint16", TF_UINT16},  {"uint32", TF_UINT32},    {"uint64", TF_UINT64},
      {"bool", TF_BOOL},       {"complex64", TF_COMPLEX64}, {"complex128", TF_COMPLEX128},
      {"float8_e4m3fn", TF_FLOAT8_E4M3FN}, {"float8_e5m2", TF_FLOAT8_E5M2},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(map[i].name, dtype) == 0) return map[i].type;
  mx_die("%s | dtype %s has no TF_DataType here", who, dtype);
}

/* "serving_default_x:0" -> the graph's operation and output index. */
static TF_Output graph_output(TF_Graph *graph, const char *tensor) {
  const char *colon = strrchr(tensor, ':');
  size_t n = colon ? (size_t)(colon - tensor) : strlen(tensor);
  char *op_name = (char *)malloc(n + 1);
  memcpy(op_name, tensor, n);
  op_name[n] = '\0';
  TF_Output out = {TF_GraphOperationByName(graph, op_name), colon ? atoi(colon + 1) : 0};
  if (!out.oper) mx_die("the SavedModel's graph has no operation '%s' (tensor %s in the manifest)", op_name, tensor);
  free(op_name);
  return out;
}

/* TF tensors own their buffer through a deallocator: this one frees an mx_npy's data. */
static void free_data(void *data, size_t len, void *arg) {
  (void)len;
  (void)arg;
  free(data);
}

/* One synchronous call: TF_SessionRun returns when the outputs are computed (on the host, for CPU). */
typedef struct {
  TF_Session *session;
  TF_Output *in_ops;
  TF_Tensor **in_values;
  int n_in;
  TF_Output *out_ops;
  TF_Tensor **out_values;
  int n_out;
  TF_Status *status;
} call_t;

static void run_once(call_t *c) {
  TF_SessionRun(c->session, NULL, c->in_ops, c->in_values, c->n_in, c->out_ops, c->out_values, c->n_out, NULL, 0,
                NULL, c->status);
  check(c->status, "TF_SessionRun");
}

static void release(call_t *c) {
  for (int k = 0; k < c->n_out; k++) {
    TF_DeleteTensor(c->out_values[k]);
    c->out_values[k] = NULL;
  }
}

/* One request of the load loop: a call and its outputs released (common/mx_load.h runs the lanes). */
static void lane_call(void *user) {
  call_t *c = (call_t *)user;
  run_once(c);
  release(c);
}

static int parse_flag(const char *flag, const char *value, void *user) {
  return mx_load_flag(flag, value, (mx_load_flags *)user);
}

/* The lanes: each its own outputs and status over the shared session and inputs. */
static void load_loop(const call_t *shared, const mx_load_flags *load) {
  int lanes = load->lanes;
  call_t *ls = (call_t *)calloc((size_t)lanes, sizeof *ls);
  void **contexts = (void **)calloc((size_t)lanes, sizeof *contexts);
  for (int k = 0; k < lanes; k++) {
    ls[k] = *shared;
    ls[k].out_values = (TF_Tensor **)calloc(shared->n_out ? (size_t)shared->n_out : 1, sizeof *ls[k].out_values);
    ls[k].status = TF_NewStatus();
    contexts[k] = &ls[k];
    lane_call(&ls[k]); /* each lane warm */
  }
  char extra[128];
  snprintf(extra, sizeof extra, "\"tensorflow\": \"%s\"", TF_Version());
  mx_load_run(load, contexts, lane_call, "tf_c_api", extra);
  for (int k = 0; k < lanes; k++) {
    free(ls[k].out_values);
    TF_DeleteStatus(ls[k].status);
  }
  free(ls);
  free(contexts);
}

int main(int argc, char **argv) {
  mx_set_program("tf_run");
  mx_options opts;
  mx_load_flags load = {0};
  mx_parse_options(argc, argv, &opts, USAGE, parse_flag, &load);
  const mx_json *native;
  mx_json *manifest = mx_load_manifest(opts.artifact, &native, "savedmodel");
  const mx_json *args = mx_require(native, "args", "native"), *results = mx_require(native, "results", "native");
  const mx_json *tags_json = mx_require(native, "tags", "native");
  size_t n_in = mx_json_len(args), n_out = mx_json_len(results), n_tags = mx_json_len(tags_json);

  /* Inputs first: a bad feed fails before the (slow) load. */
  mx_sizes sizes = {0};
  TF_Tensor **in_values = (TF_Tensor **)calloc(n_in ? n_in : 1, sizeof *in_values);
  for (size_t i = 0; i < n_in; i++) {
    const mx_json *a = mx_json_at(args, i);
    mx_npy array;
    mx_read_leaf(opts.inputs, a, &sizes, &array);
    const char *name = mx_json_str(mx_json_get(a, "leaf"), "?");
    /* The tensor takes the .npy's buffer as is (no copy); TF frees it with free_data. */
    in_values[i] = TF_NewTensor(tf_type(mx_json_str(mx_json_get(a, "dtype"), ""), name), array.shape, array.ndim,
                                array.data, array.nbytes, free_data, NULL);
    if (!in_values[i]) mx_die("Input '%s' | TF_NewTensor refused %zu bytes", name, array.nbytes);
  }

  const char **tags = (const char **)calloc(n_tags ? n_tags : 1, sizeof *tags);
  for (size_t i = 0; i < n_tags; i++) tags[i] = mx_json_str(mx_json_at(tags_json, i), "serve");
  char *export_dir = mx_join(opts.artifact, mx_json_str(mx_json_get(native, "export_dir"), "."));
  TF_Status *status = TF_NewStatus();
  TF_Graph *graph = TF_NewGraph();
  TF_SessionOptions *session_options = TF_NewSessionOptions();
  int64_t t0 = mx_now_ns();
  TF_Session *session =
      TF_LoadSessionFromSavedModel(session_options, NULL, export_dir, tags, (int)n_tags, graph, NULL, status);
  check(status, "TF_LoadSessionFromSavedModel");
  double load_ms = (double)(mx_now_ns() - t0) / 1e6;

  TF_Output *in_ops = (TF_Output *)calloc(n_in ? n_in : 1, sizeof *in_ops);
  TF_Output *out_ops = (TF_Output *)calloc(n_out ? n_out : 1, sizeof *out_ops);
  TF_Tensor **out_values = (TF_Tensor **)calloc(n_out ? n_out : 1, sizeof *out_values);
  for (size_t i = 0; i < n_in; i++)
    in_ops[i] = graph_output(graph, mx_json_str(mx_require(mx_json_at(args, i), "tensor", "native.args[]"), ""));
  for (size_t i = 0; i < n_out; i++)
    out_ops[i] = graph_output(graph, mx_json_str(mx_require(mx_json_at(results, i), "tensor", "native.results[]"), ""));

  call_t c = {session, in_ops, in_values, (int)n_in, out_ops, out_values, (int)n_out, status};
  for (int i = 0; i < opts.warmup; i++) { run_once(&c); release(&c); }
  if (load.lanes) load_loop(&c, &load);
  int64_t *times = (int64_t *)calloc(opts.iters ? (size_t)opts.iters : 1, sizeof *times);
  for (int i = 0; i < opts.iters; i++) {
    int64_t start = mx_now_ns();
    run_once(&c);
    times[i] = mx_now_ns() - start;
    release(&c);
  }
  run_once(&c); /* the call whose results are written */

  if (!opts.no_outputs) {
    mx_make_dir(opts.outputs);
    for (size_t i = 0; i < n_out; i++) {
      const mx_json *r = mx_json_at(results, i);
      const char *name = mx_json_str(mx_json_get(r, "leaf"), "?");
      TF_Tensor *t = out_values[i];
      if (TF_TensorType(t) != tf_type(mx_json_str(mx_json_get(r, "dtype"), ""), name))
        mx_die("Output '%s' | TF dtype %d differs from the manifest's %s", name, (int)TF_TensorType(t),
               mx_json_str(mx_json_get(r, "dtype"), ""));
      int ndim = TF_NumDims(t);
      int64_t shape[MX_NPY_MAX_DIMS];
      if (ndim > MX_NPY_MAX_DIMS) mx_die("Output '%s' | %d dimensions", name, ndim);
      for (int d = 0; d < ndim; d++) shape[d] = TF_Dim(t, d);
      mx_write_result(opts.outputs, r, ndim, shape, TF_TensorData(t), TF_TensorByteSize(t));
    }
  }
  release(&c);

  if (opts.iters > 0) {
    char extra[256];
    snprintf(extra, sizeof extra, "\"load_ms\": %.3f, \"tensorflow\": \"%s\"", load_ms, TF_Version());
    mx_print_timing("tf_c_api", times, opts.iters, opts.warmup, extra);
  }
  for (size_t i = 0; i < n_in; i++) TF_DeleteTensor(in_values[i]);
  TF_CloseSession(session, status);
  TF_DeleteSession(session, status);
  TF_DeleteGraph(graph);
  TF_DeleteSessionOptions(session_options);
  TF_DeleteStatus(status);
  free(in_values); free(out_values); free(in_ops); free(out_ops); free(times); free(tags); free(export_dir);
  mx_json_free(manifest);
  return 0;
}
