// tests/train/sft_inputs.h: test_sft.c's checks of what the program reads from the user:
// bad flags and files refused in one line with exit status 1 and no output directory
// (expect_bad), the data file, tokenizer and model sharing one vocabulary, and the chat
// format taken from the data file; with them the file helpers (write_variant, write_text,
// copy_file) that test_sft.c's later checks use too. Included by test_sft.c after its
// helpers (run, tmp_root, check, read_text); not a header of its own.

// Writes a copy of `src` with `len` bytes, or with bytes [at, at+n) replaced.
static void write_variant(const char *dst, const char *src, size_t len, size_t at, const void *bytes, size_t n) {
    size_t sl;
    char *buf = read_whole_file(src, &sl);
    if (len > sl) len = sl;
    if (bytes && at + n <= len) memcpy(buf + at, bytes, n);
    write_file_atomic(dst, buf, len);
    free(buf);
}

static void write_text(const char *path, const char *text) { write_file_atomic(path, text, strlen(text)); }

static void copy_file(const char *dst, const char *src) { write_variant(dst, src, (size_t)-1, 0, NULL, 0); }

// Expects exit status 1, one line on stderr starting "error:" and containing
// `needle`, and the output directory not created.
static void expect_bad(const char *name, const char *flags, const char *needle) {
    char cmd[4096], err[4096], out[512];
    snprintf(out, sizeof out, "%s/out_%s", tmp_root, name);
    snprintf(cmd, sizeof cmd, "./train_sft -o %s %s", out, flags);
    int rc = run(cmd, err, sizeof err);
    int lines = 0;
    for (char *p = err; *p; p++) lines += *p == '\n';
    char full[300];
    snprintf(full, sizeof full, "bad_input_%s", name);
    check(full, rc == 1 && lines == 1 && !strncmp(err, "error: ", 7) && strstr(err, needle) && !path_exists(out),
          "exit %d, %d stderr lines, output dir %s: %s", rc, lines, path_exists(out) ? "created" : "absent", err);
}

static void test_bad_inputs(void) {
    char p[600], q[600], flags[2048];
    const char *good = REF_DATA;
    // data files
    expect_bad("missing_data", "-i /nonexistent/data.bin -e d1c16h2t24", "/nonexistent/data.bin");
    int64_t v;
    snprintf(p, sizeof p, "%s/badmagic.bin", tmp_root);
    v = 12345; write_variant(p, good, (size_t)-1, 0, &v, 8);
    snprintf(flags, sizeof flags, "-i %s -e d1c16h2t24", p); expect_bad("wrong_magic", flags, "badmagic.bin: bad magic");
    snprintf(p, sizeof p, "%s/badversion.bin", tmp_root);
    v = 3; write_variant(p, good, (size_t)-1, 8, &v, 8);
    snprintf(flags, sizeof flags, "-i %s -e d1c16h2t24", p); expect_bad("wrong_version", flags, "badversion.bin: unsupported version");
    snprintf(p, sizeof p, "%s/truncated.bin", tmp_root);
    write_variant(p, good, 1400, 0, NULL, 0);
    snprintf(flags, sizeof flags, "-i %s -e d1c16h2t24", p); expect_bad("truncated_data", flags, "truncated.bin: file is 1400 bytes");
    snprintf(p, sizeof p, "%s/shortheader.bin", tmp_root);
    write_variant(p, good, 100, 0, NULL, 0);
    snprintf(flags, sizeof flags, "-i %s -e d1c16h2t24", p); expect_bad("short_header", flags, "shortheader.bin");
    snprintf(p, sizeof p, "%s/hugevocab.bin", tmp_root);
    {   // 4-byte tokens; a fresh model's embedding would be sized by this vocabulary
        int64_t off[2] = {0, 3};
        uint32_t toks[3] = {1, 2, 3};
        uint8_t mask[3] = {0, 1, 1};
        data_write(p, 4, ((int64_t)1 << 24) + 1, 0, 0, NULL, 1, off, toks, mask);
    }
    snprintf(flags, sizeof flags, "-i %s -e d1c16h2t24", p); expect_bad("vocab_size_too_large", flags, "hugevocab.bin: vocabulary size 16777217 out of range");
    snprintf(p, sizeof p, "%s/badoffsets.bin", tmp_root);
    v = 2; write_variant(p, good, (size_t)-1, 1024 + 8 * 3, &v, 8);  // off[3] = 2 < off[2]
    snprintf(flags, sizeof flags, "-i %s -e d1c16h2t24", p); expect_bad("offsets_out_of_order", flags, "badoffsets.bin: document offsets");
    snprintf(p, sizeof p, "%s/badrange.bin", tmp_root);
    v = 100000; write_variant(p, good, (size_t)-1, 1024 + 8 * 14, &v, 8);  // off[D] beyond N
    snprintf(flags, sizeof flags, "-i %s -e d1c16h2t24", p); expect_bad("offsets_out_of_range", flags, "badrange.bin");
    snprintf(p, sizeof p, "%s/bigvocab.bin", tmp_root);
    {
        int lens[1] = {3};
        uint32_t toks[3] = {1, 70, 2};
        uint8_t mask[3] = {0, 1, 1};
        write_docs(p, 100, 1, lens, toks, mask);
    }
    {   // a resumed model cannot grow: data with another vocabulary is an error
        char out[600], cmd[2048], err[4096];
        snprintf(out, sizeof out, "%s/vocab_resume", tmp_root);
        snprintf(cmd, sizeof cmd, "./train_sft -i " REF_DATA " -e " REF_MODEL " -b 1 -t 16 -x 1 -o %s", out);
        int rc1 = run(cmd, err, sizeof err);
        snprintf(cmd, sizeof cmd, "./train_sft -i %s -b 1 -t 16 -x 5 -y 1 -o %s", p, out);
        int rc2 = run(cmd, err, sizeof err);
        check("bad_input_resume_data_of_other_vocab", rc1 == 0 && rc2 == 1 &&
              strstr(err, "vocab_resume/step_00000001: the model has a 61-token vocabulary but the data file ") &&
              strstr(err, "bigvocab.bin was made with a 100-token one: resume with the data"), "exit %d %d: %s", rc1, rc2, err);
    }
    snprintf(flags, sizeof flags, "-i %s -e " REF_MODEL " -t 32", good); expect_bad("T_beyond_context", flags, "context of 24");
    // model directories
    char dir[600];
    snprintf(dir, sizeof dir, "%s/m_truncated", tmp_root); make_dirs(dir);
    snprintf(p, sizeof p, "%s/config.json", dir); copy_file(p, REF_MODEL "/config.json");
    snprintf(p, sizeof p, "%s/model.safetensors", dir); write_variant(p, REF_MODEL "/model.safetensors", 20000, 0, NULL, 0);
    snprintf(flags, sizeof flags, "-i %s -e %s", good, dir); expect_bad("safetensors_truncated", flags, "m_truncated/model.safetensors: tensor");
    snprintf(dir, sizeof dir, "%s/m_header", tmp_root); make_dirs(dir);
    snprintf(p, sizeof p, "%s/config.json", dir); copy_file(p, REF_MODEL "/config.json");
    snprintf(p, sizeof p, "%s/model.safetensors", dir); write_variant(p, REF_MODEL "/model.safetensors", 12, 0, NULL, 0);
    snprintf(flags, sizeof flags, "-i %s -e %s", good, dir); expect_bad("safetensors_header_truncated", flags, "m_header/model.safetensors: header length");
    snprintf(dir, sizeof dir, "%s/m_typed", tmp_root); make_dirs(dir);
    snprintf(p, sizeof p, "%s/config.json", dir); copy_file(p, REF_MODEL "/config.json");
    {
        size_t n;
        char *buf = read_whole_file(REF_MODEL "/model.safetensors", &n);
        char *at = strstr(buf + 8, "\"F32\"");
        memcpy(at, "\"I32\"", 5);
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        write_file_atomic(p, buf, n);
        free(buf);
    }
    snprintf(flags, sizeof flags, "-i %s -e %s", good, dir); expect_bad("safetensors_wrong_dtype", flags, "dtype I32");
    snprintf(dir, sizeof dir, "%s/m_shape", tmp_root); make_dirs(dir);
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, "{\"model_type\":\"gpt2\",\"n_embd\":16,\"n_head\":2,\"n_layer\":2,\"n_positions\":20,\"vocab_size\":61,\"layer_norm_epsilon\":1e-5}");
    snprintf(p, sizeof p, "%s/model.safetensors", dir); copy_file(p, REF_MODEL "/model.safetensors");
    snprintf(flags, sizeof flags, "-i %s -e %s", good, dir); expect_bad("safetensors_wrong_shape", flags, "wpe.weight has shape [24, 16], expected [20, 16]");
    snprintf(dir, sizeof dir, "%s/m_missing", tmp_root); make_dirs(dir);
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, "{\"model_type\":\"gpt2\",\"n_embd\":16,\"n_head\":2,\"n_layer\":3,\"n_positions\":24,\"vocab_size\":61,\"layer_norm_epsilon\":1e-5}");
    snprintf(p, sizeof p, "%s/model.safetensors", dir); copy_file(p, REF_MODEL "/model.safetensors");
    snprintf(flags, sizeof flags, "-i %s -e %s", good, dir); expect_bad("safetensors_missing_tensor", flags, "missing tensor transformer.h.2.ln_1.weight");
    // config.json alone describes a model of terabytes: the tensors' shapes are checked
    // against it before anything that large is allocated
    snprintf(dir, sizeof dir, "%s/m_huge", tmp_root); make_dirs(dir);
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, "{\"model_type\":\"gpt2\",\"n_embd\":65536,\"n_head\":1,\"n_layer\":1000,\"n_positions\":1048576,"
                  "\"vocab_size\":2147483647,\"layer_norm_epsilon\":1e-5}");
    snprintf(p, sizeof p, "%s/model.safetensors", dir); copy_file(p, REF_MODEL "/model.safetensors");
    snprintf(flags, sizeof flags, "-i %s -e %s", good, dir);
    expect_bad("config_huge_small_file", flags, "wte.weight has shape [61, 16], expected [2147483647, 65536]");
    snprintf(dir, sizeof dir, "%s/m_overlap", tmp_root); make_dirs(dir);
    snprintf(p, sizeof p, "%s/config.json", dir); copy_file(p, REF_MODEL "/config.json");
    {   // two tensors sharing bytes 4..8 (the format requires disjoint data); the first
        // name holds a line break, which the one-line error prints as a space
        const char h[] = "{\"a\\nz\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
        char buf[256] = {0};
        uint64_t hl = sizeof h - 1;
        memcpy(buf, &hl, 8);
        memcpy(buf + 8, h, hl);
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        write_file_atomic(p, buf, 8 + hl + 12);
    }
    snprintf(flags, sizeof flags, "-i %s -e %s", good, dir);
    expect_bad("safetensors_overlapping_tensors", flags, "m_overlap/model.safetensors: tensors a z and b overlap");
    snprintf(dir, sizeof dir, "%s/m_config", tmp_root); make_dirs(dir);
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, "{\"n_embd\":16,\"n_head\":2,\"n_layer\":2,\"vocab_size\":61,\"layer_norm_epsilon\":1e-5}");
    snprintf(q, sizeof q, "%s/model.safetensors", dir); copy_file(q, REF_MODEL "/model.safetensors");
    snprintf(flags, sizeof flags, "-i %s -e %s", good, dir); expect_bad("config_missing_field", flags, "m_config/config.json: missing field \"n_positions\"");
    write_text(p, "{\"n_embd\":16,");
    snprintf(flags, sizeof flags, "-i %s -e %s", good, dir); expect_bad("config_bad_json", flags, "m_config/config.json: invalid JSON");
    snprintf(dir, sizeof dir, "%s/m_untied", tmp_root); make_dirs(dir);
    snprintf(p, sizeof p, "%s/config.json", dir); copy_file(p, REF_MODEL "/config.json");
    {   // lm_head.weight that differs from wte: rename one tensor of the BF16 file's lm_head copy by patching wte's first value
        size_t n;
        char *buf = read_whole_file(REF_DIR "/tiny_bf16/model.safetensors", &n);
        uint64_t hl;
        memcpy(&hl, buf, 8);
        SafeTensors st;
        st_open(&st, REF_DIR "/tiny_bf16/model.safetensors");
        const StTensor *head = st_find(&st, "lm_head.weight");
        if (!head) fatal("%s: no lm_head.weight (regenerate with dev/ref_gpt2.py)", REF_DIR "/tiny_bf16/model.safetensors");
        buf[head->begin] ^= 0x40;
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        write_file_atomic(p, buf, n);
        st_close(&st);
        free(buf);
    }
    snprintf(flags, sizeof flags, "-i %s -e %s", good, dir); expect_bad("lm_head_untied", flags, "lm_head.weight differs");
    expect_bad("init_not_found", "-i " REF_DATA " -e /nonexistent/model", "/nonexistent/model: no such directory");
    // flags and the output directory
    expect_bad("flag_bad_value", "-i " REF_DATA " -b abc", "flag -b takes an integer, got 'abc'");
    expect_bad("flag_unknown", "-i " REF_DATA " -X 1", "unknown flag -X");
    expect_bad("flag_out_of_range", "-i " REF_DATA " -q 2", "-q must be between 0 and 1");
    expect_bad("batch_not_multiple", "-i " REF_DATA " -e d1c16h2t24 -b 2 -t 16 -d 50", "-d 50 is not a multiple of B*T = 32");
    char err[4096], cmd[2048];
    snprintf(p, sizeof p, "%s/a_file", tmp_root);
    write_file_atomic(p, "x", 1);
    snprintf(cmd, sizeof cmd, "./train_sft -i " REF_DATA " -e d1c16h2t24 -t 16 -x 1 -o %s/sub", p);
    int rc = run(cmd, err, sizeof err);
    check("bad_input_output_dir_unwritable", rc == 1 && strstr(err, "cannot create output directory"), "exit %d: %s", rc, err);
    // resume with nothing to resume from
    snprintf(cmd, sizeof cmd, "./train_sft -i " REF_DATA " -e d1c16h2t24 -t 16 -y 1 -o %s/noresume", tmp_root);
    rc = run(cmd, err, sizeof err);
    check("bad_input_resume_without_checkpoint", rc == 1 && strstr(err, "no checkpoint to resume from"), "exit %d: %s", rc, err);
}

// Training data, validation data, the model (after growth) and the -k tokenizer
// must share one vocabulary: same size, and the same tokenizer fingerprint (header
// field 6) where both sides know it; a file with fingerprint 0 (written before the
// field existed) still loads. The committed demo files (data/demo/, made by prepare
// with data/demo/tokenizer: 320 tokens + 2 chat tokens) are the matching pair.
#define DEMO_TOK "data/demo/tokenizer"
#define DEMO_VAL "data/demo/val.bin"

// Writes a copy of DEMO_VAL with header field 6 (the fingerprint) set to fp.
static void demo_with_fingerprint(const char *dst, uint64_t fp) {
    int64_t v;
    memcpy(&v, &fp, 8);
    write_variant(dst, DEMO_VAL, (size_t)-1, 48, &v, 8);
}

static void test_vocab_consistency(void) {
    char p[600], flags[4096];
    DataFile demo;
    data_load(&demo, DEMO_VAL);
    uint64_t fp = demo.fingerprint;
    check("data_demo_has_fingerprint", demo.vocab_size == 316 && fp != 0, "vocab %lld fingerprint %016llx (regenerate with bash data/make_demo.sh)",
          (long long)demo.vocab_size, (unsigned long long)fp);
    data_free(&demo);
    // header field 6 is read as all 64 bits
    char other[600], old[600], f7[600];
    snprintf(other, sizeof other, "%s/other_fp.bin", tmp_root);
    snprintf(old, sizeof old, "%s/old_fp.bin", tmp_root);
    snprintf(f7, sizeof f7, "%s/field7.bin", tmp_root);
    demo_with_fingerprint(other, 0xF123456789ABCDEFull);
    demo_with_fingerprint(old, 0);
    DataFile df;
    data_load(&df, other);
    uint64_t got_other = df.fingerprint;
    data_free(&df);
    data_load(&df, old);
    check("data_fingerprint_field", got_other == 0xF123456789ABCDEFull && df.fingerprint == 0, "read %016llx and %016llx",
          (unsigned long long)got_other, (unsigned long long)df.fingerprint);
    data_free(&df);
    // field 7 is the chat format (0, 1 or 2); field 8 the length of the default system
    // message that follows it from byte 72 (at most 952 bytes); the rest must be 0
    int64_t three = 3, one = 1, big = 953;
    write_variant(f7, DEMO_VAL, (size_t)-1, 56, &three, 8);
    snprintf(flags, sizeof flags, "-i %s -e d1c16h2t24", f7);
    expect_bad("header_field_7", flags, "field7.bin: header field 7 (the chat format) is 3, must be 0 (gpt2), 1 (chatml) or 2 (llama3)");
    write_variant(f7, DEMO_VAL, (size_t)-1, 64, &big, 8);
    expect_bad("header_field_8", flags, "field7.bin: header field 8 (the default system message's length) is 953, must be 0..952");
    write_variant(f7, DEMO_VAL, (size_t)-1, 72, &one, 8);
    expect_bad("header_after_system_message", flags, "field7.bin: header byte 72 is 1, must be 0 in version 1");
    {   // data_write puts the fingerprint in bytes 48..55, little-endian
        uint32_t toks[2] = {1, 2};
        uint8_t mask[2] = {0, 1};
        int64_t off[2] = {0, 2};
        snprintf(p, sizeof p, "%s/written_fp.bin", tmp_root);
        data_write(p, 2, 10, 0x0102030405060708ull, 0, NULL, 1, off, toks, mask);
        size_t n;
        unsigned char *b = (unsigned char *)read_whole_file(p, &n);
        int ok = n > 56;
        for (int k = 0; ok && k < 8; k++) ok = b[48 + k] == 8 - k;
        check("data_write_fingerprint_bytes", ok, "bytes 48..55 are not 08 07 .. 01");
        free(b);
    }

    const char *train = "-e d1c16h2t64 -b 2 -t 64 -x 1 -v 1 -m 1";
    // validation against training data
    snprintf(flags, sizeof flags, "-i " DEMO_VAL " -j " REF_DATA " %s", train);
    expect_bad("val_vocab_size", flags, REF_DATA ": the validation data has a 61-token vocabulary but the data file " DEMO_VAL
               " was made with a 316-token one: prepare both files with the same tokenizer");
    snprintf(flags, sizeof flags, "-i " DEMO_VAL " -j %s %s", other, train);
    char want[1024];
    snprintf(want, sizeof want, "other_fp.bin: the validation data has tokenizer fingerprint f123456789abcdef but the data file " DEMO_VAL
             " was made with %016llx (both 316 tokens)", (unsigned long long)fp);
    expect_bad("val_fingerprint", flags, want);
    // the model after growth against the data: a model can grow, not shrink
    snprintf(p, sizeof p, "%s/small_vocab.bin", tmp_root);
    {
        int lens[1] = {3};
        uint32_t toks[3] = {1, 7, 2};
        uint8_t mask[3] = {0, 1, 1};
        write_docs(p, 50, 1, lens, toks, mask);
    }
    snprintf(flags, sizeof flags, "-i %s -e " REF_MODEL " -b 1 -t 16 -x 1", p);
    expect_bad("model_vocab_larger_than_data", flags, REF_MODEL ": the model has a 61-token vocabulary but the data file ");
    // the -k tokenizer against the data
    snprintf(flags, sizeof flags, "-i " REF_DATA " -k " DEMO_TOK " -e d1c16h2t24 -b 1 -t 16 -x 1");
    expect_bad("tokenizer_vocab_size", flags, DEMO_TOK ": the tokenizer (with the chat tokens) has a 316-token vocabulary but the data file "
               REF_DATA " was made with a 61-token one: pass with -k the tokenizer the data was prepared with");
    snprintf(flags, sizeof flags, "-i %s -k " DEMO_TOK " %s", other, train);
    snprintf(want, sizeof want, DEMO_TOK ": the tokenizer (with the chat tokens) has tokenizer fingerprint %016llx but the data file %s was made "
             "with f123456789abcdef", (unsigned long long)fp, other);
    expect_bad("tokenizer_fingerprint", flags, want);
    // training data of unknown fingerprint: the validation file's is checked
    snprintf(flags, sizeof flags, "-i %s -j %s -k " DEMO_TOK " %s", old, other, train);
    snprintf(want, sizeof want, DEMO_TOK ": the tokenizer (with the chat tokens) has tokenizer fingerprint %016llx but the data file %s",
             (unsigned long long)fp, other);
    expect_bad("tokenizer_fingerprint_of_val", flags, want);

    // what is accepted: matching files, and files without a fingerprint (old files)
    char fine[4][1024];
    snprintf(fine[0], sizeof fine[0], "-i " DEMO_VAL " -j " DEMO_VAL " -k " DEMO_TOK);
    snprintf(fine[1], sizeof fine[1], "-i %s -j " DEMO_VAL " -k " DEMO_TOK, old);
    snprintf(fine[2], sizeof fine[2], "-i " DEMO_VAL " -j %s -k " DEMO_TOK, old);
    snprintf(fine[3], sizeof fine[3], "-i %s", old);
    const char *fine_names[4] = {"matching", "old_train_file", "old_val_file", "old_file_no_tokenizer"};
    for (int k = 0; k < 4; k++) {
        char cmd[4096], err[4096], name[128];
        snprintf(cmd, sizeof cmd, "./train_sft %s %s -o %s/ok_%s", fine[k], train, tmp_root, fine_names[k]);
        int rc = run(cmd, err, sizeof err);
        snprintf(name, sizeof name, "vocab_consistent_%s_accepted", fine_names[k]);
        check(name, rc == 0, "exit %d: %s", rc, err);
    }
    // ./chat: the tokenizer must be the model's (a model of 400 tokens against 316)
    if (!path_exists("./chat")) { printf("skip chat_tokenizer_vocab: ./chat not built (make chat)\n"); return; }
    snprintf(p, sizeof p, "%s/v400.bin", tmp_root);
    {
        int lens[1] = {3};
        uint32_t toks[3] = {1, 7, 2};
        uint8_t mask[3] = {0, 1, 1};
        write_docs(p, 400, 1, lens, toks, mask);
    }
    char cmd[4096], err[4096];
    snprintf(cmd, sizeof cmd, "./train_sft -i %s %s -o %s/v400", p, train, tmp_root);
    int rc1 = run(cmd, err, sizeof err);
    snprintf(cmd, sizeof cmd, "./chat -e %s/v400/step_00000001 -k " DEMO_TOK " -p hi", tmp_root);
    int rc2 = run(cmd, err, sizeof err);
    check("chat_tokenizer_vocab", rc1 == 0 && rc2 == 1 && strstr(err, DEMO_TOK ": the tokenizer (with the chat tokens) has 316 tokens but the model ") &&
          strstr(err, "v400/step_00000001 has 400"), "exit %d %d: %s", rc1, rc2, err);
}

// The chat format is the data file's (header field 7), not the -k tokenizer's guess:
// data prepared with --chat-format llama3 and the demo (GPT-2 style) tokenizer has
// the five Llama 3 tokens added (319 tokens), so a trainer or ./chat that took the
// tokenizer's own format (gpt2: 316 tokens) would refuse the vocabulary. Validation
// data in another format than the training data is refused.
static void test_chat_format_from_data(void) {
    if (!path_exists("./prepare")) { printf("skip chat_format_from_data: ./prepare not built (make prepare)\n"); return; }
    char data[600], eval[600], cmd[4096], err[4096], flags[2048], mixed[600];
    snprintf(data, sizeof data, "%s/llama3.bin", tmp_root);
    snprintf(eval, sizeof eval, "%s/llama3_eval.jsonl", tmp_root);
    write_text(eval, "{\"prompt\":\"What is 1+2?\",\"completion\":\"3\"}\n{\"prompt\":\"Reverse \\\"AB\\\".\",\"completion\":\"BA\"}\n");
    snprintf(cmd, sizeof cmd, "./prepare --tokenizer " DEMO_TOK " --chat-format llama3 --out %s %s", data, eval);
    int rc0 = run(cmd, err, sizeof err);
    snprintf(cmd, sizeof cmd, "./train_sft -i %s -k " DEMO_TOK " -E %s -e d1c16h2t64 -b 2 -t 64 -x 1 -v 1 -m 1 -o %s/llama3", data, eval, tmp_root);
    int rc1 = run(cmd, err, sizeof err);
    check("chat_format_from_data_file", rc0 == 0 && rc1 == 0, "exit %d %d: %s", rc0, rc1, err);
    snprintf(mixed, sizeof mixed, "%s/chatml_val.bin", tmp_root);
    int64_t chatml = 1;
    write_variant(mixed, DEMO_VAL, (size_t)-1, 56, &chatml, 8);
    snprintf(flags, sizeof flags, "-i " DEMO_VAL " -j %s -e d1c16h2t64 -b 2 -t 64 -x 1", mixed);
    expect_bad("chat_format_val_differs", flags, "chatml_val.bin: the validation data was rendered in chat format chatml but the data file "
               DEMO_VAL " in gpt2: prepare both with the same --chat-format");
    char sys[16] = {1, 0, 0, 0, 0, 0, 0, 0, 'x'};  // header field 8 = 1, byte 72 = 'x': the default system message "x"
    write_variant(mixed, DEMO_VAL, (size_t)-1, 64, sys, 9);
    expect_bad("default_system_val_differs", flags, "chatml_val.bin: the validation data has another default system message than the data file "
               DEMO_VAL ": prepare both with the same --system");
    if (!path_exists("./chat")) { printf("skip chat_format_flag: ./chat not built (make chat)\n"); return; }
    snprintf(cmd, sizeof cmd, "./chat -e %s/llama3/step_00000001 -k " DEMO_TOK " -g 2 -p hi", tmp_root);
    int rc2 = run(cmd, err, sizeof err);
    snprintf(cmd, sizeof cmd, "./chat -e %s/llama3/step_00000001 -k " DEMO_TOK " -c llama3 -g 2 -p hi", tmp_root);
    int rc3 = run(cmd, err, sizeof err);
    check("chat_format_flag", rc2 == 1 && rc3 == 0, "./chat exit %d without -c (expected 1: 316 tokens against 319), %d with -c llama3: %s",
          rc2, rc3, err);
}

