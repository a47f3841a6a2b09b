#include "kube/yaml_flow.h"

#include <cstdint>
#include <cstdio>

namespace accelpool::kube::yaml {

using nlohmann::json;

namespace {

std::string Describe(int c) {
  if (c < 0) return "the end of the input";
  if (c >= 0x20 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
  char buf[16];
  std::snprintf(buf, sizeof(buf), "byte 0x%02x", c & 0xff);
  return buf;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

class Reader {
 public:
  Reader(const std::vector<Line>& lines, Pos at) : lines_(lines), at_(at) {}

  Pos pos() const { return at_; }

  // The next byte on the current line, or -1 at its end.
  int Peek() const {
    const std::string& t = lines_[at_.line].text;
    return at_.offset < t.size() ? static_cast<unsigned char>(t[at_.offset]) : -1;
  }

  // Skips blanks; with `cross_lines`, also line ends while lines follow.
  void Skip(bool cross_lines) {
    for (;;) {
      const std::string& t = lines_[at_.line].text;
      while (at_.offset < t.size() && (t[at_.offset] == ' ' || t[at_.offset] == '\t')) {
        ++at_.offset;
      }
      if (at_.offset < t.size() || !cross_lines || at_.line + 1 >= lines_.size()) return;
      ++at_.line;
      at_.offset = 0;
    }
  }

  Status Err(std::string_view what) const { return ErrorAt(lines_, at_, what); }

  StatusOr<json> Node(int depth) {
    if (depth > kMaxFlowDepth) {
      return Err("flow collections are nested deeper than " + std::to_string(kMaxFlowDepth) +
                 " levels; flatten the document");
    }
    switch (Peek()) {
      case '{':
        return Mapping(depth);
      case '[':
        return Sequence(depth);
      case '"':
        return DoubleQuoted();
      case '\'':
        return SingleQuoted();
      default:
        return Plain();
    }
  }

 private:
  Status Unclosed(Pos open, char close) const {
    const Line& l = lines_[open.line];
    return Err(std::string("want '") + close + "' to close the '" + (close == '}' ? '{' : '[') +
               "' opened at line " + std::to_string(l.number) + ", column " +
               std::to_string(l.indent + static_cast<int>(open.offset) + 1) + ", found " +
               Describe(Peek()));
  }

  // A scalar used as a key, as a string.
  StatusOr<std::string> KeyOf(const json& v, Pos at) const {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_boolean()) return std::string(v.get<bool>() ? "true" : "false");
    return ErrorAt(lines_, at, "a null key is not supported; quote the key");
  }

  // After ':' in a collection: the value, or null when the entry ends there.
  StatusOr<json> ValueAfterColon(int depth, Pos open, char close) {
    ++at_.offset;
    Skip(true);
    const int c = Peek();
    if (c < 0) return Unclosed(open, close);
    if (c == ',' || c == close) return json(nullptr);
    return Node(depth + 1);
  }

  StatusOr<json> Mapping(int depth) {
    const Pos open = at_;
    ++at_.offset;
    json out = json::object();
    for (;;) {
      Skip(true);
      int c = Peek();
      if (c < 0) return Unclosed(open, '}');
      if (c == '}') break;
      if (c == ',') return Err("want a key or '}', found ','");
      if (c == '{' || c == '[') {
        return Err("a flow collection as a key is not supported; keys must be scalars");
      }
      const Pos key_at = at_;
      auto key = Node(depth + 1);
      if (!key.ok()) return key;
      auto k = KeyOf(*key, key_at);
      if (!k.ok()) return k.status();
      Skip(true);
      json value = nullptr;
      if (Peek() == ':') {
        auto v = ValueAfterColon(depth, open, '}');
        if (!v.ok()) return v;
        value = std::move(*v);
      }
      if (out.contains(*k)) return ErrorAt(lines_, key_at, "duplicate key \"" + *k + "\"");
      out[*k] = std::move(value);
      Skip(true);
      c = Peek();
      if (c == ',') {
        ++at_.offset;
        continue;
      }
      if (c == '}') break;
      if (c < 0) return Unclosed(open, '}');
      return Err("want ',' or '}' after the value of \"" + *k + "\", found " + Describe(c));
    }
    ++at_.offset;
    return out;
  }

  StatusOr<json> Sequence(int depth) {
    const Pos open = at_;
    ++at_.offset;
    json out = json::array();
    for (;;) {
      Skip(true);
      int c = Peek();
      if (c < 0) return Unclosed(open, ']');
      if (c == ']') break;
      if (c == ',') return Err("want a value or ']', found ','");
      const Pos item_at = at_;
      auto item = Node(depth + 1);
      if (!item.ok()) return item;
      Skip(true);
      if (Peek() == ':') {  // "[a: b]" is a one-entry mapping
        if (item->is_object() || item->is_array()) {
          return Err("a flow collection as a key is not supported; keys must be scalars");
        }
        auto k = KeyOf(*item, item_at);
        if (!k.ok()) return k.status();
        auto v = ValueAfterColon(depth, open, ']');
        if (!v.ok()) return v;
        json pair = json::object();
        pair[*k] = std::move(*v);
        *item = std::move(pair);
        Skip(true);
      }
      out.push_back(std::move(*item));
      c = Peek();
      if (c == ',') {
        ++at_.offset;
        continue;
      }
      if (c == ']') break;
      if (c < 0) return Unclosed(open, ']');
      return Err("want ',' or ']' after a sequence item, found " + Describe(c));
    }
    ++at_.offset;
    return out;
  }

  StatusOr<json> SingleQuoted() {
    const Pos open = at_;
    const std::string& t = lines_[at_.line].text;
    ++at_.offset;
    std::string out;
    for (;;) {
      if (at_.offset >= t.size()) {
        return ErrorAt(lines_, open,
                       "unterminated single-quoted string; close it with ' on the same line");
      }
      const char ch = t[at_.offset++];
      if (ch != '\'') {
        out += ch;
      } else if (at_.offset < t.size() && t[at_.offset] == '\'') {
        out += '\'';
        ++at_.offset;
      } else {
        return json(std::move(out));
      }
    }
  }

  StatusOr<json> DoubleQuoted() {
    const Pos open = at_;
    const std::string& t = lines_[at_.line].text;
    const Status unterminated = ErrorAt(
        lines_, open, "unterminated double-quoted string; close it with \" on the same line");
    ++at_.offset;
    std::string out;
    for (;;) {
      if (at_.offset >= t.size()) return unterminated;
      const char ch = t[at_.offset++];
      if (ch == '"') return json(std::move(out));
      if (ch != '\\') {
        out += ch;
        continue;
      }
      if (at_.offset >= t.size()) return unterminated;
      const Pos esc = {at_.line, at_.offset - 1};
      const char e = t[at_.offset++];
      int hex_digits = 0;
      switch (e) {
        case '0':
          out += '\0';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 't':
          out += '\t';
          break;
        case 'n':
          out += '\n';
          break;
        case 'v':
          out += '\v';
          break;
        case 'f':
          out += '\f';
          break;
        case 'r':
          out += '\r';
          break;
        case 'e':
          out += '\x1b';
          break;
        case ' ':
        case '"':
        case '/':
        case '\\':
          out += e;
          break;
        case 'x':
          hex_digits = 2;
          break;
        case 'u':
          hex_digits = 4;
          break;
        case 'U':
          hex_digits = 8;
          break;
        default:
          return ErrorAt(lines_, esc,
                         std::string("unknown escape \\") + (e >= 0x20 && e < 0x7f ? e : '?') +
                             " in a double-quoted string; write \\\\ for a backslash");
      }
      if (hex_digits == 0) continue;
      uint32_t cp = 0;
      for (int i = 0; i < hex_digits; ++i) {
        const int v = at_.offset < t.size() ? HexValue(t[at_.offset]) : -1;
        if (v < 0) {
          return ErrorAt(lines_, esc,
                         "escape \\" + std::string(1, e) + " wants " + std::to_string(hex_digits) +
                             " hexadecimal digits");
        }
        cp = cp * 16 + static_cast<uint32_t>(v);
        ++at_.offset;
      }
      if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
        return ErrorAt(lines_, esc, "escape names no Unicode character; use a code point");
      }
      AppendUtf8(out, cp);
    }
  }

  // A plain scalar inside a flow collection: ends at ',', a bracket, ": " or
  // the end of the line.
  StatusOr<json> Plain() {
    const int c = Peek();
    if (c < 0 || c == ',' || c == ']' || c == '}') return Err("want a value, found " + Describe(c));
    if (c == '&' || c == '*' || c == '!' || c == '|' || c == '>' || c == '%' || c == '@' ||
        c == '`') {
      return Err(Describe(c) +
                 " starts an anchor, alias, tag or block scalar, which kubeconfig files do not "
                 "support here; write the value plain or quoted");
    }
    const std::string& t = lines_[at_.line].text;
    const size_t start = at_.offset;
    size_t end = start;
    while (end < t.size()) {
      const char ch = t[end];
      if (ch == ',' || ch == '[' || ch == ']' || ch == '{' || ch == '}') break;
      if (ch == ':' &&
          (end + 1 == t.size() || t[end + 1] == ' ' || t[end + 1] == ',' || t[end + 1] == '[' ||
           t[end + 1] == ']' || t[end + 1] == '{' || t[end + 1] == '}')) {
        break;
      }
      ++end;
    }
    at_.offset = end;
    size_t last = end;
    while (last > start && (t[last - 1] == ' ' || t[last - 1] == '\t')) --last;
    return PlainScalar(std::string_view(t).substr(start, last - start));
  }

  const std::vector<Line>& lines_;
  Pos at_;
};

}  // namespace

Status ErrorAt(const std::vector<Line>& lines, Pos at, std::string_view what) {
  int number = 1, column = 1;
  if (!lines.empty()) {
    const Line& l = lines[at.line < lines.size() ? at.line : lines.size() - 1];
    number = l.number;
    column = l.indent + static_cast<int>(at.offset) + 1;
  }
  return InvalidArgumentError("line " + std::to_string(number) + ", column " +
                              std::to_string(column) + ": " + std::string(what));
}

StatusOr<json> ReadFlowNode(const std::vector<Line>& lines, Pos& at) {
  if (at.line >= lines.size()) return ErrorAt(lines, at, "want a value");
  Reader r(lines, at);
  auto v = r.Node(0);
  if (!v.ok()) return v;
  r.Skip(false);
  if (r.Peek() >= 0) {
    return r.Err("want the end of the line after the value, found " + Describe(r.Peek()) +
                 "; quote the whole value or put a comment after \" #\"");
  }
  at = r.pos();
  return v;
}

json PlainScalar(std::string_view s) {
  if (s.empty() || s == "null" || s == "Null" || s == "NULL" || s == "~") return json(nullptr);
  if (s == "true" || s == "True" || s == "TRUE") return json(true);
  if (s == "false" || s == "False" || s == "FALSE") return json(false);
  return json(std::string(s));
}

}  // namespace accelpool::kube::yaml
