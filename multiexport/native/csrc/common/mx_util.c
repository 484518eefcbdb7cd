/* Shared helpers of the native consumers; see mx_util.h. */
#define _POSIX_C_SOURCE 200809L
#include "mx_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static const char *program = "native";

void mx_set_program(const char *name) { program = name; }

void mx_die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", program);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static const char *times_path; /* --times: where mx_print_timing writes every call's time */

void mx_parse_options(int argc, char **argv, mx_options *opts, const char *usage,
                      int (*extra)(const char *, const char *, void *), void *user) {
  opts->artifact = ".";
  opts->inputs = "inputs";
  opts->outputs = "outputs";
  opts->warmup = 0;
  opts->iters = 0;
  opts->no_outputs = 0;
  opts->times = NULL;
  for (int i = 1; i < argc; i++) {
    const char *flag = argv[i];
    if (strcmp(flag, "--help") == 0 || strcmp(flag, "-h") == 0) { fputs(usage, stdout); exit(0); }
    if (strcmp(flag, "--no-outputs") == 0) { opts->no_outputs = 1; continue; }
    if (i + 1 >= argc) mx_die("%s needs a value\n%s", flag, usage);
    const char *value = argv[++i];
    if (strcmp(flag, "--artifact") == 0) opts->artifact = value;
    else if (strcmp(flag, "--inputs") == 0) opts->inputs = value;
    else if (strcmp(flag, "--outputs") == 0) opts->outputs = value;
    else if (strcmp(flag, "--warmup") == 0) opts->warmup = atoi(value);
    else if (strcmp(flag, "--iters") == 0) opts->iters = atoi(value);
    else if (strcmp(flag, "--times") == 0) opts->times = value;
    else if (!extra || !extra(flag, value, user)) mx_die("unknown flag %s\n%s", flag, usage);
  }
  if (opts->warmup < 0 || opts->iters < 0) mx_die("--warmup and --iters must be >= 0");
  times_path = opts->times;
}

int mx_parse_threads(const char *flag, const char *value, void *user) {
  if (strcmp(flag, "--threads") != 0) return 0;
  char *end = NULL;
  long n = strtol(value, &end, 10);
  if (!end || *end || n < 1 || n > 4096) mx_die("--threads | got '%s', expected an integer >= 1", value);
  *(int *)user = (int)n;
  return 1;
}

char *mx_read_file(const char *path, size_t *len, char *err, size_t err_len) {
  FILE *fh = fopen(path, "rb");
  if (!fh) { snprintf(err, err_len, "cannot open %s (%s)", path, strerror(errno)); return NULL; }
  fseek(fh, 0, SEEK_END);
  long size = ftell(fh);
  fseek(fh, 0, SEEK_SET);
  char *buf = (char *)malloc((size_t)size + 1);
  if (!buf || fread(buf, 1, (size_t)size, fh) != (size_t)size) {
    snprintf(err, err_len, "cannot read %s", path);
    free(buf);
    fclose(fh);
    return NULL;
  }
  fclose(fh);
  buf[size] = '\0';
  if (len) *len = (size_t)size;
  return buf;
}

char *mx_join(const char *dir, const char *name) {
  /* Every path a manifest names resolves inside the artifact (DESIGN.md: Paths). */
  size_t len = strlen(name);
  if (len == 0 || name[0] == '/' || strcmp(name, "..") == 0 || strncmp(name, "../", 3) == 0 || strstr(name, "/../") ||
      (len >= 3 && strcmp(name + len - 3, "/..") == 0) || strchr(name, '\\'))
    mx_die("path '%s' from the manifest leaves the artifact directory", name);
  size_t n = strlen(dir) + strlen(name) + 2;
  char *out = (char *)malloc(n);
  snprintf(out, n, "%s/%s", dir, name);
  return out;
}

mx_json *mx_load_manifest(const char *dir, const mx_json **native, const char *expected_backend) {
  char err[MX_ERR];
  char *path = mx_join(dir, "manifest.json");
  size_t len;
  char *text = mx_read_file(path, &len, err, sizeof err);
  if (!text) mx_die("%s: expected an artifact directory written by `multiexport export`", err);
  mx_json *root = mx_json_parse(text, len, err, sizeof err);
  free(text);
  if (!root) mx_die("%s: %s", path, err);
  const char *backend = mx_json_str(mx_json_get(root, "backend"), "?");
  if (strcmp(backend, expected_backend) != 0)
    mx_die("%s: got a '%s' artifact, expected '%s'", path, backend, expected_backend);
  *native = mx_json_get(root, "native");
  /* A static-size fallback artifact (exporting/static_fallback.py) holds one complete artifact per size. */
  const mx_json *fallback = mx_json_get(mx_json_get(mx_json_get(root, "format"), "static_fallback"), "models");
  if (!mx_json_is(*native, MX_JSON_OBJECT) && mx_json_is(fallback, MX_JSON_OBJECT) && mx_json_len(fallback) > 0)
    mx_die("%s | holds one model per size (the first: %s in %s), no native section of its own: run the one of "
           "your size, from its directory", path, fallback->keys[0], mx_json_str(&fallback->items[0], "?"));
  if (!mx_json_is(*native, MX_JSON_OBJECT))
    mx_die("%s has no \"native\" section: re-export it with a multiexport that writes one", path);
  free(path);
  return root;
}

const mx_json *mx_require(const mx_json *obj, const char *key, const char *where) {
  const mx_json *v = mx_json_get(obj, key);
  if (!v) mx_die("manifest.json: %s has no \"%s\"", where, key);
  return v;
}

static const mx_dtype DTYPES[] = {
    {"float32", "<f4", 4},  {"float64", "<f8", 8},  {"float16", "<f2", 2},     {"bfloat16", "<V2", 2},
    {"int8", "|i1", 1},     {"int16", "<i2", 2},    {"int32", "<i4", 4},       {"int64", "<i8", 8},
    {"uint8", "|u1", 1},    {"uint16", "<u2", 2},   {"uint32", "<u4", 4},      {"uint64", "<u8", 8},
    {"bool", "|b1", 1},     {"complex64", "<c8", 8}, {"complex128", "<c16", 16},
    {"float8_e4m3fn", "<V1", 1}, {"float8_e5m2", "<V1", 1},
};

const mx_dtype *mx_dtype_find(const char *name) {
  for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
    if (strcmp(DTYPES[i].name, name) == 0) return &DTYPES[i];
  return NULL;
}

/* '|i1' and '<i1' mean the same (byte order is moot for one byte); '|V2' and '<V2' too. */
static int descr_equal(const char *a, const char *b) {
  if (!a[0] || !b[0]) return 0;
  int one_byte = strcmp(a + 2, "1") == 0 || a[1] == 'V';
  if (one_byte && (a[0] == '|' || a[0] == '<') && (b[0] == '|' || b[0] == '<')) return strcmp(a + 1, b + 1) == 0;
  return strcmp(a, b) == 0;
}

static int bind_symbol(mx_sizes *sizes, const char *name, int64_t size) {
  for (int i = 0; i < sizes->count; i++)
    if (strcmp(sizes->names[i], name) == 0) return sizes->sizes[i] == size;
  if (sizes->count == MX_MAX_SYMBOLS || strlen(name) >= sizeof sizes->names[0]) mx_die("too many symbolic dims");
  strcpy(sizes->names[sizes->count], name);
  sizes->sizes[sizes->count++] = size;
  return 1;
}

static int is_identifier(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (!(*s == '_' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9'))) return 0;
  return 1;
}

void mx_sizes_key(const mx_sizes *sizes, char *out, size_t out_len) {
  int order[MX_MAX_SYMBOLS];
  for (int i = 0; i < sizes->count; i++) order[i] = i;
  for (int i = 1; i < sizes->count; i++) /* insertion sort by name: a handful of symbols */
    for (int j = i; j > 0 && strcmp(sizes->names[order[j - 1]], sizes->names[order[j]]) > 0; j--) {
      int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
    }
  size_t n = 0;
  out[0] = '\0';
  for (int i = 0; i < sizes->count && n < out_len; i++)
    n += (size_t)snprintf(out + n, out_len - n, "%s%s=%lld", i ? "," : "", sizes->names[order[i]],
                          (long long)sizes->sizes[order[i]]);
}

void mx_read_leaf(const char *inputs_dir, const mx_json *entry, mx_sizes *sizes, mx_npy *out) {
  const char *leaf = mx_json_str(mx_json_get(entry, "leaf"), "?");
  const char *file = mx_json_str(mx_require(entry, "file", leaf), "");
  const char *dtype = mx_json_str(mx_require(entry, "dtype", leaf), "");
  const mx_json *shape = mx_require(entry, "shape", leaf);
  const mx_dtype *dt = mx_dtype_find(dtype);
  if (!dt) mx_die("Input '%s' | dtype %s has no .npy form here", leaf, dtype);
  char err[MX_ERR];
  char *path = mx_join(inputs_dir, file);
  if (mx_npy_read(path, out, err, sizeof err) != 0) mx_die("Input '%s' | %s", leaf, err);
  free(path);
  if (!descr_equal(out->descr, dt->descr))
    mx_die("Input '%s' | got .npy dtype %s, expected %s (%s)", leaf, out->descr, dt->descr, dtype);
  if ((size_t)out->ndim != mx_json_len(shape))
    mx_die("Input '%s' | got %d dimensions, expected %zu", leaf, out->ndim, mx_json_len(shape));
  for (int d = 0; d < out->ndim; d++) {
    const mx_json *dim = mx_json_at(shape, (size_t)d);
    if (mx_json_is(dim, MX_JSON_NUMBER)) {
      if (mx_json_int(dim, -1) != out->shape[d])
        mx_die("Input '%s' | dim %d is %lld, expected %lld", leaf, d, (long long)out->shape[d],
               (long long)mx_json_int(dim, -1));
    } else if (is_identifier(mx_json_str(dim, ""))) {
      if (!bind_symbol(sizes, dim->string, out->shape[d]))
        mx_die("Input '%s' | dim %d is %lld, but symbolic dim '%s' is already bound to another size", leaf, d,
               (long long)out->shape[d], dim->string);
      if (out->shape[d] < 1) mx_die("Input '%s' | symbolic dim '%s' must be >= 1", leaf, dim->string);
    }
    /* Expressions over symbols (e.g. "2*b") are checked by the module's own shape assertions. */
  }
}

void mx_make_dir(const char *path) {
  if (mkdir(path, 0777) != 0 && errno != EEXIST) mx_die("cannot create %s (%s)", path, strerror(errno));
}

void mx_write_result(const char *outputs_dir, const mx_json *entry, int ndim, const int64_t *shape,
                     const void *data, size_t nbytes) {
  const char *leaf = mx_json_str(mx_json_get(entry, "leaf"), "?");
  const mx_dtype *dt = mx_dtype_find(mx_json_str(mx_require(entry, "dtype", leaf), ""));
  if (!dt) mx_die("Output '%s' | dtype has no .npy form here", leaf);
  if ((size_t)(mx_num_elements(ndim, shape) * dt->itemsize) != nbytes)
    mx_die("Output '%s' | got %zu bytes, expected %lld elements of %s", leaf, nbytes,
           (long long)mx_num_elements(ndim, shape), dt->name);
  char err[MX_ERR];
  char *path = mx_join(outputs_dir, mx_json_str(mx_require(entry, "file", leaf), ""));
  if (mx_npy_write(path, dt->descr, ndim, shape, data, nbytes, err, sizeof err) != 0) mx_die("%s", err);
  free(path);
}

/* safetensors dtype names ("F32") -> the manifest's ("float32"). */
static const char *ST_DTYPES[][2] = {
    {"F64", "float64"}, {"F32", "float32"}, {"F16", "float16"}, {"BF16", "bfloat16"}, {"F8_E4M3", "float8_e4m3fn"},
    {"F8_E5M2", "float8_e5m2"}, {"I64", "int64"}, {"I32", "int32"}, {"I16", "int16"}, {"I8", "int8"},
    {"U64", "uint64"}, {"U32", "uint32"}, {"U16", "uint16"}, {"U8", "uint8"}, {"BOOL", "bool"},
};

void mx_safetensors_open(const char *path, mx_safetensors *st) {
  FILE *fh = fopen(path, "rb");
  if (!fh) mx_die("cannot open weights file %s", path);
  unsigned char len8[8];
  if (fread(len8, 1, 8, fh) != 8) mx_die("%s: not a safetensors file", path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; i--) header_len = header_len << 8 | len8[i];
  if (header_len > (100u << 20)) mx_die("%s: header of %llu bytes is implausible", path, (unsigned long long)header_len);
  char *text = (char *)malloc(header_len + 1);
  if (fread(text, 1, header_len, fh) != header_len) mx_die("%s: truncated header", path);
  fclose(fh);
  char err[MX_ERR];
  st->header = mx_json_parse(text, header_len, err, sizeof err);
  free(text);
  if (!st->header) mx_die("%s: %s", path, err);
  st->path = strdup(path);
  st->data_start = 8 + header_len;
}

void *mx_safetensors_read(const mx_safetensors *st, const char *name, const mx_json *entry, size_t *nbytes) {
  const mx_json *t = mx_json_get(st->header, name);
  if (!t) mx_die("Weight '%s' | not in %s", name, st->path);
  const char *st_dtype = mx_json_str(mx_json_get(t, "dtype"), "?");
  const char *dtype = NULL;
  for (size_t i = 0; i < sizeof ST_DTYPES / sizeof ST_DTYPES[0]; i++)
    if (strcmp(ST_DTYPES[i][0], st_dtype) == 0) dtype = ST_DTYPES[i][1];
  const char *expected = mx_json_str(mx_require(entry, "dtype", name), "");
  if (!dtype || strcmp(dtype, expected) != 0)
    mx_die("Weight '%s' | got %s in %s, expected %s", name, st_dtype, st->path, expected);
  const mx_json *shape = mx_json_get(t, "shape"), *want = mx_require(entry, "shape", name);
  int same = mx_json_len(shape) == mx_json_len(want);
  for (size_t d = 0; same && d < mx_json_len(shape); d++)
    same = mx_json_int(mx_json_at(shape, d), -1) == mx_json_int(mx_json_at(want, d), -2);
  if (!same) mx_die("Weight '%s' | shape in %s differs from the manifest's", name, st->path);
  const mx_json *off = mx_json_get(t, "data_offsets");
  int64_t begin = mx_json_int(mx_json_at(off, 0), -1), end = mx_json_int(mx_json_at(off, 1), -1);
  if (begin < 0 || end < begin) mx_die("Weight '%s' | bad data_offsets in %s", name, st->path);
  *nbytes = (size_t)(end - begin);
  void *buf = NULL;
  if (posix_memalign(&buf, 64, *nbytes ? *nbytes : 1) != 0) mx_die("out of memory for weight '%s'", name);
  FILE *fh = fopen(st->path, "rb");
  if (!fh || fseeko(fh, (off_t)(st->data_start + (uint64_t)begin), SEEK_SET) != 0 ||
      fread(buf, 1, *nbytes, fh) != *nbytes)
    mx_die("Weight '%s' | cannot read %zu bytes from %s", name, *nbytes, st->path);
  fclose(fh);
  return buf;
}

void mx_safetensors_close(mx_safetensors *st) {
  mx_json_free(st->header);
  free(st->path);
}

int64_t mx_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted samples (q in [0, 1]); for q=0.5 with n even, the mean of the two middle. */
static double percentile_ms(const int64_t *sorted, int n, double q) {
  if (q == 0.5 && n % 2 == 0) return (double)(sorted[n / 2 - 1] + sorted[n / 2]) / 2e6;
  int k = (int)(q * (n - 1) + 0.5);
  return (double)sorted[k] / 1e6;
}

void mx_print_timing(const char *consumer, int64_t *times_ns, int n, int warmup, const char *extra_json) {
  if (n <= 0) return;
  if (times_path) { /* before sorting: the caller pools samples across runs with the same statistic as its own */
    char err[MX_ERR];
    int64_t shape[1] = {n};
    if (mx_npy_write(times_path, "<i8", 1, shape, times_ns, (size_t)n * sizeof *times_ns, err, sizeof err) != 0)
      mx_die("%s", err);
  }
  qsort(times_ns, (size_t)n, sizeof *times_ns, cmp_i64);
  double total = 0;
  for (int i = 0; i < n; i++) total += (double)times_ns[i];
  printf("{\"consumer\": \"%s\", \"calls\": %d, \"warmup\": %d, \"min_ms\": %.6f, \"median_ms\": %.6f, "
         "\"p90_ms\": %.6f, \"max_ms\": %.6f, \"mean_ms\": %.6f, "
         "\"statistic\": \"wall time of each call, measured inside the program\"%s%s}\n",
         consumer, n, warmup, (double)times_ns[0] / 1e6, percentile_ms(times_ns, n, 0.5),
         percentile_ms(times_ns, n, 0.9), (double)times_ns[n - 1] / 1e6, total / n / 1e6,
         extra_json ? ", " : "", extra_json ? extra_json : "");
  fflush(stdout);
}
