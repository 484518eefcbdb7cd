/* sum_run: the native consumer of a format defined in tests/backends/test_new_format.py alone ("xla_sum").
 *
 * No runtime: it reads the XLA section's int32 leaf arguments through the shared helpers (common/), adds up every
 * element of all of them and writes the sum as the one int32 output, which is what the seed target computes
 * (fn(foo) = sum(foo.baz), foo.bar pruned). It honours the shared command line (--inputs, --outputs, --warmup,
 * --iters, --times), so the core builds, runs and times it as any of its own programs.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/mx_json.h"
#include "common/mx_npy.h"
#include "common/mx_util.h"

static const char *USAGE = "usage: sum_run [--artifact DIR] [--inputs DIR] [--outputs DIR] [--warmup N --iters N]";

static int32_t sum(const mx_npy *arrays, size_t n) {
  int32_t total = 0;
  for (size_t i = 0; i < n; i++) {
    const int32_t *data = (const int32_t *)arrays[i].data;
    for (int64_t k = 0; k < mx_num_elements(arrays[i].ndim, arrays[i].shape); k++) total += data[k];
  }
  return total;
}

int main(int argc, char **argv) {
  mx_set_program("sum_run");
  mx_options opts;
  mx_parse_options(argc, argv, &opts, USAGE, NULL, NULL);
  const mx_json *native;
  mx_json *manifest = mx_load_manifest(opts.artifact, &native, "xla_sum");
  const mx_json *args = mx_require(native, "args", "native"), *results = mx_require(native, "results", "native");
  if (mx_json_len(results) != 1) mx_die("native.results | %zu entries, expected 1", mx_json_len(results));
  size_t n = mx_json_len(args);
  mx_npy *arrays = (mx_npy *)calloc(n ? n : 1, sizeof *arrays);
  mx_sizes sizes = {0};
  for (size_t i = 0; i < n; i++) {
    const mx_json *a = mx_json_at(args, i);
    if (strcmp(mx_json_str(mx_json_get(a, "kind"), ""), "leaf") != 0 ||
        strcmp(mx_json_str(mx_json_get(a, "dtype"), ""), "int32") != 0)
      mx_die("native.args[%zu] | not an int32 leaf, expected only those", i);
    mx_read_leaf(opts.inputs, a, &sizes, &arrays[i]);
  }
  for (int i = 0; i < opts.warmup; i++) (void)sum(arrays, n);
  int64_t *times = (int64_t *)calloc(opts.iters ? (size_t)opts.iters : 1, sizeof *times);
  volatile int32_t sink = 0;
  for (int i = 0; i < opts.iters; i++) {
    int64_t start = mx_now_ns();
    sink += sum(arrays, n);
    times[i] = mx_now_ns() - start;
  }
  int32_t total = sum(arrays, n);
  if (!opts.no_outputs) {
    mx_make_dir(opts.outputs);
    mx_write_result(opts.outputs, mx_json_at(results, 0), 0, NULL, &total, sizeof total);
  }
  if (opts.iters > 0) mx_print_timing("sum_run", times, opts.iters, opts.warmup, NULL);
  for (size_t i = 0; i < n; i++) mx_npy_free(&arrays[i]);
  free(arrays);
  free(times);
  mx_json_free(manifest);
  return 0;
}
