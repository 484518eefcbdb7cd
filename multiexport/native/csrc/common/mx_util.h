/* What the native consumers share: the command line, manifest.json's "native" section, dtypes,
 * .npy inputs checked against the manifest's shapes (symbolic dims bound by name), safetensors
 * weights, and per-call timing printed as JSON.
 */
#ifndef MX_UTIL_H
#define MX_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "mx_json.h"
#include "mx_npy.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MX_ERR 1024
#define MX_MAX_SYMBOLS 16

/* Prints "<program>: <message>" to stderr and exits 1: every failure of a native consumer is final. */
void mx_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void mx_set_program(const char *name);

/* Command line shared by the consumers (each adds its own flags through `extra`). */
typedef struct {
  const char *artifact; /* --artifact DIR (default "."): the directory holding manifest.json */
  const char *inputs;   /* --inputs DIR (default "inputs"): <file> of each leaf argument */
  const char *outputs;  /* --outputs DIR (default "outputs"): created if missing */
  int warmup, iters;    /* --warmup N --iters N: untimed then timed calls; iters 0 = one call, no timing */
  int no_outputs;       /* --no-outputs: run and time, write nothing */
  const char *times;    /* --times FILE: every timed call's wall time (ns, int64, call order) as .npy, or NULL */
} mx_options;

/* Parses argv; `extra(flag, value, user)` returns 1 if it took a flag with a value, 0 if unknown. */
void mx_parse_options(int argc, char **argv, mx_options *opts, const char *usage,
                      int (*extra)(const char *flag, const char *value, void *user), void *user);

/* Reads a whole file (NUL-terminated for convenience). Returns NULL with a message in err. */
/* An `extra` for mx_parse_options: takes --threads N (1..4096) into the int `user` points at. */
int mx_parse_threads(const char *flag, const char *value, void *user);
char *mx_read_file(const char *path, size_t *len, char *err, size_t err_len);
/* dir + "/" + name into a malloc'd string; refuses names that climb out of dir ("..", absolute). */
char *mx_join(const char *dir, const char *name);

/* manifest.json of `dir`, and its "native" section; dies naming what is missing. */
mx_json *mx_load_manifest(const char *dir, const mx_json **native, const char *expected_backend);
/* A required member of a native-section object: dies naming `where` and `key` if missing. */
const mx_json *mx_require(const mx_json *obj, const char *key, const char *where);

/* dtypes as the manifest names them (NumPy names), with their .npy descr and size. */
typedef struct {
  const char *name;  /* "float32", "bfloat16", ... */
  const char *descr; /* NumPy descr as np.save writes it: "<f4"; "<V2" for bfloat16 (opaque void) */
  int itemsize;
} mx_dtype;
const mx_dtype *mx_dtype_find(const char *name);

/* Symbolic dimension sizes bound while checking inputs: "b" -> 8. */
typedef struct {
  int count;
  char names[MX_MAX_SYMBOLS][64];
  int64_t sizes[MX_MAX_SYMBOLS];
} mx_sizes;
/* The canonical key of the bound sizes, "b=8" or "b=8,s=16" (sorted by symbol), as static_modules uses. */
void mx_sizes_key(const mx_sizes *sizes, char *out, size_t out_len);

/* Reads <inputs>/<file> of a leaf argument entry ({"leaf","file","shape","dtype"}) and checks its dtype
 * and shape against the entry; a string dim binds (or must equal) that symbol in `sizes`. */
void mx_read_leaf(const char *inputs_dir, const mx_json *entry, mx_sizes *sizes, mx_npy *out);
/* Writes one output as <outputs>/<file>, checking the runtime's dtype against the entry's. */
void mx_write_result(const char *outputs_dir, const mx_json *entry, int ndim, const int64_t *shape,
                     const void *data, size_t nbytes);
void mx_make_dir(const char *path);

/* A safetensors file: 8-byte little-endian header length, a JSON header, then the raw data. */
typedef struct {
  char *path;
  mx_json *header;
  uint64_t data_start;
} mx_safetensors;
void mx_safetensors_open(const char *path, mx_safetensors *st);
/* Reads tensor `name` into a 64-byte-aligned buffer, checking its dtype and shape against `entry`. */
void *mx_safetensors_read(const mx_safetensors *st, const char *name, const mx_json *entry, size_t *nbytes);
void mx_safetensors_close(mx_safetensors *st);

/* Monotonic wall clock in nanoseconds. */
int64_t mx_now_ns(void);
/* Prints {"calls": n, "min_ms":..., "median_ms":..., "p90_ms":..., "mean_ms":..., ...} on stdout; with --times
   given to mx_parse_options, first writes the n times in call order to that file (.npy of int64 ns). */
void mx_print_timing(const char *consumer, int64_t *times_ns, int n, int warmup, const char *extra_json);

#ifdef __cplusplus
}
#endif
#endif
