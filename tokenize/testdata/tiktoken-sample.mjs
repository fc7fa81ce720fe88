// tiktoken-sample.mjs builds tiktoken-sample.jsonl.gz: the strings compactor counts (text,
// thinking, tool names and JSON.stringify'd arguments, tool results, bash commands and
// output, summaries, custom message content) taken from Pi session files, deduplicated,
// one JSON string per line, in file order, until about LIMIT bytes of UTF-8.
//
//   node tokenize/testdata/tiktoken-sample.mjs LIMIT FILE.jsonl... | gzip -9n > tokenize/testdata/tiktoken-sample.jsonl.gz
import { readFileSync } from "node:fs";

const [limitArg, ...files] = process.argv.slice(2);
const limit = Number(limitArg);
const seen = new Set();
let total = 0;
const out = [];
function add(s) {
  if (typeof s !== "string" || s === "" || seen.has(s) || total >= limit) return;
  seen.add(s);
  total += Buffer.byteLength(s);
  out.push(JSON.stringify(s));
}
function content(c) {
  if (typeof c === "string") return add(c);
  if (!Array.isArray(c)) return;
  for (const b of c) {
    if (!b || typeof b !== "object") continue;
    if (b.type === "text") add(b.text);
    else if (b.type === "thinking") add(b.thinking);
    else if (b.type === "toolCall") { add(b.name); add(JSON.stringify(b.arguments)); }
  }
}
for (const f of files) {
  for (const line of readFileSync(f, "utf8").split("\n")) {
    let e;
    try { e = JSON.parse(line); } catch { continue; }
    const m = e.message;
    if (m) {
      content(m.content);
      if (m.role === "bashExecution") { add(m.command); add(m.output); }
    }
    if (e.type === "compaction" || e.type === "branch_summary") add(e.summary);
    if (e.type === "custom_message") content(e.content);
  }
}
process.stdout.write(out.join("\n") + "\n");
process.stderr.write(`${out.length} strings, ${total} bytes\n`);
