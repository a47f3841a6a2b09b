#include "kube/yaml_subset.h"

#include <string>
#include <vector>

namespace accelpool::kube {

using nlohmann::json;

namespace {

struct Line {
  int indent;
  std::string text;
  int number;  // 1-based, for messages
};

Status Bad(const Line& l, const std::string& why) {
  return InvalidArgumentError("line " + std::to_string(l.number) + ": " + why);
}

// Removes a trailing comment (a '#' at the start or after a space, outside quotes).
std::string StripComment(const std::string& s) {
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '#' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t')) {
      return s.substr(0, i);
    }
  }
  return s;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

StatusOr<json> Scalar(const Line& l, const std::string& raw) {
  const std::string s = Trim(raw);
  if (s.empty() || s == "null" || s == "~") return json(nullptr);
  if (s == "{}") return json::object();
  if (s == "[]") return json::array();
  if (s == "true" || s == "True") return json(true);
  if (s == "false" || s == "False") return json(false);
  if (s[0] == '\'') {
    if (s.size() < 2 || s.back() != '\'') return Bad(l, "unterminated single-quoted string");
    std::string out;
    for (size_t i = 1; i + 1 < s.size(); ++i) {
      out += s[i];
      if (s[i] == '\'' && i + 2 < s.size() && s[i + 1] == '\'') ++i;
    }
    return json(out);
  }
  if (s[0] == '"') {
    if (s.size() < 2 || s.back() != '"') return Bad(l, "unterminated double-quoted string");
    std::string out;
    for (size_t i = 1; i + 1 < s.size(); ++i) {
      if (s[i] == '\\' && i + 2 < s.size()) {
        const char n = s[++i];
        out += n == 'n' ? '\n' : n == 't' ? '\t' : n;
      } else {
        out += s[i];
      }
    }
    return json(out);
  }
  if (s[0] == '{' || s[0] == '[' || s[0] == '&' || s[0] == '*' || s[0] == '|' || s[0] == '>' ||
      s[0] == '!') {
    return Bad(l,
               "this YAML construct is not supported in kubeconfig files; write it as a "
               "plain value or use a JSON kubeconfig");
  }
  return json(s);
}

class Parser {
 public:
  explicit Parser(std::vector<Line> lines) : lines_(std::move(lines)) {}

  StatusOr<json> Document() {
    if (lines_.empty()) return json::object();
    auto v = Block(lines_[0].indent);
    if (!v.ok()) return v;
    if (pos_ < lines_.size()) return Bad(lines_[pos_], "unexpected indentation");
    return v;
  }

 private:
  static bool IsItem(const std::string& t) { return t == "-" || t.rfind("- ", 0) == 0; }

  StatusOr<json> Block(int indent) {
    if (pos_ < lines_.size() && IsItem(lines_[pos_].text)) return Sequence(indent);
    return Mapping(indent);
  }

  StatusOr<json> Sequence(int indent) {
    json out = json::array();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && IsItem(lines_[pos_].text)) {
      Line& l = lines_[pos_];
      const std::string rest = l.text.size() > 1 ? l.text.substr(2) : "";
      const std::string body = Trim(rest);
      if (body.empty()) {
        ++pos_;
        if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
          auto v = Block(lines_[pos_].indent);
          if (!v.ok()) return v;
          out.push_back(*v);
        } else {
          out.push_back(nullptr);
        }
        continue;
      }
      // "- key: value" starts a mapping whose keys sit at the column after "- ".
      const size_t lead = rest.find_first_not_of(' ');
      const bool is_map = body.find(": ") != std::string::npos || body.back() == ':';
      if (is_map && body[0] != '"' && body[0] != '\'') {
        l.indent = indent + 2 + static_cast<int>(lead);
        l.text = body;
        auto v = Mapping(l.indent);
        if (!v.ok()) return v;
        out.push_back(*v);
      } else {
        auto v = Scalar(l, body);
        if (!v.ok()) return v;
        out.push_back(*v);
        ++pos_;
      }
    }
    return out;
  }

  StatusOr<json> Mapping(int indent) {
    json out = json::object();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && !IsItem(lines_[pos_].text)) {
      const Line l = lines_[pos_];
      size_t colon = std::string::npos;
      if (l.text[0] == '"' || l.text[0] == '\'') {
        const size_t close = l.text.find(l.text[0], 1);
        if (close != std::string::npos) colon = l.text.find(':', close);
      } else {
        colon = l.text.find(": ");
        if (colon == std::string::npos && l.text.back() == ':') colon = l.text.size() - 1;
      }
      if (colon == std::string::npos) return Bad(l, "want \"key: value\"");
      auto key = Scalar(l, l.text.substr(0, colon));
      if (!key.ok()) return key.status();
      if (!key->is_string()) return Bad(l, "keys must be strings");
      const std::string value = Trim(l.text.substr(colon + 1));
      ++pos_;
      if (!value.empty()) {
        auto v = Scalar(l, value);
        if (!v.ok()) return v;
        out[key->get<std::string>()] = *v;
      } else if (pos_ < lines_.size() &&
                 (lines_[pos_].indent > indent ||
                  (lines_[pos_].indent == indent && IsItem(lines_[pos_].text)))) {
        auto v = lines_[pos_].indent == indent ? Sequence(indent) : Block(lines_[pos_].indent);
        if (!v.ok()) return v;
        out[key->get<std::string>()] = *v;
      } else {
        out[key->get<std::string>()] = nullptr;
      }
    }
    if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
      return Bad(lines_[pos_], "unexpected indentation");
    }
    return out;
  }

  std::vector<Line> lines_;
  size_t pos_ = 0;
};

}  // namespace

StatusOr<json> ParseYamlSubset(std::string_view text) {
  std::vector<Line> lines;
  int number = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string raw(text.substr(start, end - start));
    start = end + 1;
    ++number;
    if (raw.find('\t') != std::string::npos && raw.find_first_not_of(" \t") != std::string::npos &&
        raw.find_first_not_of(' ') < raw.size() && raw[raw.find_first_not_of(' ')] == '\t') {
      return InvalidArgumentError("line " + std::to_string(number) +
                                  ": tabs are not allowed for indentation in YAML");
    }
    std::string s = StripComment(raw);
    const std::string t = Trim(s);
    if (t.empty() || t == "---" || t == "...") continue;
    const int indent = static_cast<int>(s.find_first_not_of(' '));
    lines.push_back({indent, t, number});
    if (end == text.size()) break;
  }
  Parser p(std::move(lines));
  return p.Document();
}

}  // namespace accelpool::kube
