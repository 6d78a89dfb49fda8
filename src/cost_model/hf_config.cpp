// A dense decoder from its Hugging Face config.json: the fields the cost model uses, and a clear
// refusal for the ones that would change the cost and are not modelled (docs/cost-model.md).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

#include "optpipe/cost_model.h"

namespace optpipe {

namespace {

constexpr int kMaxSeqLen = 8192;  // a config gives the longest context; pretraining runs shorter

// Keys whose presence (with a value other than null, false or 0) means a model the cost model
// does not describe: mixture of experts, multi-latent attention, per-layer attention patterns.
constexpr const char* kRefusedKeys[][2] = {
    {"num_local_experts", "a mixture of experts"},
    {"num_experts", "a mixture of experts"},
    {"n_routed_experts", "a mixture of experts"},
    {"num_experts_per_tok", "a mixture of experts"},
    {"moe_intermediate_size", "a mixture of experts"},
    {"kv_lora_rank", "multi-latent attention"},
    {"q_lora_rank", "multi-latent attention"},
    {"layer_types", "per-layer attention types"},
    {"sliding_window_pattern", "per-layer attention types"},
    {"cross_attention_layers", "cross-attention layers"},
};

bool set(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return false;
  if (it->is_boolean()) return it->get<bool>();
  if (it->is_number()) return it->get<double>() != 0;
  return !(it->is_array() && it->empty());
}

}  // namespace

Result<ModelSpec> model_from_hf_config(const std::string& json_text, const std::string& name) {
  using R = Result<ModelSpec>;
  auto invalid = [&](const std::string& what) { return R::Error(Status::Invalid(name + ": " + what)); };
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid("not a JSON object (a Hugging Face config.json is expected)");
  // Multimodal configs nest the language model; its own config is what to give.
  if (j.contains("text_config")) return invalid("text_config: a multimodal model; give its language model's config");
  for (const auto& [key, what] : kRefusedKeys)
    if (set(j, key)) return invalid(std::string(key) + ": " + what + " is not modelled; no plan is made for it");
  const std::string type = j.value("model_type", std::string());
  static const char* kTypes[] = {"llama", "mistral", "qwen2", "gemma"};
  if (std::find_if(std::begin(kTypes), std::end(kTypes), [&](const char* t) { return type == t; }) == std::end(kTypes))
    return invalid("model_type \"" + type +
                   "\" is not one the cost model describes (dense decoders: llama, mistral, qwen2, gemma)");

  ModelSpec m;
  m.name = name;
  m.mlp = Mlp::kSwiGlu;  // gated MLPs (SwiGLU, Gemma's GeGLU): three weight matrices
  auto integer = [&](const char* key, int* out, bool required) -> bool {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return !required;
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 100'000'000) return false;
    *out = static_cast<int>(it->get<int64_t>());
    return true;
  };
  const std::pair<const char*, int*> required[] = {{"num_hidden_layers", &m.num_layers},
                                                   {"hidden_size", &m.hidden},
                                                   {"intermediate_size", &m.ffn},
                                                   {"num_attention_heads", &m.heads},
                                                   {"vocab_size", &m.vocab}};
  for (const auto& [key, out] : required)
    if (!integer(key, out, true)) return invalid(std::string(key) + ": expected a positive integer");
  m.kv_heads = m.heads;
  if (!integer("num_key_value_heads", &m.kv_heads, false))
    return invalid("num_key_value_heads: expected a positive integer");
  if (!integer("head_dim", &m.head_dim, false)) return invalid("head_dim: expected a positive integer");
  if (m.head_dim * m.heads == m.hidden) m.head_dim = 0;  // the usual width: hidden / heads
  if (m.head_dim == 0 && m.hidden % m.heads != 0)
    return invalid("hidden_size " + std::to_string(m.hidden) + " is not divisible by num_attention_heads " +
                   std::to_string(m.heads) + " (and no head_dim is given)");
  if (m.heads % m.kv_heads != 0)
    return invalid("num_attention_heads " + std::to_string(m.heads) + " is not a multiple of num_key_value_heads " +
                   std::to_string(m.kv_heads));
  int max_positions = kMaxSeqLen;
  if (!integer("max_position_embeddings", &max_positions, false))
    return invalid("max_position_embeddings: expected a positive integer");
  m.seq_len = std::min(max_positions, kMaxSeqLen);
  // A window shorter than the sequence makes attention cheaper than the cost model's:
  // build_problem refuses it, at whatever sequence is planned.
  const bool window_on = !j.contains("use_sliding_window") || set(j, "use_sliding_window");
  if (window_on && set(j, "sliding_window") && !integer("sliding_window", &m.sliding_window, true))
    return invalid("sliding_window: expected a positive integer or null");
  const std::string dtype = j.value("torch_dtype", j.value("dtype", std::string("bfloat16")));
  if (dtype == "float32")
    m.bytes_per_value = 4;
  else if (dtype != "bfloat16" && dtype != "float16")
    return invalid("torch_dtype \"" + dtype + "\": expected bfloat16, float16 or float32");
  if (j.contains("tie_word_embeddings") && !j["tie_word_embeddings"].is_boolean())
    return invalid("tie_word_embeddings: expected true or false");
  return R::Of(std::move(m));
}

}  // namespace optpipe
