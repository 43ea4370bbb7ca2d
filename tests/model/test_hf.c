/*
tests/model/test_hf.c: Hugging Face import and export (model/hf.h, base/safetensors.h) of
every family: config.json as transformers writes it for published models,
export -> import bit for bit (single file and sharded), transformers' tensor names
and layout, and one-line refusals of bad directories. Expected values are typed
from the published config.json files and from the layout rules, never taken from
the code under test. Prints "ok NAME" / "FAIL NAME: why"; exits 1 if anything failed.
*/
#include "../../model/hf.h"
#include "../../model/model.h"
#include "../test_util.h"

static void write_text(const char *path, const char *text) { write_file_atomic(path, text, strlen(text)); }

// ---- config.json of published models ----------------------------------------

static void parse_config(const char *text, ModelConfig *c) { model_parse_hf_config("config.json", text, strlen(text), c); }

static void test_published_configs(void) {
    ModelConfig c;
    // HuggingFaceTB/SmolLM2-135M
    parse_config("{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, \"bos_token_id\": 0,"
                 "\"eos_token_id\": 0, \"hidden_act\": \"silu\", \"hidden_size\": 576, \"initializer_range\": 0.041666666666666664,"
                 "\"intermediate_size\": 1536, \"is_llama_config\": true, \"max_position_embeddings\": 8192, \"model_type\": \"llama\","
                 "\"num_attention_heads\": 9, \"num_hidden_layers\": 30, \"num_key_value_heads\": 3, \"pretraining_tp\": 1,"
                 "\"rms_norm_eps\": 1e-05, \"rope_interleaved\": false, \"rope_scaling\": null, \"rope_theta\": 100000,"
                 "\"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.40.1\", \"use_cache\": true,"
                 "\"vocab_size\": 49152}", &c);
    check("config_smollm2_135m", c.family == FAMILY_LLAMA && c.L == 30 && c.C == 576 && c.NH == 9 && c.KVH == 3 && c.HS == 64 &&
              c.FF == 1536 && c.V == 49152 && c.maxT == 8192 && c.eps == 1e-5f && c.rope_theta == 100000.0f && c.tied == 1 &&
              c.qkv_bias == 0 && c.rope_factor == 0 && c.bos_id == 0 && c.eos_id == 0 && model_num_parameters(&c) == 134515008,
          "L %d C %d NH %d KVH %d HS %d FF %d V %d tied %d params %zu", c.L, c.C, c.NH, c.KVH, c.HS, c.FF, c.V, c.tied, model_num_parameters(&c));
    // meta-llama/Llama-3.2-1B-Instruct
    parse_config("{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, \"bos_token_id\": 128000,"
                 "\"eos_token_id\": [128001, 128008, 128009], \"head_dim\": 64, \"hidden_act\": \"silu\", \"hidden_size\": 2048,"
                 "\"initializer_range\": 0.02, \"intermediate_size\": 8192, \"max_position_embeddings\": 131072, \"mlp_bias\": false,"
                 "\"model_type\": \"llama\", \"num_attention_heads\": 32, \"num_hidden_layers\": 16, \"num_key_value_heads\": 8,"
                 "\"pretraining_tp\": 1, \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0,"
                 "\"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0,"
                 "\"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"use_cache\": true, \"vocab_size\": 128256}", &c);
    check("config_llama32_1b", c.family == FAMILY_LLAMA && c.L == 16 && c.C == 2048 && c.NH == 32 && c.KVH == 8 && c.HS == 64 &&
              c.FF == 8192 && c.V == 128256 && c.maxT == 131072 && c.rope_theta == 500000.0f && c.rope_factor == 32.0f &&
              c.rope_low_freq == 1.0f && c.rope_high_freq == 4.0f && c.rope_orig_maxT == 8192 && c.bos_id == 128000 && c.eos_id == 128001 &&
              c.n_eos_more == 2 && c.eos_more[0] == 128008 && c.eos_more[1] == 128009 && c.tied == 1 && model_num_parameters(&c) == 1235814400,
          "KVH %d HS %d factor %g eos %d params %zu", c.KVH, c.HS, (double)c.rope_factor, c.eos_id, model_num_parameters(&c));
    // Qwen/Qwen2.5-0.5B-Instruct
    parse_config("{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643, \"eos_token_id\": 151645,"
                 "\"hidden_act\": \"silu\", \"hidden_size\": 896, \"initializer_range\": 0.02, \"intermediate_size\": 4864,"
                 "\"max_position_embeddings\": 32768, \"max_window_layers\": 21, \"model_type\": \"qwen2\", \"num_attention_heads\": 14,"
                 "\"num_hidden_layers\": 24, \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0,"
                 "\"sliding_window\": 32768, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"use_cache\": true,"
                 "\"use_sliding_window\": false, \"vocab_size\": 151936}", &c);
    check("config_qwen25_05b", c.family == FAMILY_QWEN2 && c.L == 24 && c.C == 896 && c.NH == 14 && c.KVH == 2 && c.HS == 64 &&
              c.FF == 4864 && c.V == 151936 && c.eps == 1e-6f && c.rope_theta == 1e6f && c.qkv_bias == 1 && c.tied == 1 &&
              c.bos_id == 151643 && c.eos_id == 151645 && model_num_parameters(&c) == 494032768,
          "HS %d bias %d params %zu", c.HS, c.qkv_bias, model_num_parameters(&c));
    // transformers' defaults for what a config leaves out (LlamaConfig, Qwen2Config)
    parse_config("{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2,"
                 "\"num_attention_heads\": 4, \"max_position_embeddings\": 32, \"vocab_size\": 50}", &c);
    check("config_llama_defaults", c.KVH == 4 && c.HS == 16 && c.eps == 1e-6f && c.rope_theta == 10000.0f && c.tied == 0 &&
              c.bos_id == 1 && c.eos_id == 2 && c.rope_factor == 0,
          "KVH %d HS %d eps %g theta %g tied %d", c.KVH, c.HS, (double)c.eps, (double)c.rope_theta, c.tied);
    parse_config("{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2,"
                 "\"num_attention_heads\": 4, \"num_key_value_heads\": null, \"max_position_embeddings\": 32, \"vocab_size\": 50}", &c);
    check("config_qwen2_defaults", c.KVH == 4 && c.tied == 0 && c.qkv_bias == 1 && c.bos_id == -1 && c.eos_id == -1, "KVH %d tied %d bias %d bos %d eos %d",
          c.KVH, c.tied, c.qkv_bias, c.bos_id, c.eos_id);
    // transformers 5.x: rope_theta and the scaling in rope_parameters
    parse_config("{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2,"
                 "\"num_attention_heads\": 4, \"max_position_embeddings\": 32, \"vocab_size\": 50, \"rope_parameters\": {\"rope_type\":"
                 "\"llama3\", \"rope_theta\": 500000.0, \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
                 "\"original_max_position_embeddings\": 16}}", &c);
    check("config_rope_parameters", c.rope_theta == 500000.0f && c.rope_factor == 8.0f && c.rope_orig_maxT == 16,
          "theta %g factor %g", (double)c.rope_theta, (double)c.rope_factor);
}

// Layers whose flags equal flag exactly where want(l) says so.
static int layers_flagged(const ModelConfig *c, int flag, int (*want)(int)) {
    for (int l = 0; l < c->L; l++)
        if (((c->layer_flags[l] & flag) != 0) != (want(l) != 0)) return 0;
    return 1;
}
static int every_6th_full(int l) { return (l + 1) % 6 != 0; }
static int every_4th(int l) { return l % 4 == 3; }
static int none(int l) { (void)l; return 0; }
static int from_layer_2(int l) { return l >= 2; }
static int layers_1_4(int l) { return l == 1 || l == 4; }
static int layers_0_5(int l) { return l == 0 || l == 5; }
static int odd_layers(int l) { return l % 2 == 1; }

// The published config.json of the newer families (as on the Hugging Face hub, the
// parameter counts as their model cards and safetensors headers give them:
// Qwen3-0.6B 0.6B, 0.44B without embeddings; Gemma 3 1B; SmolLM3 3B (3.08B)).
// By hand: Qwen3-0.6B = 151936*1024 embedding + 28 layers * (q 1024*2048 + k, v 1024*1024
// each + o 2048*1024 + q/k norms 2*128 + MLP 3*1024*3072 + 2 norms 2*1024) + 1024 =
// 596,049,920 (tied); Gemma-3-1B = 262144*1152 + 26 * (q, o 1152*1024 each + k, v
// 1152*256 each + 2*256 + 3*1152*6912 + 4 norms 4*1152) + 1152 = 999,885,952;
// SmolLM3-3B = 128256*2048 + 36 * (q, o 2048*2048 each + k, v 2048*512 each + 3*2048*11008
// + 2*2048) + 2048 = 3,075,098,624.
static void test_published_family_configs(void) {
    ModelConfig c;
    // Qwen/Qwen3-0.6B
    parse_config("{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"
                 "\"eos_token_id\": 151645, \"head_dim\": 128, \"hidden_act\": \"silu\", \"hidden_size\": 1024, \"initializer_range\": 0.02,"
                 "\"intermediate_size\": 3072, \"max_position_embeddings\": 40960, \"max_window_layers\": 28, \"model_type\": \"qwen3\","
                 "\"num_attention_heads\": 16, \"num_hidden_layers\": 28, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-06,"
                 "\"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null, \"tie_word_embeddings\": true,"
                 "\"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\", \"use_cache\": true, \"use_sliding_window\": false,"
                 "\"vocab_size\": 151936}", &c);
    check("config_qwen3_06b", c.family == FAMILY_QWEN3 && c.L == 28 && c.C == 1024 && c.NH == 16 && c.KVH == 8 && c.HS == 128 && c.FF == 3072 &&
              c.V == 151936 && c.maxT == 40960 && c.eps == 1e-6f && c.rope_theta == 1e6f && c.tied && c.qk_norm && !c.qkv_bias &&
              !c.post_norms && !c.norm_plus_one && c.mlp_act == MLP_SWIGLU && c.window == 0 && layers_flagged(&c, 0xff, none) &&
              c.bos_id == 151643 && c.eos_id == 151645 && model_num_parameters(&c) == 596049920,
          "L %d C %d HS %d FF %d qk_norm %d window %d params %zu", c.L, c.C, c.HS, c.FF, c.qk_norm, c.window, model_num_parameters(&c));
    // google/gemma-3-1b-it
    parse_config("{\"architectures\": [\"Gemma3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
                 "\"attn_logit_softcapping\": null, \"bos_token_id\": 2, \"cache_implementation\": \"hybrid\", \"eos_token_id\": [1, 106],"
                 "\"final_logit_softcapping\": null, \"head_dim\": 256, \"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": 1152,"
                 "\"initializer_range\": 0.02, \"intermediate_size\": 6912, \"max_position_embeddings\": 32768, \"model_type\": \"gemma3_text\","
                 "\"num_attention_heads\": 4, \"num_hidden_layers\": 26, \"num_key_value_heads\": 1, \"pad_token_id\": 0,"
                 "\"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06, \"rope_local_base_freq\": 10000, \"rope_scaling\": null,"
                 "\"rope_theta\": 1000000, \"sliding_window\": 512, \"sliding_window_pattern\": 6, \"torch_dtype\": \"bfloat16\","
                 "\"transformers_version\": \"4.50.0.dev0\", \"use_cache\": true, \"vocab_size\": 262144}", &c);
    check("config_gemma3_1b", c.family == FAMILY_GEMMA3 && c.L == 26 && c.C == 1152 && c.NH == 4 && c.KVH == 1 && c.HS == 256 && c.FF == 6912 &&
              c.V == 262144 && c.maxT == 32768 && c.tied && c.qk_norm && c.post_norms && c.norm_plus_one && c.mlp_act == MLP_GEGLU &&
              c.embed_scale == (float)sqrt(1152.0) && c.attn_scalar == 256.0f && c.window == 512 && c.rope_theta == 1e6f &&
              c.rope_local_theta == 10000.0f && c.rope_linear == 0 && layers_flagged(&c, LAYER_SLIDING, every_6th_full) &&
              layers_flagged(&c, LAYER_NO_ROPE, none) && c.bos_id == 2 && c.eos_id == 1 && c.n_eos_more == 1 && c.eos_more[0] == 106 &&
              model_num_parameters(&c) == 999885952,
          "HS %d window %d scale %g scalar %g params %zu", c.HS, c.window, (double)c.embed_scale, (double)c.attn_scalar, model_num_parameters(&c));
    // HuggingFaceTB/SmolLM3-3B
    parse_config("{\"architectures\": [\"SmolLM3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, \"bos_token_id\": null,"
                 "\"eos_token_id\": 128012, \"hidden_act\": \"silu\", \"hidden_size\": 2048, \"initializer_range\": 0.02,"
                 "\"intermediate_size\": 11008, \"max_position_embeddings\": 65536, \"max_window_layers\": 28, \"mlp_bias\": false,"
                 "\"model_type\": \"smollm3\", \"no_rope_layer_interval\": 4, \"no_rope_layers\": [1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0,"
                 "1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0], \"num_attention_heads\": 16, \"num_hidden_layers\": 36,"
                 "\"num_key_value_heads\": 4, \"pad_token_id\": 128004, \"pretraining_tp\": 2, \"rms_norm_eps\": 1e-06, \"rope_scaling\": null,"
                 "\"rope_theta\": 5000000.0, \"sliding_window\": null, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.54.0.dev0\","
                 "\"use_cache\": false, \"use_sliding_window\": false, \"vocab_size\": 128256}", &c);
    check("config_smollm3_3b", c.family == FAMILY_SMOLLM3 && c.L == 36 && c.C == 2048 && c.NH == 16 && c.KVH == 4 && c.HS == 128 && c.FF == 11008 &&
              c.V == 128256 && c.maxT == 65536 && c.tied && !c.qk_norm && c.rope_theta == 5e6f && c.window == 0 &&
              layers_flagged(&c, LAYER_NO_ROPE, every_4th) && layers_flagged(&c, LAYER_SLIDING, none) && c.bos_id == -1 && c.eos_id == 128012 &&
              c.pad_id == 128004 && model_num_parameters(&c) == 3075098624ull,
          "HS %d tied %d theta %g params %zu", c.HS, c.tied, (double)c.rope_theta, model_num_parameters(&c));
    // transformers' defaults for what a config leaves out
    const char *sizes = "\"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 8, \"num_attention_heads\": 4,"
                        "\"max_position_embeddings\": 32, \"vocab_size\": 50";
    char text[1024];
    snprintf(text, sizeof text, "{\"model_type\": \"qwen3\", %s}", sizes);
    parse_config(text, &c);
    check("config_qwen3_defaults", c.HS == 128 && c.KVH == 4 && !c.tied && c.eps == 1e-6f && c.rope_theta == 10000.0f && c.bos_id == -1 &&
              c.eos_id == -1 && c.window == 0, "HS %d tied %d theta %g", c.HS, c.tied, (double)c.rope_theta);
    snprintf(text, sizeof text, "{\"model_type\": \"smollm3\", %s}", sizes);
    parse_config(text, &c);
    check("config_smollm3_defaults", c.HS == 16 && c.tied && c.rope_theta == 2e6f && layers_flagged(&c, LAYER_NO_ROPE, every_4th) && c.bos_id == 128000 &&
              c.eos_id == 128001, "HS %d tied %d theta %g", c.HS, c.tied, (double)c.rope_theta);
    snprintf(text, sizeof text, "{\"model_type\": \"gemma3_text\", %s}", sizes);
    parse_config(text, &c);
    check("config_gemma3_defaults", c.HS == 256 && c.tied && c.attn_scalar == 256.0f && c.window == 4096 && c.rope_theta == 1e6f &&
              c.rope_local_theta == 10000.0f && layers_flagged(&c, LAYER_SLIDING, every_6th_full) && c.bos_id == 2 && c.eos_id == 1,
          "HS %d window %d theta %g local %g", c.HS, c.window, (double)c.rope_theta, (double)c.rope_local_theta);
    // Qwen3's window: from max_window_layers on, only with use_sliding_window
    snprintf(text, sizeof text, "{\"model_type\": \"qwen3\", %s, \"use_sliding_window\": true, \"sliding_window\": 16, \"max_window_layers\": 2}",
             sizes);
    parse_config(text, &c);
    int with = c.window == 16 && layers_flagged(&c, LAYER_SLIDING, from_layer_2);
    snprintf(text, sizeof text, "{\"model_type\": \"qwen3\", %s, \"sliding_window\": 16, \"max_window_layers\": 2}", sizes);
    parse_config(text, &c);
    check("config_qwen3_window_layers", with && c.window == 0 && layers_flagged(&c, LAYER_SLIDING, none), "window %d", c.window);
    // SmolLM3's window (issue 33, rule 16), the layers of transformers' SmolLM3Config
    // (configuration_smollm3.py, read there): without layer_types, layer l is
    // "sliding_attention" iff use_sliding_window and sliding_window is not None and
    // no_rope_layers[l] == 0 (a NoPE layer), else "full_attention"; a given layer_types
    // is taken as it is. Worked by hand for these 8 layers:
    struct { const char *fields; int window; int (*want)(int); } smol[] = {
        // default no_rope_layers (interval 4): NoPE, so sliding, at 3 and 7
        {"\"use_sliding_window\": true, \"sliding_window\": 16", 16, every_4th},
        // NoPE at 1 and 4
        {"\"use_sliding_window\": true, \"sliding_window\": 16, \"no_rope_layers\": [1, 0, 1, 1, 0, 1, 1, 1]", 16, layers_1_4},
        // interval 2: NoPE at 1, 3, 5, 7
        {"\"use_sliding_window\": true, \"sliding_window\": 8, \"no_rope_layer_interval\": 2", 8, odd_layers},
        // the list given: sliding at 0 and 5, whatever the NoPE layers are
        {"\"use_sliding_window\": true, \"sliding_window\": 16, \"layer_types\": [\"sliding_attention\", \"full_attention\", \"full_attention\","
         "\"full_attention\", \"full_attention\", \"sliding_attention\", \"full_attention\", \"full_attention\"]", 16, layers_0_5},
        // no window: use_sliding_window off, or sliding_window null or absent
        {"\"use_sliding_window\": false, \"sliding_window\": 16", 0, none},
        {"\"use_sliding_window\": true, \"sliding_window\": null", 0, none},
        {"\"use_sliding_window\": true", 0, none},
    };
    int smol_ok = 1;
    char smol_why[300] = "";
    for (int k = 0; k < 7; k++) {
        snprintf(text, sizeof text, "{\"model_type\": \"smollm3\", %s, %s}", sizes, smol[k].fields);
        parse_config(text, &c);
        if (c.window != smol[k].window || !layers_flagged(&c, LAYER_SLIDING, smol[k].want)) {
            int n = snprintf(smol_why, sizeof smol_why, "case %d: window %d, sliding layers", k, c.window);
            for (int l = 0; l < c.L; l++)
                if (c.layer_flags[l] & LAYER_SLIDING) n += snprintf(smol_why + n, sizeof smol_why - (size_t)n, " %d", l);
            smol_ok = 0;
        }
    }
    check("config_smollm3_window_layers", smol_ok, "%s", smol_why);
    // transformers 5.x's Gemma 3: rope_parameters per layer type; layer_types instead of the pattern
    snprintf(text, sizeof text, "{\"model_type\": \"gemma3_text\", %s, \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"linear\","
             "\"factor\": 8.0, \"rope_theta\": 1000000.0}, \"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 20000.0}},"
             "\"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"full_attention\", \"sliding_attention\", \"sliding_attention\","
             "\"full_attention\", \"full_attention\", \"full_attention\"]}", sizes);
    parse_config(text, &c);
    check("config_gemma3_rope_parameters", c.rope_theta == 1e6f && c.rope_linear == 8.0f && c.rope_local_theta == 20000.0f &&
              c.layer_flags[0] == LAYER_SLIDING && c.layer_flags[2] == 0 && c.layer_flags[4] == LAYER_SLIDING && c.layer_flags[5] == 0 &&
              c.layer_flags[7] == 0, "theta %g linear %g local %g", (double)c.rope_theta, (double)c.rope_linear, (double)c.rope_local_theta);
    // the Gemma 3 4B-and-up rope_scaling of the full layers, in transformers 4.x's fields
    snprintf(text, sizeof text, "{\"model_type\": \"gemma3_text\", %s, \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"}}", sizes);
    parse_config(text, &c);
    check("config_gemma3_linear_scaling", c.rope_linear == 8.0f && c.rope_factor == 0, "linear %g", (double)c.rope_linear);
}

static void expect_refused(const char *name, const char *dir, const char *needle);

// config.json texts the newer families refuse, each with its one-line message.
static void expect_config_refused(const char *name, const char *text, const char *needle) {
    char dir[512], path[700];
    snprintf(dir, sizeof dir, "%s/refuse_%s", tmp_root, name);
    make_dirs(dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, text);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_text(path, "");
    expect_refused(name, dir, needle);
}

static void test_family_refusals(void) {
    const char *sizes = "\"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 4, \"num_attention_heads\": 4,"
                        "\"max_position_embeddings\": 32, \"vocab_size\": 50";
    char text[1024];
    snprintf(text, sizeof text, "{\"model_type\": \"gemma3_text\", %s, \"attn_logit_softcapping\": 50.0}", sizes);
    expect_config_refused("gemma3_attn_softcapping", text, "config.json: attn_logit_softcapping is not supported");
    snprintf(text, sizeof text, "{\"model_type\": \"gemma3_text\", %s, \"final_logit_softcapping\": 30.0}", sizes);
    expect_config_refused("gemma3_final_softcapping", text, "config.json: final_logit_softcapping is not supported");
    snprintf(text, sizeof text, "{\"model_type\": \"gemma3_text\", %s, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 8.0}}", sizes);
    expect_config_refused("gemma3_rope_type", text, "config.json: rope_scaling type \"yarn\" is not supported");
    snprintf(text, sizeof text, "{\"model_type\": \"gemma3_text\", %s, \"hidden_activation\": \"gelu\"}", sizes);
    expect_config_refused("gemma3_activation", text, "config.json: hidden_activation must be \"gelu_pytorch_tanh\"");
    snprintf(text, sizeof text, "{\"model_type\": \"gemma3\", \"text_config\": {%s}}", sizes);
    expect_config_refused("gemma3_multimodal", text, "config.json: model_type \"gemma3\" (Gemma3ForConditionalGeneration");
    snprintf(text, sizeof text, "{\"model_type\": \"gemma3_text\", %s, \"layer_types\": [\"full_attention\", \"chunked_attention\","
             "\"full_attention\", \"full_attention\"]}", sizes);
    expect_config_refused("gemma3_layer_type", text, "config.json: layer_types[1] must be");
    snprintf(text, sizeof text, "{\"model_type\": \"qwen3\", %s, \"attention_bias\": true}", sizes);
    expect_config_refused("qwen3_attention_bias", text, "config.json: attention_bias true");
    snprintf(text, sizeof text, "{\"model_type\": \"qwen3\", %s, \"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 2.0}}", sizes);
    expect_config_refused("qwen3_rope_type", text, "config.json: rope_scaling type \"dynamic\" is not supported");
    snprintf(text, sizeof text, "{\"model_type\": \"smollm3\", %s, \"no_rope_layers\": [1, 2, 1, 0]}", sizes);
    expect_config_refused("smollm3_no_rope_value", text, "config.json: no_rope_layers[1] must be 0 or 1");
    snprintf(text, sizeof text, "{\"model_type\": \"smollm3\", %s, \"no_rope_layers\": [1, 1]}", sizes);
    expect_config_refused("smollm3_no_rope_short", text, "config.json: no_rope_layers must list 0 or 1 for each of the 4 layers");
}

// ---- export -> import ------------------------------------------------------

// A fresh model of descriptor desc with vocabulary V and the given extras.
static void fresh_model(const char *desc, int V, ModelConfig *c, float **mem, ParamTensors *p) {
    if (model_parse_descriptor(desc, c) != 0) fatal("%s: not a descriptor", desc);
    c->V = V;
    model_check_config(c, desc);
    *mem = (float *)xmalloc(model_num_parameters(c) * sizeof(float));
    param_pointers(c, *mem, p);
    model_init_random(c, p, 1234);
    // norm scales and biases are 1 and 0 after init: make them distinct so a mix-up shows
    for (size_t k = 0; k < model_num_parameters(c); k++) (*mem)[k] += 1e-3f * (float)(k % 97);
}

static int count_files(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) n += !strncmp(e->d_name, prefix, strlen(prefix));
    if (d) closedir(d);
    return n;
}

// Exports, imports and compares; returns 1 if the config and every parameter are equal.
static int round_trip(const char *name, const ModelConfig *c, const float *mem, const ParamTensors *p, uint64_t shard_bytes, char *dir, size_t dn) {
    snprintf(dir, dn, "%s/%s", tmp_root, name);
    if (make_dirs(dir) != 0) fatal("%s: cannot create", dir);
    model_save_hf_sharded(dir, c, p, shard_bytes, HF_SAVE_F32);
    ModelConfig r;
    float *rmem;
    ParamTensors rp;
    model_load_hf(dir, &r, &rmem, &rp);
    int same = !memcmp(c, &r, sizeof r) && !memcmp(mem, rmem, model_num_parameters(c) * sizeof(float));
    free(rmem);
    return same;
}

// The tensor `name` of an export (single file or shards) into a new array.
static float *exported_tensor(const char *dir, const char *name, int64_t *rows, int64_t *cols) {
    HfWeights w;
    hf_weights_open(dir, &w);
    const SafeTensors *f;
    const StTensor *t = hf_find(&w, name, &f);
    float *out = NULL;
    *rows = *cols = -1;
    if (t) {
        out = (float *)xmalloc((size_t)t->numel * sizeof(float));
        st_read_f32(f, t, out);
        *rows = t->shape[0]; *cols = t->ndim == 2 ? t->shape[1] : 0;
    }
    hf_weights_close(&w);
    return out;
}

static void test_round_trips(void) {
    ModelConfig c;
    float *mem;
    ParamTensors p;
    char dir[512], path[700];
    int64_t rows, cols;

    // Llama, untied, grouped-query, Llama 3 rope scaling, one file
    fresh_model("l2c64h4k2f96ut32", 50, &c, &mem, &p);
    c.rope_theta = 500000.0f; c.rope_factor = 32.0f; c.rope_low_freq = 1.0f; c.rope_high_freq = 4.0f; c.rope_orig_maxT = 16;
    c.bos_id = 1; c.eos_id = 2; c.eps = 1.2345678e-5f;  // needs 8 significant digits to come back the same
    check("llama_untied_round_trip", round_trip("llama", &c, mem, &p, 5000000000ull, dir, sizeof dir), "export -> import differs");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    check("llama_single_file", path_exists(path) && count_files(dir, "model-") == 0, "no model.safetensors, or shards written");
    // layout by hand: v_proj of layer 1 is rows (NH + KVH) HS .. (NH + 2 KVH) HS of that layer's qkvw (NH 4, KVH 2, HS 16, C 64)
    float *v = exported_tensor(dir, "model.layers.1.self_attn.v_proj.weight", &rows, &cols);
    const float *want = p.qkvw + (size_t)1 * 128 * 64 + (size_t)96 * 64;
    check("llama_export_v_proj_rows", v && rows == 32 && cols == 64 && !memcmp(v, want, 32 * 64 * sizeof(float)), "shape [%lld, %lld]",
          (long long)rows, (long long)cols);
    free(v);
    float *up = exported_tensor(dir, "model.layers.0.mlp.up_proj.weight", &rows, &cols);  // rows FF..2FF of fcw, layer 0
    check("llama_export_up_proj_rows", up && rows == 96 && cols == 64 && !memcmp(up, p.fcw + 96 * 64, 96 * 64 * sizeof(float)),
          "shape [%lld, %lld]", (long long)rows, (long long)cols);
    free(up);
    float *o = exported_tensor(dir, "model.layers.1.self_attn.o_proj.weight", &rows, &cols);
    check("llama_export_o_proj", o && rows == 64 && cols == 64 && !memcmp(o, p.attprojw + 64 * 64, 64 * 64 * sizeof(float)), "shape [%lld, %lld]",
          (long long)rows, (long long)cols);
    free(o);
    float *head = exported_tensor(dir, "lm_head.weight", &rows, &cols);
    check("llama_export_untied_lm_head", head && rows == 50 && !memcmp(head, p.lmhead, 50 * 64 * sizeof(float)), "lm_head missing or wrong");
    free(head);
    // the config as transformers reads it: JSON of published field names and values
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len;
    char *text = read_whole_file(path, &len);
    check("llama_export_config_fields",
          strstr(text, "\"architectures\": [\n    \"LlamaForCausalLM\"\n  ]") && strstr(text, "\"model_type\": \"llama\"") &&
              strstr(text, "\"num_key_value_heads\": 2,") && strstr(text, "\"rms_norm_eps\": 1.2345678e-05,") && strstr(text, "\"rope_theta\": 500000.0,") &&
              strstr(text, "\"rope_type\": \"llama3\"") && strstr(text, "\"tie_word_embeddings\": false,") && strstr(text, "\"head_dim\": 16,") &&
              strstr(text, "\"torch_dtype\": \"float32\"") && strstr(text, "\"eos_token_id\": 2,"),
          "%s", text);
    JsonDoc doc;
    check("llama_export_config_is_json", json_parse(text, len, &doc) == 0, "%s", doc.error);
    json_free(&doc);
    free(text);
    // sharding the same model: many shards, an index, no single file; an eos list (Llama 3.2 Instruct's) comes back whole
    c.eos_more[0] = 8; c.eos_more[1] = 9; c.n_eos_more = 2;
    check("llama_sharded_round_trip", round_trip("llama_sharded", &c, mem, &p, 20000, dir, sizeof dir), "export -> import differs");
    int shards = count_files(dir, "model-");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int single = path_exists(path);
    check("llama_sharded_layout", shards > 2 && !single, "%d shards, model.safetensors %s", shards, single ? "present" : "absent");
    snprintf(path, sizeof path, "%s/config.json", dir);
    text = read_whole_file(path, &len);
    check("llama_export_eos_list", strstr(text, "\"eos_token_id\": [\n    2,\n    8,\n    9\n  ],") != NULL, "%s", text);
    free(text);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    text = read_whole_file(path, &len);
    char total[64], first[64];
    snprintf(total, sizeof total, "\"total_size\": %zu", 4 * model_num_parameters(&c));
    snprintf(first, sizeof first, "\"model.embed_tokens.weight\": \"model-00001-of-%05d.safetensors\"", shards);
    check("llama_index_total_size_and_names", strstr(text, total) && strstr(text, first), "%s", text);
    free(text);
    // exporting single-file into the sharded directory leaves no index behind
    model_save_hf_sharded(dir, &c, &p, 5000000000ull, HF_SAVE_F32);
    check("export_replaces_other_layout", !path_exists(path), "model.safetensors.index.json left beside model.safetensors");
    free(mem);

    // Qwen2: q/k/v biases, tied head (no lm_head stored), sharded
    fresh_model("l2c64h4k1f96bt32", 50, &c, &mem, &p);
    c.rope_theta = 1e6f; c.eps = 1e-6f; c.bos_id = -1; c.eos_id = 7;
    check("qwen2_sharded_round_trip", round_trip("qwen2", &c, mem, &p, 30000, dir, sizeof dir), "export -> import differs");
    // 61056 parameters, 244224 bytes: the greedy split at 30000 bytes gives 10 shards (test_refusals edits them)
    check("qwen2_shard_count", count_files(dir, "model-0") == 10 && model_num_parameters(&c) == 61056, "%d shards", count_files(dir, "model-0"));
    float *kb = exported_tensor(dir, "model.layers.1.self_attn.k_proj.bias", &rows, &cols);  // rows NH HS .. (NH + KVH) HS of qkvb, layer 1
    check("qwen2_export_k_bias", kb && rows == 16 && cols == 0 && !memcmp(kb, p.qkvb + 96 + 64, 16 * sizeof(float)), "shape [%lld]", (long long)rows);
    free(kb);
    head = exported_tensor(dir, "lm_head.weight", &rows, &cols);
    check("qwen2_tied_no_lm_head", !head && count_files(dir, "model-") > 1, "tied export stores lm_head.weight, or was not sharded");
    free(head);
    snprintf(path, sizeof path, "%s/config.json", dir);
    text = read_whole_file(path, &len);
    check("qwen2_export_config_fields",
          strstr(text, "\"Qwen2ForCausalLM\"") && strstr(text, "\"model_type\": \"qwen2\"") && !strstr(text, "attention_bias") &&
              strstr(text, "\"use_sliding_window\": false,") && strstr(text, "\"bos_token_id\": null,") && !strstr(text, "head_dim") &&
              strstr(text, "\"sliding_window\": null,") && strstr(text, "\"rope_scaling\": null,") &&
              strstr(text, "\"rms_norm_eps\": 1e-06,") && strstr(text, "\"tie_word_embeddings\": true,"),
          "%s", text);
    free(text);
    free(mem);

    // GPT-2 sharded and not
    fresh_model("d2c64h2t32", 50, &c, &mem, &p);
    check("gpt2_round_trip", round_trip("gpt2", &c, mem, &p, 5000000000ull, dir, sizeof dir), "export -> import differs");
    check("gpt2_sharded_round_trip", round_trip("gpt2_sharded", &c, mem, &p, 40000, dir, sizeof dir) && count_files(dir, "model-") > 1,
          "export -> import differs, or not sharded");
    float *qkv = exported_tensor(dir, "transformer.h.1.attn.c_attn.weight", &rows, &cols);
    check("gpt2_export_names", qkv && rows == 64 && cols == 192 && !memcmp(qkv, p.qkvw + 64 * 192, 64 * 192 * sizeof(float)), "Conv1D layout");
    free(qkv);
    free(mem);
}

// ---- BF16 and F16 import ------------------------------------------------------

// Rewrites every tensor of dir's model.safetensors as BF16 (bf != 0) or F16 (values
// that are exact in both: multiples of 1/64 below 4).
static void rewrite_half(const char *dir, int bf) {
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    SafeTensors st;
    st_open(&st, path);
    size_t cap = 256 + (size_t)st.count * 400, n = 0, data = 0;
    char *h = (char *)xmalloc(cap);
    n += (size_t)snprintf(h, cap, "{");
    for (int k = 0; k < st.count; k++) {
        const StTensor *t = &st.tensors[k];
        n += (size_t)snprintf(h + n, cap - n, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld", k ? "," : "", t->name, bf ? "BF16" : "F16", (long long)t->shape[0]);
        if (t->ndim == 2) n += (size_t)snprintf(h + n, cap - n, ",%lld", (long long)t->shape[1]);
        n += (size_t)snprintf(h + n, cap - n, "],\"data_offsets\":[%zu,%zu]}", data, data + 2 * (size_t)t->numel);
        data += 2 * (size_t)t->numel;
    }
    n += (size_t)snprintf(h + n, cap - n, "}");
    AtomicFile af;
    atomic_open(&af, path);
    uint64_t hlen = n;
    atomic_write(&af, &hlen, 8);
    atomic_write(&af, h, n);
    for (int k = 0; k < st.count; k++) {
        const StTensor *t = &st.tensors[k];
        const float *x = (const float *)(st.buf + t->begin);
        for (int64_t i = 0; i < t->numel; i++) {
            uint32_t bits;
            memcpy(&bits, &x[i], 4);
            uint16_t half;
            if (bf) half = (uint16_t)(bits >> 16);
            else {  // exact multiples of 1/64 in [-4, 4): exponent and 10 mantissa bits
                uint32_t sign = bits >> 31, e = (bits >> 23) & 0xFF, m = bits & 0x7FFFFF;
                half = (uint16_t)(sign << 15 | (e ? ((e - 127 + 15) << 10 | m >> 13) : 0));
            }
            atomic_write(&af, &half, 2);
        }
    }
    atomic_commit(&af);
    free(h);
    st_close(&st);
}

static void test_half_import(void) {
    for (int bf = 0; bf < 2; bf++) {
        ModelConfig c;
        float *mem;
        ParamTensors p;
        fresh_model("l2c64h4k2f96ut32", 50, &c, &mem, &p);
        size_t P = model_num_parameters(&c);
        for (size_t k = 0; k < P; k++) mem[k] = (float)((int)(k % 401) - 200) / 64.0f;  // exact in BF16? no: 200/64 needs 8 bits; F16 only
        if (bf) for (size_t k = 0; k < P; k++) { uint32_t b; memcpy(&b, &mem[k], 4); b &= 0xFFFF0000u; memcpy(&mem[k], &b, 4); }
        char dir[512];
        snprintf(dir, sizeof dir, "%s/half%d", tmp_root, bf);
        make_dirs(dir);
        model_save_hf_sharded(dir, &c, &p, 5000000000ull, HF_SAVE_F32);
        rewrite_half(dir, bf);
        ModelConfig r;
        float *rmem;
        ParamTensors rp;
        model_load_hf(dir, &r, &rmem, &rp);
        check(bf ? "llama_bf16_import" : "llama_f16_import", !memcmp(rmem, mem, P * sizeof(float)), "widened values differ");
        free(rmem); free(mem);
    }
}

// --save_dtype bf16: fp32 to bf16 rounded to nearest, ties to even, by hand: 1 + 2^-8
// is halfway between 1 and 1 + 2^-7 (keeps the even 1), 1 + 3*2^-8 halfway between
// 1 + 2^-7 and 1 + 2^-6 (goes up to the even one), a hair above or below half goes to
// the nearer; the largest float rounds to infinity, as torch's does. Then an export in
// BF16 (sharded, so the index's sizes count 2 bytes) reads back as those values, with
// config.json's torch_dtype "bfloat16".
static void test_bf16_export(void) {
    const uint32_t in[] = {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x3F807FFFu, 0xBF818000u, 0x7F7FFFFFu, 0x00000000u, 0x80000000u, 0x7F800000u};
    const uint16_t want[] = {0x3F80, 0x3F82, 0x3F81, 0x3F80, 0xBF82, 0x7F80, 0x0000, 0x8000, 0x7F80};
    int bad = -1;
    uint16_t got = 0;
    for (int k = 0; k < 9 && bad < 0; k++) {
        float f;
        memcpy(&f, &in[k], 4);
        if ((got = st_float_to_bf16(f)) != want[k]) bad = k;
    }
    check("bf16_round_to_nearest_even", bad < 0, "0x%08x gave 0x%04x, expected 0x%04x", in[bad < 0 ? 0 : bad], got, want[bad < 0 ? 0 : bad]);
    ModelConfig c;
    float *mem;
    ParamTensors p;
    fresh_model("l2c64h4k2f96ut32", 50, &c, &mem, &p);
    size_t P = model_num_parameters(&c);
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/bf16_export", tmp_root);
    make_dirs(dir);
    model_save_hf_sharded(dir, &c, &p, 20000, HF_SAVE_BF16);
    ModelConfig r;
    float *rmem;
    ParamTensors rp;
    model_load_hf(dir, &r, &rmem, &rp);
    size_t differ = 0;
    for (size_t k = 0; k < P; k++) {
        uint32_t b = (uint32_t)st_float_to_bf16(mem[k]) << 16;
        differ += memcmp(&rmem[k], &b, 4) != 0;
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len;
    char *cfg = read_whole_file(path, &len);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    char *index = read_whole_file(path, &len), total[64];
    snprintf(total, sizeof total, "\"total_size\": %zu", 2 * P);  // every parameter stored once (the head is untied)
    check("llama_bf16_export_reads_back_rounded", differ == 0 && strstr(cfg, "\"torch_dtype\": \"bfloat16\"") && count_files(dir, "model-0000") > 1,
          "%zu of %zu values differ from the rounded weights; config.json %s torch_dtype bfloat16; %d shards", differ, P,
          strstr(cfg, "\"torch_dtype\": \"bfloat16\"") ? "has" : "lacks", count_files(dir, "model-0000"));
    check("llama_bf16_index_total_size", strstr(index, total) != NULL, "index lacks %s", total);
    free(cfg); free(index); free(rmem); free(mem);
}

// ---- bad directories: one line naming the file, exit 1 -------------------------

// Loads dir in a child process; checks it exits 1 with one stderr line holding needle.
static void expect_refused(const char *name, const char *dir, const char *needle) {
    char err[600];
    snprintf(err, sizeof err, "%s/stderr.txt", tmp_root);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(err, "w", stderr)) _exit(98);
        ModelConfig c;
        float *mem;
        ParamTensors p;
        model_load_hf(dir, &c, &mem, &p);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    size_t len;
    char *msg = read_whole_file(err, &len);
    int lines = 0;
    for (char *q = msg; *q; q++) lines += *q == '\n';
    char full[200];
    snprintf(full, sizeof full, "refuses_%s", name);
    check(full, WIFEXITED(status) && WEXITSTATUS(status) == 1 && lines == 1 && strstr(msg, needle), "exit %d, %d lines: %s",
          WIFEXITED(status) ? WEXITSTATUS(status) : -1, lines, msg);
    free(msg);
}

// A copy of the sharded Qwen2 export with `from` replaced by `to` in file `file`.
static void variant(const char *name, const char *file, const char *from, const char *to, char *dir, size_t dn) {
    snprintf(dir, dn, "%s/bad_%s", tmp_root, name);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s/qwen2 %s", dir, tmp_root, dir);
    if (system(cmd) != 0) fatal("%s: copy failed", dir);
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    size_t len;
    char *text = read_whole_file(path, &len);
    char *at = strstr(text, from);
    if (!at) fatal("%s: no \"%s\" to replace", path, from);
    size_t cap = len + strlen(to) + 1;
    char *out = (char *)xmalloc(cap);
    snprintf(out, cap, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    write_text(path, out);
    free(out); free(text);
}

static void test_refusals(void) {
    char dir[512], path[700], needle[700];
    const char *ix = "model.safetensors.index.json";
    variant("dotdot", ix, "\"model-00001-of-", "\"../model-00001-of-", dir, sizeof dir);
    expect_refused("index_parent_dir", dir, "model.safetensors.index.json: weight_map names file \"../model-00001");
    variant("slash", ix, "\"model-00002-of-", "\"/tmp/model-00002-of-", dir, sizeof dir);
    expect_refused("index_absolute_path", dir, "expected a plain file name inside the model directory");
    variant("dotdot_only", ix, "\"model-00001-of-00010.safetensors\"", "\"..\"", dir, sizeof dir);
    expect_refused("index_dotdot_name", dir, "weight_map names file \"..\"");
    variant("missing_shard", ix, "{", "{", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/model-00002-of-00010.safetensors", dir);
    unlink(path);
    snprintf(needle, sizeof needle, "%s: cannot open", path);
    expect_refused("missing_shard", dir, needle);
    variant("wrong_shard", ix, "\"model.layers.1.self_attn.q_proj.weight\": \"",
            "\"model.layers.1.self_attn.q_proj.weight\": \"model-00001-of-00010.safetensors\", \"x\": \"", dir, sizeof dir);
    expect_refused("tensor_not_in_named_shard", dir, "has no tensor model.layers.1.self_attn.q_proj.weight, which");
    variant("unlisted", ix, "\"model.norm.weight\"", "\"model.norm.weight.x\"", dir, sizeof dir);
    expect_refused("tensor_missing_from_index", dir, "model.safetensors.index.json: missing tensor model.norm.weight");
    variant("shape", "config.json", "\"intermediate_size\": 96", "\"intermediate_size\": 80", dir, sizeof dir);
    expect_refused("shape_mismatch", dir, "tensor model.layers.0.mlp.gate_proj.weight has shape [96, 64], expected [80, 64] from config.json");
    variant("rope", "config.json", "\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}", dir, sizeof dir);
    expect_refused("unknown_rope_type", dir, "config.json: rope_scaling type \"yarn\" is not supported");
    variant("rope_old_key", "config.json", "\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 4.0}", dir, sizeof dir);
    expect_refused("unknown_rope_type_old_key", dir, "rope_scaling type \"linear\"");
    variant("act", "config.json", "\"silu\"", "\"gelu\"", dir, sizeof dir);
    expect_refused("hidden_act", dir, "config.json: hidden_act must be \"silu\"");
    variant("mlp_bias", "config.json", "\"use_cache\": true", "\"mlp_bias\": true", dir, sizeof dir);
    expect_refused("mlp_bias", dir, "config.json: mlp_bias true is not supported");
    variant("window", "config.json", "\"use_sliding_window\": false", "\"use_sliding_window\": true", dir, sizeof dir);
    expect_refused("sliding_window", dir, "use_sliding_window true");
    variant("mistral", "config.json", "\"model_type\": \"qwen2\"", "\"model_type\": \"mistral\"", dir, sizeof dir);
    expect_refused("model_type", dir, "config.json: model_type \"mistral\" is not supported");
    variant("attn_bias", "config.json", "\"model_type\": \"qwen2\"", "\"model_type\": \"llama\", \"attention_bias\": true", dir, sizeof dir);
    expect_refused("llama_attention_bias", dir, "attention_bias true");
    variant("eos", "config.json", "\"eos_token_id\": 7", "\"eos_token_id\": \"7\"", dir, sizeof dir);
    expect_refused("eos_not_an_id", dir, "field \"eos_token_id\" must be a token id");
    variant("eos5", "config.json", "\"eos_token_id\": 7", "\"eos_token_id\": [7, 8, 9, 10, 11]", dir, sizeof dir);
    expect_refused("eos_list_too_long", dir, "eos_token_id lists 5 ids");
    // a Llama export whose tied flag is set although lm_head.weight differs from the embedding
    snprintf(dir, sizeof dir, "%s/bad_tied", tmp_root);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf %s && cp -r %s/llama %s", dir, tmp_root, dir);
    if (system(cmd) != 0) fatal("copy failed");
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len;
    char *text = read_whole_file(path, &len);
    char *at = strstr(text, "\"tie_word_embeddings\": false");
    memcpy(at, "\"tie_word_embeddings\": true ", 28);
    write_text(path, text);
    free(text);
    expect_refused("tied_lm_head_differs", dir, "model.safetensors: lm_head.weight differs from the token embedding, but the output head is tied");
    snprintf(dir, sizeof dir, "%s/empty", tmp_root);
    make_dirs(dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(cmd, sizeof cmd, "cp %s/llama/config.json %s", tmp_root, path);
    if (system(cmd) != 0) fatal("copy failed");
    expect_refused("no_weights", dir, "no model.safetensors and no model.safetensors.index.json");
}

// The newer families' exports: every feature survives export -> import, in
// transformers' names (Gemma 3's post_attention_layernorm is the attention output's
// norm, pre_feedforward_layernorm the one before the MLP), with the config fields that
// rebuild the layers (layer_types, sliding_window, no_rope_layers, rope scaling).
static void test_family_round_trips(void) {
    ModelConfig c;
    float *mem;
    ParamTensors p;
    char dir[512], path[700];
    int64_t rows, cols;
    size_t tlen;
    fresh_model("l3c64h4k2f96a24qu", 50, &c, &mem, &p);
    check("qwen3_round_trip", round_trip("qwen3", &c, mem, &p, 5000000000ull, dir, sizeof dir), "export -> import differs");
    float *kn = exported_tensor(dir, "model.layers.2.self_attn.k_norm.weight", &rows, &cols);
    check("qwen3_export_k_norm", kn && rows == 24 && cols == 0 && !memcmp(kn, p.knormw + 2 * 24, 24 * sizeof(float)), "shape [%lld]", (long long)rows);
    free(kn);
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = read_whole_file(path, &tlen);
    check("qwen3_export_config_fields", strstr(text, "\"architectures\": [\n    \"Qwen3ForCausalLM\"\n  ],") && strstr(text, "\"model_type\": \"qwen3\",") &&
              strstr(text, "\"head_dim\": 24,") && strstr(text, "\"use_sliding_window\": false,") && strstr(text, "\"tie_word_embeddings\": false,"),
          "%s", text);
    free(text);
    free(mem);

    fresh_model("l4c64h4k2f96a32gw7p2", 50, &c, &mem, &p);
    c.rope_linear = 8.0f;
    check("gemma3_round_trip", round_trip("gemma3", &c, mem, &p, 5000000000ull, dir, sizeof dir), "export -> import differs");
    float *post = exported_tensor(dir, "model.layers.1.post_attention_layernorm.weight", &rows, &cols);
    float *pre = exported_tensor(dir, "model.layers.1.pre_feedforward_layernorm.weight", &rows, &cols);
    float *postff = exported_tensor(dir, "model.layers.3.post_feedforward_layernorm.weight", &rows, &cols);
    check("gemma3_export_norm_names", post && pre && postff && !memcmp(post, p.postattnw + 64, 64 * 4) && !memcmp(pre, p.ln2w + 64, 64 * 4) &&
              !memcmp(postff, p.postffnw + 3 * 64, 64 * 4), "post_attention / pre_feedforward / post_feedforward_layernorm mixed up");
    free(post); free(pre); free(postff);
    snprintf(path, sizeof path, "%s/config.json", dir);
    text = read_whole_file(path, &tlen);
    check("gemma3_export_config_fields",
          strstr(text, "\"layer_types\": [\n    \"sliding_attention\",\n    \"full_attention\",\n    \"sliding_attention\",\n    \"full_attention\"\n  ],") &&
              strstr(text, "\"sliding_window\": 7,") && strstr(text, "\"model_type\": \"gemma3_text\",") &&
              strstr(text, "\"query_pre_attn_scalar\": 32,") && strstr(text, "\"rope_local_base_freq\": 10000.0,") &&
              strstr(text, "\"rope_scaling\": {\n    \"factor\": 8.0,\n    \"rope_type\": \"linear\"\n  },") &&
              strstr(text, "\"hidden_activation\": \"gelu_pytorch_tanh\",") && !strstr(text, "lm_head"),
          "%s", text);
    free(text);
    free(mem);

    fresh_model("l5c64h4k2nu", 50, &c, &mem, &p);
    check("smollm3_round_trip", round_trip("smollm3", &c, mem, &p, 5000000000ull, dir, sizeof dir), "export -> import differs");
    snprintf(path, sizeof path, "%s/config.json", dir);
    text = read_whole_file(path, &tlen);
    check("smollm3_export_config_fields",
          strstr(text, "\"no_rope_layers\": [\n    1,\n    1,\n    1,\n    0,\n    1\n  ],") && strstr(text, "\"model_type\": \"smollm3\",") &&
              strstr(text, "\"use_sliding_window\": false,") && !strstr(text, "\"head_dim\"") &&
              strstr(text, "\"pad_token_id\": null,"),  // else transformers takes SmolLM3Config's 128004, past V
          "%s", text);
    free(text);
    free(mem);
}

// A tied model may store lm_head.weight too (equal to the embedding): accepted.
static void test_tied_with_lm_head(void) {
    ModelConfig c;
    float *mem;
    ParamTensors p;
    fresh_model("l2c64h4k2f96ut32", 50, &c, &mem, &p);
    memcpy(p.lmhead, p.wte, 50 * 64 * sizeof(float));
    char dir[512], path[700];
    snprintf(dir, sizeof dir, "%s/tied_stored", tmp_root);
    make_dirs(dir);
    model_save_hf_sharded(dir, &c, &p, 5000000000ull, HF_SAVE_F32);
    snprintf(path, sizeof path, "%s/config.json", dir);
    size_t len;
    char *text = read_whole_file(path, &len);
    char *at = strstr(text, "\"tie_word_embeddings\": false");
    memcpy(at, "\"tie_word_embeddings\": true ", 28);
    write_text(path, text);
    free(text);
    ModelConfig r;
    float *rmem;
    ParamTensors rp;
    model_load_hf(dir, &r, &rmem, &rp);
    check("tied_with_equal_lm_head", r.tied && model_num_parameters(&r) + 50 * 64 == model_num_parameters(&c) && !memcmp(rp.wte, p.wte, 50 * 64 * 4),
          "tied %d", r.tied);
    free(rmem); free(mem);
}

// dev/ref's Llama and Qwen2 directories (written by dev/ref_llama.py in Python, not by
// this code): import -> export gives config.json byte for byte (keys, order, number
// formats as Python's json writes them) and every tensor under the same name, shape
// and values, and no other tensor.
// The newer families' references (dev/ref_families.py) write the config fields their
// published files have (Qwen3's max_window_layers instead of layer_types, Gemma's
// pad_token_id), so their exports must import as the same model rather than match
// the text.
static void test_reference_dirs(void) {
    const char *refs[] = {"dev/ref/tiny_llama", "dev/ref/tiny_llama_bf16", "dev/ref/tiny_qwen2", "dev/ref/tiny_qwen3", "dev/ref/tiny_smollm3",
                          "dev/ref/tiny_gemma3"};
    for (int k = 0; k < 6; k++) {
        char name[100], dir[512], path[700], refpath[700];
        snprintf(name, sizeof name, "reference_export_%s", refs[k] + 8);
        snprintf(refpath, sizeof refpath, "%s/config.json", refs[k]);
        if (!path_exists(refpath)) { printf("skip %s: %s missing (dev/ref_llama.py or dev/ref_families.py writes it)\n", name, refs[k]); continue; }
        ModelConfig c;
        float *mem;
        ParamTensors p;
        model_load_hf(refs[k], &c, &mem, &p);
        snprintf(dir, sizeof dir, "%s/ref%d", tmp_root, k);
        make_dirs(dir);
        model_save_hf_sharded(dir, &c, &p, k == 0 ? 20000 : 5000000000ull, HF_SAVE_F32);
        free(mem);
        ModelConfig back;
        model_read_hf_config(dir, &back);
        size_t la, lb;
        snprintf(path, sizeof path, "%s/config.json", dir);
        char *a = read_whole_file(refpath, &la), *b = read_whole_file(path, &lb);
        const char *bf16 = "\"torch_dtype\": \"bfloat16\"";
        char *dtype = strstr(a, bf16);  // the export is F32 whatever the source
        if (dtype) {
            char *t = (char *)xmalloc(la + 1);
            snprintf(t, la + 1, "%.*s\"torch_dtype\": \"float32\"%s", (int)(dtype - a), a, dtype + strlen(bf16));
            free(a);
            a = t;
            la = strlen(a);
        }
        int same_config = k < 3 ? la == lb && !memcmp(a, b, la) : !memcmp(&c, &back, sizeof c);
        free(a); free(b);
        HfWeights want, got;
        hf_weights_open(refs[k], &want);
        hf_weights_open(dir, &got);
        int ntensors = 0, nexported = 0, bad = 0;
        const char *bad_name = "";
        for (int f = 0; f < want.nfiles; f++)
            for (int t = 0; t < want.files[f].count; t++) {
                const StTensor *w = &want.files[f].tensors[t];
                const SafeTensors *gf;
                const StTensor *g = hf_find(&got, w->name, &gf);
                ntensors++;
                int ok = g && g->ndim == w->ndim && g->numel == w->numel;
                for (int d = 0; ok && d < w->ndim; d++) ok = g->shape[d] == w->shape[d];
                if (ok) {
                    float *x = (float *)xmalloc((size_t)w->numel * 4), *y = (float *)xmalloc((size_t)w->numel * 4);
                    st_read_f32(&want.files[f], w, x);
                    st_read_f32(gf, g, y);
                    ok = !memcmp(x, y, (size_t)w->numel * 4);
                    free(x); free(y);
                }
                if (!ok && !bad++) bad_name = w->name;
            }
        for (int f = 0; f < got.nfiles; f++) nexported += got.files[f].count;
        check(name, same_config && !bad && nexported == ntensors, "config.json %s; %d of %d tensors differ (first %s); %d exported",
              same_config ? "equal" : "differs", bad, ntensors, bad_name, nexported);
        hf_weights_close(&want);
        hf_weights_close(&got);
    }
}

static void test_shard_size_env(void) {
    setenv("SFT_MAX_SHARD_SIZE", "200MB", 1);
    uint64_t mb = hf_max_shard_bytes();
    setenv("SFT_MAX_SHARD_SIZE", "1000", 1);
    uint64_t b = hf_max_shard_bytes();
    unsetenv("SFT_MAX_SHARD_SIZE");
    check("shard_size_env", mb == 200000000ull && b == 1000 && hf_max_shard_bytes() == 5000000000ull, "200MB -> %llu, 1000 -> %llu",
          (unsigned long long)mb, (unsigned long long)b);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    snprintf(tmp_root, sizeof tmp_root, "/tmp/test_hf.%d", (int)getpid());
    if (make_dirs(tmp_root) != 0) fatal("%s: cannot create test directory", tmp_root);
    test_published_configs();
    test_published_family_configs();
    test_round_trips();
    test_family_round_trips();
    test_half_import();
    test_bf16_export();
    test_refusals();
    test_family_refusals();
    test_tied_with_lm_head();
    test_reference_dirs();
    test_shard_size_env();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
    if (failures == 0 && system(cmd) != 0) printf("note: could not remove %s\n", tmp_root);
    printf("test_hf: %d failed\n", failures);
    return failures ? 1 : 0;
}
