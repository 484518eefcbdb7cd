// pjrt_run: runs an XLA artifact of multiexport through the PJRT C API, with no Python.
//
// It dlopens a PJRT plugin (e.g. the CPU plugin of the xla-cpu-pjrt wheel), compiles the module the
// manifest's "native" section names (StableHLO bytecode, format "mlir", with the artifact's serialized
// CompileOptionsProto), uploads the arguments in the section's order (platform index, leaves from
// .npy files, lifted weights from weights.safetensors), executes, and writes each result as .npy.
// A symbolic-batch artifact is run through the refined static module for the sizes its inputs bind,
// since PJRT cannot compile a polymorphic module. With --iters N it times N calls itself. With --load-lanes N it
// is the bare C loop of `multiexport load` (common/mx_load.h: the Offline, Server and MultiStream scenarios): N
// threads calling PJRT_LoadedExecutable_Execute (thread-safe) on the one loaded executable, each lane with its own
// input buffers (uploaded for it) and its own outputs, released after each call. On a CPU client (--cpu-devices)
// the lanes divide PJRT_NPROC's threads between them (divide_threads), as ONNX Runtime's and LiteRT's lanes do.
//
// Everything about the binding comes from manifest.json; see multiexport/native/csrc/README.md for the section.
#include <dlfcn.h>
#include <strings.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "pjrt_c_api.h"

extern "C" {
#include "common/mx_json.h"
#include "common/mx_load.h"
#include "common/mx_npy.h"
#include "common/mx_util.h"
}

static const char *USAGE =
    "usage: pjrt_run --plugin PATH/xla_cpu_pjrt.so [--artifact DIR] [--inputs DIR] [--outputs DIR]\n"
    "                [--warmup N] [--iters N] [--times FILE] [--no-outputs] [--info]\n"
    "                [--compile-options FILE] [--program FILE] [--cpu-devices N]\n"
    "                [--steps N --carry OUT=IN ... [--greedy LOGITS=IN] [--count IN] [--tokens FILE]]\n"
    "  Runs the XLA artifact in DIR (default .) through the PJRT C API. Inputs: one .npy per leaf\n"
    "  argument, named as the manifest's native.args[].file, in --inputs (default inputs/); outputs\n"
    "  are written to --outputs (default outputs/, created). --iters N: time N calls (after --warmup\n"
    "  untimed ones) and print min/median/p90 per-call wall time as JSON. --info: print the plugin's\n"
    "  attributes (PJRT API and StableHLO versions) as JSON and exit. --compile-options FILE: a serialized\n"
    "  CompileOptionsProto instead of the manifest's (e.g. the one jax compiles with); --program FILE: a\n"
    "  StableHLO module taking the same arguments instead of the manifest's (diagnostics). --cpu-devices N:\n"
    "  create XLA's CPU client with N devices (its create option cpu_device_count; jaxlib's client has 1; the\n"
    "  plugin's default is 4, on which single-device calls measured up to 2x slower); CPU plugins only.\n"
    "  Decode loop: --steps N calls the program N times, each call's inputs made from the previous call's\n"
    "  outputs on the device: --carry OUT=IN (repeatable) passes output leaf OUT as input leaf IN (a KV cache,\n"
    "  never copied to the host; donated where the module aliases it), --greedy LOGITS=IN feeds the argmax of\n"
    "  OUT's last axis as the int32 input leaf IN (the next token), --count IN adds 1 to the int32 scalar\n"
    "  input IN (the position). --tokens FILE writes the greedy tokens as an int32 [N, rows] .npy; the\n"
    "  per-step wall times print as JSON like --iters; --outputs gets the last call's outputs.\n"
    "  Under load (below) each lane calls the one loaded executable with its own input buffers; the CPU client's\n"
    "  threads are $PJRT_NPROC's.\n" MX_LOAD_USAGE;

static const PJRT_Api *api = nullptr;

// Dies with the plugin's message if `error` is set; the PJRT_Error is freed first.
static void check(PJRT_Error *error, const char *what) {
  if (!error) return;
  PJRT_Error_Message_Args m{};
  m.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  m.error = error;
  api->PJRT_Error_Message(&m);
  std::string message(m.message, m.message_size);
  PJRT_Error_Destroy_Args d{};
  d.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  d.error = error;
  api->PJRT_Error_Destroy(&d);
  mx_die("%s: %s", what, message.c_str());
}

static void await_event(PJRT_Event *event, const char *what) {
  if (!event) return;
  PJRT_Event_Await_Args a{};
  a.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  a.event = event;
  check(api->PJRT_Event_Await(&a), what);
  PJRT_Event_Destroy_Args d{};
  d.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  d.event = event;
  api->PJRT_Event_Destroy(&d);
}

static void destroy_buffer(PJRT_Buffer *buffer) {
  PJRT_Buffer_Destroy_Args d{};
  d.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  d.buffer = buffer;
  check(api->PJRT_Buffer_Destroy(&d), "PJRT_Buffer_Destroy");
}

struct DtypeMap {
  const char *name;
  PJRT_Buffer_Type type;
};
static const DtypeMap PJRT_TYPES[] = {
    {"bool", PJRT_Buffer_Type_PRED},      {"int8", PJRT_Buffer_Type_S8},        {"int16", PJRT_Buffer_Type_S16},
    {"int32", PJRT_Buffer_Type_S32},      {"int64", PJRT_Buffer_Type_S64},      {"uint8", PJRT_Buffer_Type_U8},
    {"uint16", PJRT_Buffer_Type_U16},     {"uint32", PJRT_Buffer_Type_U32},     {"uint64", PJRT_Buffer_Type_U64},
    {"float16", PJRT_Buffer_Type_F16},    {"float32", PJRT_Buffer_Type_F32},    {"float64", PJRT_Buffer_Type_F64},
    {"bfloat16", PJRT_Buffer_Type_BF16},  {"complex64", PJRT_Buffer_Type_C64},  {"complex128", PJRT_Buffer_Type_C128},
    {"float8_e4m3fn", PJRT_Buffer_Type_F8E4M3FN}, {"float8_e5m2", PJRT_Buffer_Type_F8E5M2},
};

static PJRT_Buffer_Type pjrt_type(const char *dtype, const char *who) {
  for (const auto &m : PJRT_TYPES)
    if (strcmp(m.name, dtype) == 0) return m.type;
  mx_die("%s | dtype %s has no PJRT buffer type here", who, dtype);
}

// "1.15.0" -> comparable triple; missing parts count as 0.
static std::vector<long> version_parts(const std::string &v) {
  std::vector<long> parts;
  const char *s = v.c_str();
  while (*s) {
    char *end;
    parts.push_back(strtol(s, &end, 10));
    s = *end == '.' ? end + 1 : end + strlen(end);
  }
  while (parts.size() < 3) parts.push_back(0);
  return parts;
}

// The plugin's attributes (xla_version, stablehlo_current_version, stablehlo_minimum_version, ...) as strings.
static std::map<std::string, std::string> plugin_attributes() {
  std::map<std::string, std::string> out;
  PJRT_Plugin_Attributes_Args a{};
  a.struct_size = PJRT_Plugin_Attributes_Args_STRUCT_SIZE;
  check(api->PJRT_Plugin_Attributes(&a), "PJRT_Plugin_Attributes");
  for (size_t i = 0; i < a.num_attributes; i++) {
    const PJRT_NamedValue &v = a.attributes[i];
    std::string name(v.name, v.name_size), value;
    switch (v.type) {
      case PJRT_NamedValue_kString: value = std::string(v.string_value, v.value_size); break;
      case PJRT_NamedValue_kInt64: value = std::to_string(v.int64_value); break;
      case PJRT_NamedValue_kInt64List:
        for (size_t k = 0; k < v.value_size; k++) value += (k ? "." : "") + std::to_string(v.int64_array_value[k]);
        break;
      case PJRT_NamedValue_kBool: value = v.bool_value ? "true" : "false"; break;
      case PJRT_NamedValue_kFloat: value = std::to_string(v.float_value); break;
    }
    out[name] = value;
  }
  return out;
}

// A hint for a failed compile when the module's StableHLO version is outside what the plugin reads.
// Not a refusal: a newer artifact that uses no newer feature still deserializes (measured: a v1.15.0
// MLP compiles on a plugin whose current version is 1.13.3).
static std::string stablehlo_hint(const std::map<std::string, std::string> &attrs, const char *needed) {
  auto lo = attrs.find("stablehlo_minimum_version"), hi = attrs.find("stablehlo_current_version");
  if (!needed || lo == attrs.end() || hi == attrs.end()) return "";
  auto v = version_parts(needed);
  if (v >= version_parts(lo->second) && v <= version_parts(hi->second)) return "";
  return std::string(" (the module is StableHLO ") + needed + ", this plugin reads " + lo->second + ".." +
         hi->second + ": use a plugin built from an XLA at least as new as the exporting jaxlib)";
}

struct Plugin {
  PJRT_Client *client = nullptr;
  PJRT_Device *device = nullptr;
  std::string platform;
};

static void load_plugin(const char *path) {
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) mx_die("cannot load PJRT plugin %s: %s", path, dlerror());
  using GetApi = const PJRT_Api *(*)();
  auto get = reinterpret_cast<GetApi>(dlsym(handle, "GetPjrtApi"));
  if (!get) mx_die("%s has no GetPjrtApi: not a PJRT plugin", path);
  api = get();
  if (api->pjrt_api_version.major_version != PJRT_API_MAJOR)
    mx_die("plugin %s speaks PJRT C API %d.%d, this program was built for %d.%d", path,
           api->pjrt_api_version.major_version, api->pjrt_api_version.minor_version, PJRT_API_MAJOR, PJRT_API_MINOR);
  PJRT_Plugin_Initialize_Args init{};
  init.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  check(api->PJRT_Plugin_Initialize(&init), "PJRT_Plugin_Initialize");
}

// PJRT_Client_Create with the plugin's INFO lines at creation kept off stderr: XLA's CPU plugin logs one
// ("cpu_device_count set via create_options", after absl's "All log messages before absl::InitializeLog()" line) for
// --cpu-devices, which would make every later failure of this program more than its one line. Any other line the
// plugin writes meanwhile (a warning, an error) is passed on to stderr as it was.
static PJRT_Error *create_quietly(PJRT_Client_Create_Args *args) {
  fflush(stderr);
  FILE *log = tmpfile();
  int saved = log ? dup(2) : -1;
  if (saved < 0 || dup2(fileno(log), 2) < 0) {
    if (saved >= 0) close(saved);
    if (log) fclose(log);
    return api->PJRT_Client_Create(args);
  }
  PJRT_Error *error = api->PJRT_Client_Create(args);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  rewind(log);
  char line[4096];
  while (fgets(line, sizeof line, log)) {
    static const char preamble[] = "WARNING: All log messages before absl::InitializeLog()";
    int info = line[0] == 'I' && strlen(line) > 5 && strspn(line + 1, "0123456789") == 4 && line[5] == ' ';
    if (!info && strncmp(line, preamble, sizeof preamble - 1) != 0) fputs(line, stderr);
  }
  fclose(log);
  return error;
}

// cpu_devices > 0 (--cpu-devices): the client is created with XLA's CPU plugin's create option cpu_device_count, as
// jaxlib creates its CPU client with one device unless jax_num_cpu_devices says otherwise (without the option the
// plugin makes 4, and one call of the example CNN took 93-110 us on that client against 50 us on a 1-device one,
// measured with the lammps-jax-pjrt-cpu 0.11.2 plugin); a plugin that has no such option refuses it.
static Plugin create_client(int cpu_devices) {
  Plugin p;
  PJRT_Client_Create_Args c{};
  c.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  PJRT_NamedValue count{};
  if (cpu_devices > 0) {
    count.struct_size = PJRT_NamedValue_STRUCT_SIZE;
    count.name = "cpu_device_count";
    count.name_size = strlen(count.name);
    count.type = PJRT_NamedValue_kInt64;
    count.int64_value = cpu_devices;
    count.value_size = 1;
    c.create_options = &count;
    c.num_options = 1;
  }
  check(create_quietly(&c), "PJRT_Client_Create");
  p.client = c.client;
  PJRT_Client_AddressableDevices_Args d{};
  d.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  d.client = p.client;
  check(api->PJRT_Client_AddressableDevices(&d), "PJRT_Client_AddressableDevices");
  if (d.num_addressable_devices == 0) mx_die("the PJRT client has no addressable device");
  p.device = d.addressable_devices[0];  // the artifact is exported for 1 device (nr_devices 1)
  PJRT_Client_PlatformName_Args n{};
  n.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
  n.client = p.client;
  check(api->PJRT_Client_PlatformName(&n), "PJRT_Client_PlatformName");
  p.platform.assign(n.platform_name, n.platform_name_size);
  return p;
}

static PJRT_Buffer *upload(const Plugin &p, const void *data, PJRT_Buffer_Type type, const int64_t *dims, int ndim) {
  PJRT_Client_BufferFromHostBuffer_Args b{};
  b.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  b.client = p.client;
  b.data = data;
  b.type = type;
  b.dims = dims;
  b.num_dims = (size_t)ndim;
  // The runtime copies before the call returns: the host arrays can be freed or reused at once.
  b.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall;
  b.device = p.device;
  check(api->PJRT_Client_BufferFromHostBuffer(&b), "PJRT_Client_BufferFromHostBuffer");
  await_event(b.done_with_host_buffer, "upload");
  PJRT_Buffer_ReadyEvent_Args r{};
  r.struct_size = PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE;
  r.buffer = b.buffer;
  check(api->PJRT_Buffer_ReadyEvent(&r), "PJRT_Buffer_ReadyEvent");
  await_event(r.event, "upload ready");
  return b.buffer;
}

// The module binding to run: the main one, or for a symbolic export the static module of the bound sizes.
static const mx_json *choose_module(const mx_json *native, const mx_sizes &sizes) {
  const mx_json *symbols = mx_json_get(native, "symbolic_dims");
  if (mx_json_len(symbols) == 0) return native;
  char key[512];
  mx_sizes_key(&sizes, key, sizeof key);
  const mx_json *statics = mx_json_get(native, "static_modules");
  const mx_json *chosen = mx_json_get(statics, key);
  if (!chosen) {
    std::string have;
    for (size_t i = 0; i < mx_json_len(statics); i++) have += std::string(i ? ", " : "") + statics->keys[i];
    mx_die("the inputs bind %s, but the artifact has refined static modules only for: %s (PJRT cannot compile the "
           "polymorphic module; re-export with --static-sizes including these sizes)",
           key, have.empty() ? "(none)" : have.c_str());
  }
  return chosen;
}

// For a module lowered for several platforms, the program lowered for the plugin's platform alone
// (native.platform_modules): the multi-platform main takes the platform index at run time, so its `case` over
// platforms survives into the compile and the numbers differ from what jax compiles for that platform (measured
// on a TPU: 1.3e-3 of max|ref| for a transformer block). An older manifest has none: the main runs, said on stderr.
static const mx_json *platform_module(const mx_json *native, const mx_json *chosen, const std::string &platform) {
  if (chosen != native) return chosen;  // a refined static module is lowered for one platform already
  const mx_json *main_platforms = mx_json_get(native, "platforms");
  if (mx_json_len(main_platforms) < 2) return native;
  const mx_json *per = mx_json_get(native, "platform_modules");
  std::string have;
  for (size_t i = 0; i < mx_json_len(per); i++) {
    if (strcasecmp(per->keys[i], platform.c_str()) == 0) return mx_json_get(per, per->keys[i]);
    have += std::string(i ? ", " : "") + per->keys[i];
  }
  bool in_main = false;
  for (size_t k = 0; k < mx_json_len(main_platforms); k++)
    in_main = in_main || strcasecmp(mx_json_str(mx_json_at(main_platforms, k), ""), platform.c_str()) == 0;
  if (!in_main) {
    std::string lowered;
    for (size_t k = 0; k < mx_json_len(main_platforms); k++)
      lowered += std::string(k ? ", " : "") + mx_json_str(mx_json_at(main_platforms, k), "");
    mx_die("the artifact's programs are lowered for %s, this plugin's platform is '%s': use a plugin of one of "
           "those, or re-export with platforms including it", lowered.c_str(), platform.c_str());
  }
  fprintf(stderr, "pjrt_run: note: no single-platform program for '%s' (platform_modules: %s); running the "
          "multi-platform main module, whose numbers may differ from jax's on this platform\n", platform.c_str(),
          have.empty() ? "none, an older manifest" : have.c_str());
  return native;
}

// A module lowered for other platforms than the plugin's would compile into something else or fail deep
// inside the compiler: refuse it first, naming both (a static module refined for cuda on a CPU plugin).
static void require_platform(const mx_json *platforms, const std::string &plugin_platform,
                             const std::string &program) {
  if (!platforms || mx_json_len(platforms) == 0) return;  // older manifests: the platform index decides
  std::string have;
  for (size_t k = 0; k < mx_json_len(platforms); k++) {
    const char *name = mx_json_str(mx_json_at(platforms, k), "");
    if (strcasecmp(name, plugin_platform.c_str()) == 0) return;
    have += std::string(k ? ", " : "") + name;
  }
  mx_die("%s | lowered for %s, this plugin's platform is '%s': use a plugin of that platform, or re-export on "
         "a machine of this one (or with platforms including it)", program.c_str(), have.c_str(),
         plugin_platform.c_str());
}

static size_t num_outputs(PJRT_LoadedExecutable *loaded) {
  PJRT_LoadedExecutable_GetExecutable_Args g{};
  g.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  g.loaded_executable = loaded;
  check(api->PJRT_LoadedExecutable_GetExecutable(&g), "PJRT_LoadedExecutable_GetExecutable");
  PJRT_Executable_NumOutputs_Args n{};
  n.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE;
  n.executable = g.executable;
  check(api->PJRT_Executable_NumOutputs(&n), "PJRT_Executable_NumOutputs");
  PJRT_Executable_Destroy_Args d{};
  d.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
  d.executable = g.executable;
  check(api->PJRT_Executable_Destroy(&d), "PJRT_Executable_Destroy");
  return n.num_outputs;
}

// A buffer's contents on the host, row-major whatever the device's layout (a TPU executable may keep an output
// column-major, {0,1} for a 64x10 result, and without a host layout the copy keeps the device's order); its
// dimensions in `dims`.
static std::vector<char> download(PJRT_Buffer *buffer, std::vector<int64_t> *dims_out) {
  PJRT_Buffer_Dimensions_Args dims{};
  dims.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
  dims.buffer = buffer;
  check(api->PJRT_Buffer_Dimensions(&dims), "PJRT_Buffer_Dimensions");
  dims_out->assign(dims.dims, dims.dims + dims.num_dims);
  std::vector<int64_t> minor_to_major(dims.num_dims);
  for (size_t d = 0; d < dims.num_dims; d++) minor_to_major[d] = (int64_t)(dims.num_dims - 1 - d);
  PJRT_Buffer_MemoryLayout row_major{};
  row_major.struct_size = PJRT_Buffer_MemoryLayout_STRUCT_SIZE;
  row_major.type = PJRT_Buffer_MemoryLayout_Type_Tiled;
  row_major.tiled.struct_size = PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE;
  row_major.tiled.minor_to_major = minor_to_major.data();
  row_major.tiled.minor_to_major_size = minor_to_major.size();
  PJRT_Buffer_ToHostBuffer_Args th{};
  th.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  th.src = buffer;
  th.host_layout = &row_major;
  check(api->PJRT_Buffer_ToHostBuffer(&th), "PJRT_Buffer_ToHostBuffer (size)");
  std::vector<char> host(th.dst_size);
  th.dst = host.data();
  check(api->PJRT_Buffer_ToHostBuffer(&th), "PJRT_Buffer_ToHostBuffer");
  await_event(th.event, "download");
  return host;
}

static bool same_shape(const mx_json *a, const mx_json *b) {
  const mx_json *sa = mx_json_get(a, "shape"), *sb = mx_json_get(b, "shape");
  if (mx_json_len(sa) != mx_json_len(sb)) return false;
  for (size_t d = 0; d < mx_json_len(sa); d++)
    if (mx_json_int(mx_json_at(sa, d), -1) != mx_json_int(mx_json_at(sb, d), -2)) return false;
  return strcmp(mx_json_str(mx_json_get(a, "dtype"), ""), mx_json_str(mx_json_get(b, "dtype"), "")) == 0;
}

static int64_t elements(const mx_json *entry) {
  const mx_json *shape = mx_json_get(entry, "shape");
  int64_t n = 1;
  for (size_t d = 0; d < mx_json_len(shape); d++) n *= mx_json_int(mx_json_at(shape, d), 0);
  return n;
}

struct Options {
  const char *plugin = nullptr;
  bool info = false;
  const char *compile_options = nullptr;  // replaces the manifest's native.compile_options file
  const char *program = nullptr;          // replaces the chosen module's program file
  int steps = 0;                          // the decode loop's calls (0: no loop)
  std::vector<std::pair<std::string, std::string>> carry;  // output leaf -> input leaf, on the device
  std::pair<std::string, std::string> greedy;               // logits output leaf -> token input leaf
  std::string count;                                        // int32 scalar input leaf, +1 per step
  const char *tokens = nullptr;                             // where the greedy tokens go (.npy)
  mx_load_flags load{};                                     // the load loop's (common/mx_load.h); lanes 0: none
  int cpu_devices = 0;                                      // the CPU client's devices (0: the plugin's default)
};

// "OUT=IN" -> (OUT, IN); dies naming the flag otherwise.
static std::pair<std::string, std::string> leaf_pair(const char *flag, const char *value) {
  const char *eq = strchr(value, '=');
  if (!eq || eq == value || !eq[1]) mx_die("%s | got '%s', expected OUTPUT_LEAF=INPUT_LEAF", flag, value);
  return {std::string(value, (size_t)(eq - value)), std::string(eq + 1)};
}

// An integer flag's value in [1, most]; dies naming the flag otherwise.
static int count_flag(const char *flag, const char *value, long most) {
  char *end = nullptr;
  long n = strtol(value, &end, 10);
  if (!end || *end || n < 1 || n > most) mx_die("%s | got '%s', expected an integer >= 1", flag, value);
  return (int)n;
}

static int extra_flag(const char *flag, const char *value, void *user) {
  auto *o = static_cast<Options *>(user);
  if (mx_load_flag(flag, value, &o->load)) return 1;
  if (strcmp(flag, "--plugin") == 0) { o->plugin = value; return 1; }
  if (strcmp(flag, "--info") == 0) { o->info = strcmp(value, "0") != 0; return 1; }
  if (strcmp(flag, "--compile-options") == 0) { o->compile_options = value; return 1; }
  if (strcmp(flag, "--program") == 0) { o->program = value; return 1; }
  if (strcmp(flag, "--steps") == 0) { o->steps = count_flag(flag, value, 1000000); return 1; }
  if (strcmp(flag, "--carry") == 0) { o->carry.push_back(leaf_pair(flag, value)); return 1; }
  if (strcmp(flag, "--cpu-devices") == 0) { o->cpu_devices = count_flag(flag, value, 4096); return 1; }
  if (strcmp(flag, "--greedy") == 0) { o->greedy = leaf_pair(flag, value); return 1; }
  if (strcmp(flag, "--count") == 0) { o->count = value; return 1; }
  if (strcmp(flag, "--tokens") == 0) { o->tokens = value; return 1; }
  return 0;
}

// One lane of the load loop: its own input buffers on the one executable; a call's outputs are released after it.
struct Lane {
  PJRT_LoadedExecutable *executable = nullptr;
  const PJRT_ExecuteOptions *options = nullptr;
  std::vector<PJRT_Buffer *> inputs, outputs;
};

static void lane_call(void *user) {
  Lane *lane = static_cast<Lane *>(user);
  PJRT_Buffer *const *arg_list = lane->inputs.data();
  PJRT_Buffer **out_list = lane->outputs.data();
  PJRT_Event *done = nullptr;
  PJRT_LoadedExecutable_Execute_Args ex{};
  ex.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  ex.executable = lane->executable;
  ex.options = const_cast<PJRT_ExecuteOptions *>(lane->options);
  ex.argument_lists = &arg_list;
  ex.num_devices = 1;
  ex.num_args = lane->inputs.size();
  ex.output_lists = &out_list;
  ex.device_complete_events = &done;
  check(api->PJRT_LoadedExecutable_Execute(&ex), "PJRT_LoadedExecutable_Execute");
  await_event(done, "execute");
  for (auto &b : lane->outputs) { if (b) destroy_buffer(b); b = nullptr; }
}

// Under load on a CPU client, PJRT_NPROC / lanes (at least 1) intra-op threads, set before the client reads it at
// its creation. Measured on the example CNN (2 lanes, PJRT_NPROC=2, CPU time per call over the loop): on the
// plugin's 2-thread pool the lanes' concurrent calls cost 130-214 us of CPU each (the pool's workers and the lanes
// handing work back and forth), on 1 thread 55-82 us; jaxlib's lanes cost 76-122 us either way
// (benchmarks/load.md, 2026-12-06 load4).
static void divide_threads(int lanes) {
  const char *given = getenv("PJRT_NPROC");
  if (!given || !*given) return;  // the plugin's own default: nothing to divide
  int threads = atoi(given), per_lane = threads / lanes > 0 ? threads / lanes : 1;
  if (threads <= 0) return;
  char value[16];
  snprintf(value, sizeof value, "%d", per_lane);
  setenv("PJRT_NPROC", value, 1);
}

// The load loop over `lanes` (their inputs uploaded), every input kept (options: none donatable).
static void load_loop(PJRT_LoadedExecutable *executable, const PJRT_ExecuteOptions *options, size_t n_out,
                      std::vector<Lane> &lanes, const mx_load_flags &load, const std::string &platform,
                      int cpu_devices, const std::string &nproc_given) {
  std::vector<void *> contexts;
  for (auto &lane : lanes) {
    lane.executable = executable;
    lane.options = options;
    lane.outputs.assign(n_out, nullptr);
    contexts.push_back(&lane);
    lane_call(&lane);  // each lane warm
  }
  const char *nproc = getenv("PJRT_NPROC");
  char extra[320], devices[32] = "the plugin's default";
  if (cpu_devices > 0) snprintf(devices, sizeof devices, "%d", cpu_devices);
  snprintf(extra, sizeof extra, "\"platform\": \"%.64s\", \"pjrt_nproc\": \"%.16s\", \"pjrt_nproc_given\": \"%.16s\", "
           "\"cpu_devices\": \"%s\", \"lane\": \"its own input buffers on the one loaded executable\"", platform.c_str(),
           nproc ? nproc : "", nproc_given.c_str(), devices);
  mx_load_run(&load, contexts.data(), lane_call, "pjrt_c_api", extra);
  for (auto &lane : lanes)
    for (auto *b : lane.inputs) destroy_buffer(b);
}

static void print_info(const char *plugin) {
  auto attrs = plugin_attributes();
  printf("{\"plugin\": \"%s\", \"pjrt_api_version\": \"%d.%d\"", plugin, api->pjrt_api_version.major_version,
         api->pjrt_api_version.minor_version);
  for (const auto &kv : attrs) printf(", \"%s\": \"%s\"", kv.first.c_str(), kv.second.c_str());
  printf("}\n");
}

int main(int argc, char **argv) {
  mx_set_program("pjrt_run");
  // --info takes no value on the command line: turn it into "--info 1" for the shared parser.
  std::vector<char *> args(argv, argv + argc);
  for (size_t i = 0; i < args.size(); i++)
    if (strcmp(args[i], "--info") == 0) args.insert(args.begin() + (long)i + 1, const_cast<char *>("1"));
  Options extra;
  mx_options opts;
  mx_parse_options((int)args.size(), args.data(), &opts, USAGE, extra_flag, &extra);
  if (!extra.plugin) mx_die("--plugin PATH is required (the PJRT plugin .so, e.g. xla_cpu_pjrt.so)\n%s", USAGE);
  load_plugin(extra.plugin);
  if (extra.info) { print_info(extra.plugin); return 0; }

  const mx_json *native;
  mx_json *manifest = mx_load_manifest(opts.artifact, &native, "xla");
  const char *format = mx_json_str(mx_require(native, "format", "native"), "mlir");

  // Read every leaf once, binding the symbolic sizes from the main module's (symbolic) shapes.
  mx_sizes sizes{};
  std::map<std::string, mx_npy> leaves;
  const mx_json *main_args = mx_require(native, "args", "native");
  for (size_t i = 0; i < mx_json_len(main_args); i++) {
    const mx_json *a = mx_json_at(main_args, i);
    if (strcmp(mx_json_str(mx_json_get(a, "kind"), ""), "leaf") != 0) continue;
    mx_npy array;
    mx_read_leaf(opts.inputs, a, &sizes, &array);
    leaves[mx_json_str(mx_json_get(a, "leaf"), "")] = array;
  }
  const mx_json *module = choose_module(native, sizes);
  const char *given_nproc = getenv("PJRT_NPROC");
  std::string nproc_given = given_nproc ? given_nproc : "";
  if (extra.load.lanes > 1 && extra.cpu_devices > 0) divide_threads(extra.load.lanes);
  Plugin p = create_client(extra.cpu_devices);
  module = platform_module(native, module, p.platform);
  std::string hint = stablehlo_hint(plugin_attributes(), mx_json_str(mx_json_get(module, "stablehlo_version"), nullptr));

  std::string program_path = mx_json_str(mx_require(module, "program", "native module"), "");
  require_platform(mx_json_get(module, "platforms"), p.platform, program_path);
  char err[MX_ERR];
  size_t code_len, options_len = 0;
  char *dir_program = extra.program ? strdup(extra.program) : mx_join(opts.artifact, program_path.c_str());
  char *code = mx_read_file(dir_program, &code_len, err, sizeof err);
  if (!code) mx_die("%s", err);
  char *options = nullptr;
  const char *options_file = mx_json_str(mx_json_get(native, "compile_options"), nullptr);
  if (!options_file) mx_die("manifest.json: native has no \"compile_options\" (a CompileOptionsProto file; empty "
                            "options abort the CPU client)");
  char *options_path = extra.compile_options ? strdup(extra.compile_options) : mx_join(opts.artifact, options_file);
  options = mx_read_file(options_path, &options_len, err, sizeof err);
  if (!options) mx_die("%s", err);
  if (options_len == 0)  // the CPU client aborts the process on it (Check failed: replica_count > 0)
    mx_die("%s is empty: it must hold a CompileOptionsProto with num_replicas 1, num_partitions 1", options_file);

  PJRT_Program prog{};
  prog.struct_size = PJRT_Program_STRUCT_SIZE;
  prog.code = code;
  prog.code_size = code_len;
  prog.format = format;
  prog.format_size = strlen(format);
  PJRT_Client_Compile_Args cc{};
  cc.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  cc.client = p.client;
  cc.program = &prog;
  cc.compile_options = options;
  cc.compile_options_size = options_len;
  int64_t t0 = mx_now_ns();
  check(api->PJRT_Client_Compile(&cc), ("compiling " + program_path + hint).c_str());
  double compile_ms = (double)(mx_now_ns() - t0) / 1e6;

  // Arguments in the module's order, uploaded once for the program and once more for each load lane.
  const mx_json *margs = mx_require(module, "args", program_path.c_str());
  const mx_json *platforms = mx_json_get(module, "platforms");
  mx_safetensors weights{};
  bool weights_open = false;
  auto upload_args = [&]() {
    std::vector<PJRT_Buffer *> inputs;
    for (size_t i = 0; i < mx_json_len(margs); i++) {
      const mx_json *a = mx_json_at(margs, i);
      std::string kind = mx_json_str(mx_json_get(a, "kind"), "");
      if (kind == "platform_index") {
        // jax.export lowered for several platforms: the first argument picks the branch by index.
        int32_t index = -1;
        for (size_t k = 0; k < mx_json_len(platforms); k++)
          if (p.platform == mx_json_str(mx_json_at(platforms, k), "")) index = (int32_t)k;
        if (index < 0) mx_die("the module was lowered for other platforms than this plugin's '%s'", p.platform.c_str());
        inputs.push_back(upload(p, &index, PJRT_Buffer_Type_S32, nullptr, 0));
      } else if (kind == "leaf") {
        std::string name = mx_json_str(mx_json_get(a, "leaf"), "");
        auto it = leaves.find(name);
        if (it == leaves.end())
          mx_die("Input '%s' | the static module takes a leaf the main module does not", name.c_str());
        const mx_npy &arr = it->second;
        inputs.push_back(upload(p, arr.data, pjrt_type(mx_json_str(mx_json_get(a, "dtype"), ""), name.c_str()),
                                arr.shape, arr.ndim));
      } else if (kind == "weight") {
        if (!weights_open) {
          char *path = mx_join(opts.artifact, mx_json_str(mx_require(a, "file", "weight"), ""));
          mx_safetensors_open(path, &weights);
          free(path);
          weights_open = true;
        }
        const char *tensor = mx_json_str(mx_require(a, "tensor", "weight"), "");
        size_t nbytes;
        void *data = mx_safetensors_read(&weights, tensor, a, &nbytes);
        const mx_json *shape = mx_json_get(a, "shape");
        std::vector<int64_t> dims;
        for (size_t d = 0; d < mx_json_len(shape); d++) dims.push_back(mx_json_int(mx_json_at(shape, d), 0));
        inputs.push_back(upload(p, data, pjrt_type(mx_json_str(mx_json_get(a, "dtype"), ""), tensor), dims.data(),
                                (int)dims.size()));
        free(data);  // uploaded with kImmutableOnlyDuringCall: the device holds its own copy
      } else if (kind == "token") {
        mx_die("argument %zu is an effect token: this consumer passes none; run the refined static module "
               "(static_modules), whose tokens are created inside", i);
      } else {
        mx_die("manifest.json: argument %zu has unknown kind '%s'", i, kind.c_str());
      }
    }
    return inputs;
  };
  std::vector<PJRT_Buffer *> inputs = upload_args();
  int32_t count_value = 0;  // --count's leaf on the host, incremented per step
  if (!extra.count.empty()) {
    auto it = leaves.find(extra.count);
    if (it == leaves.end()) mx_die("--count | '%s' is no input leaf of the module", extra.count.c_str());
    if (strcmp(it->second.descr, "<i4") != 0 || mx_num_elements(it->second.ndim, it->second.shape) != 1)
      mx_die("--count | Input '%s' | got %s of %lld elements, expected an int32 scalar", extra.count.c_str(),
             it->second.descr, (long long)mx_num_elements(it->second.ndim, it->second.shape));
    count_value = *static_cast<const int32_t *>(it->second.data);
  }
  std::vector<Lane> lanes((size_t)extra.load.lanes);
  if (extra.steps > 0 && extra.load.lanes) mx_die("--load-lanes | a load loop and a decode loop at once, expected one");
  for (auto &lane : lanes) lane.inputs = upload_args();
  for (auto &kv : leaves) mx_npy_free(&kv.second);

  const mx_json *results = mx_require(module, "results", program_path.c_str());
  size_t n_out = mx_json_len(results);
  if (num_outputs(cc.executable) != n_out)
    mx_die("%s returns %zu results, the manifest lists %zu", program_path.c_str(), num_outputs(cc.executable), n_out);
  std::vector<PJRT_Buffer *> outputs(n_out, nullptr);
  PJRT_ExecuteOptions eo{};
  eo.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  PJRT_Buffer *const *arg_list = inputs.data();
  PJRT_Buffer **out_list = outputs.data();

  // One synchronous call: execute, then wait until the device is done.
  auto call = [&]() {
    PJRT_Event *done = nullptr;
    PJRT_LoadedExecutable_Execute_Args ex{};
    ex.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
    ex.executable = cc.executable;
    ex.options = &eo;
    ex.argument_lists = &arg_list;
    ex.num_devices = 1;
    ex.num_args = inputs.size();
    ex.output_lists = &out_list;
    ex.device_complete_events = &done;
    check(api->PJRT_LoadedExecutable_Execute(&ex), "PJRT_LoadedExecutable_Execute");
    await_event(done, "execute");
  };
  auto release_outputs = [&]() {
    for (auto &b : outputs) { if (b) destroy_buffer(b); b = nullptr; }
  };

  // A module that aliases an input to an output (jax's donate_argnums) would donate that input's buffer to the
  // first call: outside the decode loop every input is reused, so none is donatable; in the loop only the
  // carried ones (replaced by the call's outputs every step).
  std::vector<int64_t> keep, times;
  std::vector<int32_t> generated;  // the greedy tokens, [steps, rows]
  int64_t rows = 0;
  if (extra.steps > 0) {
    std::map<std::string, size_t> in_at, out_at;
    for (size_t i = 0; i < mx_json_len(margs); i++)
      if (strcmp(mx_json_str(mx_json_get(mx_json_at(margs, i), "kind"), ""), "leaf") == 0)
        in_at[mx_json_str(mx_json_get(mx_json_at(margs, i), "leaf"), "")] = i;
    for (size_t j = 0; j < n_out; j++)
      if (strcmp(mx_json_str(mx_json_get(mx_json_at(results, j), "kind"), "leaf"), "leaf") == 0)
        out_at[mx_json_str(mx_json_get(mx_json_at(results, j), "leaf"), "")] = j;
    auto input_of = [&](const std::string &name, const char *flag) {
      auto it = in_at.find(name);
      if (it == in_at.end()) mx_die("%s | '%s' is no input leaf of %s", flag, name.c_str(), program_path.c_str());
      return it->second;
    };
    auto output_of = [&](const std::string &name, const char *flag) {
      auto it = out_at.find(name);
      if (it == out_at.end()) mx_die("%s | '%s' is no output leaf of %s", flag, name.c_str(), program_path.c_str());
      return it->second;
    };
    std::vector<std::pair<size_t, size_t>> carried;  // (output, input)
    std::vector<bool> donatable(inputs.size(), false);
    for (const auto &c : extra.carry) {
      size_t j = output_of(c.first, "--carry"), i = input_of(c.second, "--carry");
      if (!same_shape(mx_json_at(results, j), mx_json_at(margs, i)))
        mx_die("--carry | Output '%s' and Input '%s' differ in shape or dtype", c.first.c_str(), c.second.c_str());
      carried.push_back({j, i});
      donatable[i] = true;
    }
    long greedy_out = -1, greedy_in = -1;
    int64_t vocab = 0;
    std::vector<int64_t> token_dims;
    if (!extra.greedy.first.empty()) {
      greedy_out = (long)output_of(extra.greedy.first, "--greedy");
      greedy_in = (long)input_of(extra.greedy.second, "--greedy");
      const mx_json *logits = mx_json_at(results, (size_t)greedy_out), *token = mx_json_at(margs, (size_t)greedy_in);
      const mx_json *shape = mx_json_get(logits, "shape");
      if (strcmp(mx_json_str(mx_json_get(logits, "dtype"), ""), "float32") != 0 || mx_json_len(shape) == 0)
        mx_die("--greedy | Output '%s' | got %s, expected float32 logits of rank >= 1", extra.greedy.first.c_str(),
               mx_json_str(mx_json_get(logits, "dtype"), "?"));
      if (strcmp(mx_json_str(mx_json_get(token, "dtype"), ""), "int32") != 0)
        mx_die("--greedy | Input '%s' | got %s, expected int32 token ids", extra.greedy.second.c_str(),
               mx_json_str(mx_json_get(token, "dtype"), "?"));
      vocab = mx_json_int(mx_json_at(shape, mx_json_len(shape) - 1), 0);
      rows = vocab > 0 ? elements(logits) / vocab : 0;
      if (vocab <= 0 || elements(token) != rows)
        mx_die("--greedy | Input '%s' has %lld elements, expected one per row of '%s' (%lld)",
               extra.greedy.second.c_str(), (long long)elements(token), extra.greedy.first.c_str(), (long long)rows);
      const mx_json *tshape = mx_json_get(token, "shape");
      for (size_t d = 0; d < mx_json_len(tshape); d++) token_dims.push_back(mx_json_int(mx_json_at(tshape, d), 0));
    }
    long count_in = extra.count.empty() ? -1 : (long)input_of(extra.count, "--count");
    for (size_t i = 0; i < inputs.size(); i++)
      if (!donatable[i]) keep.push_back((int64_t)i);
    eo.non_donatable_input_indices = keep.data();
    eo.num_non_donatable_input_indices = keep.size();
    std::vector<int32_t> next((size_t)rows);
    for (int step = 0; step < extra.steps; step++) {
      int64_t start = mx_now_ns();
      call();
      bool last = step + 1 == extra.steps;  // its outputs stay for --outputs
      if (greedy_out >= 0) {
        std::vector<int64_t> dims;
        std::vector<char> host = download(outputs[(size_t)greedy_out], &dims);
        const float *l = reinterpret_cast<const float *>(host.data());
        for (int64_t r = 0; r < rows; r++) {
          int64_t best = 0;  // the first maximum, as jnp.argmax
          for (int64_t v = 1; v < vocab; v++)
            if (l[r * vocab + v] > l[r * vocab + best]) best = v;
          next[(size_t)r] = (int32_t)best;
        }
        generated.insert(generated.end(), next.begin(), next.end());
      }
      if (!last) {
        for (const auto &c : carried) {  // the device buffer itself: no copy, no host round trip
          destroy_buffer(inputs[c.second]);
          inputs[c.second] = outputs[c.first];
          outputs[c.first] = nullptr;
        }
        if (greedy_in >= 0) {
          destroy_buffer(inputs[(size_t)greedy_in]);
          inputs[(size_t)greedy_in] = upload(p, next.data(), PJRT_Buffer_Type_S32, token_dims.data(),
                                             (int)token_dims.size());
        }
        if (count_in >= 0) {
          count_value++;
          destroy_buffer(inputs[(size_t)count_in]);
          inputs[(size_t)count_in] = upload(p, &count_value, PJRT_Buffer_Type_S32, nullptr, 0);
        }
        release_outputs();
      }
      times.push_back(mx_now_ns() - start);
    }
  } else {
    for (size_t i = 0; i < inputs.size(); i++) keep.push_back((int64_t)i);
    eo.non_donatable_input_indices = keep.data();
    eo.num_non_donatable_input_indices = keep.size();
    for (int i = 0; i < opts.warmup; i++) { call(); release_outputs(); }
    if (!lanes.empty()) load_loop(cc.executable, &eo, n_out, lanes, extra.load, p.platform, extra.cpu_devices, nproc_given);
    for (int i = 0; i < opts.iters; i++) {
      int64_t start = mx_now_ns();
      call();
      times.push_back(mx_now_ns() - start);
      release_outputs();
    }
    call();  // the call whose results are written
  }

  if (!opts.no_outputs) {
    mx_make_dir(opts.outputs);
    for (size_t i = 0; i < n_out; i++) {
      const mx_json *r = mx_json_at(results, i);
      if (strcmp(mx_json_str(mx_json_get(r, "kind"), "leaf"), "leaf") != 0) continue;
      const char *name = mx_json_str(mx_json_get(r, "leaf"), "?");
      PJRT_Buffer_ElementType_Args et{};
      et.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE;
      et.buffer = outputs[i];
      check(api->PJRT_Buffer_ElementType(&et), "PJRT_Buffer_ElementType");
      if (et.type != pjrt_type(mx_json_str(mx_json_get(r, "dtype"), ""), name))
        mx_die("Output '%s' | PJRT element type %d differs from the manifest's %s", name, (int)et.type,
               mx_json_str(mx_json_get(r, "dtype"), ""));
      std::vector<int64_t> dims;
      std::vector<char> host = download(outputs[i], &dims);
      mx_write_result(opts.outputs, r, (int)dims.size(), dims.data(), host.data(), host.size());
    }
  }
  release_outputs();

  if (extra.tokens) {
    int64_t shape[2] = {extra.steps, rows};
    char err[MX_ERR];
    if (generated.empty()) mx_die("--tokens needs --steps and --greedy");
    if (mx_npy_write(extra.tokens, "<i4", 2, shape, generated.data(), generated.size() * sizeof(int32_t), err,
                     sizeof err) != 0)
      mx_die("%s", err);
  }
  if (extra.steps > 0) {
    char extra_json[512];
    snprintf(extra_json, sizeof extra_json, "\"program\": \"%s\", \"platform\": \"%s\", \"compile_ms\": %.3f, "
             "\"steps\": %d, \"carried\": %zu", program_path.c_str(), p.platform.c_str(), compile_ms, extra.steps,
             extra.carry.size());
    mx_print_timing("pjrt_c_api_decode_loop", times.data(), (int)times.size(), 0, extra_json);
  } else if (opts.iters > 0) {
    char extra_json[512];
    snprintf(extra_json, sizeof extra_json, "\"program\": \"%s\", \"platform\": \"%s\", \"compile_ms\": %.3f", program_path.c_str(),
             p.platform.c_str(), compile_ms);
    mx_print_timing("pjrt_c_api", times.data(), (int)times.size(), opts.warmup, extra_json);
  }
  for (auto *b : inputs) destroy_buffer(b);
  if (weights_open) mx_safetensors_close(&weights);
  free(code);
  free(options);
  free(dir_program);
  free(options_path);
  mx_json_free(manifest);
  return 0;
}
