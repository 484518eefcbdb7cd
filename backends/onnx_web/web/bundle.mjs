// A static bundle's self-check (multiexport native DIR --bundle OUT, for an onnx-web artifact): load the model
// beside this page with the pinned onnxruntime-web, run the artifact's example inputs, and show every output by
// its leaf name. window.mxBundle holds the outcome for automation ({done, error, info, outputs}); a deployer's
// own page uses window.mx (page.mjs) the same way: init, feed by graph input name, fetch.
import './page.mjs';

const show = (text) => { document.getElementById('status').textContent = text; };
const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array, int16: Int16Array,
  uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array, int64: BigInt64Array, uint64: BigUint64Array,
  bool: Uint8Array,
};
// the first values of an output (float16 stays raw 16-bit words: no Float16Array everywhere yet)
function head(o) {
  const Kind = ARRAYS[o.type];
  if (!Kind) return `(${o.type} words)`;
  const bytes = Uint8Array.from(atob(o.b64), (c) => c.charCodeAt(0));
  const values = Array.from(new Kind(bytes.buffer).slice(0, 6), String);
  return values.join(', ') + (bytes.length / Kind.BYTES_PER_ELEMENT > 6 ? ', ...' : '');
}
window.mxBundle = { done: false };
try {
  const manifest = await (await fetch('./model/manifest.json')).json();
  const examples = await (await fetch('./example_inputs.json')).json();
  // threads need cross-origin isolation (COOP/COEP headers); without it onnxruntime-web runs on one thread
  const threads = self.crossOriginIsolated ? Math.min(4, navigator.hardwareConcurrency || 1) : 1;
  const model = manifest.files.model;
  const external = manifest.files.external_data
    ? [{ path: manifest.files.external_data, data: `./model/${manifest.files.external_data}` }] : null;
  const info = await window.mx.init({ model: `./model/${model}`, threads, externalData: external });
  window.mx.feed(1, examples.inputs);
  const fetched = await window.mx.fetch(1);
  const byParam = Object.fromEntries(fetched.map((o) => [o.name, o]));
  const outputs = manifest.outputs.map((leaf) => ({ leaf: leaf.name, ...byParam[leaf.param] }));
  const table = document.getElementById('outputs');
  table.replaceChildren();
  for (const cells of [['output leaf', 'dtype', 'shape', 'values'],
                       ...outputs.map((o) => [o.leaf, o.type, `[${o.dims.join(', ')}]`, head(o)])]) {
    const tr = table.insertRow();
    for (const text of cells) tr.insertCell().textContent = text;  // text, never markup: leaf names are data
  }
  show(`ran ${manifest.target} with onnxruntime-web ${info.ortVersion} (${info.ep}, ${info.threads} thread(s), ` +
       `cross-origin isolated: ${info.crossOriginIsolated})`);
  window.mxBundle = { done: true, error: null, info, outputs };
} catch (e) {
  show(`failed: ${e}`);
  window.mxBundle = { done: true, error: String(e), info: null, outputs: [] };
}
