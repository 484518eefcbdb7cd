// batch_openvino: run an OpenVINO artifact of multiexport from C++ (OpenVINO's C++ API) at several batch sizes.
//
// What a C++ caller needs from the artifact, and where it is (never guessed):
//   - the model file: manifest.json's native.model (the ONNX file; OpenVINO converts it at read_model);
//   - the binding: native.args[] names, for each input leaf, the model's port (`tensor`, the leaf's own
//     name) and its shape, where a string is a symbolic dim ("b"): the batch, which stays dynamic, so one
//     compiled model serves every batch size; native.results[] does the same for the outputs;
//   - the compile properties: native.properties (the Python runner's configuration, so that both runs
//     compute the same bits), on native.device.
// Inputs: the example values the export wrote (inputs/<native.args[].file>, at the export's batch); for a
// batch of N, row r of a batched leaf is the example's row r % (its batch). Every other leaf (the weights)
// is passed as it is.
//
// Build:  make -C examples/cpp batch_openvino     (flags from `python -m multiexport.native.build`)
// Run:    examples/cpp/batch_openvino ARTIFACT_DIR --batch 1 --batch 8 [--threads N] [--save DIR]
// Prints, per batch and output leaf: name, shape, dtype, FNV-1a 64 of the output's bytes, the sum and the
// first values; --save DIR writes each output as DIR/b<N>/<native.results[].file> (.npy).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "openvino/openvino.hpp"

extern "C" {
#include "common/mx_json.h"
#include "common/mx_npy.h"
#include "common/mx_util.h"
}

static ov::element::Type element_type(const std::string &dtype, const char *leaf) {
  static const struct { const char *name; ov::element::Type_t type; } map[] = {
      {"float32", ov::element::f32}, {"float64", ov::element::f64}, {"float16", ov::element::f16},
      {"bfloat16", ov::element::bf16}, {"int8", ov::element::i8},   {"int16", ov::element::i16},
      {"int32", ov::element::i32},   {"int64", ov::element::i64},   {"uint8", ov::element::u8},
      {"bool", ov::element::boolean},
  };
  for (const auto &m : map)
    if (dtype == m.name) return m.type;
  mx_die("Leaf '%s' | dtype %s has no OpenVINO element type in this example", leaf, dtype.c_str());
}

// FNV-1a over the raw bytes: equal hashes mean equal bits (the test hashes `multiexport run`'s arrays alike).
static unsigned long long fnv1a64(const unsigned char *p, size_t n) {
  unsigned long long h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

static double sum_of(const ov::Tensor &t) {
  double s = 0;
  size_t n = t.get_size();
  if (t.get_element_type() == ov::element::f32)
    for (size_t i = 0; i < n; i++) s += t.data<const float>()[i];
  else if (t.get_element_type() == ov::element::f64)
    for (size_t i = 0; i < n; i++) s += t.data<const double>()[i];
  else if (t.get_element_type() == ov::element::i32)
    for (size_t i = 0; i < n; i++) s += t.data<const int32_t>()[i];
  else if (t.get_element_type() == ov::element::i64)
    for (size_t i = 0; i < n; i++) s += (double)t.data<const int64_t>()[i];
  return s;  // other types: 0 (the hash still covers them)
}

struct Leaf {
  std::string name, port, dtype;
  mx_npy example;     // the export's example value
  bool batched;       // dim 0 is the symbolic batch
};

static int run(int argc, char **argv);

int main(int argc, char **argv) {
  mx_set_program("batch_openvino");
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {  // OpenVINO reports failures as exceptions with multi-line messages
    std::string message = e.what();
    for (char &c : message)
      if (c == '\n') c = ' ';
    mx_die("%s", message.c_str());
  }
}

static int run(int argc, char **argv) {
  std::string dir, save, threads;
  std::vector<long> batches;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if ((a == "--batch" || a == "--save" || a == "--threads") && i + 1 < argc) {
      std::string v = argv[++i];
      if (a == "--save") save = v;
      else if (a == "--threads") threads = v;
      else {
        char *end = nullptr;
        long n = strtol(v.c_str(), &end, 10);
        if (!end || *end || n < 1) mx_die("--batch | got '%s', expected an integer >= 1", v.c_str());
        batches.push_back(n);
      }
    } else if (dir.empty() && a[0] != '-') dir = a;
    else mx_die("usage: batch_openvino ARTIFACT_DIR --batch N [--batch N ...] [--threads N] [--save DIR]");
  }
  if (dir.empty() || batches.empty())
    mx_die("usage: batch_openvino ARTIFACT_DIR --batch N [--batch N ...] [--threads N] [--save DIR]");

  // 1. The binding, from the manifest alone.
  const mx_json *native;
  mx_json *manifest = mx_load_manifest(dir.c_str(), &native, "openvino");
  const mx_json *symbols = mx_require(native, "symbolic_dims", "native");
  if (mx_json_len(symbols) != 1)
    mx_die("Artifact '%s' | %zu symbolic dims, expected one (the batch): export a target with a symbolic batch, "
           "e.g. multiexport.examples:mlp_dynamic", dir.c_str(), mx_json_len(symbols));
  std::string batch_symbol = mx_json_str(mx_json_at(symbols, 0), "");
  const mx_json *args = mx_require(native, "args", "native"), *results = mx_require(native, "results", "native");
  std::string inputs_dir = dir + "/inputs";
  mx_sizes sizes = {};
  std::vector<Leaf> leaves(mx_json_len(args));
  printf("'%s': batch '%s' is symbolic; inputs bound by name:\n", mx_json_str(mx_json_get(manifest, "target"), "?"),
         batch_symbol.c_str());
  for (size_t i = 0; i < leaves.size(); i++) {
    const mx_json *a = mx_json_at(args, i);
    Leaf &leaf = leaves[i];
    leaf.name = mx_json_str(mx_require(a, "leaf", "native.args[]"), "");
    leaf.port = mx_json_str(mx_require(a, "tensor", "native.args[]"), "");
    leaf.dtype = mx_json_str(mx_require(a, "dtype", "native.args[]"), "");
    mx_read_leaf(inputs_dir.c_str(), a, &sizes, &leaf.example);  // checks dtype and shape against the entry
    const mx_json *shape = mx_require(a, "shape", "native.args[]");
    leaf.batched = false;
    for (size_t d = 0; d < mx_json_len(shape); d++) {
      const mx_json *dim = mx_json_at(shape, d);
      if (!mx_json_is(dim, MX_JSON_STRING)) continue;
      if (d != 0 || batch_symbol != dim->string)
        mx_die("Input '%s' | symbolic dim %zu is '%s': this example varies only a leading batch '%s'",
               leaf.name.c_str(), d, dim->string, batch_symbol.c_str());
      leaf.batched = true;
    }
    printf("  %-24s -> port %-24s %s%s\n", leaf.name.c_str(), leaf.port.c_str(), leaf.dtype.c_str(),
           leaf.batched ? " (batched)" : "");
  }

  // 2. OpenVINO: read the model file, compile with the manifest's properties.
  ov::Core core;
  // mx_join refuses a model path that leaves the artifact (absolute, or with ".."): the manifest is input.
  char *model_path = mx_join(dir.c_str(), mx_json_str(mx_require(native, "model", "native"), ""));
  std::shared_ptr<ov::Model> model = core.read_model(model_path);
  free(model_path);
  ov::AnyMap properties;
  const mx_json *props = mx_require(native, "properties", "native");
  if (!mx_json_is(props, MX_JSON_OBJECT)) mx_die("manifest.json: native.properties | expected an object");
  for (size_t k = 0; k < props->count; k++) properties[props->keys[k]] = std::string(mx_json_str(&props->items[k], ""));
  if (!threads.empty()) properties["INFERENCE_NUM_THREADS"] = threads;
  ov::CompiledModel compiled = core.compile_model(model, mx_json_str(mx_require(native, "device", "native"), "CPU"),
                                                  properties);
  // Read back: a CPU with native bf16 may lower f32 math unless told not to, and says so here.
  std::string precision = compiled.get_property("INFERENCE_PRECISION_HINT").as<std::string>();
  const char *asked = mx_json_str(mx_json_get(props, "INFERENCE_PRECISION_HINT"), precision.c_str());
  if (precision != asked)
    mx_die("asked OpenVINO for INFERENCE_PRECISION_HINT=%s, the compiled model reports %s", asked, precision.c_str());
  // Every port of the model must be bound by some leaf: a port left unset would fail at infer().
  for (const ov::Output<const ov::Node> &port : compiled.inputs()) {
    bool bound = false;
    for (const Leaf &leaf : leaves) bound = bound || port.get_names().count(leaf.port) > 0;
    if (!bound) mx_die("Model input '%s' | no leaf of native.args names it", port.get_any_name().c_str());
  }
  ov::InferRequest request = compiled.create_infer_request();

  // 3. One run per batch size, on the same compiled model.
  for (long n : batches) {
    std::vector<std::vector<char>> buffers(leaves.size());
    for (size_t i = 0; i < leaves.size(); i++) {
      const Leaf &leaf = leaves[i];
      ov::Shape shape(leaf.example.shape, leaf.example.shape + leaf.example.ndim);
      std::vector<char> &buf = buffers[i];
      if (leaf.batched) {
        size_t rows = shape[0], row_bytes = leaf.example.nbytes / rows;
        shape[0] = (size_t)n;
        buf.resize(row_bytes * (size_t)n);
        for (size_t r = 0; r < (size_t)n; r++)
          memcpy(buf.data() + r * row_bytes, (const char *)leaf.example.data + (r % rows) * row_bytes, row_bytes);
      } else {
        buf.assign((const char *)leaf.example.data, (const char *)leaf.example.data + leaf.example.nbytes);
      }
      request.set_tensor(leaf.port, ov::Tensor(element_type(leaf.dtype, leaf.name.c_str()), shape, buf.data()));
    }
    request.infer();
    std::string out_dir = save.empty() ? "" : save + "/b" + std::to_string(n);
    if (!save.empty()) {
      mx_make_dir(save.c_str());
      mx_make_dir(out_dir.c_str());
    }
    for (size_t j = 0; j < mx_json_len(results); j++) {
      const mx_json *r = mx_json_at(results, j);
      const char *name = mx_json_str(mx_require(r, "leaf", "native.results[]"), "");
      ov::Tensor t = request.get_tensor(mx_json_str(mx_require(r, "tensor", "native.results[]"), ""));
      std::string dtype = mx_json_str(mx_require(r, "dtype", "native.results[]"), "");
      if (t.get_element_type() != element_type(dtype, name))
        mx_die("Output '%s' | OpenVINO element type %s differs from the manifest's %s", name,
               t.get_element_type().get_type_name().c_str(), dtype.c_str());
      ov::Shape shape = t.get_shape();
      std::string dims;
      for (size_t d = 0; d < shape.size(); d++) dims += (d ? ", " : "") + std::to_string(shape[d]);
      printf("batch %ld: %s [%s] %s fnv1a64=%016llx sum=%.9g first:", n, name, dims.c_str(), dtype.c_str(),
             fnv1a64((const unsigned char *)t.data(), t.get_byte_size()), sum_of(t));
      for (size_t k = 0; k < t.get_size() && k < 4 && t.get_element_type() == ov::element::f32; k++)
        printf(" %.9g", t.data<const float>()[k]);
      printf("\n");
      if (!save.empty()) {
        std::vector<int64_t> dims64(shape.begin(), shape.end());
        dims64.push_back(0);  // never read: keeps data() valid for a 0-d output
        mx_write_result(out_dir.c_str(), r, (int)shape.size(), dims64.data(), t.data(), t.get_byte_size());
      }
    }
  }
  for (Leaf &leaf : leaves) mx_npy_free(&leaf.example);
  mx_json_free(manifest);
  return 0;
}
