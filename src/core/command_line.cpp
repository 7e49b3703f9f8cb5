// The command line, parsed with CLI11: miniattn DECK.yaml [--set section.key=value ...].
#include "core/command_line.hpp"

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "core/config.hpp"
#include "core/error.hpp"

namespace miniattn {

namespace {

const char* const kUsage = "usage: miniattn DECK.yaml [--set section.key=value ...]";

// CLI11's help with our usage line in place of its generated one.
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override { return std::string(kUsage) + "\n"; }
};

std::string help_text(const CLI::App& app) { return app.help(); }

}  // namespace

CommandLine parse_command_line(int argc, const char* const* argv) {
  CommandLine result;
  CLI::App app{
      "miniattn: trains a small transformer on long sequences split across MPI ranks.\n"
      "Every deck key can be overridden with --set; overrides are applied in order after the deck.",
      "miniattn"};
  app.formatter(std::make_shared<Formatter>());
  app.add_option("deck", result.deck_path, "the input deck (YAML)")->type_name("DECK.yaml");
  app.add_option("--set", result.overrides, "override one deck key, e.g. --set model.heads=8 (repeatable)")
      ->type_name("SECTION.KEY=VALUE")
      ->allow_extra_args(false)
      ->take_all();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    result.help_requested = true;
    result.help_text = help_text(app);
    return result;
  } catch (const CLI::ParseError& error) {
    throw InputError(std::string("command line: ") + error.what() + "\n" + help_text(app));
  }
  if (result.deck_path.empty()) {
    throw InputError("command line: missing the input deck (DECK.yaml)\n" + help_text(app));
  }
  for (const std::string& text : result.overrides) {
    try {
      split_override(text);
    } catch (const InputError& error) {
      throw InputError(std::string("command line: ") + error.what() + "\n" + help_text(app));
    }
  }
  return result;
}

}  // namespace miniattn
