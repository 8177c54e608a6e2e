// kiln-golden-dump: a tiny libllama client that exposes llama.cpp's tokenizer
// and full-precision logit rows to scripts/golden.py. Built by
// scripts/build-llama-cpp.sh against the same llama.cpp tree as llama-bench.
//
// Usage: kiln-golden-dump MODEL.gguf [N_CTX] [FLASH_ATTN: -1 auto (default), 0 off, 1 on]
// Reads one command per line on stdin, answers one line per command on stdout
// (text arguments and answers are hex-encoded UTF-8 so any byte survives):
//   meta                          -> "meta <n_vocab> <add_bos 0|1> <bos> <eos> <hex chat template> <hex system info>"
//   tok <add_special> <parse_special> <hex text>
//                                 -> "ids <id> <id> ..."
//   piece <id> ...                -> "pieces <hex> <hex> ..."  (special tokens rendered)
//   eval <threads> <n_gen> <out.bin> <id> ...
//       clears the KV cache, decodes the prompt as one batch with logits for
//       every position, then greedily (argmax, lowest id on ties, EOS ignored)
//       decodes n_gen-1 more tokens one at a time. Writes (n_prompt + n_gen - 1)
//       rows of n_vocab little-endian f32 to out.bin.
//                                 -> "ok <n_rows> <generated ids...>"
// Errors answer "err <message>" and the process keeps going.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string to_hex(const std::string & s) {
    static const char * digits = "0123456789abcdef";
    std::string out;
    for (unsigned char c : s) {
        out.push_back(digits[c >> 4]);
        out.push_back(digits[c & 15]);
    }
    return out.empty() ? "-" : out;
}

std::string from_hex(const std::string & h) {
    std::string out;
    if (h == "-") return out;
    for (size_t i = 0; i + 1 < h.size(); i += 2) {
        out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
    }
    return out;
}

struct Session {
    llama_model * model = nullptr;
    llama_context * ctx = nullptr;
    const llama_vocab * vocab = nullptr;
    int n_vocab = 0;
};

void cmd_meta(const Session & s) {
    const char * tmpl = llama_model_chat_template(s.model, nullptr);
    std::cout << "meta " << s.n_vocab << ' ' << (llama_vocab_get_add_bos(s.vocab) ? 1 : 0) << ' '
              << llama_vocab_bos(s.vocab) << ' ' << llama_vocab_eos(s.vocab) << ' '
              << to_hex(tmpl ? tmpl : "") << ' ' << to_hex(llama_print_system_info()) << '\n';
}

void cmd_tok(const Session & s, std::istringstream & args) {
    int add_special = 0, parse_special = 0;
    std::string hex;
    args >> add_special >> parse_special >> hex;
    const std::string text = from_hex(hex);
    std::vector<llama_token> ids(text.size() + 8);
    int n = llama_tokenize(s.vocab, text.data(), static_cast<int32_t>(text.size()), ids.data(),
                           static_cast<int32_t>(ids.size()), add_special != 0, parse_special != 0);
    if (n < 0) {
        std::cout << "err tokenize failed " << n << '\n';
        return;
    }
    std::cout << "ids";
    for (int i = 0; i < n; ++i) std::cout << ' ' << ids[i];
    std::cout << '\n';
}

void cmd_piece(const Session & s, std::istringstream & args) {
    std::cout << "pieces";
    llama_token id;
    while (args >> id) {
        char buf[256];
        int n = llama_token_to_piece(s.vocab, id, buf, sizeof(buf), 0, true);
        std::cout << ' ' << to_hex(n > 0 ? std::string(buf, n) : std::string());
    }
    std::cout << '\n';
}

llama_token argmax(const float * row, int n) {
    int best = 0;
    for (int i = 1; i < n; ++i) {
        if (row[i] > row[best]) best = i;
    }
    return best;
}

void cmd_eval(Session & s, std::istringstream & args) {
    int threads = 1, n_gen = 0;
    std::string out_path;
    args >> threads >> n_gen >> out_path;
    std::vector<llama_token> prompt;
    llama_token id;
    while (args >> id) prompt.push_back(id);
    if (prompt.empty()) {
        std::cout << "err empty prompt\n";
        return;
    }
    FILE * out = std::fopen(out_path.c_str(), "wb");
    if (!out) {
        std::cout << "err cannot open " << out_path << '\n';
        return;
    }
    llama_set_n_threads(s.ctx, threads, threads);
    llama_memory_clear(llama_get_memory(s.ctx), true);

    const int n = static_cast<int>(prompt.size());
    llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; ++i) {
        batch.token[i] = prompt[i];
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    int rc = llama_decode(s.ctx, batch);
    llama_batch_free(batch);
    if (rc != 0) {
        std::fclose(out);
        std::cout << "err decode " << rc << '\n';
        return;
    }
    int rows = 0;
    for (int i = 0; i < n; ++i, ++rows) {
        std::fwrite(llama_get_logits_ith(s.ctx, i), sizeof(float), s.n_vocab, out);
    }
    std::vector<llama_token> gen;
    llama_token next = argmax(llama_get_logits_ith(s.ctx, n - 1), s.n_vocab);
    for (int step = 0; step < n_gen; ++step) {
        gen.push_back(next);
        if (step + 1 == n_gen) break;
        llama_token tok = next;
        if (llama_decode(s.ctx, llama_batch_get_one(&tok, 1)) != 0) {
            std::fclose(out);
            std::cout << "err decode at step " << step << '\n';
            return;
        }
        const float * row = llama_get_logits_ith(s.ctx, -1);
        std::fwrite(row, sizeof(float), s.n_vocab, out);
        ++rows;
        next = argmax(row, s.n_vocab);
    }
    std::fclose(out);
    std::cout << "ok " << rows;
    for (llama_token t : gen) std::cout << ' ' << t;
    std::cout << '\n';
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s MODEL.gguf [N_CTX] [FLASH_ATTN]\n", argv[0]);
        return 2;
    }
    llama_backend_init();
    Session s;
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    s.model = llama_model_load_from_file(argv[1], mp);
    if (!s.model) {
        std::fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = argc > 2 ? static_cast<uint32_t>(std::atoi(argv[2])) : 512;
    cp.n_batch = cp.n_ctx;
    cp.n_ubatch = cp.n_ctx;
    if (argc > 3) cp.flash_attn_type = static_cast<llama_flash_attn_type>(std::atoi(argv[3]));
    s.ctx = llama_init_from_model(s.model, cp);
    if (!s.ctx) {
        std::fprintf(stderr, "cannot create context\n");
        return 1;
    }
    s.vocab = llama_model_get_vocab(s.model);
    s.n_vocab = llama_vocab_n_tokens(s.vocab);

    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream args(line);
        std::string cmd;
        args >> cmd;
        if (cmd == "meta") cmd_meta(s);
        else if (cmd == "tok") cmd_tok(s, args);
        else if (cmd == "piece") cmd_piece(s, args);
        else if (cmd == "eval") cmd_eval(s, args);
        else if (cmd == "quit") break;
        else std::cout << "err unknown command\n";
        std::cout.flush();
    }
    llama_free(s.ctx);
    llama_model_free(s.model);
    return 0;
}
