// The onnxruntime-node 1.29 KServe v2 peer for bench/bench.py's "worker >= 2x the Node peer"
// row: a small binary-KServe-v2 server on Node's http module and onnxruntime-node's native
// binding. The npm pack's postinstall downloads, so it is never npm-installed: bench.py
// unpacks the pinned tarball (scripts/setup.sh's cache) and passes the binding's path; the
// Tensor class onnxruntime-common would supply is the few fields the binding reads.
//
//   node bench/ortnode/server.js BINDING.node MODEL.onnx   (prints "listening on 127.0.0.1:P")
'use strict';
const http = require('http');

const [bindingPath, modelPath] = process.argv.slice(2);
const binding = require(bindingPath);

class Tensor {
  constructor(type, data, dims) {
    this.type = type;
    this.data = data;
    this.dims = dims;
    this.location = 'cpu';
    this.size = data.length;
  }
}
binding.initOrtOnce(2, Tensor, true);
const session = new binding.InferenceSession();
session.loadModel(modelPath, {}); // ORT's defaults, as bench_inproc without INTRA_OP_THREADS
const inName = session.inputMetadata[0].name;
const outName = session.outputMetadata[0].name;
const MAX_BODY = 64 << 20;

function fail(res, code, msg) {
  const b = JSON.stringify({ error: msg });
  res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(b) });
  res.end(b);
}

// onnxruntime-node's InferenceSession.run: the native run on a setImmediate, behind a Promise
function run(feeds, fetches) {
  return new Promise((resolve, reject) => setImmediate(() => {
    try { resolve(session.run(feeds, fetches, {})); } catch (e) { reject(e); }
  }));
}

async function infer(req, res, body) {
  const hl = Number(req.headers['inference-header-content-length']);
  if (!Number.isInteger(hl) || hl < 0 || hl > body.length) return fail(res, 400, 'bad Inference-Header-Content-Length');
  let hdr;
  try { hdr = JSON.parse(body.subarray(0, hl).toString()); } catch (e) { return fail(res, 400, 'bad JSON header'); }
  const inp = hdr.inputs && hdr.inputs[0];
  if (!inp || inp.datatype !== 'FP32' || !Array.isArray(inp.shape)) return fail(res, 400, 'need one FP32 input');
  const n = inp.shape.reduce((a, d) => a * d, 1);
  if (hl + n * 4 > body.length) return fail(res, 400, 'binary data shorter than the shape');
  const x = new Float32Array(n); // a copy: the body's offset need not be 4-aligned
  Buffer.from(x.buffer).set(body.subarray(hl, hl + n * 4));
  let out;
  try {
    out = (await run({ [inName]: new Tensor('float32', x, inp.shape) }, { [outName]: null }))[outName];
  } catch (e) {
    return fail(res, 400, String(e.message || e));
  }
  const bin = Buffer.from(out.data.buffer, out.data.byteOffset, out.data.byteLength);
  const oh = Buffer.from(JSON.stringify({
    model_name: req.url.split('/')[3], outputs: [{ name: outName, datatype: 'FP32', shape: out.dims,
      parameters: { binary_data_size: bin.length } }] }));
  res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Inference-Header-Content-Length': oh.length,
    'Content-Length': oh.length + bin.length });
  res.end(Buffer.concat([oh, bin]));
}

const server = http.createServer((req, res) => {
  if (req.method !== 'POST' || !/^\/v2\/models\/[^/]+(\/versions\/[^/]+)?\/infer$/.test(req.url)) {
    req.resume();
    return fail(res, 404, 'not found');
  }
  const chunks = [];
  let len = 0;
  req.on('data', (c) => { len += c.length; if (len <= MAX_BODY) chunks.push(c); });
  req.on('end', () => (len > MAX_BODY ? fail(res, 413, 'body too large') : infer(req, res, Buffer.concat(chunks))));
});
server.keepAliveTimeout = 60000;
server.listen(0, '127.0.0.1', () => console.log(`listening on 127.0.0.1:${server.address().port}`));
