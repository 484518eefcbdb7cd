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
 * Decode loop (--steps N, the flags of pjrt_run): N calls of one infer request, each call's inputs made from the
 * previous call's outputs without a copy. A carried leaf (--carry OUT=IN: a KV cache) has two tensors of its
 * own, set on the request as input IN and output OUT and swapped after each call (OpenVINO writes the output
 * where the tensor set on its port points: the next call reads it in place, and never writes the buffer it
 * reads); --greedy LOGITS=IN writes the argmax of LOGITS' last axis into the token input's buffer, --count IN
 * adds 1 to the int32 scalar input IN.
 *
 * Load loop (--load-lanes N, common/mx_load.h: the Offline, Server and MultiStream scenarios of `multiexport load`):
 * the model compiled again with PERFORMANCE_HINT=THROUGHPUT on the same threads (OpenVINO picks its streams), one
 * infer request per lane on the one compiled model, each with the inputs' tensors set once: the Python runner's
 * throughput configuration (backends/openvino/runner.py throughput_lanes), as benchmark_app -hint throughput.
 *
 * Built against the openvino wheel's C headers (openvino/include) and libopenvino_c (openvino/libs),
 * linked with an rpath to the wheel so the program runs under `env -i`.
 */
#define _GNU_SOURCE /* clock_nanosleep (common/mx_load.h) under -std=c99 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mx_json.h"
#include "common/mx_load.h"
#include "common/mx_npy.h"
#include "common/mx_util.h"
#include "openvino/c/openvino.h"

static const char *USAGE =
    "usage: ov_run [--artifact DIR] [--inputs DIR] [--outputs DIR] [--threads N] [--warmup N] [--iters N] [--times FILE]\n"
    "              [--no-outputs] [--steps N --carry OUT=IN ... [--greedy LOGITS=IN] [--count IN] [--tokens FILE]]\n"
    "  Runs the OpenVINO artifact in DIR (default .) on OpenVINO's CPU plugin through its C API. Inputs: one\n"
    "  .npy per model input, named as the manifest's native.args[].file, in --inputs (default inputs/).\n"
    "  Outputs go to --outputs (default outputs/). --threads N: INFERENCE_NUM_THREADS (default: the\n"
    "  plugin's choice). --iters N: time N calls (after --warmup untimed ones), print per-call figures as JSON.\n"
    "  Decode loop: --steps N calls the model N times, each call's inputs made from the previous call's outputs:\n"
    "  --carry OUT=IN (repeatable) passes output leaf OUT as input leaf IN (a KV cache: two tensors swapped\n"
    "  between the ports, never copied), --greedy LOGITS=IN feeds the argmax of OUT's last axis as the int32\n"
    "  input leaf IN (the next token), --count IN adds 1 to the int32 scalar input IN (the position). --tokens\n"
    "  FILE writes the greedy tokens as an int32 [N, rows] .npy; per-step times (call + argmax + feed) print as\n"
    "  JSON. The outputs written are the last step's.\n"
    "  Under load (below) the model is compiled again with PERFORMANCE_HINT=THROUGHPUT (OpenVINO picks the streams),\n"
    "  one infer request per lane (the Python runner's throughput configuration).\n" MX_LOAD_USAGE;

#define MAX_CARRY 1024

typedef struct {
  int threads;      /* --threads N (0: the plugin's choice) */
  int steps;        /* the decode loop's calls (0: no loop) */
  int n_carry;
  const char *carry_out[MAX_CARRY], *carry_in[MAX_CARRY]; /* output leaf -> input leaf */
  const char *greedy_out, *greedy_in;                     /* logits output leaf -> token input leaf */
  const char *count;                                      /* int32 scalar input leaf, +1 per step */
  const char *tokens;                                     /* where the greedy tokens go (.npy) */
  mx_load_flags load;                                     /* the load loop's (common/mx_load.h); lanes 0: none */
} loop_options;

/* "OUT=IN" -> *out, *in (pointers into a copy); dies naming the flag otherwise. */
static void leaf_pair(const char *flag, const char *value, const char **out, const char **in) {
  const char *eq = strchr(value, '=');
  if (!eq || eq == value || !eq[1]) mx_die("%s | got '%s', expected OUTPUT_LEAF=INPUT_LEAF", flag, value);
  size_t len = strlen(value);
  char *copy = (char *)malloc(len + 1); /* lives as long as the options (strdup is not C99) */
  memcpy(copy, value, len + 1);
  copy[eq - value] = '\0';
  *out = copy;
  *in = copy + (eq - value) + 1;
}

static int extra_flag(const char *flag, const char *value, void *user) {
  loop_options *o = (loop_options *)user;
  if (mx_load_flag(flag, value, &o->load)) return 1;
  if (mx_parse_threads(flag, value, &o->threads)) return 1;
  if (strcmp(flag, "--steps") == 0) {
    char *end = NULL;
    long n = strtol(value, &end, 10);
    if (!end || *end || n < 1 || n > 1000000) mx_die("--steps | got '%s', expected an integer >= 1", value);
    o->steps = (int)n;
    return 1;
  }
  if (strcmp(flag, "--carry") == 0) {
    if (o->n_carry == MAX_CARRY) mx_die("--carry | more than %d pairs", MAX_CARRY);
    leaf_pair(flag, value, &o->carry_out[o->n_carry], &o->carry_in[o->n_carry]);
    o->n_carry++;
    return 1;
  }
  if (strcmp(flag, "--greedy") == 0) { leaf_pair(flag, value, &o->greedy_out, &o->greedy_in); return 1; }
  if (strcmp(flag, "--count") == 0) { o->count = value; return 1; }
  if (strcmp(flag, "--tokens") == 0) { o->tokens = value; return 1; }
  return 0;
}

/* The index of the entry of `list` (native.args or native.results) whose leaf is `name`; dies naming the flag. */
static size_t leaf_index(const mx_json *list, const char *name, const char *flag, const char *what) {
  for (size_t i = 0; i < mx_json_len(list); i++)
    if (strcmp(mx_json_str(mx_json_get(mx_json_at(list, i), "leaf"), ""), name) == 0) return i;
  mx_die("%s | '%s' is no %s leaf of the model", flag, name, what);
}

static int64_t elements(const mx_json *entry) {
  const mx_json *shape = mx_json_get(entry, "shape");
  int64_t n = 1;
  for (size_t d = 0; d < mx_json_len(shape); d++) n *= mx_json_int(mx_json_at(shape, d), 0);
  return n;
}

/* Same dtype and the same shape in the manifest (symbolic dims by name). */
static int same_leaf_type(const mx_json *a, const mx_json *b) {
  if (strcmp(mx_json_str(mx_json_get(a, "dtype"), "a"), mx_json_str(mx_json_get(b, "dtype"), "b")) != 0) return 0;
  const mx_json *sa = mx_json_get(a, "shape"), *sb = mx_json_get(b, "shape");
  if (mx_json_len(sa) != mx_json_len(sb)) return 0;
  for (size_t d = 0; d < mx_json_len(sa); d++) {
    const mx_json *x = mx_json_at(sa, d), *y = mx_json_at(sb, d);
    if (mx_json_int(x, -1) != mx_json_int(y, -2) && strcmp(mx_json_str(x, "x"), mx_json_str(y, "y")) != 0) return 0;
  }
  return 1;
}

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

/* The decode loop: `loop->steps` calls of `request`. Carried leaf k has two tensors, in_tensors[carry_i[k]] and
 * spare[k] (made here, its shape and type); one is set on the input port, the other on the output port, and they
 * swap after each call, so a call reads the previous call's output where it was written and writes the other
 * buffer. The greedy token and the count are written into their inputs' host buffers, which the input tensors
 * wrap. times[step]: the call, the argmax and the feeding. The last step's outputs stay on the request. */
static void run_loop(ov_infer_request_t *request, const mx_json *args, const mx_json *results, const loop_options *loop,
                     const size_t *carry_o, const size_t *carry_i, ov_tensor_t **in_tensors, ov_tensor_t **spare,
                     mx_npy *arrays, long greedy_o, long greedy_i, long count_i, int64_t vocab, int64_t rows,
                     int32_t *generated, int64_t *times) {
  ov_tensor_t **cur_in = (ov_tensor_t **)calloc((size_t)loop->n_carry + 1, sizeof *cur_in);
  ov_tensor_t **cur_out = (ov_tensor_t **)calloc((size_t)loop->n_carry + 1, sizeof *cur_out);
  const char **in_port = (const char **)calloc((size_t)loop->n_carry + 1, sizeof *in_port);
  const char **out_port = (const char **)calloc((size_t)loop->n_carry + 1, sizeof *out_port);
  for (int k = 0; k < loop->n_carry; k++) {
    ov_tensor_t *first = in_tensors[carry_i[k]];
    ov_element_type_e type;
    ov_shape_t shape;
    check(ov_tensor_get_element_type(first, &type), loop->carry_in[k]);
    check(ov_tensor_get_shape(first, &shape), loop->carry_in[k]);
    check(ov_tensor_create(type, shape, &spare[k]), loop->carry_in[k]);
    ov_shape_free(&shape);
    in_port[k] = mx_json_str(mx_require(mx_json_at(args, carry_i[k]), "tensor", "native.args[]"), "");
    out_port[k] = mx_json_str(mx_require(mx_json_at(results, carry_o[k]), "tensor", "native.results[]"), "");
    cur_in[k] = first;
    cur_out[k] = spare[k];
    check(ov_infer_request_set_tensor(request, out_port[k], cur_out[k]), loop->carry_out[k]);
  }
  const char *logits_port = greedy_o >= 0 ?
      mx_json_str(mx_require(mx_json_at(results, (size_t)greedy_o), "tensor", "native.results[]"), "") : NULL;
  for (int step = 0; step < loop->steps; step++) {
    int64_t start = mx_now_ns();
    int last = step + 1 == loop->steps;
    check(ov_infer_request_infer(request), "ov_infer_request_infer");
    if (greedy_o >= 0) {
      ov_tensor_t *t = NULL;
      void *data = NULL;
      check(ov_infer_request_get_tensor(request, logits_port, &t), loop->greedy_out);
      check(ov_tensor_data(t, &data), loop->greedy_out);
      const float *l = (const float *)data;
      int32_t *next = generated + (size_t)(step * rows);
      for (int64_t r = 0; r < rows; r++) {
        int64_t best = 0; /* the first maximum, as jnp.argmax */
        for (int64_t v = 1; v < vocab; v++)
          if (l[r * vocab + v] > l[r * vocab + best]) best = v;
        next[r] = (int32_t)best;
      }
      ov_tensor_free(t);
      if (!last) memcpy(arrays[greedy_i].data, next, (size_t)rows * sizeof(int32_t));
    }
    if (!last) {
      for (int k = 0; k < loop->n_carry; k++) { /* swap: this call's output is the next call's input */
        ov_tensor_t *swap = cur_in[k];
        cur_in[k] = cur_out[k];
        cur_out[k] = swap;
        check(ov_infer_request_set_tensor(request, in_port[k], cur_in[k]), loop->carry_in[k]);
        check(ov_infer_request_set_tensor(request, out_port[k], cur_out[k]), loop->carry_out[k]);
      }
      if (count_i >= 0) (*(int32_t *)arrays[count_i].data)++;
    }
    times[step] = mx_now_ns() - start;
  }
  free(cur_in); free(cur_out); free(in_port); free(out_port);
}

static void lane_call(void *user) { check(ov_infer_request_infer((ov_infer_request_t *)user), "ov_infer_request_infer"); }

static char *compiled_property(ov_compiled_model_t *compiled, const char *key) {
  char *value = NULL;
  check(ov_compiled_model_get_property(compiled, key, &value), key);
  return value;
}

/* The load loop: the model compiled with the THROUGHPUT hint on `threads` threads (0: the plugin's choice) and f32
 * precision, one infer request per lane over the inputs' tensors (read only), common/mx_load.h running them. */
static void load_loop(ov_core_t *core, ov_model_t *model, const char *device, const char *precision, int threads,
                      const mx_json *args, ov_tensor_t **in_tensors, const mx_load_flags *load) {
  ov_compiled_model_t *compiled = NULL;
  char threads_text[16];
  snprintf(threads_text, sizeof threads_text, "%d", threads);
  if (threads > 0)
    check(ov_core_compile_model(core, model, device, 6, &compiled, ov_property_key_hint_performance_mode, "THROUGHPUT",
                                ov_property_key_hint_inference_precision, precision,
                                ov_property_key_inference_num_threads, threads_text),
          "ov_core_compile_model(THROUGHPUT)");
  else
    check(ov_core_compile_model(core, model, device, 4, &compiled, ov_property_key_hint_performance_mode, "THROUGHPUT",
                                ov_property_key_hint_inference_precision, precision),
          "ov_core_compile_model(THROUGHPUT)");
  int lanes = load->lanes;
  ov_infer_request_t **requests = (ov_infer_request_t **)calloc((size_t)lanes, sizeof *requests);
  for (int k = 0; k < lanes; k++) {
    check(ov_compiled_model_create_infer_request(compiled, &requests[k]), "ov_compiled_model_create_infer_request");
    for (size_t i = 0; i < mx_json_len(args); i++) {
      const mx_json *a = mx_json_at(args, i);
      check(ov_infer_request_set_tensor(requests[k], mx_json_str(mx_require(a, "tensor", "native.args[]"), ""),
                                        in_tensors[i]),
            mx_json_str(mx_json_get(a, "leaf"), "?"));
    }
    lane_call(requests[k]); /* each lane warm */
  }
  char *streams = compiled_property(compiled, ov_property_key_num_streams);
  char *optimal = compiled_property(compiled, ov_property_key_optimal_number_of_infer_requests);
  char *used = compiled_property(compiled, ov_property_key_inference_num_threads);
  char extra[320];
  snprintf(extra, sizeof extra, "\"performance_hint\": \"THROUGHPUT\", \"num_streams\": \"%.16s\", "
           "\"inference_num_threads\": \"%.16s\", \"optimal_number_of_infer_requests\": \"%.16s\"", streams, used,
           optimal);
  ov_free(streams);
  ov_free(optimal);
  ov_free(used);
  mx_load_run(load, (void **)requests, lane_call, "openvino_c_api", extra);
  for (int k = 0; k < lanes; k++) ov_infer_request_free(requests[k]);
  free(requests);
  ov_compiled_model_free(compiled);
}

int main(int argc, char **argv) {
  mx_set_program("ov_run");
  mx_options opts;
  loop_options loop = {0};
  mx_parse_options(argc, argv, &opts, USAGE, extra_flag, &loop);
  int threads = loop.threads;
  if ((loop.n_carry || loop.greedy_out || loop.count || loop.tokens) && loop.steps == 0)
    mx_die("--carry, --greedy, --count and --tokens need --steps N");
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

  /* The decode loop's leaves, checked before the (slow) read and compile. */
  size_t *carry_o = (size_t *)calloc((size_t)loop.n_carry + 1, sizeof *carry_o);
  size_t *carry_i = (size_t *)calloc((size_t)loop.n_carry + 1, sizeof *carry_i);
  long greedy_o = -1, greedy_i = -1, count_i = -1;
  int64_t vocab = 0, rows = 0;
  for (int k = 0; k < loop.n_carry; k++) {
    carry_o[k] = leaf_index(results, loop.carry_out[k], "--carry", "output");
    carry_i[k] = leaf_index(args, loop.carry_in[k], "--carry", "input");
    if (!same_leaf_type(mx_json_at(results, carry_o[k]), mx_json_at(args, carry_i[k])))
      mx_die("--carry | Output '%s' and Input '%s' differ in shape or dtype", loop.carry_out[k], loop.carry_in[k]);
  }
  if (loop.greedy_out) {
    greedy_o = (long)leaf_index(results, loop.greedy_out, "--greedy", "output");
    greedy_i = (long)leaf_index(args, loop.greedy_in, "--greedy", "input");
    const mx_json *logits = mx_json_at(results, (size_t)greedy_o), *token = mx_json_at(args, (size_t)greedy_i);
    const mx_json *shape = mx_json_get(logits, "shape");
    if (strcmp(mx_json_str(mx_json_get(logits, "dtype"), ""), "float32") != 0 || mx_json_len(shape) == 0)
      mx_die("--greedy | Output '%s' | got %s, expected float32 logits of rank >= 1", loop.greedy_out,
             mx_json_str(mx_json_get(logits, "dtype"), "?"));
    if (strcmp(mx_json_str(mx_json_get(token, "dtype"), ""), "int32") != 0)
      mx_die("--greedy | Input '%s' | got %s, expected int32 token ids", loop.greedy_in,
             mx_json_str(mx_json_get(token, "dtype"), "?"));
    vocab = mx_json_int(mx_json_at(shape, mx_json_len(shape) - 1), 0);
    rows = vocab > 0 ? elements(logits) / vocab : 0;
    if (vocab <= 0 || (int64_t)arrays[greedy_i].nbytes != rows * (int64_t)sizeof(int32_t))
      mx_die("--greedy | Input '%s' has %lld bytes, expected one int32 per row of '%s' (%lld)", loop.greedy_in,
             (long long)arrays[greedy_i].nbytes, loop.greedy_out, (long long)rows);
  }
  if (loop.count) {
    count_i = (long)leaf_index(args, loop.count, "--count", "input");
    const mx_json *a = mx_json_at(args, (size_t)count_i);
    if (strcmp(mx_json_str(mx_json_get(a, "dtype"), ""), "int32") != 0 || arrays[count_i].nbytes != sizeof(int32_t))
      mx_die("--count | Input '%s' | got %s of %lld bytes, expected an int32 scalar", loop.count,
             mx_json_str(mx_json_get(a, "dtype"), "?"), (long long)arrays[count_i].nbytes);
  }
  if (loop.tokens && !loop.greedy_out) mx_die("--tokens needs --greedy");
  if (loop.steps > 0 && loop.load.lanes) mx_die("--load-lanes | a load loop and a decode loop at once, expected one");

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
  int n_times = loop.steps > 0 ? loop.steps : opts.iters;
  int64_t *times = (int64_t *)calloc(n_times ? (size_t)n_times : 1, sizeof *times);
  int32_t *generated = (int32_t *)calloc(loop.steps > 0 && rows > 0 ? (size_t)(loop.steps * rows) : 1, sizeof *generated);
  ov_tensor_t **spare = (ov_tensor_t **)calloc((size_t)loop.n_carry + 1, sizeof *spare);
  if (loop.steps > 0) {
    run_loop(request, args, results, &loop, carry_o, carry_i, in_tensors, spare, arrays, greedy_o, greedy_i, count_i,
             vocab, rows, generated, times);
  } else {
    for (int i = 0; i < opts.warmup; i++) check(ov_infer_request_infer(request), "ov_infer_request_infer");
    if (loop.load.lanes) load_loop(core, model, device, precision, threads, args, in_tensors, &loop.load);
    for (int i = 0; i < opts.iters; i++) {
      int64_t start = mx_now_ns();
      check(ov_infer_request_infer(request), "ov_infer_request_infer");
      times[i] = mx_now_ns() - start;
    }
    check(ov_infer_request_infer(request), "ov_infer_request_infer"); /* the call whose results are written */
  }

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

  if (loop.tokens) {
    int64_t shape[2] = {loop.steps, rows};
    char err[256];
    if (mx_npy_write(loop.tokens, "<i4", 2, shape, generated, (size_t)(loop.steps * rows) * sizeof(int32_t), err,
                     sizeof err) != 0)
      mx_die("%s", err);
  }
  if (loop.steps > 0) {
    ov_version_t version;
    check(ov_get_openvino_version(&version), "ov_get_openvino_version");
    char extra[384];
    snprintf(extra, sizeof extra, "\"load_ms\": %.3f, \"openvino\": \"%s\", \"steps\": %d, \"carried\": %d", load_ms,
             version.buildNumber, loop.steps, loop.n_carry);
    mx_print_timing("openvino_c_api_decode_loop", times, loop.steps, 0, extra);
    ov_version_free(&version);
  } else if (opts.iters > 0) {
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
  for (int k = 0; k < loop.n_carry; k++) ov_tensor_free(spare[k]);
  ov_infer_request_free(request);
  ov_compiled_model_free(compiled);
  ov_model_free(model);
  ov_core_free(core);
  free(arrays); free(in_tensors); free(times); free(model_path);
  free(carry_o); free(carry_i); free(generated); free(spare);
  mx_json_free(manifest);
  return 0;
}
