// Suggestions for misspelled names.
#include <arc/base/error.h>

#include <algorithm>

namespace arc {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      const size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& candidate : candidates) {
    const size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += items[i];
  }
  return out;
}

std::string unknown_name_message(const std::string& what, const std::string& name,
                                 const std::vector<std::string>& known) {
  std::string message = "unknown " + what + " '" + name + "'";
  const std::string suggestion = closest_match(name, known);
  if (!suggestion.empty()) message += "; did you mean '" + suggestion + "'?";
  message += (suggestion.empty() ? "; known: " : " known: ") + join(known);
  return message;
}

void check_choice(const std::string& key, const std::string& value, const std::vector<std::string>& allowed) {
  for (const auto& choice : allowed)
    if (choice == value) return;
  throw Error(unknown_name_message(key, value, allowed));
}

}  // namespace arc
