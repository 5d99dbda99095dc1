// Shared by the unit tests: a committed JSON fixture from tests/fixtures/, made by the script
// named in the failure message (fixtures are never edited by hand).
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/file.h"

namespace zt {

inline nlohmann::json load_json_fixture(const std::string& name, const std::string& script) {
  auto text = read_file(std::string(ZT_SOURCE_DIR) + "/tests/fixtures/" + name, "fixture");
  EXPECT_TRUE(text.ok()) << text.status() << "; rerun scripts/" << script;
  return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json();
}

}  // namespace zt
