// The page side of multiexport's onnx-web runner: one onnxruntime-web session, feeds resident in the page,
// timing by performance.now() around session.run (the figure the runner reports as the runtime's cost).
// Tensors cross the Python<->page boundary as base64 of their raw little-endian bytes, so int64 arrives as
// a BigInt64Array and float16 as 16-bit words without a per-element conversion.

const params = new URLSearchParams(location.search);
// the runner asks by ?ep=; a static bundle's index.html sets window.MX_EP from its manifest
const ep = window.MX_EP || params.get('ep') || 'wasm';
// The runtime beside this module (./ort/), so the page works at any path a static server puts it under: the
// wasm-only bundle for the wasm EP; the WebGPU bundle (JSEP build) only when WebGPU is asked for.
const ORT_DIR = new URL('./ort/', import.meta.url).href;
const ort = await import(ORT_DIR + (ep === 'webgpu' ? 'ort.webgpu.min.mjs' : 'ort.wasm.min.mjs'));

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array, int16: Int16Array,
  uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array, uint64: BigUint64Array,
  bool: Uint8Array, float16: Uint16Array,
};

function decode(b64, type) {
  const raw = atob(b64);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  const Kind = ARRAYS[type];
  if (!Kind) throw new Error(`no typed array for ${type}`);
  return new Kind(bytes.buffer, 0, bytes.byteLength / Kind.BYTES_PER_ELEMENT);
}

function encode(data) {
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  let out = '';
  for (let i = 0; i < bytes.length; i += 0x8000) out += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(out);
}

const state = { session: null, feeds: new Map(), outputs: null, pageMs: [] };

async function webgpuProbe() {
  if (!('gpu' in navigator)) return { ok: false, reason: 'navigator.gpu is absent (WebGPU not exposed in this browser)' };
  try {
    const adapter = await navigator.gpu.requestAdapter();
    if (!adapter) return { ok: false, reason: 'navigator.gpu.requestAdapter() returned null (no WebGPU adapter: no GPU, and no software adapter in this build)' };
    const info = adapter.info || {};
    return { ok: true, reason: `adapter ${info.vendor || '?'} ${info.architecture || ''} ${info.description || ''}`.trim() };
  } catch (e) {
    return { ok: false, reason: `requestAdapter() threw ${e}` };
  }
}

async function init(options) {
  ort.env.wasm.wasmPaths = ORT_DIR;
  ort.env.wasm.numThreads = options.threads;
  ort.env.wasm.proxy = false;
  const model = new Uint8Array(await (await fetch(options.model)).arrayBuffer());
  const sessionOptions = { executionProviders: [ep], graphOptimizationLevel: 'all', executionMode: 'sequential' };
  if (options.externalData) sessionOptions.externalData = options.externalData;
  const t0 = performance.now();
  state.session = await ort.InferenceSession.create(model, sessionOptions);
  return {
    createMs: performance.now() - t0, inputNames: state.session.inputNames, outputNames: state.session.outputNames,
    crossOriginIsolated: self.crossOriginIsolated, threads: ort.env.wasm.numThreads,
    hardwareConcurrency: navigator.hardwareConcurrency, ortVersion: ort.env.versions ? ort.env.versions.web : null,
    ep, userAgent: navigator.userAgent,
  };
}

function feed(id, inputs) {
  const tensors = {};
  for (const x of inputs) tensors[x.name] = new ort.Tensor(x.type, decode(x.b64, x.type), x.dims);
  state.feeds.set(id, tensors);
  return true;
}

function drop(id) { state.feeds.delete(id); return true; }

async function run(id) {
  const tensors = state.feeds.get(id);
  const t0 = performance.now();
  state.outputs = await state.session.run(tensors);
  const ms = performance.now() - t0;
  state.pageMs.push(ms);
  return ms;
}

async function fetchOutputs(id) {
  await run(id);
  return state.session.outputNames.map((name) => {
    const t = state.outputs[name];
    return { name, type: t.type, dims: Array.from(t.dims), b64: encode(t.data) };
  });
}

async function timed(id, warmup, calls, seconds) {
  const tensors = state.feeds.get(id);
  for (let i = 0; i < warmup; i++) await state.session.run(tensors);
  const ms = [];
  const start = performance.now();
  while (ms.length < calls.max && (ms.length < calls.min || performance.now() - start < seconds * 1000)) {
    const t0 = performance.now();
    await state.session.run(tensors);
    ms.push(performance.now() - t0);
  }
  return ms;
}

function takePageMs() { const ms = state.pageMs; state.pageMs = []; return ms; }

window.mx = { init, feed, drop, run, fetch: fetchOutputs, timed, webgpuProbe, takePageMs, ready: true };
