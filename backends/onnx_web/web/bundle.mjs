// A static bundle's self-check (multiexport native DIR --bundle OUT, for an onnx-web artifact): load the model
// beside this page with the pinned onnxruntime-web, run the artifact's example inputs, and show every output by
// its leaf name. window.mxBundle holds the outcome for automation ({done, error, info, outputs}); a deployer's
// own page uses window.mx (page.mjs) the same way: init, feed by graph input name, fetch.
import './page.mjs';

const show = (text) => { document.getElementById('status').textContent = text; };
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
  const rows = outputs.map((o) => `<tr><td>${o.leaf}</td><td>${o.type}</td><td>[${o.dims.join(', ')}]</td></tr>`);
  document.getElementById('outputs').innerHTML = `<tr><th>output leaf</th><th>dtype</th><th>shape</th></tr>${rows.join('')}`;
  show(`ran ${manifest.target} with onnxruntime-web ${info.ortVersion} (${info.ep}, ${info.threads} thread(s), ` +
       `cross-origin isolated: ${info.crossOriginIsolated})`);
  window.mxBundle = { done: true, error: null, info, outputs };
} catch (e) {
  show(`failed: ${e}`);
  window.mxBundle = { done: true, error: String(e), info: null, outputs: [] };
}
