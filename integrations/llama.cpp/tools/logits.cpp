// tpar-llama-logits: runs one prompt through llama.cpp and saves every logit, so that
// split modes (-sm none / layer / tensor) and AllReduce implementations (ggml's own
// fallback, tpar) can be compared number for number; and compares two such files.
//
//   tpar-llama-logits run -m model.gguf --sm tensor -o out.logits [-p TEXT] [-n N]
//   tpar-llama-logits compare a.logits b.logits [--exact | --bound X | --relative X]
//
// `run` decodes the prompt in one batch (prefill-sized AllReduces) and then N tokens one
// at a time, greedily (decode-sized AllReduces), keeping the logits of every prompt
// position and every generated token. A random-weight model's logits are nearly tied, so
// greedy text is no test; the logits are. `--batch-at K:B` makes step K of the N a batch
// of B tokens (the greedy one and B-1 more), so that the graph's shape changes mid-stream
// and back. `--seqs 0,1,3` decodes the prompt into each of those sequences of a context of
// a KV stream a sequence (as llama-server's slots), each its own prompt, then feeds every
// listed sequence one fixed token a step, all in one batch (`--one-by-one`: a batch a
// sequence), so that a step whose sequences' streams are not adjacent can be checked
// against the same steps taken one sequence at a time. `--beside MODE` runs a second
// context in the same process on the same devices (another instance of the model, split
// by MODE), its every step between the first context's decode and the reading of its
// logits, as a draft model or a second model of an application's would.
#include "llama.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace {

const char * usage_text =
    "usage: tpar-llama-logits run -m MODEL -o FILE [--sm none|layer|tensor] [--ts A,B,...] [-p TEXT] [-n N]\n"
    "                             [--ctx N] [--batch-at K:B,... | --seqs S,... [--one-by-one] [--kv-runs N]]\n"
    "                             [--beside none|layer|tensor --beside-output FILE] [--log-prefix TEXT]\n"
    "       tpar-llama-logits compare A B [--exact | --bound X | --relative X]\n"
    "\n"
    "run      loads MODEL on every GPU layer (the devices ggml sees; GGML_VK_VISIBLE_DEVICES\n"
    "         selects them), decodes TEXT in one batch, then N tokens one at a time\n"
    "         (greedy), and writes every logit to FILE\n"
    "  -m, --model FILE     GGUF model\n"
    "  -o, --output FILE    where the logits go\n"
    "  --sm MODE            split mode: none (one device, the default), layer, tensor\n"
    "  --ts A,B,...         how much of the model each device takes, in proportion\n"
    "                       (llama.cpp's --tensor-split; default: by free memory)\n"
    "  -p, --prompt TEXT    the prompt (default: a fixed sentence)\n"
    "  -n N                 tokens generated after the prompt (default 8)\n"
    "  --ctx N              context size (default 512)\n"
    "  --batch-at K:B,...   generated step K (0-based) feeds B tokens at once: the greedy\n"
    "                       one, then B-1 following it in the vocabulary; every row's\n"
    "                       logits are kept (B from 1 to 64)\n"
    "  --seqs S,...         a context of a KV stream a sequence (as llama-server's slots,\n"
    "                       sequences 0 to the largest S); the prompt is decoded into each\n"
    "                       S (sequence S without its first S tokens, so each differs), then\n"
    "                       each of the N steps feeds every S one fixed token, in one batch;\n"
    "                       the logits of each S's last prompt token and of every step's\n"
    "                       rows are kept (S increasing, from 0 to 63)\n"
    "  --one-by-one         with --seqs: each step feeds the sequences in a batch each\n"
    "  --kv-runs N          with --seqs: the most runs of adjacent KV streams one batch may\n"
    "                       join (llama_context_params::n_kv_runs; 1: adjacent streams only)\n"
    "  --beside MODE        a second context in the same process, on another instance of\n"
    "                       the model split by MODE, decoding the same prompt and steps;\n"
    "                       each of its steps runs while the first context's step is in\n"
    "                       flight (between its decode and the reading of its logits)\n"
    "  --beside-output FILE where the second context's logits go\n"
    "  --log-prefix TEXT    llama.cpp's log through a callback (llama_log_set) that writes\n"
    "                       each message to stderr after TEXT and its level (\"TEXT 3: ...\")\n"
    "compare  compares two files of the same run shape: prints the largest absolute\n"
    "         difference, the largest relative to the larger logit range, and how many\n"
    "         values differ at all; fails when they differ by more than the bound\n"
    "  --exact              every value must be identical, bit for bit (the default)\n"
    "  --bound X            the largest absolute difference allowed\n"
    "  --relative X         the largest difference allowed, as a fraction of the largest\n"
    "                       |logit| of the two runs\n"
    "\n"
    "exit status: 0 success (compare: within the bound), 1 a failure (compare: outside\n"
    "the bound), 2 a usage error\n";

[[noreturn]] void usage_error(const std::string & what) {
    std::fprintf(stderr, "tpar-llama-logits: %s\n(tpar-llama-logits --help lists the options)\n", what.c_str());
    std::exit(2);
}

long parse_long(const char * flag, const std::string & text, long lo, long hi) {
    char * end = nullptr;
    errno = 0;
    const long v = std::strtol(text.c_str(), &end, 10);
    if (errno || *end || end == text.c_str() || v < lo || v > hi) {
        usage_error(std::string(flag) + " takes an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                    ", not '" + text + "'");
    }
    return v;
}

// File: "TPLG", rows (u32), vocab (u32), then rows x vocab f32 logits and rows u32 tokens
// (the token each row's logits were computed after).
struct Logits {
    uint32_t rows = 0, vocab = 0;
    std::vector<float> values;
    std::vector<uint32_t> tokens;
};

bool save(const std::string & path, const Logits & l) {
    FILE * f = std::fopen(path.c_str(), "wb");
    if (!f) return false;
    bool ok = std::fwrite("TPLG", 1, 4, f) == 4 && std::fwrite(&l.rows, 4, 1, f) == 1 && std::fwrite(&l.vocab, 4, 1, f) == 1 &&
              std::fwrite(l.values.data(), 4, l.values.size(), f) == l.values.size() &&
              std::fwrite(l.tokens.data(), 4, l.tokens.size(), f) == l.tokens.size();
    return std::fclose(f) == 0 && ok;
}

bool load(const std::string & path, Logits & l) {
    FILE * f = std::fopen(path.c_str(), "rb");
    if (!f) return false;
    char magic[4];
    bool ok = std::fread(magic, 1, 4, f) == 4 && !std::memcmp(magic, "TPLG", 4) && std::fread(&l.rows, 4, 1, f) == 1 &&
              std::fread(&l.vocab, 4, 1, f) == 1 && l.rows < (1u << 20) && l.vocab < (1u << 24);
    if (ok) {
        l.values.resize(size_t(l.rows) * l.vocab);
        l.tokens.resize(l.rows);
        ok = std::fread(l.values.data(), 4, l.values.size(), f) == l.values.size() &&
             std::fread(l.tokens.data(), 4, l.tokens.size(), f) == l.tokens.size();
    }
    std::fclose(f);
    return ok;
}

int compare(const std::vector<std::string> & args) {
    std::vector<std::string> files;
    double bound = 0.0;
    bool relative = false;
    for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--exact") {
            bound = 0.0;
        } else if (args[i] == "--bound" || args[i] == "--relative") {
            if (i + 1 >= args.size()) usage_error(args[i] + " needs a value");
            relative = args[i] == "--relative";
            char * end = nullptr;
            bound = std::strtod(args[++i].c_str(), &end);
            if (*end || !(bound >= 0.0)) usage_error(args[i - 1] + " takes a non-negative number, not '" + args[i] + "'");
        } else if (!args[i].empty() && args[i][0] == '-') {
            usage_error("unknown option '" + args[i] + "' for compare");
        } else {
            files.push_back(args[i]);
        }
    }
    if (files.size() != 2) usage_error("compare takes two files");
    Logits a, b;
    for (int k = 0; k < 2; ++k) {
        if (!load(files[k], k ? b : a)) {
            std::fprintf(stderr, "tpar-llama-logits: cannot read %s as a logits file\n", files[k].c_str());
            return 1;
        }
    }
    if (a.rows != b.rows || a.vocab != b.vocab) {
        std::fprintf(stderr, "tpar-llama-logits: %s has %u x %u logits, %s %u x %u\n", files[0].c_str(), a.rows, a.vocab,
                     files[1].c_str(), b.rows, b.vocab);
        return 1;
    }
    double max_abs = 0.0, range = 0.0;
    size_t differ = 0, nonfinite = 0;
    for (size_t i = 0; i < a.values.size(); ++i) {
        const float x = a.values[i], y = b.values[i];
        if (!std::isfinite(x) || !std::isfinite(y)) ++nonfinite;
        if (std::memcmp(&x, &y, 4)) ++differ;
        max_abs = std::max(max_abs, double(std::fabs(x - y)));
        range = std::max({range, double(std::fabs(x)), double(std::fabs(y))});
    }
    size_t token_differ = 0;
    for (uint32_t r = 0; r < a.rows; ++r) token_differ += a.tokens[r] != b.tokens[r];
    std::printf("compare: %u rows x %u logits: %zu differ (largest |a-b| %.3g, %.3g of the largest |logit| %.3g), "
                "%zu non-finite, %zu of %u input tokens differ\n",
                a.rows, a.vocab, differ, max_abs, range > 0 ? max_abs / range : 0.0, range, nonfinite, token_differ, a.rows);
    if (nonfinite) return 1;
    if (token_differ) {
        std::printf("compare: the runs fed different tokens (greedy choices diverged); only rows before the first "
                    "difference are comparable\n");
        return 1;
    }
    const double allowed = relative ? bound * range : bound;
    const bool ok = bound == 0.0 ? differ == 0 : max_abs <= allowed;
    char what[96];
    if (bound == 0.0) std::snprintf(what, sizeof what, "exact");
    else if (relative) std::snprintf(what, sizeof what, "|a-b| <= %g x %.3g = %.3g", bound, range, allowed);
    else std::snprintf(what, sizeof what, "|a-b| <= %g", bound);
    std::printf("compare: %s (%s)\n", ok ? "within the bound" : "OUTSIDE the bound", what);
    return ok ? 0 : 1;
}

// --seqs: the prompt into each sequence s (without its first s tokens), then n_gen steps that feed
// every sequence the token (7 * step + 31 * s) % n_vocab, in one batch or a batch a sequence.
template <typename Keep>
int run_seqs(llama_context * ctx, llama_batch & batch, const std::vector<llama_token> & tokens,
             const std::vector<int32_t> & seqs, long n_gen, bool one_by_one, Keep & keep) {
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(llama_get_model(ctx)));
    std::vector<int32_t> pos(seqs.size());
    for (size_t k = 0; k < seqs.size(); ++k) {
        const int32_t s = seqs[k];
        batch.n_tokens = 0;
        for (size_t i = size_t(s); i < tokens.size(); ++i) {
            const int32_t j = batch.n_tokens++;
            batch.token[j] = tokens[i];
            batch.pos[j] = j;
            batch.n_seq_id[j] = 1;
            batch.seq_id[j][0] = s;
            batch.logits[j] = i + 1 == tokens.size();
        }
        if (llama_decode(ctx, batch) != 0) {
            std::fprintf(stderr, "tpar-llama-logits: decoding sequence %d's prompt failed\n", s);
            return 1;
        }
        keep(batch.n_tokens - 1, tokens.back());
        pos[k] = batch.n_tokens;
    }
    for (long g = 0; g < n_gen; ++g) {
        batch.n_tokens = 0;
        for (size_t k = 0; k < seqs.size(); ++k) {
            const int32_t j = batch.n_tokens++;
            batch.token[j] = llama_token((7 * g + 31 * seqs[k]) % n_vocab);
            batch.pos[j] = pos[k]++;
            batch.n_seq_id[j] = 1;
            batch.seq_id[j][0] = seqs[k];
            batch.logits[j] = 1;
            if (!one_by_one && k + 1 < seqs.size()) continue;
            if (llama_decode(ctx, batch) != 0) {
                std::fprintf(stderr, "tpar-llama-logits: decoding step %ld failed\n", g);
                return 1;
            }
            for (int32_t i = 0; i < batch.n_tokens; ++i) keep(i, batch.token[i]);
            batch.n_tokens = 0;
        }
    }
    return 0;
}

int run(const std::vector<std::string> & args) {
    std::string model_path, out, prompt = "The quick brown fox jumps over the lazy dog, and tensor parallelism splits every layer.";
    llama_split_mode mode = LLAMA_SPLIT_MODE_NONE;
    long n_gen = 8, n_ctx = 512;
    std::vector<float> split;
    std::vector<std::pair<long, long>> batch_at;  // (step, tokens)
    std::vector<int32_t> seqs;
    bool one_by_one = false;
    long n_kv_runs = -1;
    std::string beside_out;
    llama_split_mode beside_mode = LLAMA_SPLIT_MODE_NONE;
    bool beside = false;
    static std::string log_prefix;
    auto parse_mode = [](const std::string & flag, const std::string & m) {
        if (m == "none") return LLAMA_SPLIT_MODE_NONE;
        if (m == "layer") return LLAMA_SPLIT_MODE_LAYER;
        if (m == "tensor") return LLAMA_SPLIT_MODE_TENSOR;
        usage_error(flag + " takes none, layer or tensor, not '" + m + "'");
    };
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string & a = args[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= args.size()) usage_error(a + " needs a value");
            return args[++i];
        };
        if (a == "-m" || a == "--model") model_path = value();
        else if (a == "-o" || a == "--output") out = value();
        else if (a == "-p" || a == "--prompt") prompt = value();
        else if (a == "-n") n_gen = parse_long("-n", value(), 0, 4096);
        else if (a == "--ctx") n_ctx = parse_long("--ctx", value(), 16, 1 << 20);
        else if (a == "--batch-at") {
            const std::string v = value();
            for (size_t at = 0; at <= v.size();) {
                const size_t comma = std::min(v.find(',', at), v.size());
                const std::string part = v.substr(at, comma - at);
                const size_t colon = part.find(':');
                if (colon == std::string::npos) usage_error("--batch-at takes STEP:TOKENS pairs separated by commas, not '" + v + "'");
                batch_at.emplace_back(parse_long("--batch-at's step", part.substr(0, colon), 0, 4095),
                                      parse_long("--batch-at's tokens", part.substr(colon + 1), 1, 64));
                at = comma + 1;
            }
        }
        else if (a == "--seqs") {
            const std::string v = value();
            seqs.clear();
            for (size_t at = 0; at <= v.size();) {
                const size_t comma = std::min(v.find(',', at), v.size());
                const long s = parse_long("--seqs", v.substr(at, comma - at), 0, 63);
                if (!seqs.empty() && s <= seqs.back()) usage_error("--seqs takes increasing sequence ids, not '" + v + "'");
                seqs.push_back(int32_t(s));
                at = comma + 1;
            }
        }
        else if (a == "--one-by-one") one_by_one = true;
        else if (a == "--kv-runs") n_kv_runs = parse_long("--kv-runs", value(), 1, 64);
        else if (a == "--beside") { beside_mode = parse_mode(a, value()); beside = true; }
        else if (a == "--beside-output") beside_out = value();
        else if (a == "--log-prefix") log_prefix = value();
        else if (a == "--ts" || a == "--tensor-split") {
            const std::string v = value();
            split.clear();
            for (size_t at = 0; at <= v.size();) {
                const size_t comma = std::min(v.find(',', at), v.size());
                const std::string part = v.substr(at, comma - at);
                char * end = nullptr;
                const float f = std::strtof(part.c_str(), &end);
                if (part.empty() || *end || !(f >= 0.0f) || !std::isfinite(f))
                    usage_error("--ts takes non-negative numbers separated by commas, not '" + v + "'");
                split.push_back(f);
                at = comma + 1;
            }
            if (split.size() > llama_max_devices()) usage_error("--ts names more devices than llama.cpp supports");
            if (std::all_of(split.begin(), split.end(), [](float f) { return f == 0.0f; })) usage_error("--ts gives every device nothing");
        }
        else if (a == "--sm") mode = parse_mode(a, value());
        else usage_error("unknown option '" + a + "' for run");
    }
    if (model_path.empty() || out.empty()) usage_error("run needs -m MODEL and -o FILE");
    if (!seqs.empty() && !batch_at.empty()) usage_error("--seqs and --batch-at do not go together");
    if (one_by_one && seqs.empty()) usage_error("--one-by-one goes with --seqs");
    if (n_kv_runs > 0 && seqs.empty()) usage_error("--kv-runs goes with --seqs");
    if (beside != !beside_out.empty()) usage_error("--beside and --beside-output go together");
    if (beside && !seqs.empty()) usage_error("--beside does not go with --seqs");

    if (!log_prefix.empty()) {
        llama_log_set([](ggml_log_level level, const char * text, void *) {
            std::fprintf(stderr, "%s %d: %s", log_prefix.c_str(), int(level), text);
        }, nullptr);
    }
    llama_backend_init();
    split.resize(llama_max_devices(), 0.0f);
    bool any_split = false;
    for (float f : split) any_split |= f > 0.0f;

    // One model and context, as the run (or the context beside it) uses them.
    struct Instance {
        llama_model * model = nullptr;
        llama_context * ctx = nullptr;
        Logits l;
        ~Instance() {
            if (ctx) llama_free(ctx);
            if (model) llama_model_free(model);
        }
    };
    auto open = [&](Instance & in, llama_split_mode m) -> bool {
        llama_model_params mp = llama_model_default_params();
        mp.n_gpu_layers = 9999;
        mp.split_mode = m;
        if (any_split) mp.tensor_split = split.data();
        in.model = llama_model_load_from_file(model_path.c_str(), mp);
        if (!in.model) {
            std::fprintf(stderr, "tpar-llama-logits: cannot load %s\n", model_path.c_str());
            return false;
        }
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx = uint32_t(n_ctx);
        cp.n_batch = uint32_t(n_ctx);
        cp.n_ubatch = uint32_t(n_ctx);
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;  // -sm tensor needs it; the same everywhere keeps runs comparable
        if (!seqs.empty()) {
            cp.n_seq_max = uint32_t(seqs.back() + 1);
            cp.n_ctx = uint32_t(n_ctx) * cp.n_seq_max;  // n_ctx for each sequence's stream
            cp.kv_unified = false;
            if (n_kv_runs > 0) cp.n_kv_runs = uint32_t(n_kv_runs);
        }
        in.ctx = llama_init_from_model(in.model, cp);
        if (!in.ctx) {
            std::fprintf(stderr, "tpar-llama-logits: cannot create a context\n");
            return false;
        }
        return true;
    };
    Instance main_run, beside_run;
    if (!open(main_run, mode) || (beside && !open(beside_run, beside_mode))) return 1;

    const llama_vocab * vocab = llama_model_get_vocab(main_run.model);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    std::vector<llama_token> tokens(prompt.size() + 8);
    const int32_t n_prompt = llama_tokenize(vocab, prompt.c_str(), int32_t(prompt.size()), tokens.data(), int32_t(tokens.size()), true, false);
    auto tokens_at = [&](long g) {
        long b = 1;
        for (const auto & [step, count] : batch_at) {
            if (step == g) b = count;
        }
        return b;
    };
    long n_fed = 0;
    for (long g = 0; g < n_gen; ++g) n_fed += tokens_at(g);
    if (!seqs.empty() && n_prompt <= seqs.back() + 1) {
        std::fprintf(stderr, "tpar-llama-logits: the prompt gives %d tokens; --seqs %d needs more than %d\n", n_prompt,
                     seqs.back(), seqs.back() + 1);
        return 2;
    }
    if (n_prompt <= 0 || n_prompt + n_fed > n_ctx) {
        std::fprintf(stderr, "tpar-llama-logits: the prompt gives %d tokens; with -n %ld (%ld tokens fed) it must fit --ctx %ld\n",
                     n_prompt, n_gen, n_fed, n_ctx);
        return 2;
    }
    tokens.resize(size_t(n_prompt));
    main_run.l.vocab = beside_run.l.vocab = uint32_t(n_vocab);
    auto keep_in = [&](Instance & in, int32_t i, llama_token after) {
        const float * row = llama_get_logits_ith(in.ctx, i);
        in.l.values.insert(in.l.values.end(), row, row + n_vocab);
        in.l.tokens.push_back(uint32_t(after));
        ++in.l.rows;
        return int32_t(std::max_element(row, row + n_vocab) - row);
    };
    auto keep = [&](int32_t i, llama_token after) { return keep_in(main_run, i, after); };

    // One sequence: the prompt in one batch, then n_gen steps of tokens_at(g) tokens each;
    // a step's batch is decoded (decode) and then its logits read (read), so that the
    // context beside runs its own step between the two.
    struct Stepper {
        llama_batch batch;
        llama_token next = 0;
        int32_t pos = 0;
        std::vector<llama_token> fed;
        explicit Stepper(int32_t n) : batch(llama_batch_init(n, 0, 1)) {}
        ~Stepper() { llama_batch_free(batch); }
    };
    auto decode = [&](Instance & in, Stepper & st, long g) -> bool {
        if (g < 0) {
            for (int32_t i = 0; i < n_prompt; ++i) {
                st.batch.token[i] = tokens[size_t(i)];
                st.batch.pos[i] = i;
                st.batch.n_seq_id[i] = 1;
                st.batch.seq_id[i][0] = 0;
                st.batch.logits[i] = 1;
            }
            st.batch.n_tokens = n_prompt;
        } else {
            const int32_t b = int32_t(tokens_at(g));
            st.fed.resize(static_cast<size_t>(b));
            for (int32_t k = 0; k < b; ++k) {
                st.fed[size_t(k)] = llama_token((int64_t(st.next) + k) % n_vocab);
                st.batch.token[k] = st.fed[size_t(k)];
                st.batch.pos[k] = st.pos + k;
                st.batch.n_seq_id[k] = 1;
                st.batch.seq_id[k][0] = 0;
                st.batch.logits[k] = 1;
            }
            st.batch.n_tokens = b;
        }
        if (llama_decode(in.ctx, st.batch) != 0) {
            if (g < 0) std::fprintf(stderr, "tpar-llama-logits: decoding the prompt failed\n");
            else std::fprintf(stderr, "tpar-llama-logits: decoding step %ld failed\n", g);
            return false;
        }
        return true;
    };
    auto read = [&](Instance & in, Stepper & st, long g) {
        if (g < 0) {
            for (int32_t i = 0; i < n_prompt; ++i) st.next = keep_in(in, i, tokens[size_t(i)]);
            st.pos = n_prompt;
        } else {
            for (int32_t k = 0; k < st.batch.n_tokens; ++k) st.next = keep_in(in, k, st.fed[size_t(k)]);
            st.pos += st.batch.n_tokens;
        }
    };
    const auto run_one = [&]() -> int {
        Stepper a(std::max<int32_t>(n_prompt, 64)), b(std::max<int32_t>(n_prompt, 64));
        for (long g = -1; g < n_gen; ++g) {
            if (!decode(main_run, a, g)) return 1;
            if (beside) {
                if (!decode(beside_run, b, g)) return 1;
                read(beside_run, b, g);
            }
            read(main_run, a, g);
        }
        return 0;
    };
    int rc = 0;
    if (seqs.empty()) {
        rc = run_one();
    } else {
        llama_batch batch = llama_batch_init(std::max<int32_t>(n_prompt, 64), 0, 1);
        rc = run_seqs(main_run.ctx, batch, tokens, seqs, n_gen, one_by_one, keep);
        llama_batch_free(batch);
    }
    if (rc == 0 && !save(out, main_run.l)) {
        std::fprintf(stderr, "tpar-llama-logits: cannot write %s\n", out.c_str());
        rc = 1;
    }
    if (rc == 0 && beside && !save(beside_out, beside_run.l)) {
        std::fprintf(stderr, "tpar-llama-logits: cannot write %s\n", beside_out.c_str());
        rc = 1;
    }
    const Logits & l = main_run.l;
    if (rc == 0 && seqs.empty()) {
        std::printf("run: %u rows x %u logits (%d prompt tokens, %ld generated, %ld fed) -> %s\n", l.rows, l.vocab,
                    n_prompt, n_gen, n_fed, out.c_str());
        if (beside) std::printf("run: beside it, %u rows -> %s\n", beside_run.l.rows, beside_out.c_str());
    } else if (rc == 0) {
        std::printf("run: %u rows x %u logits (%zu sequences, %ld steps, %s) -> %s\n", l.rows, l.vocab, seqs.size(),
                    n_gen, one_by_one ? "a batch a sequence" : "one batch a step", out.c_str());
    }
    return rc;
}

}  // namespace

int main(int argc, char ** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) usage_error("a command is needed: run or compare");
    if (args[0] == "-h" || args[0] == "--help") {
        std::fputs(usage_text, stdout);
        return 0;
    }
    const std::string command = args[0];
    args.erase(args.begin());
    for (const auto & a : args) {
        if (a == "-h" || a == "--help") {
            std::fputs(usage_text, stdout);
            return 0;
        }
    }
    if (command == "run") {
        const int rc = run(args);
        llama_backend_free();
        return rc;
    }
    if (command == "compare") return compare(args);
    usage_error("unknown command '" + command + "': use run or compare");
}
