// Bounded YAML loading on top of yaml-cpp's event API (see yaml_tree.h).
//
// Why events and not YAML::Load: YAML::Load expands aliases (a 10-level "billion laughs"
// document becomes billions of nodes), silently keeps only one of two duplicate keys
// when looked up, and recurses as deep as the input nests. Here every event is checked
// as it arrives and the first refused construct aborts the parse (by exception, which
// yaml-cpp unwinds cleanly), so the work done is bounded by the input size and the
// recursion by kMaxDepth.
#include "manifest/yaml_tree.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <cstdint>
#include <cstdio>
#include <new>
#include <algorithm>
#include <istream>
#include <streambuf>

namespace soyaos::manifest::detail {
namespace {

// Thrown from the event handler to stop yaml-cpp at the first refused construct.
struct Refused {
  Mark mark;
  std::string message;
};

Mark to_mark(const YAML::Mark& m) {
  if (m.is_null() || m.line < 0 || m.column < 0) return {};
  return Mark{m.line + 1, m.column + 1};
}

// Feeds the text to yaml-cpp in chunks, refusing to read further than kMaxLookahead
// bytes past the last event. yaml-cpp's scanner holds every token it cannot yet resolve
// (a flow collection that might be a simple key, "[[[[..." or "[a,a,a,...") in a queue
// of ~250 bytes per token; this window caps that queue at a few MiB whatever the input.
// yaml-cpp reads through rdbuf()->sgetn(), so the exception reaches our catch directly.
class WindowBuf final : public std::streambuf {
 public:
  WindowBuf(std::string_view text, const std::size_t& progress) : text_(text), progress_(progress) {}

 protected:
  int_type underflow() override {
    if (gptr() != nullptr && gptr() < egptr()) return traits_type::to_int_type(*gptr());
    if (next_ >= text_.size()) return traits_type::eof();
    if (next_ > progress_ + kMaxLookahead) {
      throw Refused{mark_at(text_, progress_),
                    "a single YAML node spans more than " + std::to_string(kMaxLookahead / 1024) +
                        " KiB (split it, or use block style)"};
    }
    const std::size_t n = std::min<std::size_t>(4096, text_.size() - next_);
    char* begin = const_cast<char*>(text_.data() + next_);  // read-only get area
    setg(begin, begin, begin + n);
    next_ += n;
    return traits_type::to_int_type(*gptr());
  }

 private:
  std::string_view text_;
  const std::size_t& progress_;
  std::size_t next_ = 0;
};

class TreeBuilder final : public YAML::EventHandler {
 public:
  std::optional<YNode> root;
  std::size_t progress = 0;  // byte offset of the latest event

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    note(mark);
    check_anchor(mark, anchor);
    YNode n;
    n.kind = YNode::Kind::null;
    n.mark = to_mark(mark);
    add(std::move(n));
  }

  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    throw Refused{to_mark(mark), "YAML aliases (*name) are not allowed in a manifest"};
  }

  void OnAnchor(const YAML::Mark& mark, const std::string& name) override {
    throw Refused{to_mark(mark), "YAML anchors (&" + printable(name) + ") are not allowed in a manifest"};
  }

  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    note(mark);
    check_anchor(mark, anchor);
    check_tag(mark, tag);
    YNode n;
    n.kind = YNode::Kind::scalar;
    n.quoted = tag == "!";
    n.value = value;
    n.mark = to_mark(mark);
    add(std::move(n));
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open(mark, tag, anchor, YNode::Kind::sequence);
  }
  void OnSequenceEnd() override { close(); }

  void OnMapStart(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open(mark, tag, anchor, YNode::Kind::mapping);
  }
  void OnMapEnd() override { close(); }

 private:
  // Open containers, innermost last. Pointers stay valid: a container only gains
  // children while it is the innermost open one, so its ancestors' vectors don't grow.
  std::vector<YNode*> stack_;
  std::size_t nodes_ = 0;

  static std::string printable(const std::string& s) {
    std::string out;
    for (char c : s.substr(0, 40)) out += (static_cast<unsigned char>(c) < 0x20) ? '?' : c;
    return out;
  }

  static void check_anchor(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) throw Refused{to_mark(mark), "YAML anchors are not allowed in a manifest"};
  }

  static void check_tag(const YAML::Mark& mark, const std::string& tag) {
    // "?" = untagged plain node, "!" = untagged quoted scalar (non-specific tags).
    if (!tag.empty() && tag != "?" && tag != "!") {
      throw Refused{to_mark(mark), "YAML tags (" + printable(tag) + ") are not allowed in a manifest"};
    }
  }

  void note(const YAML::Mark& mark) {
    if (!mark.is_null() && mark.pos > 0) progress = std::max(progress, static_cast<std::size_t>(mark.pos));
  }

  void open(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor, YNode::Kind kind) {
    note(mark);
    check_anchor(mark, anchor);
    check_tag(mark, tag);
    if (stack_.size() + 1 > static_cast<std::size_t>(kMaxDepth)) {
      throw Refused{to_mark(mark), "nesting deeper than " + std::to_string(kMaxDepth) + " levels"};
    }
    YNode n;
    n.kind = kind;
    n.mark = to_mark(mark);
    YNode* placed = add(std::move(n));
    stack_.push_back(placed);
  }

  void close() {
    if (!stack_.empty()) stack_.pop_back();
  }

  YNode* add(YNode n) {
    if (++nodes_ > kMaxNodes) {
      throw Refused{n.mark, "more than " + std::to_string(kMaxNodes) + " YAML nodes"};
    }
    if (stack_.empty()) {
      root = std::move(n);
      return &*root;
    }
    YNode& parent = *stack_.back();
    // yaml-cpp marks an empty value ("name:") at the next token, often on a later line;
    // point at its key instead.
    if (n.kind == YNode::Kind::null && parent.kind == YNode::Kind::mapping && parent.items.size() % 2 == 1) {
      n.mark = parent.items.back().mark;
    }
    parent.items.push_back(std::move(n));
    return &stack_.back()->items.back();
  }
};

// Detects a second document without building it.
class SecondDocument final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    throw Refused{to_mark(mark), "a manifest must be a single YAML document"};
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Length of the UTF-8 sequence starting at text[i] and its code point, or 0 if invalid
// (truncated, overlong, surrogate, above U+10FFFF).
std::size_t utf8_sequence(std::string_view text, std::size_t i, uint32_t& cp) {
  auto b = [&](std::size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char c = b(0);
  std::size_t len;
  uint32_t min;
  if (c < 0x80) {
    cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    len = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

// NUL bytes, invalid UTF-8 and control characters (YAML's c-printable excludes them) are
// refused before yaml-cpp sees the text; the first one is reported.
std::optional<Diagnostic> check_bytes(std::string_view text, const std::string& file) {
  std::size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    const std::size_t len = utf8_sequence(text, i, cp);
    if (len == 0) return Diagnostic{file, mark_at(text, i), "", "file is not valid UTF-8"};
    if (cp == 0) return Diagnostic{file, mark_at(text, i), "", "file contains a NUL byte (binary data?)"};
    const bool control = (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') || cp == 0x7F ||
                         (cp >= 0x80 && cp <= 0x9F && cp != 0x85) || cp == 0xFFFE || cp == 0xFFFF;
    if (control) {
      char buf[16];
      (void)std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
      return Diagnostic{file, mark_at(text, i), "", std::string("file contains control character ") + buf};
    }
    i += len;
  }
  return std::nullopt;
}

}  // namespace

Mark mark_at(std::string_view text, std::size_t pos) {
  Mark m{1, 1};
  for (std::size_t i = 0; i < pos && i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      ++m.line;
      m.column = 1;
    } else if ((c & 0xC0) != 0x80) {  // count characters, not continuation bytes
      ++m.column;
    }
  }
  return m;
}

YamlParse parse_yaml(std::string_view text, const std::string& file) {
  YamlParse out;
  if (auto bad = check_bytes(text, file)) {
    out.errors.push_back(std::move(*bad));
    return out;
  }
  try {
    TreeBuilder builder;
    WindowBuf buf(text, builder.progress);
    std::istream in(&buf);
    YAML::Parser parser(in);
    if (!parser.HandleNextDocument(builder) || !builder.root) {
      out.errors.push_back(Diagnostic{file, {}, "", "manifest is empty"});
      return out;
    }
    SecondDocument second;
    (void)parser.HandleNextDocument(second);
    out.root = std::move(builder.root);
  } catch (const Refused& r) {
    out.errors.push_back(Diagnostic{file, r.mark, "", r.message});
  } catch (const YAML::Exception& e) {
    std::string msg = "invalid YAML: " + e.msg;
    // An unquoted "*.example.com" or "*" is YAML alias syntax; say so.
    if (e.msg.find("anchor is not defined") != std::string::npos || e.msg.find("alias not found") != std::string::npos) {
      msg += " (a value starting with '*' must be quoted: host: \"*.example.com\", egress: \"*\")";
    }
    out.errors.push_back(Diagnostic{file, to_mark(e.mark), "", std::move(msg)});
  } catch (const std::bad_alloc&) {
    out.errors.push_back(Diagnostic{file, {}, "", "out of memory while parsing YAML"});
  } catch (const std::exception& e) {
    out.errors.push_back(Diagnostic{file, {}, "", std::string("invalid YAML: ") + e.what()});
  }
  if (!out.errors.empty()) out.root.reset();
  return out;
}

}  // namespace soyaos::manifest::detail
