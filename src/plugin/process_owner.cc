#include "plugin/process_owner.h"

#include <cctype>
#include <fstream>
#include <sstream>
#include <vector>

namespace accelpool::plugin {
namespace {

constexpr size_t kUidLength = 36;  // 8-4-4-4-12 hex digits
constexpr size_t kContainerIdLength = 64;
constexpr size_t kMaxRead = 64 * 1024;  // a cgroup file is a few hundred bytes

bool IsHex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

// A pod UID at the start of `s`, as kubelet writes it into a cgroup name
// (dashes; underscores under the systemd driver); "" when there is none.
std::string UidAt(std::string_view s) {
  if (s.size() < kUidLength) return "";
  std::string out;
  for (size_t i = 0; i < kUidLength; ++i) {
    const char c = s[i];
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? (c != '-' && c != '_') : !IsHex(c)) return "";
    out += dash ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  // "pod<uid>" ends the component, or goes on with ".slice".
  if (s.size() > kUidLength && s[kUidLength] != '.') return "";
  return out;
}

// The pod UID a path component names ("pod<uid>", "kubepods-burstable-pod<uid>.slice").
std::string UidOfComponent(std::string_view c) {
  for (size_t at = c.find("pod"); at != std::string_view::npos; at = c.find("pod", at + 1)) {
    if (std::string uid = UidAt(c.substr(at + 3)); !uid.empty()) return uid;
  }
  return "";
}

// The container id a path component names: a bare id, or one inside a
// runtime's systemd scope ("cri-containerd-<id>.scope").
std::string ContainerOfComponent(std::string_view c) {
  if (c.ends_with(".scope")) c.remove_suffix(6);
  if (const size_t dash = c.rfind('-'); dash != std::string_view::npos) c.remove_prefix(dash + 1);
  if (c.size() != kContainerIdLength) return "";
  for (char ch : c) {
    if (!IsHex(ch)) return "";
  }
  return std::string(c);
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string_view::npos ? s.size() - start : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return out;
}

std::string ReadSmall(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string out(kMaxRead, '\0');
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  out.resize(static_cast<size_t>(in.gcount()));
  return out;
}

}  // namespace

CgroupPlace PlaceFromCgroup(std::string_view text) {
  for (std::string_view line : Split(text, '\n')) {
    // "<hierarchy>:<controllers>:<path>"; the path may itself hold ':'.
    const size_t first = line.find(':');
    if (first == std::string_view::npos) continue;
    const size_t second = line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    const std::vector<std::string_view> parts = Split(line.substr(second + 1), '/');
    for (size_t i = 0; i < parts.size(); ++i) {
      std::string uid = UidOfComponent(parts[i]);
      if (uid.empty()) continue;
      CgroupPlace place;
      place.pod_uid = std::move(uid);
      if (i + 1 < parts.size()) place.container_id = ContainerOfComponent(parts[i + 1]);
      return place;
    }
  }
  return {};
}

ProcessOwner ReadProcessOwner(const std::string& proc_root, int64_t pid) {
  ProcessOwner out;
  out.pid = pid;
  if (proc_root.empty() || pid <= 0) return out;
  const std::string dir = proc_root + "/" + std::to_string(pid) + "/";
  std::ifstream comm(dir + "comm", std::ios::binary);
  if (!comm) return out;
  out.visible = true;
  std::string name;
  std::getline(comm, name);
  // The kernel keeps 15 bytes; a process sets them itself, so they are
  // anything: only printable ASCII goes into a log line or an Event.
  for (char c : name.substr(0, 16)) {
    const auto u = static_cast<unsigned char>(c);
    out.command += u >= 0x20 && u < 0x7f ? c : '?';
  }
  out.place = PlaceFromCgroup(ReadSmall(dir + "cgroup"));
  return out;
}

}  // namespace accelpool::plugin
