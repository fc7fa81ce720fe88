// tiktoken-count.mjs counts tokens with OpenAI's official tiktoken npm package (the Rust
// core compiled to WASM), for the goldens and for the Go-vs-npm throughput comparison.
// The package is not a dependency of compactor: install it anywhere outside the repo and
// pass its node_modules directory.
//
//   goldens:  node tiktoken-count.mjs goldens NODE_MODULES SAMPLE.jsonl > tiktoken-goldens.json
//   speed:    node tiktoken-count.mjs bench   NODE_MODULES SAMPLE.jsonl [ENCODING]
//
// Special-token strings are ordinary text (encode_ordinary), as in compactor. hostile()
// must stay identical to hostileStrings in tiktoken_test.go.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const [mode, modules, sample, encArg] = process.argv.slice(2);
const require = createRequire(join(modules, "noop.js"));
const { get_encoding } = require("tiktoken");
const texts = readFileSync(sample, "utf8").split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));

// xorshift32, seeded: the same bytes in Go.
function pseudoBytes(n, seed) {
  const b = Buffer.alloc(n);
  let x = seed >>> 0;
  for (let i = 0; i < n; i++) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    b[i] = x & 0xff;
  }
  return b;
}
function hostile() {
  return [
    ["endoftext", "<|endoftext|>"],
    ["specials", "a <|endoftext|> b <|fim_prefix|><|fim_middle|><|fim_suffix|><|endofprompt|> <|im_start|>user<|im_end|>"],
    ["run-a-20000", "a".repeat(20000)],
    ["run-A-20000", "A".repeat(20000)],
    ["run-space-20000", " ".repeat(20000) + "x"],
    ["run-newline-20000", "\n".repeat(20000)],
    ["run-digit-20000", "7".repeat(20000)],
    ["run-dot-20000", ".".repeat(20000)],
    ["run-cjk-5000", "漢".repeat(5000)],
    ["run-emoji-5000", "😀".repeat(5000)],
    ["mixed-case-20000", "aB".repeat(10000)],
    ["base64-400k", pseudoBytes(300000, 12345).toString("base64")],
    ["hex-100k", pseudoBytes(50000, 777).toString("hex")],
    ["contractions", "It's we'LL they'Re I'M you'VE he'D don'T 'S 'ſ"],
    ["unicode-mix", "naïve café Ωμέγα Привет мир こんにちは 世界 🧪🚀 e\u0301 \u2028\u2029 \t\r\n end"],
  ];
}

if (mode === "goldens") {
  const out = { generator: "tiktoken npm " + JSON.parse(readFileSync(join(modules, "tiktoken", "package.json"), "utf8")).version, encodings: {} };
  for (const name of ["o200k_base", "cl100k_base"]) {
    const enc = get_encoding(name);
    out.encodings[name] = {
      sample: texts.map((t) => enc.encode_ordinary(t).length),
      hostile: Object.fromEntries(hostile().map(([k, s]) => [k, enc.encode_ordinary(s).length])),
    };
    enc.free();
  }
  process.stdout.write(JSON.stringify(out) + "\n");
} else if (mode === "bench") {
  const enc = get_encoding(encArg ?? "o200k_base");
  const bytes = texts.reduce((a, t) => a + Buffer.byteLength(t), 0);
  let tokens = 0;
  for (const t of texts) tokens += enc.encode_ordinary(t).length; // warm-up
  const runs = 3;
  const t0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  for (let r = 0; r < runs; r++) { tokens = 0; for (const t of texts) tokens += enc.encode_ordinary(t).length; }
  const secs = Number(process.hrtime.bigint() - t0) / 1e9 / runs;
  const c = process.cpuUsage(c0);
  const cpu = (c.user + c.system) / 1e6 / runs;
  console.log(JSON.stringify({ encoding: encArg ?? "o200k_base", texts: texts.length, bytes, tokens,
    seconds: secs, MBps: bytes / secs / 1e6, cpuSeconds: cpu, MBperCPUs: bytes / cpu / 1e6 }));
} else {
  console.error("usage: tiktoken-count.mjs goldens|bench NODE_MODULES SAMPLE.jsonl [ENCODING]");
  process.exit(64);
}
