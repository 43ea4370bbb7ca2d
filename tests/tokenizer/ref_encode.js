// Reference side of tests/tokenizer/test_exact.sh: independent GPT-2 encoders from npm
// (gpt-3-encoder, js-tiktoken), installed with
//   npm install --prefix dev/node gpt-3-encoder js-tiktoken
//
//   node ref_encode.js encode OUTDIR FILE...      OUTDIR/NAME.gpt3, NAME.tiktoken, NAME.tiktoken-special
//   node ref_encode.js classes CLASSES POOL       compare character classes with the C tables
//   node ref_encode.js gen SEED POOL OUT BYTES    deterministic mixed-text corpus
//   node ref_encode.js hfjson ENCODER VOCAB OUT   a Hugging Face tokenizer.json from GPT-2's files
//   node ref_encode.js gpt3dir DIR FILE           ids from gpt-3-encoder's Encoder.js copied into DIR
//                                                 (it reads DIR/encoder.json and DIR/vocab.bpe)
//   node ref_encode.js tiktoken-json NAME OUT     a Hugging Face tokenizer.json made from js-tiktoken's
//                                                 rank table NAME (cl100k_base, o200k_base)
//   node ref_encode.js tiktoken NAME OUTDIR FILE...  OUTDIR/NAME.FILE.ids and .ids-special from js-tiktoken
//   node ref_encode.js bench NAME FILE REPEATS    js-tiktoken's encoding speed on FILE (median MB/s)
//   node ref_encode.js hf TOKENIZER FILE IDS TEXT  Hugging Face tokenizers (npm `tokenizers`, the Rust library):
//                                                 FILE's ids (special tokens matched, none added) into IDS,
//                                                 those ids decoded into TEXT; several FILE IDS TEXT triples may follow
//   node ref_encode.js hf-bench TOKENIZER FILE REPEATS  its encoding speed on FILE (median MB/s)
//   node ref_encode.js normalize FORM IN OUT      IN in Unicode form FORM (NFC, NFD) by String.prototype.normalize
//   node ref_encode.js sp-gen SEED POOL OUT BYTES  mixed text for SentencePiece-style tokenizers (Gemma 3's
//                                                 special tokens, literal <0xNN> and unused tokens, whitespace
//                                                 runs, decomposed accents, rare characters for byte fallback)
//   node ref_encode.js nfc-cases POOL OUT         NFC test cases (code points of POOL, mark orders, Hangul)
//   node ref_encode.js json-edit IN OUT EDIT      a tokenizer.json variant: EDIT is JavaScript run with `j`
//                                                 the parsed file (e.g. "j.model.byte_fallback = false")
'use strict';
const fs = require('fs');
const path = require('path');
const NM = path.join(__dirname, '..', '..', 'dev', 'node', 'node_modules');

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
  // CLASSES: one byte per code point from `test_tok --dump-classes` (0 other, 1 L, 2 N,
  // 3 space, plus 4 for o200k_base's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], 8 for [\p{Ll}\p{Lm}\p{Lo}\p{M}]).
  const c = fs.readFileSync(args[0]);
  const L = /\p{L}/u, N = /\p{N}/u, S = /\s/u, U = /[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]/u, W = /[\p{Ll}\p{Lm}\p{Lo}\p{M}]/u;
  const pool = [];
  let differ = 0, bad = 0, example = '';
  for (let cp = 0; cp < 0x110000; cp++) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    const s = String.fromCodePoint(cp);
    const js = (S.test(s) ? 3 : L.test(s) ? 1 : N.test(s) ? 2 : 0) | (U.test(s) ? 4 : 0) | (W.test(s) ? 8 : 0);
    if (js === c[cp]) { pool.push(cp); continue; }
    differ++;
    // Node's Unicode may be newer than the tables: only characters the tables see as
    // unassigned ("other") may differ, and U+0295, which is Ll in Unicode 15.0 and Lo
    // in later versions (only o200k_base's letter groups see the difference).
    if (c[cp] !== 0 && !(cp === 0x295 && c[cp] === 9 && js === 13)) { bad++; if (!example) example = 'U+' + cp.toString(16).toUpperCase() + ' C=' + c[cp] + ' JS=' + js; }
  }
  fs.writeFileSync(args[1], JSON.stringify(pool));
  const u = process.versions.unicode;
  if (bad) console.log(`FAIL unicode-classes: ${bad} code points classed differently from JavaScript (Unicode ${u}), e.g. ${example}`);
  else console.log(`ok unicode-classes (JavaScript \\s, \\p{L}, \\p{N}, o200k_base's letter groups agree except ${differ} code points new since the tables' Unicode version; node has Unicode ${u})`);
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
} else if (cmd === 'tiktoken-json') {
  // Converts a tiktoken rank table into the form Llama 3's tokenizer.json has: byte-level
  // vocabulary (bytes through GPT-2's byte-to-unicode table, id = rank), merges for every
  // split of every token into two tokens (ordered by the merged token's rank, then the
  // ranks of the left and right parts, as transformers' tiktoken converter orders them),
  // ignore_merges, and the pattern as a Split pre-tokenizer. Merge-rank BPE with these
  // merges then performs the same merges as tiktoken's rank BPE.
  const ranks = require(path.join(NM, 'js-tiktoken', 'dist', 'ranks', args[0] + '.cjs'));
  const byteChar = [];
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    byteChar.push(String.fromCodePoint(printable ? b : 256 + extra++));
  }
  const rank = new Map();  // token bytes as a latin1 string -> rank
  for (const line of ranks.bpe_ranks.split('\n')) {
    if (!line) continue;
    const [, offset, ...toks] = line.split(' ');
    toks.forEach((tok, i) => rank.set(Buffer.from(tok, 'base64').toString('latin1'), Number(offset) + i));
  }
  const mapped = (s) => { let m = ''; for (let i = 0; i < s.length; i++) m += byteChar[s.charCodeAt(i)]; return m; };
  const vocab = {};
  const merges = [];
  const byRank = [...rank.entries()].sort((a, b) => a[1] - b[1]);
  for (const [tok, r] of byRank) {
    vocab[mapped(tok)] = r;
    const local = [];
    for (let k = 1; k < tok.length; k++) {
      const a = rank.get(tok.slice(0, k)), b = rank.get(tok.slice(k));
      if (a !== undefined && b !== undefined) local.push([a, b, tok.slice(0, k), tok.slice(k)]);
    }
    local.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
    // cl100k_base as "a b" strings (like Llama 3's file), o200k_base as ["a", "b"] pairs
    for (const m of local) merges.push(args[0] === 'cl100k_base' ? mapped(m[2]) + ' ' + mapped(m[3]) : [mapped(m[2]), mapped(m[3])]);
  }
  const contractions = "('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)";
  if (!ranks.pat_str.includes(contractions)) throw new Error('unexpected pattern in ' + args[0]);
  const pattern = ranks.pat_str.split(contractions).join("(?i:'s|'t|'re|'ve|'m|'ll|'d)");  // as tiktoken's Python spells it
  const added_tokens = Object.entries(ranks.special_tokens).map(([content, id]) =>
    ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }));
  const tj = {
    version: '1.0', truncation: null, padding: null, added_tokens, normalizer: null,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: pattern }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
    post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
             fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab, merges },
  };
  fs.writeFileSync(args[1], JSON.stringify(tj));
} else if (cmd === 'tiktoken') {
  const { getEncoding } = require(path.join(NM, 'js-tiktoken'));
  const enc = getEncoding(args[0]);
  for (const file of args.slice(2)) {
    const text = fs.readFileSync(file, 'utf8');
    const name = path.join(args[1], args[0] + '.' + path.basename(file));
    fs.writeFileSync(name + '.ids', enc.encode(text, [], []).join(' ') + '\n');
    fs.writeFileSync(name + '.ids-special', enc.encode(text, 'all', []).join(' ') + '\n');
  }
} else if (cmd === 'bench') {
  const { getEncoding } = require(path.join(NM, 'js-tiktoken'));
  const enc = getEncoding(args[0]);
  const text = fs.readFileSync(args[1], 'utf8');
  const mb = Buffer.byteLength(text) / 1e6;
  const speeds = [];
  for (let r = 0; r < Number(args[2]); r++) {
    const t0 = process.hrtime.bigint();
    enc.encode(text, [], []);
    speeds.push(mb / (Number(process.hrtime.bigint() - t0) / 1e9));
  }
  speeds.sort((a, b) => a - b);
  console.log(speeds[Math.floor(speeds.length / 2)].toFixed(2));
} else if (cmd === 'hf' || cmd === 'hf-bench') {
  const { Tokenizer } = require(path.join(NM, 'tokenizers'));
  const tok = Tokenizer.fromFile(args[0]);
  (async () => {
    if (cmd === 'hf-bench') {
      const text = fs.readFileSync(args[1], 'utf8');
      const mb = Buffer.byteLength(text) / 1e6, speeds = [];
      for (let r = 0; r < Number(args[2]); r++) {
        const t0 = process.hrtime.bigint();
        await tok.encode(text, null, { addSpecialTokens: false });
        speeds.push(mb / (Number(process.hrtime.bigint() - t0) / 1e9));
      }
      speeds.sort((a, b) => a - b);
      console.log(speeds[Math.floor(speeds.length / 2)].toFixed(2));
      return;
    }
    for (let k = 1; k + 2 < args.length + 1; k += 3) {
      const text = fs.readFileSync(args[k], 'utf8');
      const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      fs.writeFileSync(args[k + 1], ids.join(' ') + '\n');
      fs.writeFileSync(args[k + 2], await tok.decode(ids, false));
    }
  })().catch((e) => { console.error(e); process.exit(1); });
} else if (cmd === 'normalize') {
  fs.writeFileSync(args[2], fs.readFileSync(args[1], 'utf8').normalize(args[0]));
} else if (cmd === 'sp-gen') {
  let seed = Number(args[0]) >>> 0;
  const rnd = () => {  // mulberry32, as in gen
    seed = (seed + 0x6D2B79F5) >>> 0;
    let t = seed;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const pick = (a) => a[Math.floor(rnd() * a.length)];
  const pool = JSON.parse(fs.readFileSync(args[1], 'utf8'));
  const bits = ['<start_of_turn>', '<end_of_turn>', '<bos>', '<eos>', '<pad>', '<unk>', '<mask>', '<unused0>', '<unused6241>',
    '<unused', '<start_of_image>', '<0x41>', '<0x0A>', '<0xZZ>', '<s>', '</s>', '[multimodal]', '<h1>', '</h1>', '<|endoftext|>',
    '\n', '\n\n', '\n\n\n\n\n', '\t', '\t\t\t', '    ', '        ', ' ', '  ', '\r\n', '\u00a0', '\u3000',
    'e\u0301', 'A\u030a', '\u1100\u1161\u11a8', 'n\u0303o', '\u2581', '\u2581\u2581', 'x\u2581y',
    'def f(x):\n    return x', '{"a": [1, 2]}', 'int main() { return 0; }', '😀', '👩‍💻', '🇩🇪', '你好，世界', 'こんにちは', '안녕하세요',
    'Привет', 'مرحبا', '\u{10FFFD}', '\u{E000}', '\u{1D11E}', '\u{20000}', '\ufeff', '\u200d', '12345', '3.14'];
  const words = 'the quick brown fox jumps over lazy dog Hello World tokenization is fun'.split(' ');
  const want = Number(args[3]);
  const out = [];
  let size = 0;
  while (size < want) {
    let piece = '';
    const r = rnd();
    if (r < 0.4) { for (let k = 0; k < 10; k++) piece += pick(words) + (rnd() < 0.7 ? ' ' : pick(bits)); }
    else if (r < 0.7) { for (let k = 0; k < 8; k++) piece += pick(bits); }
    else { for (let k = 0; k < 20; k++) piece += String.fromCodePoint(pick(pool)) + (rnd() < 0.2 ? pick(bits) : ''); }
    out.push(piece);
    size += Buffer.byteLength(piece);
  }
  fs.writeFileSync(args[2], out.join(''));
} else if (cmd === 'nfc-cases') {
  // Code points of POOL alone and in their NFD form; bases with two combining marks
  // in both orders (canonical ordering, blocking); all Hangul L V (T) sequences, with
  // one code point past each range. One case per line (a newline composes with nothing).
  const pool = JSON.parse(fs.readFileSync(args[0], 'utf8'));
  const lines = [];
  for (const cp of pool) {  // those with a decomposition or a mark, and every 64th other one
    const c = String.fromCodePoint(cp), d = c.normalize('NFD');
    if (d !== c || /\p{M}/u.test(c) || cp % 64 === 0) lines.push(c, d);
  }
  const marks = [0x300, 0x301, 0x302, 0x303, 0x308, 0x30A, 0x316, 0x31B, 0x323, 0x327, 0x328, 0x345, 0x5B0, 0x93C, 0x3099, 0x1AB0];
  for (const base of ['a', 'e', 'o', 'u', 's', 'A', 'O', 'U', '\u03b1', '\u03c9', '\u0915', '\u304b', '\u00e9', '\u1e63', '\u0301'])
    for (const m1 of marks) for (const m2 of marks) lines.push(base + String.fromCodePoint(m1, m2));
  for (let l = 0x1100; l <= 0x1113; l++)
    for (let v = 0x1161; v <= 0x1176; v++) {
      lines.push(String.fromCodePoint(l, v));
      for (let t = 0x11A6; t <= 0x11C3; t++) lines.push(String.fromCodePoint(l, v, t));
    }
  for (let s = 0xAC00; s < 0xAC00 + 11172; s += 7) lines.push(String.fromCodePoint(s, 0x11A8), String.fromCodePoint(s, 0x11A7));
  fs.writeFileSync(args[1], lines.join('\n'));
} else if (cmd === 'json-edit') {
  const j = JSON.parse(fs.readFileSync(args[0], 'utf8'));
  new Function('j', args[2])(j);
  fs.writeFileSync(args[1], JSON.stringify(j));
} else {
  console.error('usage: see the comment at the top of ref_encode.js');
  process.exit(2);
}
