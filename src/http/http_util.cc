// Request/Response helpers and URL coding shared by the server and client.
#include <nlohmann/json.hpp>

#include "http/http.h"

namespace accelpool::http {

std::string Request::Query(const std::string& key, const std::string& fallback) const {
  auto it = query.find(key);
  return it == query.end() ? fallback : it->second;
}

std::string Request::Header(const std::string& lower_name, const std::string& fallback) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? fallback : it->second;
}

Response Response::Json(int status, std::string body) {
  Response r;
  r.status = status;
  r.headers["content-type"] = "application/json";
  r.body = std::move(body);
  return r;
}

Response Response::Error(int status, std::string_view message) {
  nlohmann::json j = {{"error", {{"code", status}, {"message", std::string(message)}}}};
  return Json(status, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

std::string UrlEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string UrlDecode(std::string_view s, bool plus_is_space) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else if (plus_is_space && s[i] == '+') {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace accelpool::http
