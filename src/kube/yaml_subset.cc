#include "kube/yaml_subset.h"

#include <string>
#include <vector>

#include "kube/yaml_flow.h"

namespace accelpool::kube {

using nlohmann::json;

namespace {

using yaml::Line;
using yaml::Pos;

Status Bad(const Line& l, const std::string& why) {
  return InvalidArgumentError("line " + std::to_string(l.number) + ": " + why);
}

// Removes a trailing comment (a '#' at the start or after a space, outside
// quotes). A quote opens a quoted scalar only where a token starts, so the
// apostrophe in "name: it's # note" does not hide the comment.
std::string StripComment(const std::string& s) {
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quote != 0) {
      if ((c == '\\' && quote == '"') ||
          (c == '\'' && quote == '\'' && i + 1 < s.size() && s[i + 1] == '\'')) {
        ++i;
      } else if (c == quote) {
        quote = 0;
      }
      continue;
    }
    const bool token_start = i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t' || s[i - 1] == '[' ||
                             s[i - 1] == '{' || s[i - 1] == ',' || s[i - 1] == ':';
    if ((c == '\'' || c == '"') && token_start) {
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

// A plain block scalar (quoted and flow values go through yaml::ReadFlowNode).
StatusOr<json> Scalar(const Line& l, const std::string& raw) {
  const std::string s = Trim(raw);
  if (!s.empty() && (s[0] == '&' || s[0] == '*' || s[0] == '|' || s[0] == '>' || s[0] == '!' ||
                     s[0] == '%' || s[0] == '@' || s[0] == '`')) {
    return Bad(l,
               "anchors, aliases, tags and block scalars are not supported in kubeconfig "
               "files; write the value plain, quoted or in {} / [] flow style, or use a JSON "
               "kubeconfig");
  }
  return yaml::PlainScalar(s);
}

constexpr int kMaxBlockDepth = 100;

// The index of the ':' that ends the key of a "key: value" or "key:" line,
// or npos when the line is not a mapping entry. Keys may be quoted.
size_t KeyColon(const std::string& t) {
  if (t.empty() || t[0] == '{' || t[0] == '[') return std::string::npos;
  size_t from = 0;
  if (t[0] == '"' || t[0] == '\'') {
    size_t i = 1;
    for (; i < t.size(); ++i) {
      if (t[0] == '"' && t[i] == '\\') {
        ++i;
      } else if (t[i] == t[0]) {
        if (t[0] == '\'' && i + 1 < t.size() && t[i + 1] == '\'') {
          ++i;
        } else {
          break;
        }
      }
    }
    if (i >= t.size()) return std::string::npos;
    from = t.find_first_not_of(' ', i + 1);
    if (from == std::string::npos || t[from] != ':') return std::string::npos;
    return from + 1 == t.size() || t[from + 1] == ' ' ? from : std::string::npos;
  }
  const size_t colon = t.find(": ");
  if (colon != std::string::npos) return colon;
  return t.back() == ':' ? t.size() - 1 : std::string::npos;
}

class Parser {
 public:
  explicit Parser(std::vector<Line> lines) : lines_(std::move(lines)) {}

  StatusOr<json> Document() {
    if (lines_.empty()) return json::object();
    auto v = Block(lines_[0].indent, 0);
    if (!v.ok()) return v;
    if (pos_ < lines_.size()) return Bad(lines_[pos_], "unexpected indentation");
    return v;
  }

 private:
  static bool IsItem(const std::string& t) { return t == "-" || t.rfind("- ", 0) == 0; }

  // A flow collection or quoted scalar starting at `offset` of the current
  // line; continues after the line where it ends.
  StatusOr<json> Flow(size_t offset) {
    Pos at{pos_, offset};
    auto v = yaml::ReadFlowNode(lines_, at);
    if (!v.ok()) return v;
    pos_ = at.line + 1;
    return v;
  }

  // Every nesting (a block, "- - x" on one line, a "key:" followed by "- "
  // at its own column) goes one level deeper; a corrupt file of thousands of
  // them is an error, not a stack overflow.
  Status CheckDepth(int depth) const {
    if (depth > kMaxBlockDepth) {
      return Bad(lines_[pos_], "nested deeper than " + std::to_string(kMaxBlockDepth) +
                                   " levels; flatten the document");
    }
    return Status::Ok();
  }

  StatusOr<json> Block(int indent, int depth) {
    ACCELPOOL_RETURN_IF_ERROR(CheckDepth(depth));
    const std::string& t = lines_[pos_].text;
    if (t[0] == '{' || t[0] == '[') {
      auto v = Flow(0);
      if (v.ok() && pos_ < lines_.size() && lines_[pos_].indent == indent) {
        return Bad(lines_[pos_],
                   "unexpected content after a flow collection; a value is either "
                   "a {} / [] collection or indented lines, not both");
      }
      return v;
    }
    if (IsItem(t)) return Sequence(indent, depth);
    return Mapping(indent, depth);
  }

  StatusOr<json> Sequence(int indent, int depth) {
    ACCELPOOL_RETURN_IF_ERROR(CheckDepth(depth));
    json out = json::array();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && IsItem(lines_[pos_].text)) {
      Line& l = lines_[pos_];
      const std::string rest = l.text.size() > 1 ? l.text.substr(2) : "";
      const std::string body = Trim(rest);
      if (body.empty()) {
        ++pos_;
        if (pos_ < lines_.size() && lines_[pos_].indent > indent) {
          auto v = Block(lines_[pos_].indent, depth + 1);
          if (!v.ok()) return v;
          out.push_back(std::move(*v));
        } else {
          out.push_back(nullptr);
        }
        continue;
      }
      // "- key: value" starts a mapping whose keys sit at the column after "- ".
      // "- - x" likewise starts a sequence at the column of its inner "- ".
      const size_t lead = rest.find_first_not_of(' ');
      StatusOr<json> v = json();
      if (IsItem(body)) {
        l.indent = indent + 2 + static_cast<int>(lead);
        l.text = body;
        v = Sequence(l.indent, depth + 1);
      } else if (KeyColon(body) != std::string::npos) {
        l.indent = indent + 2 + static_cast<int>(lead);
        l.text = body;
        v = Mapping(l.indent, depth + 1);
      } else if (yaml::StartsFlowNode(body[0])) {
        v = Flow(2 + lead);
      } else {
        v = Scalar(l, body);
        ++pos_;
      }
      if (!v.ok()) return v;
      out.push_back(std::move(*v));
    }
    return out;
  }

  StatusOr<std::string> Key(const Line& l, size_t colon) {
    const std::string text = Trim(l.text.substr(0, colon));
    if (text.empty()) return Bad(l, "empty key; write \"key: value\"");
    if (text[0] != '"' && text[0] != '\'') {
      auto k = Scalar(l, text);
      if (!k.ok()) return k.status();
      if (!k->is_string()) return Bad(l, "keys must be strings; quote the key");
      return k->get<std::string>();
    }
    const std::vector<Line> one = {{l.indent, text, l.number}};
    Pos at;
    auto k = yaml::ReadFlowNode(one, at);
    if (!k.ok()) return k.status();
    return k->get<std::string>();
  }

  StatusOr<json> Mapping(int indent, int depth) {
    ACCELPOOL_RETURN_IF_ERROR(CheckDepth(depth));
    json out = json::object();
    while (pos_ < lines_.size() && lines_[pos_].indent == indent && !IsItem(lines_[pos_].text)) {
      const Line l = lines_[pos_];
      const size_t colon = KeyColon(l.text);
      if (colon == std::string::npos) return Bad(l, "want \"key: value\"");
      auto key = Key(l, colon);
      if (!key.ok()) return key.status();
      if (out.contains(*key)) return Bad(l, "duplicate key \"" + *key + "\"");
      const size_t voff = l.text.find_first_not_of(' ', colon + 1);
      StatusOr<json> v = json();
      if (voff != std::string::npos && yaml::StartsFlowNode(l.text[voff])) {
        v = Flow(voff);
      } else if (voff != std::string::npos) {
        ++pos_;
        v = Scalar(l, l.text.substr(voff));
      } else if (++pos_ < lines_.size() &&
                 (lines_[pos_].indent > indent ||
                  (lines_[pos_].indent == indent && IsItem(lines_[pos_].text)))) {
        v = lines_[pos_].indent == indent ? Sequence(indent, depth + 1)
                                          : Block(lines_[pos_].indent, depth + 1);
      } else {
        v = json(nullptr);
      }
      if (!v.ok()) return v;
      out[*key] = std::move(*v);
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
