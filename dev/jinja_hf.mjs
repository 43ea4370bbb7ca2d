// Renders the cases of data/testdata/jinja/expected.jsonl (Python's Jinja2, the
// reference of data/jinja.h) with @huggingface/jinja, the engine transformers.js uses,
// and reports where the two engines agree and where they differ.
//   node dev/jinja_hf.mjs            (after npm install --prefix dev/node @huggingface/jinja)
import { readFileSync } from "fs";
import { createRequire } from "module";
const require = createRequire(new URL("./node/", import.meta.url));
const { Template } = require("@huggingface/jinja");

const lines = readFileSync("data/testdata/jinja/expected.jsonl", "utf8").split("\n").filter((l) => l);
let same = 0, differ = 0, skipped = 0;
const diffs = [];
for (const line of lines) {
  const c = JSON.parse(line);
  if (c.c_error || c.error !== undefined || (c.gen && c.gen.length)) { skipped++; continue; }  // refusals, errors, generation spans
  const src = c.template_file ? readFileSync("data/testdata/templates/" + c.template_file, "utf8") : c.template;
  let out;
  try {
    const vars = { ...c.vars };  // raise_exception and strftime_now (the real date) are built in
    out = new Template(src).render(vars);
  } catch (e) { out = "ERROR " + e.message; }
  if (out === c.output) same++;
  else { differ++; diffs.push(c.name + ": " + JSON.stringify(out).slice(0, 100) + " / python " + JSON.stringify(c.output).slice(0, 100)); }
}
console.log(`@huggingface/jinja: ${same} cases as Python renders them, ${differ} differ, ${skipped} not compared (errors, refusals, generation blocks)`);
for (const d of diffs) console.log("  differs: " + d);
