// "Did you mean" suggestions: the distance between what a user typed and the names we know.
#pragma once

#include <string_view>

namespace zt {

// Levenshtein edit distance between a and b (insertions, deletions and substitutions of one
// byte each; case-sensitive).
int edit_distance(std::string_view a, std::string_view b);

}  // namespace zt
