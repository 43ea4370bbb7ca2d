// tests/data/make_parquet.mjs: writes the Parquet fixtures of tests/data/test_parquet.sh
// into tests/testdata/parquet/ with real writers from npm: DuckDB (@duckdb/node-api) and
// arrow-rs compiled to WebAssembly (parquet-wasm, with apache-arrow). Each fixture holds
// the rows of one JSONL file written beside it; the test checks that ./prepare makes the
// same training file from both. Regenerate (after npm install --prefix dev/node
// @duckdb/node-api parquet-wasm apache-arrow): node tests/data/make_parquet.mjs
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '../../dev/node/package.json'));
const { DuckDBInstance } = require('@duckdb/node-api');
const out = path.join(here, '../testdata/parquet');
fs.mkdirSync(out, { recursive: true });

// rows of each shape: unicode, quotes, backslashes, newlines, empty strings, nulls, extra columns
const say = i => `Reply ${i}: "quoted", back\\slash, tab\t, ünïcödé ✓ 日本語\nsecond line`;
const rows = {
  messages: Array.from({ length: 7 }, (_, i) => ({
    id: i, score: i / 2,
    messages: [
      ...(i % 3 === 0 ? [{ role: 'system', content: `Be brief ${i}.` }] : []),
      { role: 'user', content: `Question ${i}?` },
      { role: 'assistant', content: say(i) },
      ...(i % 2 ? [{ role: 'user', content: 'More?' }, { role: 'assistant', content: `More ${i}.` }] : []),
    ],
  })),
  sharegpt: Array.from({ length: 6 }, (_, i) => ({
    conversations: [{ from: 'human', value: `Hello ${i}` }, { from: 'gpt', value: say(i) }],
    system: i % 2 ? `System ${i}` : null,
    source: 'synthetic',
  })),
  alpaca: Array.from({ length: 6 }, (_, i) => ({
    instruction: `Do task ${i}`, input: i % 2 ? `with input ${i}` : null, output: say(i), n: i,
  })),
  pc: Array.from({ length: 5 }, (_, i) => ({ prompt: `Prompt ${i}: `, completion: say(i), weight: 1.5 })),
};
// JSONL: a null is written as an absent key, as the Parquet reader reads it
for (const [name, rs] of Object.entries(rows))
  fs.writeFileSync(path.join(out, `${name}.jsonl`),
    rs.map(r => JSON.stringify(r, (k, v) => (v === null ? undefined : v))).join('\n') + '\n');

const db = await (await DuckDBInstance.create(':memory:')).connect();
for (const name of Object.keys(rows)) {
  const src = path.join(out, `${name}.jsonl`);
  for (const codec of ['uncompressed', 'snappy', 'gzip', 'zstd']) {
    const dst = path.join(out, `duckdb_${name}_${codec}.parquet`);
    // messages: also a system column of nulls (what a union of datasets gives), which must read as absent
    const extra = name === 'messages' ? ', NULL::VARCHAR AS system' : '';
    await db.run(`COPY (SELECT *${extra} FROM read_json('${src}')) TO '${dst}' (FORMAT parquet, COMPRESSION ${codec}, ROW_GROUP_SIZE 2)`);
  }
}
// arrow-rs (parquet-wasm): the DuckDB file read back and written again, with data pages
// v1 and v2, with and without dictionaries, in each codec, two rows per row group
const pw = require('parquet-wasm/node');
const codecs = { uncompressed: pw.Compression.UNCOMPRESSED, snappy: pw.Compression.SNAPPY, gzip: pw.Compression.GZIP, zstd: pw.Compression.ZSTD };
for (const name of Object.keys(rows)) {
  for (const [version, v] of [['v1', pw.WriterVersion.V1], ['v2', pw.WriterVersion.V2]])
    for (const dict of [true, false])
      for (const [codec, c] of Object.entries(codecs)) {
        // the flat shapes in two of the combinations only: the nested ones take every path
        const flat = name === 'alpaca' || name === 'pc';
        if (flat && !(version === 'v2' && !dict && codec === 'zstd') && !(version === 'v1' && dict && codec === 'snappy')) continue;
        const table = pw.readParquet(fs.readFileSync(path.join(out, `duckdb_${name}_uncompressed.parquet`)));
        let b = new pw.WriterPropertiesBuilder().setWriterVersion(v).setCompression(c).setMaxRowGroupSize(2).setDictionaryEnabled(dict);
        if (!dict) b = b.setEncoding(pw.Encoding.PLAIN);
        fs.writeFileSync(path.join(out, `arrow_${name}_${version}_${dict ? 'dict' : 'plain'}_${codec}.parquet`), pw.writeParquet(table, b.build()));
      }
}
console.log('wrote', fs.readdirSync(out).length, 'files to', out);
