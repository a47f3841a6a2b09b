#include "common/flags.h"

namespace accelpool {

Status ParseFlagTable(int argc, const char* const* argv,
                      const std::map<std::string, std::string*>& strings,
                      const std::map<std::string, bool*>& bools) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") return Status(StatusCode::kCancelled, "");
    if (arg.rfind("--", 0) != 0) {
      return InvalidArgumentError("unexpected argument " + arg + "; flags look like --name=value");
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (auto b = bools.find(name); b != bools.end()) {
      if (has_value && value != "true" && value != "false" && value != "1" && value != "0") {
        return InvalidArgumentError("flag --" + name + " takes true or false, got " + value);
      }
      *b->second = !has_value || value == "true" || value == "1";
      continue;
    }
    auto s = strings.find(name);
    if (s == strings.end()) return InvalidArgumentError("unknown flag --" + name + "; see --help");
    if (!has_value) {
      if (i + 1 >= argc) return InvalidArgumentError("flag --" + name + " needs a value");
      value = argv[++i];
    }
    *s->second = value;
  }
  return Status::Ok();
}

}  // namespace accelpool
