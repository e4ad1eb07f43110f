// Just enough XML for S3's answers: the text of elements by name. S3's documents are flat
// records (<Key>, <IsTruncated>, <UploadId>, <Code>, <Message>) with no attributes that matter
// and no CDATA; the five named entities and numeric character references are decoded.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deltakv::sidecar {

// The decoded text of every <name>...</name> element, in document order. An element with
// attributes (<name a="b">) counts; a self-closing <name/> gives "".
std::vector<std::string> XmlElements(std::string_view xml, std::string_view name);

// The first such element, or nullopt.
std::optional<std::string> XmlElement(std::string_view xml, std::string_view name);

// Escapes &, <, >, " and ' for an element's text.
std::string XmlEscape(std::string_view text);

}  // namespace deltakv::sidecar
