// The input deck: bad decks rejected with the key's name, good decks read,
// --set overrides applied in order, and the YAML/JSON writers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/config_fields.hpp"
#include "core/config_json.hpp"
#include "core/error.hpp"
#include "kernels/attention/kernel_record.hpp"

namespace miniattn {
namespace {

// ------------------------------------------------------------------ bad decks

struct BadDeck {
  const char* name;
  std::string deck;
  std::vector<std::string> overrides;
  int world_size;
  std::vector<std::string> expected;  // every one must appear in the message; the first is the key
};

std::ostream& operator<<(std::ostream& os, const BadDeck& c) { return os << c.name; }

std::vector<BadDeck> bad_decks() {
  std::vector<BadDeck> cases = {
      // structure
      {"unknown_section",
       "trian:\n  steps: 5\n",
       {},
       1,
       {"trian: unknown section", "known: model, parallel, train, io, run, kernels", "did you mean train?"}},
      {"unknown_key_with_hint",
       "model:\n  dmodel: 64\n",
       {},
       1,
       {"model.dmodel: unknown key in section model (did you mean d_model?)", "line 2, column 3"}},
      {"unknown_key_without_hint",
       "model:\n  colour: blue\n",
       {},
       1,
       {"model.colour: unknown key", "known: vocab, d_model"}},
      {"section_is_scalar", "model: 5\n", {}, 1, {"model: a section must be a mapping", "got '5'"}},
      {"section_is_sequence", "model:\n  - vocab\n", {}, 1, {"model: a section must be a mapping", "got a sequence"}},
      {"deck_is_sequence", "- model\n- train\n", {}, 1, {"deck text: a deck must be a YAML mapping of sections"}},
      {"deck_is_scalar", "hello\n", {}, 1, {"deck text: a deck must be a YAML mapping"}},
      {"invalid_yaml", "model:\n  vocab: [1, 2\n", {}, 1, {"deck text: not valid YAML at line"}},
      {"invalid_yaml_indent", "model:\n  vocab: 1\n d_model: 2\n", {}, 1, {"deck text: not valid YAML at line 3"}},
      {"duplicate_key", "model:\n  vocab: 5\n  vocab: 6\n", {}, 1, {"model.vocab: key given twice"}},
      {"duplicate_section", "model:\n  vocab: 5\nmodel:\n  heads: 4\n", {}, 1, {"model: section given twice"}},
      {"two_documents", "model:\n  vocab: 5\n---\nmodel:\n  vocab: 6\n", {}, 1, {"deck text: holds 2 YAML documents"}},
      // types
      {"integer_from_word", "model:\n  vocab: abc\n", {}, 1, {"model.vocab: expected an integer, got 'abc'"}},
      {"integer_from_float", "model:\n  vocab: 1.5\n", {}, 1, {"model.vocab: expected an integer, got '1.5'"}},
      {"integer_from_exponent", "model:\n  seq_len: 1e6\n", {}, 1, {"model.seq_len: expected an integer, got '1e6'"}},
      {"integer_from_bool", "model:\n  heads: true\n", {}, 1, {"model.heads: expected an integer, got 'true'"}},
      {"integer_from_quoted",
       "model:\n  vocab: \"256\"\n",
       {},
       1,
       {"model.vocab: expected an integer, got the quoted string '256'"}},
      {"integer_from_sequence",
       "model:\n  vocab: [1, 2]\n",
       {},
       1,
       {"model.vocab: expected an integer, got a sequence"}},
      {"integer_from_mapping", "model:\n  vocab: {a: 1}\n", {}, 1, {"model.vocab: expected an integer, got a mapping"}},
      {"integer_empty", "model:\n  vocab:\n", {}, 1, {"model.vocab: expected an integer, got an empty value"}},
      {"integer_overflow", "model:\n  vocab: 99999999999999999999\n", {}, 1, {"model.vocab: integer out of range"}},
      {"bool_from_yes", "model:\n  causal: yes\n", {}, 1, {"model.causal: expected true or false, got 'yes'"}},
      {"bool_from_integer", "model:\n  causal: 1\n", {}, 1, {"model.causal: expected true or false, got '1'"}},
      {"bool_from_quoted",
       "model:\n  causal: \"true\"\n",
       {},
       1,
       {"model.causal: expected true or false, got the quoted string"}},
      {"float_from_word", "train:\n  lr: fast\n", {}, 1, {"train.lr: expected a number, got 'fast'"}},
      {"float_inf", "train:\n  lr: .inf\n", {}, 1, {"train.lr: expected a number, got '.inf'"}},
      {"float_nan", "train:\n  eps: nan\n", {}, 1, {"train.eps: expected a number, got 'nan'"}},
      {"float_hex", "train:\n  lr: 0x10\n", {}, 1, {"train.lr: expected a number"}},
      {"float_huge", "train:\n  lr: 1e999\n", {}, 1, {"train.lr: number out of range"}},
      {"seed_negative", "train:\n  seed: -1\n", {}, 1, {"train.seed: expected a non-negative integer, got '-1'"}},
      {"string_from_mapping", "io:\n  init: {a: b}\n", {}, 1, {"io.init: expected a string, got a mapping"}},
      {"window_negative", "model:\n  window: -3\n", {}, 1, {"model.window: must be >= 0 (0 means full attention)"}},
      // enumerations
      {"precision", "model:\n  precision: fp16\n", {}, 1,
       {"model.precision: expected one of fp32, fp64, bf16, got 'fp16'"}},
      {"fp32_cudnn", "model:\n  precision: fp32\nkernels:\n  attention: cudnn\n", {}, 1,
       {"kernels.attention: the cudnn kernel computes bf16 only; for model.precision fp32 use fused, gemm or auto"}},
      {"cudnn_rsa", "model:\n  precision: bf16\nparallel:\n  strategy: rsa\nkernels:\n  attention: cudnn\n", {}, 2,
       {"kernels.attention: cudnn computes the blocks of local, ring, ulysses, hybrid, allgather attention"}},
      {"cudnn_workspace_negative", "kernels:\n  cudnn_workspace_mib: -1\n", {}, 1,
       {"kernels.cudnn_workspace_mib: must be >= 0"}},
      {"deterministic_not_a_boolean", "kernels:\n  deterministic: sometimes\n", {}, 1,
       {"kernels.deterministic"}},
      {"strategy",
       "parallel:\n  strategy: tree\n",
       {},
       1,
       {"parallel.strategy: expected one of local, rsa, ring, ulysses, hybrid, allgather, got 'tree'"}},
      {"layout",
       "parallel:\n  layout: strided\n",
       {},
       1,
       {"parallel.layout: expected one of contiguous, zigzag, striped"}},
      {"striped_seq_len",
       "parallel:\n  strategy: ring\n  layout: striped\nmodel:\n  seq_len: 10\n",
       {},
       4,
       {"model.seq_len: must be divisible by sp for parallel.layout striped", "10 % 4 != 0"}},
      {"comm", "parallel:\n  comm: gloo\n", {}, 1, {"parallel.comm: expected one of mpi, nccl, got 'gloo'"}},
      {"optimizer", "train:\n  optimizer: Adam\n", {}, 1, {"train.optimizer: expected one of adamw, sgd"}},
      {"mode",
       "run:\n  mode: infer\n",
       {},
       1,
       {"run.mode: expected one of train, bench, predict, calibrate, got 'infer'"}},
      // sizes
      {"vocab_zero", "model:\n  vocab: 0\n", {}, 1, {"model.vocab: must be >= 1, got 0"}},
      {"d_model_negative", "model:\n  d_model: -64\n", {}, 1, {"model.d_model: must be >= 1, got -64"}},
      {"heads_zero", "model:\n  heads: 0\n", {}, 1, {"model.heads: must be >= 1"}},
      {"ffn_negative", "model:\n  ffn: -1\n", {}, 1, {"model.ffn: must be >= 0 (0 means 4 * model.d_model), got -1"}},
      {"layers_zero", "model:\n  layers: 0\n", {}, 1, {"model.layers: must be >= 1"}},
      {"seq_len_zero", "model:\n  seq_len: 0\n", {}, 1, {"model.seq_len: must be >= 1"}},
      {"batch_zero", "model:\n  batch: 0\n", {}, 1, {"model.batch: must be >= 1"}},
      {"steps_zero", "train:\n  steps: 0\n", {}, 1, {"train.steps: must be >= 1 for run.mode train, got 0"}},
      {"steps_negative_predict", "train:\n  steps: -1\nrun:\n  mode: predict\n", {}, 1, {"train.steps: must be >= 0"}},
      {"log_every_zero", "run:\n  log_every: 0\n", {}, 1, {"run.log_every: must be >= 1"}},
      {"query_block_negative", "kernels:\n  query_block: -1\n", {}, 1, {"kernels.query_block: must be >= 0"}},
      {"key_block_negative", "kernels:\n  key_block: -8\n", {}, 1, {"kernels.key_block: must be >= 0"}},
      {"attention_kernel", "kernels:\n  attention: flash\n", {}, 1,
       {"kernels.attention: expected one of auto, fused, gemm, cudnn, got 'flash'"}},
      // deleted on 2026-11-28: an unknown word like any other
      {"attention_kernel_tensor_core", "model:\n  precision: bf16\nkernels:\n  attention: tensor_core\n", {}, 1,
       {"kernels.attention: expected one of auto, fused, gemm, cudnn, got 'tensor_core'"}},
      {"chunk_negative", "kernels:\n  chunk: -2\n", {}, 1, {"kernels.chunk: must be >= 0"}},
      {"dp_zero", "parallel:\n  dp: 0\n", {}, 1, {"parallel.dp: must be >= 1"}},
      {"ulysses_degree_zero", "parallel:\n  ulysses_degree: 0\n", {}, 1, {"parallel.ulysses_degree: must be >= 1"}},
      {"seq_len_too_long", "model:\n  seq_len: 2147483649\n", {}, 1, {"model.seq_len: must be <= 2^31"}},
      {"size_overflow",
       "model:\n  vocab: 1099511627776\n  d_model: 1073741824\n  heads: 1\n",
       {},
       1,
       {"model.vocab: model.vocab * model.d_model", "overflows a 64-bit integer"}},
      {"logits_overflow",
       "model:\n  vocab: 4294967296\n  seq_len: 2147483648\n  d_model: 1\n  heads: 1\n  batch: 4\n",
       {},
       1,
       {"overflows a 64-bit integer"}},
      // combinations
      {"heads_divide_d_model",
       "model:\n  d_model: 64\n  heads: 3\n",
       {},
       1,
       {"model.heads: must divide model.d_model (64 % 3 != 0)"}},
      {"dp_divide_world",
       "parallel:\n  dp: 3\n",
       {},
       4,
       {"parallel.dp: must divide the number of MPI ranks (4 % 3 != 0)"}},
      {"dp_larger_than_world", "parallel:\n  dp: 2\nmodel:\n  batch: 2\n", {}, 1, {"parallel.dp: must divide"}},
      {"batch_divisible_by_dp",
       "parallel:\n  dp: 2\nmodel:\n  batch: 3\n",
       {},
       2,
       {"model.batch: must be divisible by parallel.dp (3 % 2 != 0)"}},
      {"local_needs_sp_1",
       "parallel:\n  strategy: local\n",
       {},
       2,
       {"parallel.strategy: 'local'", "sp = 2 ranks / (parallel.dp 1 x parallel.pp 1 x parallel.tp 1) = 2",
        "use parallel.dp x parallel.pp x parallel.tp = 2", "sequence-parallel strategy"}},
      {"contiguous_seq_len",
       "parallel:\n  strategy: ring\nmodel:\n  seq_len: 255\n",
       {},
       2,
       {"model.seq_len: must be divisible by sp for parallel.layout contiguous", "255 % 2 != 0"}},
      {"zigzag_seq_len",
       "parallel:\n  strategy: ring\n  layout: zigzag\nmodel:\n  seq_len: 12\n",
       {},
       4,
       {"model.seq_len: must be divisible by 2 * sp for parallel.layout zigzag", "12 % 8 != 0"}},
      {"ulysses_heads",
       "parallel:\n  strategy: ulysses\nmodel:\n  heads: 4\n",
       {},
       8,
       {"model.heads: must be divisible by sp x parallel.tp for parallel.strategy ulysses",
        "model.heads = 4, not divisible by 8"}},
      {"hybrid_degree_divides_sp",
       "parallel:\n  strategy: hybrid\n  ulysses_degree: 3\n",
       {},
       4,
       {"parallel.ulysses_degree: must divide sp", "4 % 3 != 0"}},
      {"hybrid_heads",
       "parallel:\n  strategy: hybrid\n  ulysses_degree: 4\nmodel:\n  heads: 2\n",
       {},
       4,
       {"model.heads: must be divisible by parallel.ulysses_degree", "model.heads = 2, not divisible by 4"}},
      {"kv_heads_negative", "model:\n  kv_heads: -1\n", {}, 1, {"model.kv_heads: must be >= 0 (0 means model.heads)"}},
      {"kv_heads_divide_heads",
       "model:\n  kv_heads: 3\n",
       {},
       1,
       {"model.kv_heads: must divide model.heads (4 % 3 != 0)"}},
      {"tp_divides_kv_heads",
       "parallel:\n  tp: 2\nmodel:\n  kv_heads: 1\n",
       {},
       2,
       {"parallel.tp: must divide model.kv_heads (1 % 2 != 0)", "whole K/V heads"}},
      {"ulysses_kv_heads",
       "parallel:\n  strategy: ulysses\nmodel:\n  heads: 12\n  d_model: 48\n  kv_heads: 4\n  seq_len: 24\n",
       {},
       3,
       {"model.kv_heads: model.kv_heads / parallel.tp = 4 must divide or be divisible by the Ulysses degree",
        "parallel.strategy ulysses", "sp = 3"}},
      {"hybrid_kv_heads",
       "parallel:\n  strategy: hybrid\n  ulysses_degree: 3\nmodel:\n  heads: 12\n  d_model: 48\n  kv_heads: 2\n  "
       "seq_len: 24\n",
       {},
       6,
       {"model.kv_heads: model.kv_heads / parallel.tp = 2 must divide or be divisible by the Ulysses degree",
        "parallel.ulysses_degree = 3"}},
      {"tp_divides_heads",
       "parallel:\n  tp: 2\nmodel:\n  heads: 3\n  d_model: 48\n",
       {},
       2,
       {"parallel.tp: must divide model.heads", "3 % 2 != 0"}},
      {"tp_divides_ranks", "parallel:\n  tp: 2\n", {}, 3, {"parallel.tp: must divide the ranks", "3 ranks"}},
      {"tp_divides_rows",
       "parallel:\n  tp: 4\nmodel:\n  seq_len: 6\n",
       {},
       4,
       {"parallel.tp: must divide the rows", "6 % 4 != 0"}},
      {"pp_zero", "parallel:\n  pp: 0\n", {}, 1, {"parallel.pp: must be >= 1"}},
      {"pp_divides_ranks",
       "parallel:\n  pp: 2\n",
       {},
       3,
       {"parallel.pp: must divide the ranks", "= 3, not divisible by 2"}},
      {"pp_beyond_layers",
       "parallel:\n  pp: 4\nmodel:\n  layers: 2\n",
       {},
       4,
       {"parallel.pp: must be <= model.layers", "4 stages > 2 layers"}},
      {"virtual_stages_zero", "parallel:\n  virtual_stages: 0\n", {}, 1, {"parallel.virtual_stages: must be >= 1"}},
      {"virtual_stages_without_pipeline",
       "parallel:\n  virtual_stages: 2\n",
       {},
       1,
       {"parallel.virtual_stages: interleaves pipeline stages: it needs parallel.pp > 1"}},
      {"virtual_stages_divide_layers",
       "parallel:\n  pp: 2\n  virtual_stages: 2\nmodel:\n  layers: 6\ntrain:\n  micro_batches: 2\n",
       {},
       2,
       {"parallel.virtual_stages: needs model.layers divisible by parallel.pp x parallel.virtual_stages",
        "6 % 4 != 0"}},
      {"virtual_stages_micro_batches_by_pp",
       "parallel:\n  pp: 2\n  virtual_stages: 2\nmodel:\n  layers: 4\n  batch: 3\ntrain:\n  micro_batches: 3\n",
       {},
       2,
       {"parallel.virtual_stages: needs train.micro_batches divisible by parallel.pp", "3 % 2 != 0"}},
      {"micro_batches_zero", "train:\n  micro_batches: 0\n", {}, 1, {"train.micro_batches: must be >= 1"}},
      {"micro_batches_divide_samples",
       "model:\n  batch: 6\ntrain:\n  micro_batches: 4\n",
       {},
       1,
       {"train.micro_batches: must divide the samples of each DP group", "6 % 4 != 0"}},
      {"tp_divides_micro_batch_rows",
       "parallel:\n  tp: 2\nmodel:\n  batch: 2\n  seq_len: 3\ntrain:\n  micro_batches: 2\n",
       {},
       2,
       {"parallel.tp: must divide the rows of each TP group's micro-batch", "3 % 2 != 0"}},
      {"tp_ulysses_heads",
       "parallel:\n  strategy: ulysses\n  tp: 2\nmodel:\n  heads: 4\n",
       {},
       8,
       {"model.heads: must be divisible by sp x parallel.tp", "model.heads / parallel.tp = 2, not divisible by 4"}},
      {"lr_zero", "train:\n  lr: 0\n", {}, 1, {"train.lr: must be > 0, got 0.0"}},
      {"lr_negative", "train:\n  lr: -0.1\n", {}, 1, {"train.lr: must be > 0, got -0.1"}},
      {"weight_decay_negative", "train:\n  weight_decay: -0.01\n", {}, 1, {"train.weight_decay: must be >= 0"}},
      {"grad_clip_negative", "train:\n  grad_clip: -1\n", {}, 1, {"train.grad_clip: must be >= 0"}},
      {"beta1_one", "train:\n  beta1: 1\n", {}, 1, {"train.beta1: must be in [0, 1), got 1.0"}},
      {"beta2_negative", "train:\n  beta2: -0.5\n", {}, 1, {"train.beta2: must be in [0, 1)"}},
      {"eps_zero", "train:\n  eps: 0.0\n", {}, 1, {"train.eps: must be > 0"}},
      {"init_empty", "io:\n  init: \"\"\n", {}, 1, {"io.init: must be 'random' or the path of an HDF5 weights file"}},
      {"snapshot_step_past_end",
       "io:\n  snapshot: s.h5\n  snapshot_step: 10\ntrain:\n  steps: 10\n",
       {},
       1,
       {"io.snapshot_step: must be in [0, train.steps) = [0, 10), got 10"}},
      {"snapshot_step_negative", "io:\n  snapshot_step: -1\n", {}, 1, {"io.snapshot_step: must be >= 0"}},
      {"checkpoint_every_negative", "io:\n  checkpoint_every: -5\n", {}, 1, {"io.checkpoint_every: must be >= 0"}},
      {"checkpoint_every_without_path",
       "io:\n  checkpoint_every: 5\n",
       {},
       1,
       {"io.checkpoint_every: is 5 but io.checkpoint is empty"}},
      // overrides
      {"override_unknown_section", "", {"trian.steps=3"}, 1, {"trian: unknown section", "(in --set trian.steps=3)"}},
      {"override_unknown_key",
       "",
       {"model.dmodel=3"},
       1,
       {"model.dmodel: unknown key in section model (did you mean d_model?)"}},
      {"override_wrong_type",
       "",
       {"model.vocab=abc"},
       1,
       {"model.vocab: expected an integer, got 'abc'", "(in --set model.vocab=abc)"}},
      {"override_wrong_bool", "", {"model.causal=no"}, 1, {"model.causal: expected true or false, got 'no'"}},
      {"override_without_equals",
       "",
       {"model.vocab"},
       1,
       {"--set 'model.vocab': expected section.key=value, found no '='"}},
      {"override_without_section",
       "",
       {"vocab=3"},
       1,
       {"--set 'vocab=3': expected section.key=value, found no section"}},
      {"override_without_key", "", {"model.=3"}, 1, {"--set 'model.=3'", "no key after the section"}},
      {"override_invalid_yaml", "", {"model.vocab=[1"}, 1, {"model.vocab: the value '[1' is not a valid YAML scalar"}},
      {"override_sequence", "", {"model.vocab=[1, 2]"}, 1, {"model.vocab: expected an integer, got a sequence"}},
      {"override_empty_integer", "", {"model.vocab="}, 1, {"model.vocab: expected an integer, got an empty value"}},
      {"override_breaks_combination",
       "model:\n  d_model: 64\n  heads: 4\n",
       {"model.heads=3"},
       1,
       {"model.heads: must divide model.d_model (64 % 3 != 0)"}},
      {"override_later_wins_bad", "", {"model.vocab=5", "model.vocab=0"}, 1, {"model.vocab: must be >= 1, got 0"}},
  };
#ifndef MINIATTN_HAVE_NCCL
  cases.push_back({"nccl_not_built", "parallel:\n  comm: nccl\n", {}, 1,
                   {"parallel.comm: 'nccl' needs a build with MINIATTN_ENABLE_NCCL=ON"}});
#endif
  return cases;
}

class BadDeckTest : public ::testing::TestWithParam<BadDeck> {};

TEST_P(BadDeckTest, RejectedWithTheKeyAndTheReason) {
  const BadDeck& c = GetParam();
  try {
    parse_config_text(c.deck, c.overrides, c.world_size);
    FAIL() << "accepted a bad deck: " << c.name;
  } catch (const InputError& error) {
    const std::string message = error.what();
    for (const std::string& part : c.expected) {
      EXPECT_NE(message.find(part), std::string::npos) << "message: " << message << "\nexpected to contain: " << part;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Config, BadDeckTest, ::testing::ValuesIn(bad_decks()),
                         [](const ::testing::TestParamInfo<BadDeck>& info) { return std::string(info.param.name); });

// ------------------------------------------------------------------ files

class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("miniattn_config_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string file = (path_ / name).string();
    std::ofstream(file) << text;
    return file;
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const InputError& error) {
    return error.what();
  }
  return "(no InputError)";
}

TEST(ConfigFile, MissingFileNamesTheFile) {
  TempDir dir;
  const std::string missing = dir.path() + "/nope.yaml";
  const std::string message = error_of([&] { parse_config(missing, {}, 1); });
  EXPECT_NE(message.find(missing), std::string::npos) << message;
  EXPECT_NE(message.find("no such file"), std::string::npos) << message;
}

TEST(ConfigFile, DirectoryIsNotADeck) {
  TempDir dir;
  const std::string message = error_of([&] { parse_config(dir.path(), {}, 1); });
  EXPECT_NE(message.find(dir.path()), std::string::npos) << message;
  EXPECT_NE(message.find("directory"), std::string::npos) << message;
}

// Root reads any file: as root (CI), the read runs with the effective user id
// of "nobody" (65534) and switches back, so the permission check applies.
class AsUnprivilegedUser {
 public:
  AsUnprivilegedUser() : was_root_(::geteuid() == 0) {
    if (was_root_ && ::seteuid(65534) != 0) throw std::runtime_error("seteuid(65534) failed");
  }
  ~AsUnprivilegedUser() {
    if (was_root_ && ::seteuid(0) != 0) std::abort();
  }
  AsUnprivilegedUser(const AsUnprivilegedUser&) = delete;
  AsUnprivilegedUser& operator=(const AsUnprivilegedUser&) = delete;

 private:
  bool was_root_;
};

TEST(ConfigFile, UnreadableFileNamesTheFile) {
  TempDir dir;
  const std::string file = dir.write("locked.yaml", "model:\n  vocab: 5\n");
  std::filesystem::permissions(file, std::filesystem::perms::none);
  std::filesystem::permissions(dir.path(), std::filesystem::perms::all);  // "nobody" may enter the directory
  std::string message;
  {
    AsUnprivilegedUser nobody;
    message = error_of([&] { parse_config(file, {}, 1); });
  }
  EXPECT_NE(message.find(file), std::string::npos) << message;
  EXPECT_NE(message.find("ermission"), std::string::npos) << message;
}

TEST(ConfigFile, InvalidYamlNamesTheFileLineAndColumn) {
  TempDir dir;
  const std::string file = dir.write("bad.yaml", "model:\n  vocab: 5\n  heads: [4\n");
  const std::string message = error_of([&] { parse_config(file, {}, 1); });
  EXPECT_EQ(message.rfind(file + ": not valid YAML at line", 0), 0u) << message;
  EXPECT_NE(message.find("column"), std::string::npos) << message;
}

TEST(ConfigFile, TypeErrorPointsAtTheLine) {
  TempDir dir;
  const std::string file = dir.write("typo.yaml", "model:\n  vocab: 5\n  heads: four\n");
  const std::string message = error_of([&] { parse_config(file, {}, 1); });
  EXPECT_NE(message.find("model.heads: expected an integer, got 'four'"), std::string::npos) << message;
  EXPECT_NE(message.find(file + ":3:10"), std::string::npos) << message;
}

TEST(ConfigFile, GoodFileRecordsThePath) {
  TempDir dir;
  const std::string file = dir.write("good.yaml", "model:\n  vocab: 300\ntrain:\n  steps: 3\n");
  const Config c = parse_config(file, {"train.steps=4"}, 1);
  EXPECT_EQ(c.deck_path, file);
  EXPECT_EQ(c.model.vocab, 300);
  EXPECT_EQ(c.train.steps, 4);
}

TEST(ConfigFile, EmptyFileGivesDefaults) {
  TempDir dir;
  const std::string file = dir.write("empty.yaml", "");
  Config expected;
  expected.deck_path = file;
  EXPECT_EQ(parse_config(file, {}, 1), expected);
}

// ------------------------------------------------------------------ good decks

TEST(Config, EmptyDeckGivesDefaults) {
  EXPECT_EQ(parse_config_text("", {}, 1), Config{});
  EXPECT_EQ(parse_config_text("# nothing but a comment\n", {}, 1), Config{});
  EXPECT_EQ(parse_config_text("model:\ntrain:\n", {}, 1), Config{});
}

TEST(Config, FullDeck) {
  const std::string deck = R"(
model:
  vocab: 512
  d_model: 96
  heads: 6
  ffn: 200
  layers: 3
  seq_len: 1024
  batch: 4
  causal: false
  precision: fp32
parallel:
  strategy: "local"
  layout: zigzag
  dp: 2
  ulysses_degree: 1
  comm: mpi
train:
  steps: 50
  lr: 3e-4
  optimizer: sgd
  weight_decay: 0.1
  grad_clip: 0
  seed: 18446744073709551615
  beta1: 0.8
  beta2: 0.95
  eps: 1.0e-6
io:
  init: random
  snapshot: snap.h5
  snapshot_step: 49
  checkpoint: ckpt.h5
  checkpoint_every: 10
  restart: old.h5
run:
  mode: bench
  log_every: 5
  result: out/result.json
kernels:
  attention: gemm
  chunk: 300
  query_block: 128
  key_block: 32
)";
  const Config c = parse_config_text(deck, {}, 2);
  EXPECT_EQ(c.model.vocab, 512);
  EXPECT_EQ(c.model.d_model, 96);
  EXPECT_EQ(c.model.heads, 6);
  EXPECT_EQ(c.model.head_dim(), 16);
  EXPECT_EQ(c.model.ffn, 200);
  EXPECT_EQ(c.model.ffn_width(), 200);
  EXPECT_EQ(c.model.layers, 3);
  EXPECT_EQ(c.model.seq_len, 1024);
  EXPECT_EQ(c.model.batch, 4);
  EXPECT_FALSE(c.model.causal);
  EXPECT_EQ(c.model.precision, Precision::fp32);
  EXPECT_EQ(c.parallel.strategy, Strategy::local);
  EXPECT_EQ(c.parallel.layout, Layout::zigzag);
  EXPECT_EQ(c.parallel.dp, 2);
  EXPECT_EQ(c.parallel.ulysses_degree, 1);
  EXPECT_EQ(c.parallel.comm, CommBackend::mpi);
  EXPECT_EQ(c.train.steps, 50);
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-4);
  EXPECT_EQ(c.train.optimizer, OptimizerKind::sgd);
  EXPECT_DOUBLE_EQ(c.train.weight_decay, 0.1);
  EXPECT_EQ(c.train.grad_clip, 0.0);
  EXPECT_EQ(c.train.seed, std::numeric_limits<std::uint64_t>::max());
  EXPECT_DOUBLE_EQ(c.train.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.train.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.train.eps, 1e-6);
  EXPECT_EQ(c.io.init, "random");  // io.restart holds the parameters; io.init may not name a file too
  EXPECT_EQ(c.io.snapshot, "snap.h5");
  EXPECT_EQ(c.io.snapshot_step, 49);
  EXPECT_EQ(c.io.checkpoint, "ckpt.h5");
  EXPECT_EQ(c.io.checkpoint_every, 10);
  EXPECT_EQ(c.io.restart, "old.h5");
  EXPECT_EQ(c.run.mode, RunMode::bench);
  EXPECT_EQ(c.run.log_every, 5);
  EXPECT_EQ(c.run.result, "out/result.json");
  EXPECT_EQ(c.kernels.attention, AttentionKernel::gemm);
  EXPECT_EQ(c.kernels.chunk, 300);
  EXPECT_EQ(c.kernels.query_block, 128);
  EXPECT_EQ(c.kernels.key_block, 32);
  EXPECT_TRUE(c.deck_path.empty());
}

TEST(Config, MissingKeysKeepDefaults) {
  const Config c = parse_config_text("model:\n  vocab: 100\n", {}, 1);
  Config expected;
  expected.model.vocab = 100;
  EXPECT_EQ(c, expected);
}

TEST(Config, ScalarSpellings) {
  const Config c = parse_config_text(
      "model:\n  causal: False\n  vocab: +12\ntrain:\n  lr: 1\n  eps: .5e-3\n  seed: 0\nio:\n  snapshot: ~\n", {}, 1);
  EXPECT_FALSE(c.model.causal);
  EXPECT_EQ(c.model.vocab, 12);
  EXPECT_EQ(c.train.lr, 1.0);  // a float key takes an integer
  EXPECT_DOUBLE_EQ(c.train.eps, 0.5e-3);
  EXPECT_EQ(c.train.seed, 0u);
  EXPECT_EQ(c.io.snapshot, "");  // null clears a string
  EXPECT_TRUE(parse_config_text("model:\n  causal: TRUE\n", {}, 1).model.causal);
}

TEST(Config, StringKeysTakeAnyScalar) {
  const Config c = parse_config_text("io:\n  restart: \"true\"\n  checkpoint: a b#c.h5\n", {}, 1);
  EXPECT_EQ(parse_config_text("io:\n  init: 123\n", {}, 1).io.init, "123");
  EXPECT_EQ(c.io.restart, "true");
  EXPECT_EQ(c.io.checkpoint, "a b#c.h5");
}

TEST(Config, DataParallelOverAllRanks) {
  const Config c = parse_config_text("parallel:\n  dp: 4\nmodel:\n  batch: 8\n", {}, 4);
  EXPECT_EQ(c.parallel.dp, 4);
}

TEST(Config, PredictAllowsZeroStepsAndAnySnapshotStep) {
  const Config c = parse_config_text("run:\n  mode: predict\ntrain:\n  steps: 0\n", {}, 1);
  EXPECT_EQ(c.train.steps, 0);
  EXPECT_EQ(c.run.mode, RunMode::predict);
}

TEST(Config, SnapshotStepOnlyMattersWithASnapshot) {
  // No snapshot file: snapshot_step is not compared with train.steps.
  EXPECT_NO_THROW(parse_config_text("io:\n  snapshot_step: 100\ntrain:\n  steps: 3\n", {}, 1));
  EXPECT_NO_THROW(parse_config_text("io:\n  snapshot: s.h5\n  snapshot_step: 2\ntrain:\n  steps: 3\n", {}, 1));
}

TEST(Config, LargestSequenceAccepted) {
  const Config c = parse_config_text("model:\n  seq_len: 2147483648\n  d_model: 8\n  heads: 1\n  vocab: 16\n", {}, 1);
  EXPECT_EQ(c.model.seq_len, std::int64_t{1} << 31);
}

TEST(Config, ValidateConfigBuiltInCode) {
  Config c;
  EXPECT_NO_THROW(validate_config(c, 1));
  c.parallel.strategy = static_cast<Strategy>(17);  // an enum cast from a bad integer
  EXPECT_NE(error_of([&] { validate_config(c, 1); }).find("parallel.strategy: expected one of"), std::string::npos);
  c = Config{};
  c.train.lr = std::nan("");
  EXPECT_NE(error_of([&] { validate_config(c, 1); }).find("train.lr: must be a finite number"), std::string::npos);
  c = Config{};
  c.model.heads = 5;
  EXPECT_NE(error_of([&] { validate_config(c, 1); }).find("model.heads: must divide model.d_model (64 % 5 != 0)"),
            std::string::npos);
}

// ------------------------------------------------------------------ overrides

TEST(ConfigOverride, OverridesTheFile) {
  const Config c = parse_config_text("model:\n  vocab: 100\n  causal: true\n",
                                     {"model.vocab=200", "model.causal=false", "train.lr=0.5"}, 1);
  EXPECT_EQ(c.model.vocab, 200);
  EXPECT_FALSE(c.model.causal);
  EXPECT_EQ(c.train.lr, 0.5);
}

TEST(ConfigOverride, AppliedInOrder) {
  const Config c = parse_config_text("", {"model.vocab=1", "model.vocab=7", "run.mode=bench", "run.mode=predict"}, 1);
  EXPECT_EQ(c.model.vocab, 7);
  EXPECT_EQ(c.run.mode, RunMode::predict);
}

TEST(ConfigOverride, ValidatedAfterAllOverrides) {
  // heads = 3 alone would be rejected; d_model = 96 afterwards makes it valid.
  const Config c = parse_config_text("model:\n  heads: 3\n", {"model.d_model=96"}, 1);
  EXPECT_EQ(c.model.heads, 3);
  EXPECT_EQ(c.model.d_model, 96);
}

TEST(ConfigOverride, StringValues) {
  const Config c = parse_config_text("io:\n  snapshot: x.h5\n", {"io.snapshot=", "io.init=dir/a=b.h5"}, 1);
  EXPECT_EQ(c.io.snapshot, "");
  EXPECT_EQ(c.io.init, "dir/a=b.h5");
  EXPECT_EQ(parse_config_text("", {"io.restart=\"null\""}, 1).io.restart, "null");
}

TEST(ConfigOverride, SpacesAroundTheName) {
  const Config c = parse_config_text("", {" model.vocab = 5"}, 1);
  EXPECT_EQ(c.model.vocab, 5);
}

TEST(ConfigOverride, SplitOverride) {
  const Override o = split_override("train.lr=1e-3=x");
  EXPECT_EQ(o.section, "train");
  EXPECT_EQ(o.key, "lr");
  EXPECT_EQ(o.value, "1e-3=x");
  EXPECT_THROW(split_override("train"), InputError);
  EXPECT_THROW(split_override(".lr=1"), InputError);
}

// ------------------------------------------------------------------ writers

Config unusual_config() {
  Config c;
  c.model.vocab = 1000;
  c.model.d_model = 48;
  c.model.heads = 3;
  c.model.ffn = 100;
  c.model.layers = 5;
  c.model.seq_len = 4096;
  c.model.batch = 6;
  c.model.causal = false;
  c.model.window = 300;
  c.model.precision = Precision::fp32;
  c.parallel.layout = Layout::zigzag;
  c.parallel.dp = 3;
  c.parallel.ulysses_degree = 2;
  c.train.steps = 7;
  c.train.lr = 0.1;
  c.train.optimizer = OptimizerKind::sgd;
  c.train.weight_decay = 1.0 / 3.0;
  c.train.grad_clip = 0.0;
  c.train.seed = std::numeric_limits<std::uint64_t>::max();
  c.train.beta1 = 0.0;
  c.train.beta2 = 0.999999999999;
  c.train.eps = 1e-300;
  c.io.init = "true";
  c.io.snapshot = "dir with spaces/snap: \"q\" #1.h5";
  c.io.snapshot_step = 6;
  c.io.checkpoint = "null";
  c.io.checkpoint_every = 2;
  c.io.restart = "";
  c.run.mode = RunMode::bench;
  c.run.log_every = 3;
  c.run.result = "r\u00e9sultat\n.json";
  c.kernels.query_block = 16;
  c.kernels.key_block = 8;
  return c;
}

TEST(ConfigWriters, YamlRoundTripDefaults) {
  const Config c;
  EXPECT_EQ(parse_config_text(config_to_yaml(c), {}, 1), c) << config_to_yaml(c);
}

TEST(ConfigWriters, YamlRoundTripUnusualValues) {
  const Config c = unusual_config();
  const std::string yaml = config_to_yaml(c);
  EXPECT_EQ(parse_config_text(yaml, {}, 3), c) << yaml;
}

TEST(ConfigWriters, YamlMentionsTheDeckAndEveryKey) {
  Config c;
  c.deck_path = "inputs/example.yaml";
  const std::string yaml = config_to_yaml(c);
  EXPECT_NE(yaml.find("inputs/example.yaml"), std::string::npos) << yaml;
  for (const auto& field : config_fields::fields()) {
    EXPECT_NE(yaml.find(field.key + ":"), std::string::npos) << field.name();
  }
  EXPECT_NE(yaml.find("lr: 0.001"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("eps: 1.0e-08"), std::string::npos) << yaml;
  // Parsing it again gives the same values; deck_path is the caller's.
  Config back = parse_config_text(yaml, {}, 1);
  back.deck_path = c.deck_path;
  EXPECT_EQ(back, c);
}

// Every key, changed alone, makes the configs differ and survives the round trip.
TEST(ConfigWriters, EveryFieldRoundTrips) {
  for (const auto& field : config_fields::fields()) {
    Config c = unusual_config();
    const Config before = c;
    std::visit(
        [&](auto ref) {
          if constexpr (std::is_same_v<decltype(ref), config_fields::EnumRef>) {
            ref.set(c, ref.get(c) == 0 ? ref.names().size() - 1 : 0);  // another valid word
            return;
          } else {
          using Value = std::decay_t<decltype(ref(c))>;
          Value& value = ref(c);
          if constexpr (std::is_same_v<Value, bool>) {
            value = !value;
          } else if constexpr (std::is_same_v<Value, std::string>) {
            value = "changed/" + field.key + ".h5";
            if (field.name() == "io.restart") c.io.init = "random";  // the two may not both name files
          } else if constexpr (std::is_same_v<Value, double>) {
            value = value * 0.5 + 0.001;
          } else if constexpr (std::is_same_v<Value, std::uint64_t>) {
            value = 42;
          } else {
            // Keep every combination valid: multiples of what divides them.
            value = field.name() == "model.heads" ? 1 : field.name() == "model.batch" ? 12 : value * 2;
            if (field.name() == "io.snapshot_step") value = 0;
            if (field.name() == "model.kv_heads") value = c.model.heads;  // 0 (= heads) doubled is 0
            if (field.name() == "kernels.chunk") value = 96;                 // 0 (= chosen) doubled is 0
          }
          }
        },
        field.ref);
    if (field.name() == "parallel.tp") c.model.heads = 6;  // tp 2 needs an even head count
    if (field.name() == "parallel.virtual_stages") {  // interleaving needs pp > 1, pp v | layers, pp | micro-batches
      c.parallel.pp = 2;
      c.model.layers = 8;
      c.model.batch = 12;
      c.train.micro_batches = 2;
    }
    if (!kernels::attention_kernel_record(c.kernels.attention == AttentionKernel::automatic ? AttentionKernel::gemm
                                                                                             : c.kernels.attention)
             .computes(c.model.precision))
      c.model.precision = Precision::bf16;  // cudnn's only precision
    EXPECT_NE(c, before) << field.name();
    const std::string yaml = config_to_yaml(c);
#ifndef MINIATTN_HAVE_NCCL
    if (field.name() == "parallel.comm") {  // written, then refused by a build without NCCL
      EXPECT_NE(yaml.find("comm: nccl"), std::string::npos) << yaml;
      EXPECT_NE(error_of([&] { parse_config_text(yaml, {}, 3); }).find("parallel.comm: 'nccl'"), std::string::npos);
      continue;
    }
#endif
    Config back;
    const int world = static_cast<int>(c.parallel.dp * c.parallel.tp * c.parallel.pp);
    EXPECT_NO_THROW(back = parse_config_text(yaml, {}, world)) << field.name() << "\n" << yaml;
    EXPECT_EQ(back, c) << field.name() << "\n" << yaml;
  }
}

TEST(ConfigWriters, Json) {
  Config c = unusual_config();
  c.deck_path = "deck.yaml";
  const nlohmann::json j = config_to_json(c);
  EXPECT_EQ(j.at("model").at("vocab").get<std::int64_t>(), 1000);
  EXPECT_EQ(j.at("model").at("causal").get<bool>(), false);
  EXPECT_EQ(j.at("model").at("precision").get<std::string>(), "fp32");
  EXPECT_EQ(j.at("parallel").at("layout").get<std::string>(), "zigzag");
  EXPECT_EQ(j.at("train").at("seed").get<std::uint64_t>(), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(j.at("train").at("weight_decay").get<double>(), 1.0 / 3.0);
  EXPECT_EQ(j.at("io").at("snapshot").get<std::string>(), c.io.snapshot);
  EXPECT_EQ(j.at("run").at("mode").get<std::string>(), "bench");
  EXPECT_EQ(j.at("kernels").at("key_block").get<std::int64_t>(), 8);
  EXPECT_EQ(j.at("deck").get<std::string>(), "deck.yaml");
  std::size_t keys = 0;
  for (const auto& section : config_fields::sections()) keys += j.at(section).size();
  EXPECT_EQ(keys, config_fields::fields().size());
  // Serialises (valid UTF-8 etc.) and parses back.
  EXPECT_EQ(nlohmann::json::parse(j.dump()), j);
}

TEST(ConfigWriters, Equality) {
  EXPECT_EQ(Config{}, Config{});
  Config c;
  c.train.lr = 2e-3;
  EXPECT_NE(c, Config{});
  c = Config{};
  c.deck_path = "x";
  EXPECT_NE(c, Config{});
}

}  // namespace
}  // namespace miniattn
