// multiexport's onnx-node runner: one onnxruntime-node session in this Node.js process, driven over stdin/stdout by
// one JSON object per line (a request, then its answer). Tensors cross as base64 of their raw little-endian bytes
// (int64 as BigInt64Array, float16 as 16-bit words, bool as 0/1 bytes). Calls are timed in Node by
// process.hrtime.bigint() around `await session.run(feeds)`: the runtime's cost as a Node.js server pays it.
'use strict';
const readline = require('node:readline');
const ort = require('onnxruntime-node');

const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array, int16: Int16Array,
  uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array, uint64: BigUint64Array,
  bool: Uint8Array, float16: Uint16Array,
};
const state = { session: null, feeds: new Map() };

function decode(x) {
  const bytes = Buffer.from(x.b64, 'base64');
  const Kind = ARRAYS[x.type];
  if (!Kind) throw new Error(`no typed array for ${x.type}`);
  const copy = new Uint8Array(bytes.length);  // aligned for the typed array
  copy.set(bytes);
  return new ort.Tensor(x.type, new Kind(copy.buffer, 0, bytes.length / Kind.BYTES_PER_ELEMENT), x.dims);
}

function encode(t) {
  const data = t.data;
  return { type: t.type, dims: Array.from(t.dims),
           b64: Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('base64') };
}

async function timedRun(feeds) {
  const t0 = process.hrtime.bigint();
  const out = await state.session.run(feeds);
  return [Number(process.hrtime.bigint() - t0), out];
}

const handlers = {
  async init(r) {
    const t0 = process.hrtime.bigint();
    state.session = await ort.InferenceSession.create(r.model, {
      executionProviders: ['cpu'], intraOpNumThreads: r.threads, interOpNumThreads: 1,
      graphOptimizationLevel: 'all', executionMode: 'sequential' });
    return { createMs: Number(process.hrtime.bigint() - t0) / 1e6, inputNames: state.session.inputNames,
             outputNames: state.session.outputNames, versions: ort.env.versions, node: process.version };
  },
  feed(r) {
    const feeds = {};
    for (const x of r.inputs) feeds[x.name] = decode(x);
    state.feeds.set(r.id, feeds);
    return true;
  },
  drop(r) { state.feeds.delete(r.id); return true; },
  close() { return true; },
  async run(r) { return (await timedRun(state.feeds.get(r.id)))[0]; },
  async fetch(r) {
    const [, out] = await timedRun(state.feeds.get(r.id));
    return state.session.outputNames.map((name) => ({ name, ...encode(out[name]) }));
  },
  async timed(r) {
    const feeds = state.feeds.get(r.id);
    for (let i = 0; i < r.warmup; i++) await state.session.run(feeds);
    const ns = [];
    const start = process.hrtime.bigint();
    const limit = BigInt(Math.round(r.seconds * 1e9));
    while (ns.length < r.max && (ns.length < r.min || process.hrtime.bigint() - start < limit)) {
      ns.push((await timedRun(feeds))[0]);
    }
    return ns;
  },
};

const lines = readline.createInterface({ input: process.stdin });
(async () => {
  for await (const line of lines) {
    const r = JSON.parse(line);
    let answer;
    try {
      answer = { ok: true, value: await handlers[r.op](r) };
    } catch (e) {
      answer = { ok: false, error: String(e && e.message ? e.message : e) };
    }
    process.stdout.write(JSON.stringify(answer) + '\n');
    if (r.op === 'close') break;
  }
  process.exit(0);
})();
