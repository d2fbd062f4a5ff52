// Test helper: JUnit XML parsed and validated with libxml2 against
// tests/data/batch/junit.xsd (the common JUnit elements and attributes).
#pragma once

#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xmlschemas.h>

#include <cstdarg>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tqtest {

struct JUnitCase {
  std::map<std::string, std::string> attrs;                   // name, classname, time, ...
  std::optional<std::map<std::string, std::string>> failure;  // message, type
  std::string failure_text;
  std::optional<std::string> skipped;  // its message
};

struct JUnitSuite {
  std::map<std::string, std::string> attrs;
  std::vector<JUnitCase> cases;
};

struct JUnitDoc {
  std::vector<std::string> errors;  // parse and schema errors; empty = valid
  std::map<std::string, std::string> root_attrs;
  std::string root_name;
  std::vector<JUnitSuite> suites;
};

namespace junit_detail {

inline void collect(void* ctx, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  static_cast<std::vector<std::string>*>(ctx)->emplace_back(buf);
}

inline std::map<std::string, std::string> attrs_of(xmlNode* n) {
  std::map<std::string, std::string> out;
  for (xmlAttr* a = n->properties; a; a = a->next) {
    xmlChar* v = xmlNodeListGetString(n->doc, a->children, 1);
    out[reinterpret_cast<const char*>(a->name)] = v ? reinterpret_cast<const char*>(v) : "";
    xmlFree(v);
  }
  return out;
}

inline bool is(xmlNode* n, const char* name) {
  return n->type == XML_ELEMENT_NODE && xmlStrcmp(n->name, BAD_CAST name) == 0;
}

}  // namespace junit_detail

inline JUnitDoc parse_junit(const std::string& text, const std::string& xsd_path) {
  using namespace junit_detail;
  JUnitDoc out;
  xmlSetGenericErrorFunc(&out.errors, collect);
  xmlDoc* doc = xmlReadMemory(text.data(), static_cast<int>(text.size()), "junit.xml", "UTF-8",
                              XML_PARSE_NONET);
  if (!doc) {
    out.errors.push_back("not well-formed XML");
    xmlSetGenericErrorFunc(nullptr, nullptr);
    return out;
  }
  xmlSchemaParserCtxt* pctx = xmlSchemaNewParserCtxt(xsd_path.c_str());
  xmlSchema* schema = pctx ? xmlSchemaParse(pctx) : nullptr;
  if (!schema) {
    out.errors.push_back("cannot read the schema " + xsd_path);
  } else {
    xmlSchemaValidCtxt* vctx = xmlSchemaNewValidCtxt(schema);
    xmlSchemaSetValidErrors(vctx, collect, collect, &out.errors);
    if (xmlSchemaValidateDoc(vctx, doc) != 0 && out.errors.empty())
      out.errors.push_back("schema validation failed");
    xmlSchemaFreeValidCtxt(vctx);
    xmlSchemaFree(schema);
  }
  if (pctx) xmlSchemaFreeParserCtxt(pctx);

  xmlNode* root = xmlDocGetRootElement(doc);
  out.root_name = reinterpret_cast<const char*>(root->name);
  out.root_attrs = attrs_of(root);
  for (xmlNode* s = root->children; s; s = s->next) {
    if (!is(s, "testsuite")) continue;
    JUnitSuite suite;
    suite.attrs = attrs_of(s);
    for (xmlNode* c = s->children; c; c = c->next) {
      if (!is(c, "testcase")) continue;
      JUnitCase tc;
      tc.attrs = attrs_of(c);
      for (xmlNode* k = c->children; k; k = k->next) {
        if (is(k, "failure")) {
          tc.failure = attrs_of(k);
          xmlChar* t = xmlNodeGetContent(k);
          tc.failure_text = t ? reinterpret_cast<const char*>(t) : "";
          xmlFree(t);
        } else if (is(k, "skipped")) {
          auto a = attrs_of(k);
          tc.skipped = a.count("message") ? a["message"] : "";
        }
      }
      suite.cases.push_back(std::move(tc));
    }
    out.suites.push_back(std::move(suite));
  }
  xmlFreeDoc(doc);
  xmlSetGenericErrorFunc(nullptr, nullptr);
  return out;
}

}  // namespace tqtest
