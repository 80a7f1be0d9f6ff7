// Lightning's table of the metrics that validate and test logged, which they print when they end.
#pragma once

#include <arc/core/metric_store.h>

#include <cstddef>
#include <string>

namespace arc::detail {

/// The table as Lightning prints it without rich: a header row ("Test metric", "DataLoader 0", ...)
/// and one row per metric name in sorted order, between bars `columns` wide ("─" with `unicode`,
/// else "-"), each cell centred in max(25, the longest name) characters and at most half the width.
/// A name ending in "/dataloader_idx_N" goes, without that ending, to loader N's column; others to
/// every loader's. Loaders that do not fit beside the names go on to another table. Empty for no
/// metrics.
std::string results_table(const Metrics& metrics, const std::string& stage, size_t loaders, size_t columns,
                          bool unicode);

/// Prints results_table on standard output, as wide as Python's shutil.get_terminal_size says
/// (COLUMNS, else the terminal's, else 120), with "─" unless the locale names another encoding.
void print_results(const Metrics& metrics, const std::string& stage, size_t loaders);

}  // namespace arc::detail
