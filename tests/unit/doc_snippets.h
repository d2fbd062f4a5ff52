// Test helper: the code blocks of docs/batch.md that a `<!-- snippet: NAME -->`
// line marks, so that the tests run the documented recipes as written.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "batch_test_util.h"

namespace tqtest {

inline const std::string& batch_doc() {
  static const std::string doc = slurp(std::string(TQ_SOURCE_DIR) + "/docs/batch.md");
  return doc;
}

// The fenced block after `<!-- snippet: NAME -->`, without its fences.
inline std::string doc_snippet(const std::string& name) {
  const std::string& doc = batch_doc();
  const size_t mark = doc.find("<!-- snippet: " + name + " -->");
  REQUIRE(mark != std::string::npos);
  const size_t open = doc.find("```", mark);
  const size_t body = doc.find('\n', open) + 1;
  const size_t close = doc.find("\n```", body);
  REQUIRE(close != std::string::npos);
  return doc.substr(body, close - body + 1);
}

// The text of the section that holds the snippet (from its ### heading on).
inline std::string doc_section(const std::string& name) {
  const std::string& doc = batch_doc();
  const size_t mark = doc.find("<!-- snippet: " + name + " -->");
  REQUIRE(mark != std::string::npos);
  const size_t start = doc.rfind("\n### ", mark);
  const size_t end = doc.find("\n### ", mark);
  return doc.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

}  // namespace tqtest
