// tpar-llama-model: writes a GGUF model with random weights, so that llama.cpp's tensor
// parallelism (-sm tensor) can be tested and timed where real weights cannot be
// downloaded. A Llama-style dense model, or the same with mixture-of-experts FFNs
// (Mixtral's layout: llama.cpp's MoE path, where ggml's meta backend delays the
// AllReduce past the expert sum). The tokenizer is a small SentencePiece-style vocabulary
// with byte fallback, so any prompt tokenizes.
//
// Weights are uniform random with the standard deviation a trained model's initialiser
// would give (1/sqrt(fan_in)), so activations stay bounded through the layers; the data
// is written straight in the chosen type, deterministically from the seed, in parallel:
// q8_0 blocks are random int8 with one scale (Llama-3-8B's shapes, 8.5 GB, take about a
// minute on 16 cores); the k-quant mixes llama.cpp users run (Q4_K_M, ...) quantize each
// random row with ggml's own quantizer, each tensor in the type llama-quantize would give
// it for that mix (llama.cpp's src/llama-quant.cpp, for this architecture).
#include "ggml.h"
#include "gguf.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Shape {
    std::string arch = "dense";  // dense | moe
    int64_t embd = 256, layers = 4, heads = 4, heads_kv = 2, ff = 512, vocab = 512, ctx = 4096;
    int64_t head_dim = 0;  // 0: embd / heads
    int64_t experts = 0, experts_used = 0;
    std::string type = "q8_0";  // f32, f16, or one of the mixes in kMixes
    uint64_t seed = 1;
    float rope_base = 10000.0f;
};

const char * usage_text =
    "usage: tpar-llama-model -o FILE [options]\n"
    "Writes a GGUF model with random weights (architecture \"llama\"; dense, or with\n"
    "mixture-of-experts FFNs in Mixtral's layout) for testing and timing llama.cpp.\n"
    "\n"
    "  -o, --output FILE     where to write (required)\n"
    "  --preset NAME         tiny (default: 256 wide, 4 layers), tiny-moe (tiny with 4\n"
    "                        experts, 2 used), llama3-8b (Llama-3-8B's shapes),\n"
    "                        llama3-70b (Llama-3-70B's; with --layers 20, a quarter of it)\n"
    "  --arch dense|moe      dense FFNs or experts (moe needs --experts)\n"
    "  --embd N              embedding width (a multiple of 32 and of the head count)\n"
    "  --layers N            transformer blocks\n"
    "  --heads N             attention heads\n"
    "  --heads-kv N          key/value heads (divides --heads)\n"
    "  --head-dim N          each head's width (default: --embd / --heads); with fewer heads\n"
    "                        than --embd / N, one GPU's share of a model split by\n"
    "                        -sm tensor (Llama-3-8B on two: --heads 16 --heads-kv 4\n"
    "                        --head-dim 128 --ff 7168)\n"
    "  --ff N                FFN width (per expert for moe; a multiple of 32)\n"
    "  --vocab N             vocabulary size (at least 300)\n"
    "  --experts N           experts per MoE layer (moe)\n"
    "  --experts-used N      experts per token (moe)\n"
    "  --ctx N               context length the model declares\n"
    "  --type TYPE           the weights' type, as llama-quantize names it: f32, f16,\n"
    "                        q8_0 (default), q4_0, q4_k_m, q5_k_m, q6_k; norms and the\n"
    "                        router stay f32, and each tensor of a mix takes the type\n"
    "                        llama-quantize gives it (q4_k_m: output and some attn_v and\n"
    "                        ffn_down in q6_k, the rest q4_k)\n"
    "  --describe FILE       list a GGUF model's tensors: name, type, shape; then exit\n"
    "  --seed N              random seed (default 1)\n"
    "  -h, --help            this text\n"
    "\n"
    "exit status: 0 written, 1 a failure while writing, 2 a usage error\n";

[[noreturn]] void usage_error(const std::string & what) {
    std::fprintf(stderr, "tpar-llama-model: %s\n(tpar-llama-model --help lists the options)\n", what.c_str());
    std::exit(2);
}

int64_t parse_int(const char * flag, const char * text, int64_t lo, int64_t hi) {
    char * end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text, &end, 10);
    if (errno || !end || *end || end == text || v < lo || v > hi) {
        usage_error(std::string(flag) + " takes an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                    ", not '" + text + "'");
    }
    return v;
}

void apply_preset(Shape & s, const std::string & name) {
    if (name == "tiny") {
        s = Shape{};
    } else if (name == "tiny-moe") {
        s = Shape{};
        s.arch = "moe";
        s.experts = 4;
        s.experts_used = 2;
    } else if (name == "llama3-8b") {
        s = Shape{};
        s.embd = 4096; s.layers = 32; s.heads = 32; s.heads_kv = 8; s.ff = 14336; s.vocab = 128256; s.ctx = 8192;
        s.rope_base = 500000.0f;
    } else if (name == "llama3-70b") {
        s = Shape{};
        s.embd = 8192; s.layers = 80; s.heads = 64; s.heads_kv = 8; s.ff = 28672; s.vocab = 128256; s.ctx = 8192;
        s.rope_base = 500000.0f;
    } else {
        usage_error("--preset takes tiny, tiny-moe, llama3-8b or llama3-70b, not '" + name + "'");
    }
}

// splitmix64: a fast, well-mixed generator; one stream per (tensor, chunk).
struct Rng {
    uint64_t state;
    explicit Rng(uint64_t seed) : state(seed) {}
    uint64_t next() {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    // uniform in [-1, 1)
    float symmetric() { return float(int64_t(next() >> 11) - (int64_t(1) << 52)) * (1.0f / float(int64_t(1) << 52)); }
};

struct TensorPlan {
    std::string name;
    std::vector<int64_t> ne;
    ggml_type type;
    float sigma;  // 0: all ones (norm weights)
};

// A weight type as llama-quantize names it: the type of most tensors, and llama.cpp's
// file type (general.file_type) for the file.
struct Mix {
    const char * name;
    ggml_type base;
    uint32_t file_type;
};
const Mix kMixes[] = {
    {"f32", GGML_TYPE_F32, 0},     {"f16", GGML_TYPE_F16, 1},       {"q8_0", GGML_TYPE_Q8_0, 7},
    {"q4_0", GGML_TYPE_Q4_0, 2},   {"q4_k_m", GGML_TYPE_Q4_K, 15},  {"q5_k_m", GGML_TYPE_Q5_K, 17},
    {"q6_k", GGML_TYPE_Q6_K, 18},
};

const Mix * find_mix(const std::string & name) {
    for (const Mix & m : kMixes) {
        if (name == m.name) return &m;
    }
    return nullptr;
}

// The roles llama-quantize's choice of type looks at.
enum class Role { token_embd, output, attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down, other };

// What llama-quantize (llama.cpp de3ff815, src/llama-quant.cpp, without an imatrix or
// overrides) gives a tensor of this architecture for the mix: the base type, moved up
// for the output, for some layers' attn_v and ffn_down (the first and last eighth and
// every third between) in the _M mixes, and for MoE models of 8 experts and 80-layer
// GQA models (llama.cpp's "70B"); then a type whose block fits the row where the
// chosen one does not.
ggml_type weight_type(const Shape & s, const Mix & mix, Role role, int64_t layer, int64_t ne0) {
    ggml_type t = mix.base;
    if (!ggml_is_quantized(t) || t == GGML_TYPE_Q8_0) return t;  // q8_0, f16, f32: every weight
    const bool m_mix = mix.file_type == 15 || mix.file_type == 17;  // q4_k_m, q5_k_m
    const int64_t n = s.layers;
    const bool more_bits = layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2;
    const bool eight_experts = s.arch == "moe" && s.experts == 8;
    const bool model_70b = !eight_experts && n == 80 && s.heads != s.heads_kv;
    switch (role) {
        case Role::output:
            t = ne0 % 256 != 0 ? GGML_TYPE_Q8_0 : GGML_TYPE_Q6_K;
            break;
        case Role::attn_v:
            if (m_mix && more_bits) t = GGML_TYPE_Q6_K;
            if (model_70b && (t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q4_K)) t = GGML_TYPE_Q5_K;
            if (eight_experts) t = GGML_TYPE_Q8_0;
            break;
        case Role::attn_k:
            if (eight_experts) t = GGML_TYPE_Q8_0;
            break;
        case Role::ffn_down:
            if (m_mix && more_bits) t = GGML_TYPE_Q6_K;
            break;
        case Role::attn_output:
            if (eight_experts && mix.file_type == 15) t = GGML_TYPE_Q5_K;
            break;
        default:
            break;
    }
    if (ne0 % ggml_blck_size(t) != 0) {
        // llama-quantize's fallback for a row its type's block does not divide
        switch (t) {
            case GGML_TYPE_Q4_K: t = GGML_TYPE_Q5_0; break;
            case GGML_TYPE_Q5_K: t = GGML_TYPE_Q5_1; break;
            case GGML_TYPE_Q6_K: t = GGML_TYPE_Q8_0; break;
            default: break;
        }
        if (ne0 % ggml_blck_size(t) != 0) t = GGML_TYPE_F16;
    }
    return t;
}

// Fills `rows` rows of a tensor (row = ne[0] values) starting at row `row0`, in its type.
void fill_rows(const TensorPlan & t, uint64_t seed, int64_t row0, int64_t rows, uint8_t * out) {
    const int64_t n0 = t.ne[0];
    const float a = t.sigma * std::sqrt(3.0f);  // uniform on [-a, a] has standard deviation sigma
    std::vector<float> row(n0);
    for (int64_t r = 0; r < rows; ++r) {
        Rng rng(seed ^ (uint64_t(row0 + r) * 0xd1b54a32d192ed03ull));
        if (t.type == GGML_TYPE_Q8_0) {
            // blocks of {f16 scale, 32 x int8}: values d*q, q uniform in [-127, 127]
            const ggml_fp16_t d = ggml_fp32_to_fp16(a / 127.0f);
            uint8_t * p = out + r * (n0 / 32) * 34;
            for (int64_t b = 0; b < n0 / 32; ++b, p += 34) {
                std::memcpy(p, &d, 2);
                for (int k = 0; k < 32; ++k) p[2 + k] = uint8_t(int8_t(int(rng.next() % 255) - 127));
            }
            continue;
        }
        for (int64_t i = 0; i < n0; ++i) row[i] = t.sigma == 0.0f ? 1.0f : a * rng.symmetric();
        if (t.type == GGML_TYPE_F32) {
            std::memcpy(out + r * n0 * 4, row.data(), size_t(n0) * 4);
        } else if (t.type == GGML_TYPE_F16) {
            ggml_fp32_to_fp16_row(row.data(), reinterpret_cast<ggml_fp16_t *>(out + r * n0 * 2), n0);
        } else {
            // ggml's own quantizer, as llama-quantize runs it without an imatrix
            const size_t row_bytes = ggml_row_size(t.type, n0);
            ggml_quantize_chunk(t.type, row.data(), out + size_t(r) * row_bytes, 0, 1, n0, nullptr);
        }
    }
}

std::vector<TensorPlan> plan_tensors(const Shape & s, const Mix & mix) {
    const int64_t head_dim = s.head_dim ? s.head_dim : s.embd / s.heads, q = head_dim * s.heads, kv = head_dim * s.heads_kv;
    const float in_embd = 1.0f / std::sqrt(float(s.embd)), in_ff = 1.0f / std::sqrt(float(s.ff));
    std::vector<TensorPlan> t;
    auto weight = [&](const std::string & name, std::vector<int64_t> ne, Role role, int64_t layer, float sigma) {
        const ggml_type type = weight_type(s, mix, role, layer, ne[0]);
        t.push_back({name, std::move(ne), type, sigma});
    };
    weight("token_embd.weight", {s.embd, s.vocab}, Role::token_embd, 0, 1.0f);
    for (int64_t l = 0; l < s.layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        t.push_back({p + "attn_norm.weight", {s.embd}, GGML_TYPE_F32, 0.0f});
        weight(p + "attn_q.weight", {s.embd, q}, Role::attn_q, l, in_embd);
        weight(p + "attn_k.weight", {s.embd, kv}, Role::attn_k, l, in_embd);
        weight(p + "attn_v.weight", {s.embd, kv}, Role::attn_v, l, in_embd);
        weight(p + "attn_output.weight", {q, s.embd}, Role::attn_output, l, 1.0f / std::sqrt(float(q)));
        t.push_back({p + "ffn_norm.weight", {s.embd}, GGML_TYPE_F32, 0.0f});
        if (s.arch == "moe") {
            t.push_back({p + "ffn_gate_inp.weight", {s.embd, s.experts}, GGML_TYPE_F32, in_embd});
            weight(p + "ffn_gate_exps.weight", {s.embd, s.ff, s.experts}, Role::ffn_gate, l, in_embd);
            weight(p + "ffn_up_exps.weight", {s.embd, s.ff, s.experts}, Role::ffn_up, l, in_embd);
            weight(p + "ffn_down_exps.weight", {s.ff, s.embd, s.experts}, Role::ffn_down, l, in_ff);
        } else {
            weight(p + "ffn_gate.weight", {s.embd, s.ff}, Role::ffn_gate, l, in_embd);
            weight(p + "ffn_up.weight", {s.embd, s.ff}, Role::ffn_up, l, in_embd);
            weight(p + "ffn_down.weight", {s.ff, s.embd}, Role::ffn_down, l, in_ff);
        }
    }
    t.push_back({"output_norm.weight", {s.embd}, GGML_TYPE_F32, 0.0f});
    // a wider spread than 1/sqrt(n) keeps greedy choices clear of near-ties
    weight("output.weight", {s.embd, s.vocab}, Role::output, 0, 4.0f * in_embd);
    return t;
}

// --describe: one line per tensor, "name type ne0xne1...", as the file holds them.
int describe(const char * path) {
    ggml_context * meta = nullptr;
    gguf_init_params params = {true, &meta};
    gguf_context * ctx = gguf_init_from_file(path, params);
    if (!ctx) {
        std::fprintf(stderr, "tpar-llama-model: %s is not a GGUF file it can read\n", path);
        return 1;
    }
    for (int64_t i = 0; i < gguf_get_n_tensors(ctx); ++i) {
        const char * name = gguf_get_tensor_name(ctx, i);
        const ggml_tensor * x = ggml_get_tensor(meta, name);
        std::printf("%s %s ", name, ggml_type_name(gguf_get_tensor_type(ctx, i)));
        for (int d = 0; d < ggml_n_dims(x); ++d) std::printf(d ? "x%lld" : "%lld", (long long) x->ne[d]);
        std::printf("\n");
    }
    gguf_free(ctx);
    ggml_free(meta);
    return 0;
}

// A SentencePiece-style vocabulary: <unk> <s> </s>, the 256 byte tokens (so any text
// tokenizes), then lowercase pieces with and without the word-start mark.
void write_vocab(gguf_context * ctx, int64_t vocab) {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<int32_t> types = {2, 3, 3};  // unknown, control, control
    char hex[8];
    for (int b = 0; b < 256; ++b) {
        std::snprintf(hex, sizeof hex, "<0x%02X>", b);
        tokens.push_back(hex);
        types.push_back(6);  // byte
    }
    const std::string mark = "\xe2\x96\x81";  // U+2581, SentencePiece's word start
    for (int64_t k = 0; int64_t(tokens.size()) < vocab; ++k) {
        // k -> a base-26 lowercase string of increasing length
        std::string piece;
        int64_t v = k / 2;
        do {
            piece.insert(piece.begin(), char('a' + v % 26));
            v = v / 26 - 1;
        } while (v >= 0);
        tokens.push_back(k % 2 ? piece : mark + piece);
        types.push_back(1);  // normal
    }
    std::vector<const char *> names;
    std::vector<float> scores;
    for (size_t i = 0; i < tokens.size(); ++i) {
        names.push_back(tokens[i].c_str());
        scores.push_back(-float(i));
    }
    gguf_set_val_str(ctx, "tokenizer.ggml.model", "llama");
    gguf_set_arr_str(ctx, "tokenizer.ggml.tokens", names.data(), names.size());
    gguf_set_arr_data(ctx, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores.data(), scores.size());
    gguf_set_arr_data(ctx, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types.data(), types.size());
    gguf_set_val_u32(ctx, "tokenizer.ggml.unknown_token_id", 0);
    gguf_set_val_u32(ctx, "tokenizer.ggml.bos_token_id", 1);
    gguf_set_val_u32(ctx, "tokenizer.ggml.eos_token_id", 2);
    gguf_set_val_bool(ctx, "tokenizer.ggml.add_bos_token", true);
}

}  // namespace

int main(int argc, char ** argv) {
    Shape s;
    std::string out;
    std::vector<std::string> args(argv + 1, argv + argc);
    // a preset first, so that other flags refine it whatever their order
    for (size_t i = 0; i + 1 < args.size(); ++i) {
        if (args[i] == "--preset") apply_preset(s, args[i + 1]);
    }
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string & a = args[i];
        if (a == "-h" || a == "--help") {
            std::fputs(usage_text, stdout);
            return 0;
        }
        auto value = [&]() -> const char * {
            if (i + 1 >= args.size()) usage_error(a + " needs a value");
            return args[++i].c_str();
        };
        if (a == "--describe") return describe(value());
        if (a == "-o" || a == "--output") out = value();
        else if (a == "--preset") (void) value();
        else if (a == "--arch") {
            s.arch = value();
            if (s.arch != "dense" && s.arch != "moe") usage_error("--arch takes dense or moe, not '" + s.arch + "'");
        }
        else if (a == "--embd") s.embd = parse_int("--embd", value(), 32, 65536);
        else if (a == "--layers") s.layers = parse_int("--layers", value(), 1, 1024);
        else if (a == "--heads") s.heads = parse_int("--heads", value(), 1, 1024);
        else if (a == "--heads-kv") s.heads_kv = parse_int("--heads-kv", value(), 1, 1024);
        else if (a == "--head-dim") s.head_dim = parse_int("--head-dim", value(), 32, 1024);
        else if (a == "--ff") s.ff = parse_int("--ff", value(), 32, 1 << 20);
        else if (a == "--vocab") s.vocab = parse_int("--vocab", value(), 300, 1 << 22);
        else if (a == "--experts") s.experts = parse_int("--experts", value(), 1, 256);
        else if (a == "--experts-used") s.experts_used = parse_int("--experts-used", value(), 1, 256);
        else if (a == "--ctx") s.ctx = parse_int("--ctx", value(), 16, 1 << 20);
        else if (a == "--seed") s.seed = uint64_t(parse_int("--seed", value(), 0, INT64_MAX));
        else if (a == "--type") {
            s.type = value();
            if (!find_mix(s.type)) usage_error("--type takes f32, f16, q8_0, q4_0, q4_k_m, q5_k_m or q6_k, not '" + s.type + "'");
        }
        else usage_error("unknown option '" + a + "'");
    }
    if (out.empty()) usage_error("-o FILE is required");
    if (s.layers == 80 && s.embd == 8192) {
        bool layers_given = false;
        for (const auto & arg : args) layers_given |= arg == "--layers";
        if (!layers_given) {
            std::fprintf(stderr, "tpar-llama-model: all 80 of Llama-3-70B's layers: about 75 GB at q8_0, 42 GB at q4_k_m, on disk and "
                                 "across the GPUs; --layers 20 makes a quarter of it\n");
        }
    }
    if (!s.head_dim && s.embd % s.heads) usage_error("--embd must be a multiple of --heads (or give --head-dim)");
    if (s.head_dim % 32) usage_error("--head-dim must be a multiple of 32 (the q8_0 block)");
    if (s.heads % s.heads_kv) usage_error("--heads-kv must divide --heads");
    if (s.embd % 32 || s.ff % 32) usage_error("--embd and --ff must be multiples of 32 (the q8_0 block)");
    if (s.arch == "moe" && (s.experts < 2 || s.experts_used < 1 || s.experts_used > s.experts)) {
        usage_error("--arch moe needs --experts N (at least 2) and --experts-used K (1 to N)");
    }
    if (s.arch == "dense" && s.experts) usage_error("--experts needs --arch moe");

    const Mix & mix = *find_mix(s.type);
    const std::vector<TensorPlan> plan = plan_tensors(s, mix);
    ggml_init_params params = {ggml_tensor_overhead() * (plan.size() + 1), nullptr, true};
    ggml_context * meta = ggml_init(params);
    gguf_context * ctx = gguf_init_empty();
    const std::string arch = "llama";
    gguf_set_val_str(ctx, "general.architecture", arch.c_str());
    gguf_set_val_str(ctx, "general.name", ("random weights, " + s.arch).c_str());
    gguf_set_val_u32(ctx, "general.file_type", mix.file_type);
    auto key = [&](const char * k) { return arch + "." + k; };
    gguf_set_val_u32(ctx, key("context_length").c_str(), uint32_t(s.ctx));
    gguf_set_val_u32(ctx, key("embedding_length").c_str(), uint32_t(s.embd));
    gguf_set_val_u32(ctx, key("block_count").c_str(), uint32_t(s.layers));
    gguf_set_val_u32(ctx, key("feed_forward_length").c_str(), uint32_t(s.ff));
    gguf_set_val_u32(ctx, key("attention.head_count").c_str(), uint32_t(s.heads));
    gguf_set_val_u32(ctx, key("attention.head_count_kv").c_str(), uint32_t(s.heads_kv));
    const int64_t head_dim = s.head_dim ? s.head_dim : s.embd / s.heads;
    gguf_set_val_u32(ctx, key("rope.dimension_count").c_str(), uint32_t(head_dim));
    if (s.head_dim) {
        gguf_set_val_u32(ctx, key("attention.key_length").c_str(), uint32_t(head_dim));
        gguf_set_val_u32(ctx, key("attention.value_length").c_str(), uint32_t(head_dim));
    }
    gguf_set_val_f32(ctx, key("rope.freq_base").c_str(), s.rope_base);
    gguf_set_val_f32(ctx, key("attention.layer_norm_rms_epsilon").c_str(), 1e-5f);
    gguf_set_val_u32(ctx, key("vocab_size").c_str(), uint32_t(s.vocab));
    if (s.arch == "moe") {
        gguf_set_val_u32(ctx, key("expert_count").c_str(), uint32_t(s.experts));
        gguf_set_val_u32(ctx, key("expert_used_count").c_str(), uint32_t(s.experts_used));
    }
    write_vocab(ctx, s.vocab);
    for (const auto & t : plan) {
        ggml_tensor * x = ggml_new_tensor(meta, t.type, int(t.ne.size()), t.ne.data());
        ggml_set_name(x, t.name.c_str());
        gguf_add_tensor(ctx, x);
    }

    FILE * f = std::fopen(out.c_str(), "wb");
    if (!f) {
        std::fprintf(stderr, "tpar-llama-model: cannot create %s: %s\n", out.c_str(), std::strerror(errno));
        return 1;
    }
    std::vector<uint8_t> header(gguf_get_meta_size(ctx));
    gguf_get_meta_data(ctx, header.data());
    bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();

    // the metadata ends padded to the alignment; tensor offsets count from there
    const size_t data_offset = header.size();
    size_t total = 0;
    for (size_t i = 0; i < plan.size(); ++i) total += gguf_get_tensor_size(ctx, int64_t(i));
    std::fprintf(stderr, "tpar-llama-model: %s, %s %s, %lld layers, %lld wide, %.1f MB of weights\n", out.c_str(), s.arch.c_str(),
                 mix.name, (long long) s.layers, (long long) s.embd, double(total) / 1e6);

    const unsigned workers = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
    const auto start = std::chrono::steady_clock::now();
    auto last_report = start;
    size_t written = 0;
    std::vector<uint8_t> buffer;
    for (size_t i = 0; ok && i < plan.size(); ++i) {
        const TensorPlan & t = plan[i];
        const size_t offset = data_offset + gguf_get_tensor_offset(ctx, int64_t(i));
        // padding up to the tensor's aligned offset
        const long pos = std::ftell(f);
        if (pos < 0 || size_t(pos) > offset) {
            ok = false;
            break;
        }
        std::vector<uint8_t> pad(offset - size_t(pos), 0);
        ok = std::fwrite(pad.data(), 1, pad.size(), f) == pad.size();
        const int64_t rows = ggml_nelements(ggml_get_tensor(meta, t.name.c_str())) / t.ne[0];
        const size_t row_bytes = gguf_get_tensor_size(ctx, int64_t(i)) / size_t(rows);
        const uint64_t tensor_seed = s.seed * 0x9e3779b97f4a7c15ull + i;
        // a few hundred MB at a time, the rows split over the workers
        const int64_t rows_per_pass = std::max<int64_t>(1, int64_t((256u << 20) / row_bytes));
        for (int64_t r0 = 0; ok && r0 < rows; r0 += rows_per_pass) {
            const int64_t n = std::min(rows_per_pass, rows - r0);
            buffer.resize(size_t(n) * row_bytes);
            std::vector<std::thread> pool;
            for (unsigned w = 0; w < workers; ++w) {
                const int64_t lo = n * w / workers, hi = n * (w + 1) / workers;
                if (lo < hi) pool.emplace_back(fill_rows, std::cref(t), tensor_seed, r0 + lo, hi - lo, buffer.data() + size_t(lo) * row_bytes);
            }
            for (auto & th : pool) th.join();
            ok = std::fwrite(buffer.data(), 1, buffer.size(), f) == buffer.size();
            written += buffer.size();
            const auto now = std::chrono::steady_clock::now();
            if (now - last_report > std::chrono::seconds(10)) {
                std::fprintf(stderr, "tpar-llama-model: %.1f of %.1f GB written\n", double(written) / 1e9, double(total) / 1e9);
                last_report = now;
            }
        }
    }
    ok = std::fclose(f) == 0 && ok;
    gguf_free(ctx);
    ggml_free(meta);
    if (!ok) {
        std::fprintf(stderr, "tpar-llama-model: writing %s failed: %s\n", out.c_str(), std::strerror(errno));
        std::remove(out.c_str());
        return 1;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "tpar-llama-model: done in %.1f s\n", secs);
    return 0;
}
