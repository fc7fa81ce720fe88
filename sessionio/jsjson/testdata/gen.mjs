// Generates golden.json from cases.json using Node's own JSON.parse / JSON.stringify,
// so the Go tests compare against the real JavaScript behaviour without needing Node.
//
//   cd sessionio/jsjson/testdata && node gen.mjs
//
// Inputs are passed to Go as hex bytes so nothing is lost to re-encoding. Expected
// outputs are JSON.stringify results, which are always well-formed Unicode.
import { readFileSync, writeFileSync } from "node:fs";

const cases = JSON.parse(readFileSync(new URL("./cases.json", import.meta.url), "utf8"));

const values = cases.values.map((c) => {
  const bytes = c.hex !== undefined ? Buffer.from(c.hex, "hex") : Buffer.from(c.json, "utf8");
  const text = bytes.toString("utf8"); // what Pi does when it reads a session file
  const g = { name: c.name, inputHex: bytes.toString("hex"), ok: false };
  try {
    const v = JSON.parse(text);
    const out = JSON.stringify(v);
    g.ok = true;
    g.output = out;
    g.length = out.length;
    if (typeof v === "string") g.stringLength = v.length;
  } catch (e) {
    g.error = e.message;
  }
  return g;
});

// Default Array.prototype.sort compares UTF-16 code units.
const sortInputs = cases.sort;
const strs = sortInputs.map((lit) => JSON.parse(lit));
const sorted = [...strs].sort();
const sortOrder = sorted.map((s) => strs.indexOf(s));

const rawStrings = cases.rawStrings.map((c) => {
  const s = Buffer.from(c.hex, "hex").toString("utf8");
  const out = JSON.stringify(s);
  return { name: c.name, inputHex: c.hex, output: out, length: s.length };
});

// splitmix64 with a fixed seed: the same doubles on every run.
let state = 0x9e3779b97f4a7c15n;
const mask = (1n << 64n) - 1n;
function next64() {
  state = (state + 0x9e3779b97f4a7c15n) & mask;
  let z = state;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & mask;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & mask;
  return z ^ (z >> 31n);
}
const unit = () => Number(next64() >> 11n) / 2 ** 53;
const dv = new DataView(new ArrayBuffer(8));
const bitsOf = (x) => {
  dv.setFloat64(0, x);
  return dv.getBigUint64(0).toString(16).padStart(16, "0");
};
const fromBits = (b) => {
  dv.setBigUint64(0, b);
  return dv.getFloat64(0);
};
const doubles = [];
for (let i = 0; i < 800; i++) doubles.push(fromBits(next64())); // any bit pattern
for (let i = 0; i < 400; i++) doubles.push(Math.floor(unit() * 10 ** Math.floor(unit() * 24)) * (i % 2 ? -1 : 1));
for (let i = 0; i < 400; i++) doubles.push(unit() * 10 ** (Math.floor(unit() * 61) - 30));
for (let i = 0; i < 400; i++) doubles.push(Math.round(unit() * 1e4) / 10 ** Math.floor(unit() * 12));
for (let e = -330; e <= 310; e++) doubles.push(Number(`1e${e}`), Number(`5e${e}`));
doubles.push(0, -0, NaN, Infinity, -Infinity, Number.MIN_VALUE, Number.MAX_VALUE, Number.EPSILON,
  2 ** 53, 2 ** 53 + 2, -(2 ** 53), 2 ** 63, 2 ** 64, 1e21 - 65536, 1e21, 0.1 + 0.2, 1 / 3, 2 / 3);
const numbers = doubles.map((x) => ({ bits: bitsOf(x), output: JSON.stringify(x) }));

const golden = { node: process.version, values, sortInputs, sortOrder, rawStrings, numbers };
// One array element per line keeps the file reviewable and diffs small.
const lines = Object.entries(golden).map(([k, v]) =>
  Array.isArray(v)
    ? ` ${JSON.stringify(k)}: [\n${v.map((e) => "  " + JSON.stringify(e)).join(",\n")}\n ]`
    : ` ${JSON.stringify(k)}: ${JSON.stringify(v)}`,
);
writeFileSync(new URL("./golden.json", import.meta.url), "{\n" + lines.join(",\n") + "\n}\n");
console.log(`golden.json: ${values.length} values, ${sortInputs.length} sort inputs, ${rawStrings.length} raw strings, ${numbers.length} numbers`);
