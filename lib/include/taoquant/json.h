// nlohmann::json, under its contract in every build. Include this, never
// <nlohmann/json.hpp> itself (ctest lint_json_door checks it).
//
// The library checks its preconditions with JSON_ASSERT, assert() by default,
// which release builds compile out: reading a key a const json lacks through
// operator[] is then undefined (a garbage value, or a crash: 2 runs in 12 of
// one test). Here a broken precondition throws std::logic_error in every
// build. JSON_ASSERT must be defined before the first inclusion of the
// library in a translation unit, hence this one door.
#pragma once

#include <stdexcept>
#include <string>

#ifndef JSON_ASSERT
namespace tq::detail {
// A function, not a throw expression: inside the library's noexcept
// functions it ends the program with the message instead of warning.
[[noreturn]] inline void json_contract_broken(const char* what) {
  throw std::logic_error(std::string("nlohmann::json used outside its contract: ") + what +
                         " (a key a const json lacks read through [], or a value of another "
                         "type)");
}
}  // namespace tq::detail
#define JSON_ASSERT(x) ((x) ? static_cast<void>(0) : ::tq::detail::json_contract_broken(#x))
#endif

#include <nlohmann/json.hpp>
