#include "store/s3_xml.h"

#include <charconv>
#include <cstdint>

namespace deltakv::sidecar {
namespace {

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string Decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string_view::npos) {
      out += s.substr(i);
      break;
    }
    std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") {
      out += '&';
    } else if (ent == "lt") {
      out += '<';
    } else if (ent == "gt") {
      out += '>';
    } else if (ent == "quot") {
      out += '"';
    } else if (ent == "apos") {
      out += '\'';
    } else if (ent.size() > 1 && ent[0] == '#') {
      const bool hex = ent[1] == 'x' || ent[1] == 'X';
      std::string_view digits = ent.substr(hex ? 2 : 1);
      uint32_t cp = 0;
      auto [end, ec] =
          std::from_chars(digits.data(), digits.data() + digits.size(), cp, hex ? 16 : 10);
      if (ec != std::errc() || end != digits.data() + digits.size() || cp > 0x10FFFF) {
        out += s.substr(i, semi - i + 1);
      } else {
        AppendUtf8(out, cp);
      }
    } else {
      out += s.substr(i, semi - i + 1);
    }
    i = semi;
  }
  return out;
}

}  // namespace

std::vector<std::string> XmlElements(std::string_view xml, std::string_view name) {
  std::vector<std::string> out;
  const std::string open = "<" + std::string(name);
  const std::string close = "</" + std::string(name) + ">";
  size_t at = 0;
  while ((at = xml.find(open, at)) != std::string_view::npos) {
    const size_t after = at + open.size();
    if (after >= xml.size()) break;
    const char c = xml[after];
    if (c != '>' && c != ' ' && c != '/' && c != '\t' && c != '\n' && c != '\r') {
      at = after;  // a longer name with this prefix
      continue;
    }
    const size_t gt = xml.find('>', after);
    if (gt == std::string_view::npos) break;
    if (xml[gt - 1] == '/') {
      out.emplace_back();
      at = gt + 1;
      continue;
    }
    const size_t end = xml.find(close, gt + 1);
    if (end == std::string_view::npos) break;
    out.push_back(Decode(xml.substr(gt + 1, end - gt - 1)));
    at = end + close.size();
  }
  return out;
}

std::optional<std::string> XmlElement(std::string_view xml, std::string_view name) {
  std::vector<std::string> all = XmlElements(xml, name);
  if (all.empty()) return std::nullopt;
  return std::move(all.front());
}

std::string XmlEscape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace deltakv::sidecar
