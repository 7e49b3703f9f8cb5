// The command line: miniattn DECK.yaml [--set section.key=value ...].
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/command_line.hpp"
#include "core/error.hpp"

namespace miniattn {
namespace {

CommandLine parse(std::vector<std::string> args) {
  args.insert(args.begin(), "miniattn");
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

std::string parse_error_of(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const InputError& error) {
    return error.what();
  }
  return "(no InputError)";
}

TEST(CommandLine, DeckOnly) {
  const CommandLine cl = parse({"inputs/example.yaml"});
  EXPECT_EQ(cl.deck_path, "inputs/example.yaml");
  EXPECT_TRUE(cl.overrides.empty());
  EXPECT_FALSE(cl.help_requested);
}

TEST(CommandLine, OverridesInOrder) {
  const CommandLine cl =
      parse({"--set", "model.vocab=1", "deck.yaml", "--set", "model.vocab=2", "--set=model.causal=false"});
  EXPECT_EQ(cl.deck_path, "deck.yaml");
  EXPECT_EQ(cl.overrides, (std::vector<std::string>{"model.vocab=1", "model.vocab=2", "model.causal=false"}));
}

TEST(CommandLine, OverrideValueWithSpacesAndEquals) {
  const CommandLine cl = parse({"deck.yaml", "--set", "io.init=my dir/a=b.h5"});
  EXPECT_EQ(cl.overrides, (std::vector<std::string>{"io.init=my dir/a=b.h5"}));
}

TEST(CommandLine, Help) {
  for (const char* flag : {"--help", "-h"}) {
    const CommandLine cl = parse({flag});
    EXPECT_TRUE(cl.help_requested) << flag;
    EXPECT_NE(cl.help_text.find("usage: miniattn DECK.yaml [--set section.key=value ...]"), std::string::npos)
        << cl.help_text;
    EXPECT_NE(cl.help_text.find("--set"), std::string::npos) << cl.help_text;
  }
  EXPECT_TRUE(parse({"deck.yaml", "--help"}).help_requested);
}

TEST(CommandLine, MissingDeck) {
  const std::string message = parse_error_of({});
  EXPECT_NE(message.find("missing the input deck"), std::string::npos) << message;
  EXPECT_NE(message.find("usage: miniattn"), std::string::npos) << message;
  EXPECT_NE(parse_error_of({"--set", "model.vocab=3"}).find("missing the input deck"), std::string::npos);
}

TEST(CommandLine, UnknownOption) {
  const std::string message = parse_error_of({"deck.yaml", "--frobnicate"});
  EXPECT_NE(message.find("--frobnicate"), std::string::npos) << message;
  EXPECT_NE(message.find("usage: miniattn"), std::string::npos) << message;
}

TEST(CommandLine, TwoDecks) {
  const std::string message = parse_error_of({"a.yaml", "b.yaml"});
  EXPECT_NE(message.find("b.yaml"), std::string::npos) << message;
  EXPECT_NE(message.find("usage: miniattn"), std::string::npos) << message;
}

TEST(CommandLine, SetWithoutValue) {
  const std::string message = parse_error_of({"deck.yaml", "--set"});
  EXPECT_NE(message.find("--set"), std::string::npos) << message;
  EXPECT_NE(message.find("usage: miniattn"), std::string::npos) << message;
}

TEST(CommandLine, OverrideWithoutEquals) {
  const std::string message = parse_error_of({"deck.yaml", "--set", "model.vocab"});
  EXPECT_NE(message.find("'model.vocab': expected section.key=value, found no '='"), std::string::npos) << message;
  EXPECT_NE(message.find("usage: miniattn"), std::string::npos) << message;
}

TEST(CommandLine, OverrideWithoutSection) {
  const std::string message = parse_error_of({"deck.yaml", "--set", "vocab=3"});
  EXPECT_NE(message.find("'vocab=3': expected section.key=value, found no section"), std::string::npos) << message;
  EXPECT_NE(message.find("usage: miniattn"), std::string::npos) << message;
}

}  // namespace
}  // namespace miniattn
