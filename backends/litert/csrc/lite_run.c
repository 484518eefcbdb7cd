/* lite_run: runs a LiteRT artifact of multiexport through LiteRT's C API (libLiteRt.so), with no Python.
 *
 * The model file is the artifact's model.tflite; its signature (native.signature, "serving_default") names
 * every input and output by the leaf's alias, so each leaf is bound by that name (native.args[].key), never
 * by position: the raw tensor order of a converted model is neither leaf order nor sorted. The model is
 * compiled for LiteRT's CPU accelerator, which runs it through the XNNPACK delegate as the Python runner's
 * Interpreter does, with the thread count always passed, as that runner passes it (default: the usable CPUs).
 * A symbolic batch stays dynamic: each input is resized to its .npy's shape
 * (LiteRtCompiledModelResizeInputTensor) and each output buffer is sized from the manifest's shape at the bound
 * sizes, then checked against the shape LiteRT computed in the call. With --iters N it times N
 * LiteRtRunCompiledModel calls itself (each call registers the buffers and invokes, as the API does). With
 * --load-lanes N it is the bare C loop of `multiexport load` (common/mx_load.h: Offline, Server, MultiStream):
 * N threads, each with its own compiled model of the one model, its own copy of the inputs and its own output
 * buffers, threads/N XNNPACK threads each (the Python driver's lanes for LiteRT: one Interpreter per lane); where
 * no input is resized and no output is an input's tensor, each lane's inputs are bound to their tensors once, at
 * compile (LiteRtAddExternalTensorBinding), so its calls register only the outputs (load_loop).
 *
 * litert_api.h declares the few functions used (the wheel ships no headers); the program links the
 * ai-edge-litert wheel's libLiteRt.so with an rpath to it, so it runs under `env -i`.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/mx_json.h"
#include "common/mx_load.h"
#include "common/mx_npy.h"
#include "common/mx_util.h"
#include "litert_api.h"

/* litert/c/litert_options.h: binds a signature tensor to caller-owned memory when the model is compiled (exported by
 * the wheel's libLiteRt.so; declared here, beside its one caller, the load loop). */
LiteRtStatus LiteRtAddExternalTensorBinding(LiteRtOptions options, const char *signature_name, const char *tensor_name,
                                            void *data, size_t size_bytes);

static const char *USAGE =
    "usage: lite_run [--artifact DIR] [--inputs DIR] [--outputs DIR] [--threads N] [--warmup N] [--iters N] [--times FILE]\n"
    "                [--no-outputs]\n"
    "  Runs the LiteRT artifact in DIR (default .) on LiteRT's CPU accelerator (XNNPACK) through libLiteRt's C\n"
    "  API. Inputs: one .npy per model input, named as the manifest's native.args[].file, in --inputs (default\n"
    "  inputs/). Outputs go to --outputs (default outputs/). --threads N: XNNPACK threads (default: the CPUs this\n"
    "  process may run on, as the Python runner's default). --iters N: time N calls (after --warmup untimed\n"
    "  ones), print per-call figures as JSON.\n"
    "  Under load (below) each lane has its own compiled model and buffers (a compiled model is not for concurrent\n"
    "  calls), threads/N XNNPACK threads each (the Python driver's lanes: one Interpreter per lane), its inputs\n"
    "  bound once at compile where the model allows (static inputs, no output on an input's tensor).\n" MX_LOAD_USAGE;

/* litert/c/litert_common.h's LiteRtStatus values (LiteRtGetStatusString is not exported by the wheel). */
static const char *status_name(LiteRtStatus status) {
  static const struct { int code; const char *name; } names[] = {
      {1, "ErrorInvalidArgument"}, {2, "ErrorMemoryAllocationFailure"}, {3, "ErrorRuntimeFailure"},
      {4, "ErrorMissingInputTensor"}, {5, "ErrorUnsupported"}, {6, "ErrorNotFound"}, {7, "ErrorTimeoutExpired"},
      {8, "ErrorWrongVersion"}, {9, "ErrorUnknown"}, {10, "ErrorAlreadyExists"}, {100, "Cancelled"},
      {500, "ErrorFileIO"}, {501, "ErrorInvalidFlatbuffer"}, {502, "ErrorDynamicLoading"},
      {503, "ErrorSerialization"}, {504, "ErrorCompilation"}, {1000, "ErrorIndexOOB"},
      {5000, "ErrorUnsupportedOpShapeInferer"}, {5001, "ErrorShapeInferenceFailed"},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].code == status) return names[i].name;
  return "unknown status";
}

static void check(LiteRtStatus status, const char *what) {
  if (status != kLiteRtStatusOk) mx_die("%s: LiteRT status %d (%s)", what, status, status_name(status));
}

static LiteRtElementType element_type(const char *dtype, const char *who) {
  static const struct { const char *name; LiteRtElementType type; } map[] = {
      {"float32", kLiteRtElementTypeFloat32}, {"float64", kLiteRtElementTypeFloat64},
      {"float16", kLiteRtElementTypeFloat16}, {"bfloat16", kLiteRtElementTypeBFloat16},
      {"int8", kLiteRtElementTypeInt8},       {"int16", kLiteRtElementTypeInt16},
      {"int32", kLiteRtElementTypeInt32},     {"int64", kLiteRtElementTypeInt64},
      {"uint8", kLiteRtElementTypeUInt8},     {"uint16", kLiteRtElementTypeUInt16},
      {"uint32", kLiteRtElementTypeUInt32},   {"uint64", kLiteRtElementTypeUInt64},
      {"bool", kLiteRtElementTypeBool},
  };
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(map[i].name, dtype) == 0) return map[i].type;
  mx_die("%s | dtype %s has no LiteRT element type here", who, dtype);
}

/* LiteRT logs INFO and WARNING lines on stderr on every run (its accelerator registry, the XNNPACK delegate)
 * and exports no switch for them, so from the first LiteRT call on its stderr goes to an unlinked temporary
 * file. At exit a failure of this program (mx_die's "lite_run: ..." line) is printed on the real stderr as one
 * line, with LiteRT's own ERROR lines appended; on a crash the whole log is, so nothing is lost. */
static int saved_stderr = -1, log_fd = -1;

static void dump_log(void) { /* async-signal-safe: read/write/lseek only */
  char buf[4096];
  ssize_t n;
  lseek(log_fd, 0, SEEK_SET);
  while ((n = read(log_fd, buf, sizeof buf)) > 0)
    if (write(2, buf, (size_t)n) < 0) break;
}

static void on_crash(int sig) {
  dup2(saved_stderr, 2);
  dump_log();
  signal(sig, SIG_DFL);
  raise(sig);
}

static void release_stderr(void) {
  fflush(stderr);
  dup2(saved_stderr, 2);
  struct stat st;
  if (fstat(log_fd, &st) != 0 || st.st_size <= 0) return;
  char *log = (char *)malloc((size_t)st.st_size + 1);
  ssize_t n = log ? pread(log_fd, log, (size_t)st.st_size, 0) : -1;
  if (n <= 0) { free(log); return; }
  log[n] = 0;
  const char *ours = NULL;
  char theirs[640] = "";
  for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
    if (strncmp(line, "lite_run: ", 10) == 0) ours = line;
    else if (strncmp(line, "ERROR: ", 7) == 0 && strlen(theirs) + strlen(line) + 3 < sizeof theirs)
      snprintf(theirs + strlen(theirs), sizeof theirs - strlen(theirs), "%s%s", theirs[0] ? "; " : "", line + 7);
  }
  if (ours) fprintf(stderr, "%s%s%s%s\n", ours, theirs[0] ? " (LiteRT: " : "", theirs, theirs[0] ? ")" : "");
  free(log);
}

static void capture_stderr(void) {
  FILE *tmp = tmpfile();
  if (!tmp) return; /* no temporary file: LiteRT's lines stay on stderr */
  fflush(stderr);
  saved_stderr = dup(2);
  log_fd = fileno(tmp);
  if (saved_stderr < 0 || dup2(log_fd, 2) < 0) return;
  atexit(release_stderr);
  signal(SIGABRT, on_crash);
  signal(SIGSEGV, on_crash);
  signal(SIGBUS, on_crash);
  signal(SIGILL, on_crash);
  signal(SIGFPE, on_crash);
}

/* The CPUs this process may run on: the Python runner's default thread count (RunOptions.thread_count). */
static int usable_cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return 1;
}

/* Index of the signature keyed `key`; dies naming the keys the model has. */
static LiteRtParamIndex find_signature(LiteRtModel model, const char *key, LiteRtSignature *out) {
  LiteRtParamIndex n = 0;
  check(LiteRtGetNumModelSignatures(model, &n), "LiteRtGetNumModelSignatures");
  char seen[512] = "";
  for (LiteRtParamIndex i = 0; i < n; i++) {
    const char *name = NULL;
    check(LiteRtGetModelSignature(model, i, out), "LiteRtGetModelSignature");
    check(LiteRtGetSignatureKey(*out, &name), "LiteRtGetSignatureKey");
    if (strcmp(name, key) == 0) return i;
    snprintf(seen + strlen(seen), sizeof seen - strlen(seen), "%s%s", i ? ", " : "", name);
  }
  mx_die("Model | has no signature '%s', only [%s]", key, seen);
}

/* Position in the signature of the input (role 0) or output (role 1) named `key`; dies if there is none. */
static LiteRtParamIndex signature_position(LiteRtSignature sig, int role, const char *key, const char *leaf) {
  LiteRtParamIndex n = 0;
  check(role ? LiteRtGetNumSignatureOutputs(sig, &n) : LiteRtGetNumSignatureInputs(sig, &n), "signature size");
  for (LiteRtParamIndex i = 0; i < n; i++) {
    const char *name = NULL;
    check(role ? LiteRtGetSignatureOutputName(sig, i, &name) : LiteRtGetSignatureInputName(sig, i, &name),
          "signature name");
    if (strcmp(name, key) == 0) return i;
  }
  mx_die("%s '%s' | the model's signature has no %s named '%s'", role ? "Output" : "Input", leaf,
         role ? "output" : "input", key);
}

/* Element type and tensor index (in the signature's subgraph) of signature input (role 0) or output (role 1) i. */
static LiteRtElementType signature_tensor(LiteRtSignature sig, int role, LiteRtParamIndex i, uint32_t *index) {
  LiteRtTensor tensor = NULL;
  LiteRtRankedTensorType type;
  memset(&type, 0, sizeof type);
  check(role ? LiteRtGetSignatureOutputTensorByIndex(sig, i, &tensor) : LiteRtGetSignatureInputTensorByIndex(sig, i, &tensor),
        "signature tensor");
  check(LiteRtGetRankedTensorType(tensor, &type), "LiteRtGetRankedTensorType");
  check(LiteRtGetTensorIndex(tensor, index), "LiteRtGetTensorIndex");
  return type.element_type;
}

/* A dim of a manifest shape at the bound sizes: an int, a symbol ("b"), or jax's expression text over
 * symbols ("2*b", "b + 1", "floordiv(b, 2)", "mod(b, 2)", "max(b, 1)", "min(b, 4)"). */
typedef struct { const char *p; const mx_sizes *sizes; const char *leaf; int depth; } dim_parser;
#define DIM_MAX_DEPTH 64 /* nesting of parentheses, calls and unary minus a manifest's expression may use */

static int64_t dim_expr(dim_parser *q);

static void dim_space(dim_parser *q) { while (*q->p == ' ') q->p++; }

/* a manifest is input: its arithmetic is checked, never undefined */
static int64_t dim_checked(dim_parser *q, int overflowed, int64_t v) {
  if (overflowed) mx_die("Output '%s' | shape expression overflows 64 bits", q->leaf);
  return v;
}

static void dim_enter(dim_parser *q) {
  if (++q->depth > DIM_MAX_DEPTH) mx_die("Output '%s' | shape expression nested deeper than %d", q->leaf, DIM_MAX_DEPTH);
}

static int64_t dim_factor(dim_parser *q) {
  dim_space(q);
  if (*q->p == '-') {
    q->p++;
    dim_enter(q);
    int64_t v = dim_factor(q), r;
    q->depth--;
    int overflowed = __builtin_sub_overflow((int64_t)0, v, &r);
    return dim_checked(q, overflowed, r);
  }
  if (*q->p == '(') {
    q->p++;
    dim_enter(q);
    int64_t v = dim_expr(q);
    q->depth--;
    dim_space(q);
    if (*q->p++ != ')') mx_die("Output '%s' | unreadable shape expression", q->leaf);
    return v;
  }
  if (*q->p >= '0' && *q->p <= '9') {
    int64_t v = 0;
    while (*q->p >= '0' && *q->p <= '9') {
      int64_t digit = *q->p++ - '0';
      int overflowed = __builtin_mul_overflow(v, (int64_t)10, &v) || __builtin_add_overflow(v, digit, &v);
      v = dim_checked(q, overflowed, v);
    }
    return v;
  }
  char name[64];
  size_t n = 0;
  while ((*q->p == '_' || (*q->p >= 'a' && *q->p <= 'z') || (*q->p >= 'A' && *q->p <= 'Z') ||
          (n && *q->p >= '0' && *q->p <= '9')) && n + 1 < sizeof name)
    name[n++] = *q->p++;
  name[n] = 0;
  if (!n) mx_die("Output '%s' | unreadable shape expression", q->leaf);
  dim_space(q);
  if (*q->p == '(') {
    q->p++;
    dim_enter(q);
    int64_t a = dim_expr(q);
    dim_space(q);
    if (*q->p++ != ',') mx_die("Output '%s' | unreadable shape expression", q->leaf);
    int64_t b = dim_expr(q);
    q->depth--;
    dim_space(q);
    if (*q->p++ != ')') mx_die("Output '%s' | unreadable shape expression", q->leaf);
    if (strcmp(name, "max") == 0) return a > b ? a : b;
    if (strcmp(name, "min") == 0) return a < b ? a : b;
    if (b == 0) mx_die("Output '%s' | shape expression divides by 0", q->leaf);
    if (a == INT64_MIN && b == -1) mx_die("Output '%s' | shape expression overflows 64 bits", q->leaf);
    int64_t div = a / b - ((a % b != 0) && ((a < 0) != (b < 0))); /* floor division, as jax's */
    if (strcmp(name, "floordiv") == 0) return div;
    if (strcmp(name, "mod") == 0) return a - div * b; /* |div * b| <= |a|: cannot overflow */
    mx_die("Output '%s' | shape expression uses %s(), expected floordiv, mod, max or min", q->leaf, name);
  }
  for (int i = 0; i < q->sizes->count; i++)
    if (strcmp(q->sizes->names[i], name) == 0) return q->sizes->sizes[i];
  mx_die("Output '%s' | its shape uses symbol '%s', which no input binds", q->leaf, name);
}

static int64_t dim_term(dim_parser *q) {
  int64_t v = dim_factor(q);
  for (;;) {
    dim_space(q);
    if (*q->p != '*') return v;
    q->p++;
    int64_t f = dim_factor(q);
    int overflowed = __builtin_mul_overflow(v, f, &v);
    v = dim_checked(q, overflowed, v);
  }
}

static int64_t dim_expr(dim_parser *q) {
  int64_t v = dim_term(q);
  for (;;) {
    dim_space(q);
    int overflowed;
    if (*q->p == '+') { q->p++; int64_t t = dim_term(q); overflowed = __builtin_add_overflow(v, t, &v); }
    else if (*q->p == '-') { q->p++; int64_t t = dim_term(q); overflowed = __builtin_sub_overflow(v, t, &v); }
    else return v;
    v = dim_checked(q, overflowed, v);
  }
}

static int64_t output_dim(const mx_json *dim, const mx_sizes *sizes, const char *leaf) {
  if (mx_json_is(dim, MX_JSON_NUMBER)) return mx_json_int(dim, -1);
  dim_parser q = {mx_json_str(dim, ""), sizes, leaf, 0};
  int64_t v = dim_expr(&q);
  dim_space(&q);
  if (*q.p) mx_die("Output '%s' | unreadable shape expression '%s'", leaf, mx_json_str(dim, ""));
  return v;
}

static void free_payload(void *payload) { free(payload); }

/* What binds the manifest's leaves to the model's signature, computed once: every engine (the program's, and
 * each load lane's) is made from it. Indices: arg_of_input and in_tensor by signature input position,
 * output_of_result by result, out_tensor by signature output position, out_dims and out_bytes by result. */
typedef struct {
  LiteRtEnvironment env;
  LiteRtModel model;
  const char *sig_key; /* the signature's name (native.signature): what an external tensor binding names */
  LiteRtParamIndex sig_index;
  size_t n_in, n_out;
  const mx_json *args, *results;
  const mx_npy *arrays;
  const size_t *arg_of_input;
  const LiteRtParamIndex *output_of_result;
  const uint32_t *in_tensor, *out_tensor;
  int64_t (*out_dims)[LITERT_TENSOR_MAX_RANK];
  const size_t *out_bytes;
} binding;

/* One compiled model with its own buffers: a LiteRT compiled model (an interpreter inside) holds its tensors and
 * is not for concurrent calls, so each load lane has its own, with its own copy of the inputs (own_inputs). */
typedef struct {
  LiteRtCompiledModel compiled;
  LiteRtOptions options;
  LiteRtTensorBuffer *in_buffers, *out_buffers; /* by signature position */
  int *shared;                                  /* by signature position: an output on another's buffer */
  void **owned;                                 /* by arg: this engine's copy of the input (own_inputs) */
} engine;

/* Whether arg `i` has a symbolic dim (the manifest's shape names it): its tensor is resized to the feed's shape. */
static int symbolic_input(const binding *b, size_t i) {
  const mx_json *shape = mx_json_get(mx_json_at(b->args, i), "shape");
  for (size_t d = 0; d < mx_json_len(shape); d++)
    if (!mx_json_is(mx_json_at(shape, d), MX_JSON_NUMBER)) return 1;
  return 0;
}

static void make_engine(const binding *b, int threads, int own_inputs, int bind_inputs, engine *e) {
  memset(e, 0, sizeof *e);
  /* CPU accelerator, XNNPACK threads as the CPU options' TOML payload under the "xnnpack" identifier
   * (litert/c/options/litert_cpu_options.h builds the same payload; its helpers are not exported). */
  LiteRtOpaqueOptions cpu_options = NULL;
  check(LiteRtCreateOptions(&e->options), "LiteRtCreateOptions");
  check(LiteRtSetOptionsHardwareAccelerators(e->options, kLiteRtHwAcceleratorCpu), "LiteRtSetOptionsHardwareAccelerators");
  char *payload = (char *)malloc(48);
  snprintf(payload, 48, "num_threads = %d\n", threads);
  check(LiteRtCreateOpaqueOptions("xnnpack", payload, free_payload, &cpu_options), "LiteRtCreateOpaqueOptions");
  check(LiteRtAddOpaqueOptions(e->options, cpu_options), "LiteRtAddOpaqueOptions");

  /* A load lane's own copy of the inputs (64-byte aligned, as LiteRT requires of host memory). bind_inputs: each
   * copy is bound to its input tensor once, at compile (an external tensor binding), and the calls then pass no
   * buffer for it, which LiteRT's run skips ("bound to an external buffer"): no per-call registration. */
  size_t n_in = b->n_in, n_out = b->n_out;
  e->in_buffers = (LiteRtTensorBuffer *)calloc(n_in ? n_in : 1, sizeof *e->in_buffers);
  e->owned = (void **)calloc(n_in ? n_in : 1, sizeof *e->owned);
  for (LiteRtParamIndex pos = 0; own_inputs && pos < n_in; pos++) {
    size_t i = b->arg_of_input[pos];
    const mx_npy *array = &b->arrays[i];
    const mx_json *a = mx_json_at(b->args, i);
    const char *leaf = mx_json_str(mx_json_get(a, "leaf"), "?");
    e->owned[i] = aligned_alloc(64, (array->nbytes + 63) / 64 * 64 + 64);
    if (!e->owned[i]) mx_die("Input '%s' | out of memory for a load lane's copy", leaf);
    memcpy(e->owned[i], array->data, array->nbytes);
    if (bind_inputs)
      check(LiteRtAddExternalTensorBinding(e->options, b->sig_key, mx_json_str(mx_json_get(a, "key"), ""),
                                           e->owned[i], array->nbytes),
            leaf);
  }
  check(LiteRtCreateCompiledModel(b->env, b->model, e->options, &e->compiled), "LiteRtCreateCompiledModel");

  /* Inputs at the feed's shapes: a symbolic dim is resized to its bound size; the others are the model's. */
  for (LiteRtParamIndex pos = 0; pos < n_in; pos++) {
    size_t i = b->arg_of_input[pos];
    const mx_npy *array = &b->arrays[i];
    const mx_json *a = mx_json_at(b->args, i);
    const char *leaf = mx_json_str(mx_json_get(a, "leaf"), "?");
    int dims[LITERT_TENSOR_MAX_RANK] = {0};
    for (int d = 0; d < array->ndim; d++) dims[d] = (int)array->shape[d];
    if (symbolic_input(b, i)) check(LiteRtCompiledModelResizeInputTensor(e->compiled, b->sig_index, pos, dims, (size_t)array->ndim), leaf);
    if (bind_inputs) continue; /* bound at compile: the calls pass no buffer for it */
    LiteRtRankedTensorType type;
    memset(&type, 0, sizeof type);
    type.element_type = element_type(mx_json_str(mx_json_get(a, "dtype"), ""), leaf);
    type.layout.rank = (unsigned)array->ndim;
    for (int d = 0; d < array->ndim; d++) type.layout.dimensions[d] = dims[d];
    void *data = own_inputs ? e->owned[i] : array->data;
    check(LiteRtCreateTensorBufferFromHostMemory(&type, data, array->nbytes, NULL, &e->in_buffers[pos]), leaf);
  }
  e->out_buffers = (LiteRtTensorBuffer *)calloc(n_out ? n_out : 1, sizeof *e->out_buffers);
  e->shared = (int *)calloc(n_out ? n_out : 1, sizeof *e->shared);
  for (size_t j = 0; j < n_out; j++) {
    const mx_json *r = mx_json_at(b->results, j);
    const char *leaf = mx_json_str(mx_json_get(r, "leaf"), "?");
    LiteRtRankedTensorType type;
    memset(&type, 0, sizeof type);
    type.element_type = element_type(mx_json_str(mx_json_get(r, "dtype"), ""), leaf);
    type.layout.rank = (unsigned)mx_json_len(mx_json_get(r, "shape"));
    for (unsigned d = 0; d < type.layout.rank; d++) type.layout.dimensions[d] = (int32_t)b->out_dims[j][d];
    /* An output that is an input's own tensor (the converter folds x * 1 to x) or another output's takes that
     * tensor's buffer: LiteRT gives a tensor one host allocation per call, the one registered last, so a second
     * buffer would silently replace the input's data (measured, ai-edge-litert 2.3.0: every output of
     * [x * k for k in range(12)] came back 0, the Python CompiledModel API's too). */
    LiteRtParamIndex pos = b->output_of_result[j];
    for (LiteRtParamIndex k = 0; k < n_in && !e->out_buffers[pos]; k++)
      if (b->in_tensor[k] == b->out_tensor[pos]) e->out_buffers[pos] = e->in_buffers[k], e->shared[pos] = 1;
    for (LiteRtParamIndex k = 0; k < n_out && !e->out_buffers[pos]; k++)
      if (k != pos && e->out_buffers[k] && b->out_tensor[k] == b->out_tensor[pos])
        e->out_buffers[pos] = e->out_buffers[k], e->shared[pos] = 1;
    if (!e->out_buffers[pos])
      check(LiteRtCreateManagedTensorBuffer(b->env, kLiteRtTensorBufferTypeHostMemory, &type, b->out_bytes[j],
                                            &e->out_buffers[pos]),
            leaf);
  }
}

static void free_engine(const binding *b, engine *e) {
  for (size_t i = 0; i < b->n_in; i++)
    if (e->in_buffers[i]) LiteRtDestroyTensorBuffer(e->in_buffers[i]);
  for (size_t j = 0; j < b->n_out; j++)
    if (!e->shared[j]) LiteRtDestroyTensorBuffer(e->out_buffers[j]);
  LiteRtDestroyCompiledModel(e->compiled);
  LiteRtDestroyOptions(e->options); /* owns the CPU options since LiteRtAddOpaqueOptions */
  for (size_t i = 0; i < b->n_in; i++) free(e->owned[i]);
  free(e->in_buffers); free(e->out_buffers); free(e->shared); free(e->owned);
}

typedef struct {
  int threads;
  mx_load_flags load; /* the load loop's (common/mx_load.h); lanes 0: none */
} flags;

static int parse_flag(const char *flag, const char *value, void *user) {
  flags *f = (flags *)user;
  if (mx_load_flag(flag, value, &f->load)) return 1;
  return mx_parse_threads(flag, value, &f->threads);
}

/* One lane of the load loop (common/mx_load.h runs them): its own engine. */
typedef struct {
  const binding *plan;
  engine e;
} lane;

static void lane_call(void *user) {
  lane *l = (lane *)user;
  check(LiteRtRunCompiledModel(l->e.compiled, l->plan->sig_index, l->plan->n_in, l->e.in_buffers, l->plan->n_out,
                               l->e.out_buffers),
        "LiteRtRunCompiledModel");
}

/* Whether the inputs can be bound once at compile: not where an output is an input's own tensor (the converter
 * folds x * 1 to x; such a tensor gets the buffer registered last in each call, see make_engine), nor where an
 * input is resized to the feed's shape (measured, ai-edge-litert 2.3.0: a bound tensor resized after compile fails
 * the first call's tensor allocation, tflite/core/subgraph.cc "idx_and_alloc != tensor_idx_to_alloc.end()"). */
static int inputs_bindable(const binding *b) {
  for (size_t k = 0; k < b->n_in; k++) {
    if (symbolic_input(b, b->arg_of_input[k])) return 0;
    for (size_t j = 0; j < b->n_out; j++)
      if (b->in_tensor[k] == b->out_tensor[j]) return 0;
  }
  return 1;
}

/* Whether two engines' outputs hold the same bytes (after each ran on the same inputs). */
static int same_outputs(const binding *b, const engine *x, const engine *y) {
  int same = 1;
  for (size_t j = 0; same && j < b->n_out; j++) {
    size_t nx = 0, ny = 0;
    void *dx = NULL, *dy = NULL;
    check(LiteRtGetTensorBufferPackedSize(x->out_buffers[j], &nx), "LiteRtGetTensorBufferPackedSize");
    check(LiteRtGetTensorBufferPackedSize(y->out_buffers[j], &ny), "LiteRtGetTensorBufferPackedSize");
    check(LiteRtLockTensorBuffer(x->out_buffers[j], &dx, kLiteRtTensorBufferLockModeRead), "LiteRtLockTensorBuffer");
    check(LiteRtLockTensorBuffer(y->out_buffers[j], &dy, kLiteRtTensorBufferLockModeRead), "LiteRtLockTensorBuffer");
    same = nx == ny && memcmp(dx, dy, nx) == 0;
    check(LiteRtUnlockTensorBuffer(x->out_buffers[j]), "LiteRtUnlockTensorBuffer");
    check(LiteRtUnlockTensorBuffer(y->out_buffers[j]), "LiteRtUnlockTensorBuffer");
  }
  return same;
}

/* The load loop: `load->lanes` engines side by side, the threads divided between them (at least one each), as the
 * Python driver's lanes for LiteRT (one Interpreter per lane: run/load_serve.py separate_runners). Where they can
 * be (inputs_bindable), each lane's inputs are bound once at compile, so a call only runs the model and registers its
 * outputs (the Python runner's
 * Interpreter sets its inputs once per call too, by copy); a lane whose first outputs differ from the program's
 * own engine's (`reference`, same inputs) is made again with its inputs registered per call, and says so. */
static void load_loop(const binding *plan, const engine *reference, int threads, const mx_load_flags *load) {
  int lanes = load->lanes, per_lane = threads / lanes > 0 ? threads / lanes : 1, bound = inputs_bindable(plan);
  lane *ls = (lane *)calloc((size_t)lanes, sizeof *ls);
  void **contexts = (void **)calloc((size_t)lanes, sizeof *contexts);
  for (int k = 0; k < lanes; k++) {
    ls[k].plan = plan;
    make_engine(plan, per_lane, 1, bound, &ls[k].e);
    contexts[k] = &ls[k];
    lane_call(&ls[k]); /* each lane warm */
    if (bound && !same_outputs(plan, reference, &ls[k].e)) {
      free_engine(plan, &ls[k].e);
      bound = 0;
      for (int m = 0; m <= k; m++) { /* every lane the same way: the lanes' rates are one configuration's */
        if (m < k) free_engine(plan, &ls[m].e);
        make_engine(plan, per_lane, 1, 0, &ls[m].e);
        lane_call(&ls[m]);
      }
    }
  }
  char extra[320];
  snprintf(extra, sizeof extra, "\"threads_per_lane\": %d, \"accelerator\": \"cpu (XNNPACK)\", "
           "\"lane\": \"its own compiled model and buffers\", \"inputs\": \"%s\"", per_lane,
           bound ? "bound once at compile (external tensor binding)" : "registered in every call");
  mx_load_run(load, contexts, lane_call, "litert_c_api", extra);
  for (int k = 0; k < lanes; k++) free_engine(plan, &ls[k].e);
  free(ls);
  free(contexts);
}

int main(int argc, char **argv) {
  mx_set_program("lite_run");
  mx_options opts;
  flags f = {0};
  mx_parse_options(argc, argv, &opts, USAGE, parse_flag, &f);
  int threads = f.threads;
  if (threads == 0) threads = usable_cpus();
  const mx_json *native;
  mx_json *manifest = mx_load_manifest(opts.artifact, &native, "litert");
  const mx_json *args = mx_require(native, "args", "native"), *results = mx_require(native, "results", "native");
  size_t n_in = mx_json_len(args), n_out = mx_json_len(results);
  const char *accelerator = mx_json_str(mx_require(native, "accelerator", "native"), "");
  if (strcmp(accelerator, "cpu") != 0)
    mx_die("native.accelerator | got '%s', expected 'cpu' (the only accelerator lite_run uses)", accelerator);

  /* Inputs first: a bad feed fails before the (slow) load and compile. The arrays live until the end: the
   * input buffers wrap their memory (64-byte aligned, as LiteRT requires) without copying. */
  mx_sizes sizes = {0};
  mx_npy *arrays = (mx_npy *)calloc(n_in ? n_in : 1, sizeof *arrays);
  for (size_t i = 0; i < n_in; i++) {
    mx_read_leaf(opts.inputs, mx_json_at(args, i), &sizes, &arrays[i]);
    const char *leaf = mx_json_str(mx_json_get(mx_json_at(args, i), "leaf"), "?");
    if (arrays[i].ndim > LITERT_TENSOR_MAX_RANK)
      mx_die("Input '%s' | %d dimensions, LiteRT takes at most %d", leaf, arrays[i].ndim, LITERT_TENSOR_MAX_RANK);
    for (int d = 0; d < arrays[i].ndim; d++)
      if (arrays[i].shape[d] > INT32_MAX) mx_die("Input '%s' | dim %d is past LiteRT's int32 dimensions", leaf, d);
  }

  capture_stderr();
  int64_t t0 = mx_now_ns();
  LiteRtEnvironment env = NULL;
  LiteRtModel model = NULL;
  check(LiteRtCreateEnvironment(0, NULL, &env), "LiteRtCreateEnvironment");
  char *model_path = mx_join(opts.artifact, mx_json_str(mx_require(native, "model", "native"), ""));
  check(LiteRtCreateModelFromFile(env, model_path, &model), model_path);
  LiteRtSignature sig = NULL;
  LiteRtParamIndex sig_index = find_signature(model, mx_json_str(mx_require(native, "signature", "native"), ""), &sig);

  /* Bind every signature input and output to exactly one entry, by name. */
  LiteRtParamIndex n_sig_in = 0, n_sig_out = 0;
  check(LiteRtGetNumSignatureInputs(sig, &n_sig_in), "LiteRtGetNumSignatureInputs");
  check(LiteRtGetNumSignatureOutputs(sig, &n_sig_out), "LiteRtGetNumSignatureOutputs");
  if (n_sig_in != n_in || n_sig_out != n_out)
    mx_die("Model | its signature has %zu inputs and %zu outputs, the manifest's native section %zu and %zu",
           n_sig_in, n_sig_out, n_in, n_out);
  size_t *arg_of_input = (size_t *)calloc(n_in ? n_in : 1, sizeof *arg_of_input); /* signature pos -> arg */
  LiteRtParamIndex *output_of_result = (LiteRtParamIndex *)calloc(n_out ? n_out : 1, sizeof *output_of_result);
  int *taken = (int *)calloc((n_in > n_out ? n_in : n_out) + 1, sizeof *taken);
  uint32_t *in_tensor = (uint32_t *)calloc(n_in ? n_in : 1, sizeof *in_tensor);    /* by signature position */
  uint32_t *out_tensor = (uint32_t *)calloc(n_out ? n_out : 1, sizeof *out_tensor);
  for (size_t i = 0; i < n_in; i++) {
    const mx_json *a = mx_json_at(args, i);
    const char *leaf = mx_json_str(mx_json_get(a, "leaf"), "?");
    LiteRtParamIndex pos = signature_position(sig, 0, mx_json_str(mx_require(a, "key", leaf), ""), leaf);
    if (taken[pos]++) mx_die("Input '%s' | its signature input is bound twice", leaf);
    arg_of_input[pos] = i;
    LiteRtElementType got = signature_tensor(sig, 0, pos, &in_tensor[pos]);
    if (got != element_type(mx_json_str(mx_json_get(a, "dtype"), ""), leaf))
      mx_die("Input '%s' | the model's element type %d differs from the manifest's %s", leaf, (int)got,
             mx_json_str(mx_json_get(a, "dtype"), ""));
  }
  memset(taken, 0, ((n_in > n_out ? n_in : n_out) + 1) * sizeof *taken);
  for (size_t j = 0; j < n_out; j++) {
    const mx_json *r = mx_json_at(results, j);
    const char *leaf = mx_json_str(mx_json_get(r, "leaf"), "?");
    LiteRtParamIndex pos = signature_position(sig, 1, mx_json_str(mx_require(r, "key", leaf), ""), leaf);
    if (taken[pos]++) mx_die("Output '%s' | its signature output is bound twice", leaf);
    output_of_result[j] = pos;
    LiteRtElementType got = signature_tensor(sig, 1, pos, &out_tensor[pos]);
    if (got != element_type(mx_json_str(mx_json_get(r, "dtype"), ""), leaf))
      mx_die("Output '%s' | the model's element type %d differs from the manifest's %s", leaf, (int)got,
             mx_json_str(mx_json_get(r, "dtype"), ""));
  }

  /* Output buffers sized from the manifest's shapes at the bound sizes: a symbolic model computes its output
   * shapes inside the call (SHAPE / BROADCAST_TO arithmetic makes them dynamic tensors), so the runtime reports
   * them only afterwards; they are checked against these after the first call. */
  int64_t (*out_dims)[LITERT_TENSOR_MAX_RANK] =
      (int64_t(*)[LITERT_TENSOR_MAX_RANK])calloc(n_out ? n_out : 1, sizeof *out_dims);
  size_t *out_bytes = (size_t *)calloc(n_out ? n_out : 1, sizeof *out_bytes);
  for (size_t j = 0; j < n_out; j++) {
    const mx_json *r = mx_json_at(results, j);
    const char *leaf = mx_json_str(mx_json_get(r, "leaf"), "?");
    const mx_dtype *dt = mx_dtype_find(mx_json_str(mx_json_get(r, "dtype"), ""));
    if (!dt) mx_die("Output '%s' | dtype %s has no .npy form here", leaf, mx_json_str(mx_json_get(r, "dtype"), ""));
    const mx_json *shape = mx_require(r, "shape", "native.results[]");
    if (mx_json_len(shape) > LITERT_TENSOR_MAX_RANK) mx_die("Output '%s' | more than %d dimensions", leaf, LITERT_TENSOR_MAX_RANK);
    size_t count = 1;
    for (size_t d = 0; d < mx_json_len(shape); d++) {
      out_dims[j][d] = output_dim(mx_json_at(shape, d), &sizes, leaf);
      if (out_dims[j][d] < 0 || out_dims[j][d] > INT32_MAX) mx_die("Output '%s' | dim %zu is %lld", leaf, d, (long long)out_dims[j][d]);
      if (__builtin_mul_overflow(count, (size_t)out_dims[j][d], &count))
        mx_die("Output '%s' | shape holds more elements than memory can", leaf);
    }
    if (__builtin_mul_overflow(count, (size_t)dt->itemsize, &out_bytes[j]))
      mx_die("Output '%s' | shape holds more bytes than memory can", leaf);
  }
  binding plan = {env, model, mx_json_str(mx_require(native, "signature", "native"), ""), sig_index, n_in, n_out, args, results, arrays, arg_of_input, output_of_result,
                  in_tensor, out_tensor, out_dims, out_bytes};
  engine main_engine;
  make_engine(&plan, threads, 0, 0, &main_engine);
  LiteRtCompiledModel compiled = main_engine.compiled;
  LiteRtTensorBuffer *in_buffers = main_engine.in_buffers, *out_buffers = main_engine.out_buffers;
  double load_ms = (double)(mx_now_ns() - t0) / 1e6;

  /* One call first: the shapes LiteRT computed in it (a dynamic output's shape is known only now) must be the
   * ones the buffers were sized for before any more calls run (LiteRT also refuses a buffer too small for its
   * tensor). Every call computes the same values: the outputs written at the end are the last call's. */
  check(LiteRtRunCompiledModel(compiled, sig_index, n_in, in_buffers, n_out, out_buffers), "LiteRtRunCompiledModel");
  LiteRtLayout *layouts = (LiteRtLayout *)calloc(n_out ? n_out : 1, sizeof *layouts);
  check(LiteRtGetCompiledModelOutputTensorLayouts(compiled, sig_index, n_out, layouts, false),
        "LiteRtGetCompiledModelOutputTensorLayouts");
  for (size_t j = 0; j < n_out; j++) {
    const LiteRtLayout *got = &layouts[output_of_result[j]];
    const mx_json *r = mx_json_at(results, j);
    int same = got->rank == mx_json_len(mx_json_get(r, "shape"));
    for (unsigned d = 0; same && d < got->rank; d++) same = got->dimensions[d] == out_dims[j][d];
    if (!same) {
      char text[160] = "";
      for (unsigned d = 0; d < got->rank && d < LITERT_TENSOR_MAX_RANK; d++)
        snprintf(text + strlen(text), sizeof text - strlen(text), "%s%d", d ? ", " : "", got->dimensions[d]);
      mx_die("Output '%s' | LiteRT computed shape [%s], the manifest's shape at these sizes differs",
             mx_json_str(mx_json_get(r, "leaf"), "?"), text);
    }
  }
  for (int i = 0; i < opts.warmup; i++)
    check(LiteRtRunCompiledModel(compiled, sig_index, n_in, in_buffers, n_out, out_buffers), "LiteRtRunCompiledModel");
  if (f.load.lanes) load_loop(&plan, &main_engine, threads, &f.load);
  int64_t *times = (int64_t *)calloc(opts.iters ? (size_t)opts.iters : 1, sizeof *times);
  for (int i = 0; i < opts.iters; i++) {
    int64_t start = mx_now_ns();
    check(LiteRtRunCompiledModel(compiled, sig_index, n_in, in_buffers, n_out, out_buffers), "LiteRtRunCompiledModel");
    times[i] = mx_now_ns() - start;
  }
  if (!opts.no_outputs) {
    mx_make_dir(opts.outputs);
    for (size_t j = 0; j < n_out; j++) {
      const mx_json *r = mx_json_at(results, j);
      const char *leaf = mx_json_str(mx_json_get(r, "leaf"), "?");
      LiteRtTensorBuffer buffer = out_buffers[output_of_result[j]];
      size_t nbytes = 0;
      void *data = NULL;
      check(LiteRtGetTensorBufferPackedSize(buffer, &nbytes), leaf);
      check(LiteRtLockTensorBuffer(buffer, &data, kLiteRtTensorBufferLockModeRead), leaf);
      mx_write_result(opts.outputs, r, (int)mx_json_len(mx_json_get(r, "shape")), out_dims[j], data, nbytes);
      check(LiteRtUnlockTensorBuffer(buffer), leaf);
    }
  }

  if (opts.iters > 0) {
    char extra[160];
    snprintf(extra, sizeof extra, "\"load_ms\": %.3f, \"threads\": %d, \"accelerator\": \"cpu (XNNPACK)\"", load_ms,
             threads);
    mx_print_timing("litert_c_api", times, opts.iters, opts.warmup, extra);
  }
  free_engine(&plan, &main_engine);
  LiteRtDestroyModel(model);
  LiteRtDestroyEnvironment(env);
  for (size_t i = 0; i < n_in; i++) mx_npy_free(&arrays[i]);
  free(arrays); free(layouts); free(out_dims); free(out_bytes); free(times); free(model_path);
  free(arg_of_input); free(output_of_result); free(taken); free(in_tensor); free(out_tensor);
  mx_json_free(manifest);
  return 0;
}
