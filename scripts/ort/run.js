#!/usr/bin/env node
// Runs an ONNX model in ONNX Runtime (npm onnxruntime-node, CPU) on inputs
// from .npy files and writes its outputs as .npy: what the tests use to
// check an exported model in a real runtime, with no Python.
//
// Usage: node scripts/ort/run.js MODEL.onnx --input a.npy [--input b.npy]
//          [--output-dir DIR] [--optimized OPT.onnx] [--batch N]
//          [--time ITERS] [--threads N] [--no-optimize | --level L]
//   --output-dir   writes output_<k>.npy there (one per model output)
//   --optimized    writes the graph ORT optimized (the kernels that run)
//   --batch N      runs the inputs in batches of N and concatenates
//   --time ITERS   also times ITERS runs of the first batch (JSON on stdout)
//   --no-optimize  runs the graph as written (graph optimizations off): each
//                  Q/DQ pair in float, ONNX's own semantics, no int8 kernel
//   --level L      ONNX Runtime's graph optimization level: disabled (as
//                  --no-optimize), basic, extended or all (the default)
// Prints a JSON line: {"outputs": [[shape]...], "ms": median-or-null}.
'use strict';
const fs = require('fs');
const path = require('path');
let ort;
try {
  ort = require(path.join(__dirname, '..', '..', 'third_party', 'ort', 'node_modules',
                          'onnxruntime-node'));
} catch (e) {
  console.error('run.js: onnxruntime-node is not installed (scripts/ort/install.sh): ' + e.message);
  process.exit(2);
}

const DTYPES = {'<f4': ['float32', Float32Array], '<i8': ['int64', BigInt64Array],
                '|u1': ['uint8', Uint8Array], '|i1': ['int8', Int8Array],
                '<i4': ['int32', Int32Array]};

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(file + ': not a .npy file');
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = (major === 1 ? 10 : 12);
  const header = buf.toString('latin1', start, start + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(file + ': Fortran order');
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map(s => s.trim())
                    .filter(s => s.length).map(Number);
  const [type, Ctor] = DTYPES[descr] || [];
  if (!type) throw new Error(file + ': dtype ' + descr);
  const off = start + hlen;
  const data = new Ctor(buf.buffer.slice(buf.byteOffset + off, buf.byteOffset + buf.length));
  return {type, shape, data};
}

function writeNpy(file, tensor) {
  const descr = {float32: '<f4', int64: '<i8', uint8: '|u1', int8: '|i1', int32: '<i4'}[tensor.type];
  const shape = tensor.dims.length === 1 ? `(${tensor.dims[0]},)` : `(${tensor.dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += ' '.repeat(pad % 64) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1; head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  const data = Buffer.from(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength);
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(header, 'latin1'), data]));
}

function sliceBatch(x, from, to) {
  const per = x.shape.slice(1).reduce((a, b) => a * b, 1);
  const Ctor = x.data.constructor;
  const n = Math.min(to, x.shape[0]) - from;
  return new ort.Tensor(x.type, new Ctor(x.data.slice(from * per, (from + n) * per)),
                        [n, ...x.shape.slice(1)]);
}

function concat(parts) {
  const first = parts[0];
  const total = parts.reduce((a, t) => a + t.data.length, 0);
  const out = new first.data.constructor(total);
  let at = 0;
  for (const t of parts) { out.set(t.data, at); at += t.data.length; }
  const rows = parts.reduce((a, t) => a + t.dims[0], 0);
  return {type: first.type, dims: [rows, ...first.dims.slice(1)], data: out};
}

async function main() {
  const args = process.argv.slice(2);
  const opt = {inputs: [], batch: 0, time: 0, threads: 0};
  for (let i = 0; i < args.length; ++i) {
    const a = args[i];
    if (a === '--input') opt.inputs.push(args[++i]);
    else if (a === '--output-dir') opt.outDir = args[++i];
    else if (a === '--optimized') opt.optimized = args[++i];
    else if (a === '--batch') opt.batch = Number(args[++i]);
    else if (a === '--time') opt.time = Number(args[++i]);
    else if (a === '--threads') opt.threads = Number(args[++i]);
    else if (a === '--no-optimize') opt.level = 'disabled';
    else if (a === '--level') opt.level = args[++i];
    else if (!opt.model) opt.model = a;
    else { console.error('run.js: unexpected argument ' + a); process.exit(2); }
  }
  if (!opt.model || !opt.inputs.length) { console.error('run.js: MODEL and --input are required'); process.exit(2); }
  const so = {};
  if (opt.optimized) so.optimizedModelFilePath = opt.optimized;
  if (opt.level !== undefined) {
    if (!['disabled', 'basic', 'extended', 'all'].includes(opt.level)) {
      console.error('run.js: --level ' + opt.level + ' is not one of disabled, basic, extended, all');
      process.exit(2);
    }
    so.graphOptimizationLevel = opt.level;
  }
  if (opt.threads) { so.intraOpNumThreads = opt.threads; so.interOpNumThreads = 1; }
  const session = await ort.InferenceSession.create(opt.model, so);
  const xs = opt.inputs.map(readNpy);
  const n = xs[0].shape[0];
  const batch = opt.batch > 0 ? opt.batch : n;
  const outs = session.outputNames.map(() => []);
  const feed = (from, to) => {
    const f = {};
    session.inputNames.forEach((name, k) => { f[name] = sliceBatch(xs[k], from, to); });
    return f;
  };
  for (let from = 0; from < n; from += batch) {
    const r = await session.run(feed(from, from + batch));
    session.outputNames.forEach((name, k) => outs[k].push(r[name]));
  }
  const merged = outs.map(concat);
  if (opt.outDir) merged.forEach((t, k) => writeNpy(path.join(opt.outDir, `output_${k}.npy`), t));
  let ms = null;
  if (opt.time > 0) {
    const f = feed(0, batch), times = [];
    for (let i = 0; i < 3; ++i) await session.run(f);
    for (let i = 0; i < opt.time; ++i) {
      const t0 = process.hrtime.bigint();
      await session.run(f);
      times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    times.sort((a, b) => a - b);
    ms = times[Math.floor(times.length / 2)];
  }
  console.log(JSON.stringify({outputs: merged.map(t => t.dims), ms}));
}

main().catch(e => { console.error('run.js: ' + (e && e.message ? e.message : e)); process.exit(1); });
