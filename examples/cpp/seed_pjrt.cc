// seed_pjrt: call an XLA artifact of multiexport from C++ through the PJRT C API, binding by manifest.
//
// The question this answers (shared/seed-discussion.md): "XLA prunes unused leaves silently; which
// inputs does a C++ caller pass, in which order?" The answer is in manifest.json, never guessed:
//   - `inputs[]` lists every leaf: `used: false` means the module does not take it (drop it);
//   - `native.args[]` is the module's real argument list, in order: a platform index when the
//     module was lowered for several platforms, then one entry per leaf the module reads, naming
//     the leaf and the .npy file (`inputs/input{i}.npy`) the export wrote its example value to;
//   - a symbolic-batch export is compiled through `native.static_modules["b=N"]` (PJRT compiles no
//     polymorphic module); `native.compile_options` is the CompileOptionsProto PJRT needs.
//
// Build:  make -C examples/cpp            (flags from `python -m multiexport.native.build --cflags`)
// Run:    examples/cpp/seed_pjrt ARTIFACT_DIR [PLUGIN.so] [--sizes b=8]
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pjrt_c_api.h"

extern "C" {
#include "common/mx_json.h"
#include "common/mx_npy.h"
#include "common/mx_util.h"
}

static const PJRT_Api *api;

static void check(PJRT_Error *error, const char *what) {
  if (!error) return;
  PJRT_Error_Message_Args m{PJRT_Error_Message_Args_STRUCT_SIZE};
  m.error = error;
  api->PJRT_Error_Message(&m);
  mx_die("%s: %.*s", what, (int)m.message_size, m.message);
}

static void await(PJRT_Event *event) {
  if (!event) return;
  PJRT_Event_Await_Args a{PJRT_Event_Await_Args_STRUCT_SIZE};
  a.event = event;
  check(api->PJRT_Event_Await(&a), "PJRT_Event_Await");
  PJRT_Event_Destroy_Args d{PJRT_Event_Destroy_Args_STRUCT_SIZE};
  d.event = event;
  api->PJRT_Event_Destroy(&d);
}

static PJRT_Buffer_Type buffer_type(const std::string &dtype) {
  if (dtype == "float32") return PJRT_Buffer_Type_F32;
  if (dtype == "float64") return PJRT_Buffer_Type_F64;
  if (dtype == "int32") return PJRT_Buffer_Type_S32;
  if (dtype == "int64") return PJRT_Buffer_Type_S64;
  if (dtype == "bool") return PJRT_Buffer_Type_PRED;
  mx_die("dtype %s: this example handles float32/64, int32/64 and bool (csrc/pjrt_run.cc handles all)", dtype.c_str());
}

static void print_values(const std::string &dtype, const char *data, size_t n) {
  for (size_t i = 0; i < n && i < 8; i++) {
    if (dtype == "float32") printf(" %g", ((const float *)data)[i]);
    else if (dtype == "float64") printf(" %g", ((const double *)data)[i]);
    else if (dtype == "int32") printf(" %d", ((const int32_t *)data)[i]);
    else if (dtype == "int64") printf(" %lld", (long long)((const int64_t *)data)[i]);
    else printf(" %d", data[i]);
  }
  printf(n > 8 ? " ...\n" : "\n");
}

int main(int argc, char **argv) {
  mx_set_program("seed_pjrt");
  if (argc < 2) mx_die("usage: seed_pjrt ARTIFACT_DIR [PLUGIN.so] [--sizes b=8] (PLUGIN.so: else $MULTIEXPORT_PJRT_PLUGIN)");
  std::string dir = argv[1], plugin, sizes;
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) sizes = argv[++i];
    else plugin = argv[i];
  }
  // The same environment variable multiexport itself reads, so one export serves both.
  if (plugin.empty() && getenv("MULTIEXPORT_PJRT_PLUGIN")) plugin = getenv("MULTIEXPORT_PJRT_PLUGIN");
  if (plugin.empty())
    mx_die("no PJRT plugin given: pass its .so after ARTIFACT_DIR or set MULTIEXPORT_PJRT_PLUGIN "
           "(python -m multiexport.native.build --plugin prints the installed one)");

  // 1. The binding, from the manifest alone.
  const mx_json *native;
  mx_json *manifest = mx_load_manifest(dir.c_str(), &native, "xla");
  const mx_json *leaves = mx_json_get(manifest, "inputs");
  printf("input leaves of '%s':\n", mx_json_str(mx_json_get(manifest, "target"), "?"));
  for (size_t i = 0; i < mx_json_len(leaves); i++) {
    const mx_json *leaf = mx_json_at(leaves, i);
    const mx_json *flag = mx_json_get(leaf, "used");
    bool used = !flag || (mx_json_is(flag, MX_JSON_BOOL) && flag->boolean);
    printf("  %-24s %s\n", mx_json_str(mx_json_get(leaf, "name"), "?"),
           used ? "taken by the module" : "dropped: the module never reads it, do not pass it");
  }
  const mx_json *module = native;
  if (mx_json_len(mx_json_get(native, "symbolic_dims")) > 0) {
    const mx_json *statics = mx_json_get(native, "static_modules");
    if (mx_json_len(statics) == 0) mx_die("symbolic export without refined static modules: export with --static-sizes");
    module = sizes.empty() ? mx_json_at(statics, 0) : mx_json_get(statics, sizes.c_str());
    if (!module) mx_die("no static module for %s", sizes.c_str());
    printf("symbolic export: using the module refined for %s\n", sizes.empty() ? statics->keys[0] : sizes.c_str());
  }
  const mx_json *args = mx_require(module, "args", "module");
  printf("module arguments, in order:\n");
  for (size_t k = 0; k < mx_json_len(args); k++) {
    const mx_json *a = mx_json_at(args, k);
    std::string kind = mx_json_str(mx_json_get(a, "kind"), "");
    if (kind == "leaf")
      printf("  %zu: %s (%s) from inputs/%s\n", k, mx_json_str(mx_json_get(a, "leaf"), "?"),
             mx_json_str(mx_json_get(a, "dtype"), "?"), mx_json_str(mx_json_get(a, "file"), "?"));
    else
      printf("  %zu: %s\n", k, kind.c_str());
  }

  // 2. PJRT: plugin, client, compile with the artifact's CompileOptionsProto.
  void *handle = dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) mx_die("cannot load %s: %s", plugin.c_str(), dlerror());
  api = reinterpret_cast<const PJRT_Api *(*)()>(dlsym(handle, "GetPjrtApi"))();
  PJRT_Plugin_Initialize_Args init{PJRT_Plugin_Initialize_Args_STRUCT_SIZE};
  check(api->PJRT_Plugin_Initialize(&init), "PJRT_Plugin_Initialize");
  PJRT_Client_Create_Args cc{PJRT_Client_Create_Args_STRUCT_SIZE};
  check(api->PJRT_Client_Create(&cc), "PJRT_Client_Create");
  PJRT_Client_AddressableDevices_Args devs{PJRT_Client_AddressableDevices_Args_STRUCT_SIZE};
  devs.client = cc.client;
  check(api->PJRT_Client_AddressableDevices(&devs), "PJRT_Client_AddressableDevices");

  char err[MX_ERR];
  size_t code_len, options_len;
  char *program = mx_join(dir.c_str(), mx_json_str(mx_require(module, "program", "module"), ""));
  char *options_path = mx_join(dir.c_str(), mx_json_str(mx_require(native, "compile_options", "native"), ""));
  char *code = mx_read_file(program, &code_len, err, sizeof err);
  char *options = code ? mx_read_file(options_path, &options_len, err, sizeof err) : nullptr;
  if (!options) mx_die("%s", err);
  PJRT_Program prog{PJRT_Program_STRUCT_SIZE};
  prog.code = code;
  prog.code_size = code_len;
  prog.format = "mlir";  // native.format: StableHLO bytecode
  prog.format_size = 4;
  PJRT_Client_Compile_Args compile{PJRT_Client_Compile_Args_STRUCT_SIZE};
  compile.client = cc.client;
  compile.program = &prog;
  compile.compile_options = options;
  compile.compile_options_size = options_len;
  check(api->PJRT_Client_Compile(&compile), "PJRT_Client_Compile");

  // 3. The arguments in the module's order: the example values the export wrote to inputs/.
  std::vector<PJRT_Buffer *> buffers;
  std::vector<mx_npy> arrays(mx_json_len(args));
  int32_t platform_index = 0;  // this example runs on the plugin's platform, the first one exported (cpu)
  for (size_t k = 0; k < mx_json_len(args); k++) {
    const mx_json *a = mx_json_at(args, k);
    std::string kind = mx_json_str(mx_json_get(a, "kind"), "");
    PJRT_Client_BufferFromHostBuffer_Args b{PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE};
    b.client = cc.client;
    b.device = devs.addressable_devices[0];
    b.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
    if (kind == "platform_index") {
      b.data = &platform_index;
      b.type = PJRT_Buffer_Type_S32;
    } else if (kind == "leaf") {
      char *path = mx_join((dir + "/inputs").c_str(), mx_json_str(mx_json_get(a, "file"), ""));
      if (mx_npy_read(path, &arrays[k], err, sizeof err) != 0) mx_die("%s", err);
      free(path);
      b.data = arrays[k].data;
      b.type = buffer_type(mx_json_str(mx_json_get(a, "dtype"), ""));
      b.dims = arrays[k].shape;
      b.num_dims = (size_t)arrays[k].ndim;
    } else {
      mx_die("argument %zu is a %s: csrc/pjrt_run.cc shows lifted weights (weights.safetensors)", k, kind.c_str());
    }
    check(api->PJRT_Client_BufferFromHostBuffer(&b), "PJRT_Client_BufferFromHostBuffer");
    await(b.done_with_host_buffer);
    buffers.push_back(b.buffer);
  }

  // 4. One call, then each result by its leaf name.
  const mx_json *results = mx_require(module, "results", "module");
  std::vector<PJRT_Buffer *> outputs(mx_json_len(results));
  PJRT_Buffer *const *arg_list = buffers.data();
  PJRT_Buffer **out_list = outputs.data();
  PJRT_ExecuteOptions eo{PJRT_ExecuteOptions_STRUCT_SIZE};
  PJRT_Event *done = nullptr;
  PJRT_LoadedExecutable_Execute_Args ex{PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE};
  ex.executable = compile.executable;
  ex.options = &eo;
  ex.argument_lists = &arg_list;
  ex.num_devices = 1;
  ex.num_args = buffers.size();
  ex.output_lists = &out_list;
  ex.device_complete_events = &done;
  check(api->PJRT_LoadedExecutable_Execute(&ex), "PJRT_LoadedExecutable_Execute");
  await(done);
  for (size_t j = 0; j < outputs.size(); j++) {
    const mx_json *r = mx_json_at(results, j);
    PJRT_Buffer_ToHostBuffer_Args th{PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE};
    th.src = outputs[j];
    check(api->PJRT_Buffer_ToHostBuffer(&th), "PJRT_Buffer_ToHostBuffer");
    std::vector<char> host(th.dst_size);
    th.dst = host.data();
    check(api->PJRT_Buffer_ToHostBuffer(&th), "PJRT_Buffer_ToHostBuffer");
    await(th.event);
    std::string dtype = mx_json_str(mx_json_get(r, "dtype"), "");
    const mx_dtype *dt = mx_dtype_find(dtype.c_str());
    printf("output %s (%s):", mx_json_str(mx_json_get(r, "leaf"), "?"), dtype.c_str());
    print_values(dtype, host.data(), dt ? host.size() / (size_t)dt->itemsize : 0);
  }
  free(code);
  free(options);
  free(program);
  free(options_path);
  for (auto &a : arrays) if (a.data) mx_npy_free(&a);
  mx_json_free(manifest);
  return 0;
}
