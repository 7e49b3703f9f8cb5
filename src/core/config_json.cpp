#include "core/config_json.hpp"

#include <type_traits>
#include <variant>

#include "core/config_fields.hpp"

namespace miniattn {

nlohmann::json config_to_json(const Config& config) {
  Config& values = const_cast<Config&>(config);  // read only: the table hands out references
  nlohmann::json out = nlohmann::json::object();
  for (const std::string& section : config_fields::sections()) out[section] = nlohmann::json::object();
  for (const config_fields::Field& field : config_fields::fields()) {
    nlohmann::json& slot = out[field.section][field.key];
    std::visit(
        [&](auto ref) {
          if constexpr (std::is_same_v<decltype(ref), config_fields::EnumRef>) {
            slot = ref.names()[ref.get(values)];
          } else {
            slot = ref(values);
          }
        },
        field.ref);
  }
  out["deck"] = config.deck_path;
  return out;
}

}  // namespace miniattn
