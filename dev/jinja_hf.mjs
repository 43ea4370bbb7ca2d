// @huggingface/jinja (the engine transformers.js uses) on the cases of
// tests/testdata/jinja/expected.jsonl, whose expected renderings are Python's Jinja2's
// (dev/jinja_ref.py), the reference of template/jinja.h: the two independent engines must
// agree on every fixture template and conversation, except where @huggingface/jinja
// departs from Python (KNOWN below, tested against Python only). The construct cases
// are counted, not required: @huggingface/jinja departs from Python on many of them.
//   node dev/jinja_hf.mjs      (after npm install --prefix dev/node @huggingface/jinja)
// Exits 1 on an unexplained difference (JINJA_HF_STRICT=1: the known ones count too).
import { readFileSync } from "fs";
import { createRequire } from "module";
const require = createRequire(new URL("./node/", import.meta.url));
const { Template } = require("@huggingface/jinja");

// Departures of @huggingface/jinja from Python's Jinja2 seen on the fixtures:
const KNOWN = {
  // |trim and .strip() use JavaScript's whitespace (U+FEFF yes; U+0085, U+001C..U+001F no),
  // not Python's str.isspace(): the conversation's U+00A0 / U+3000 / U+2003 / U+0085 edges
  "/unicode": "trim/strip whitespace set",
};

// strftime_now is built in and reads the clock: pin the clock at the date the
// Python reference uses (2024-07-26, midnight local time).
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...a) { if (a.length) super(...a); else super(2024, 6, 26); }
  static now() { return new RealDate(2024, 6, 26).getTime(); }
};

const lines = readFileSync("tests/testdata/jinja/expected.jsonl", "utf8").split("\n").filter((l) => l);
let same = 0, known = 0, skipped = 0, constructsSame = 0, constructs = 0;
const unexplained = [];
for (const line of lines) {
  const c = JSON.parse(line);
  // not compared: the engine's own refusals and limits, Python errors, generation spans
  // ({% generation %} is transformers' extension, not part of @huggingface/jinja)
  if (c.c_error || c.error !== undefined || (c.gen && c.gen.length) || /{%-?\s*generation/.test(c.template || "")) { skipped++; continue; }
  const src = c.template_file ? readFileSync("tests/testdata/templates/" + c.template_file, "utf8") : c.template;
  if (c.template_file && /{%-?\s*generation/.test(src)) { skipped++; continue; }
  let out;
  try { out = new Template(src).render({ ...c.vars }); } catch (e) { out = "ERROR " + e.message; }
  if (!c.template_file) { constructs++; if (out === c.output) constructsSame++; continue; }
  if (out === c.output) { same++; continue; }
  const why = process.env.JINJA_HF_STRICT ? undefined : Object.keys(KNOWN).find((k) => c.name.includes(k));
  if (why) { known++; continue; }
  unexplained.push(c.name + ": " + JSON.stringify(out).slice(0, 160) + " / Python " + JSON.stringify(c.output).slice(0, 160));
}
console.log(`${unexplained.length ? "FAIL" : "ok"} jinja_hf: @huggingface/jinja renders ${same} fixture cases as Python does, ` +
  `${known} differ as known (${Object.values(KNOWN).join("; ")}), ${unexplained.length} unexplained; ` +
  `${constructsSame} of ${constructs} construct cases alike; ${skipped} not compared`);
for (const u of unexplained) console.log("  differs: " + u);
process.exit(unexplained.length ? 1 : 0);
