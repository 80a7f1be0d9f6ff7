// The table that validate and test print, against what Lightning 2.2.5's _print_results prints for
// the same metrics (without rich).
#include <arc/core/detail/results_table.h>

#include <gtest/gtest.h>

namespace arc::detail {
namespace {

std::string bar(size_t columns, const std::string& character = "-") {
  std::string line;
  for (size_t i = 0; i < columns; ++i) line += character;
  return line + "\n";
}

TEST(ResultsTable, OneLoaderAsLightningPrintsIt) {
  const std::string expected = bar(120, "─") + "       Test metric             DataLoader 0\n" + bar(120, "─") +
                               "        test_acc                  0.8673\n"
                               "        test_loss           0.40639925599098203\n" +
                               bar(120, "─");
  EXPECT_EQ(results_table({{"test_acc", 0.8673}, {"test_loss", 0.40639925599098203}}, "test", 1, 120, true), expected);
}

TEST(ResultsTable, EachLoaderIsAColumnAndANameWithoutLoaderIsInEvery) {
  const Metrics metrics = {{"val_loss/dataloader_idx_0", 0.25},
                           {"val_loss/dataloader_idx_1", 0.125},
                           {"val_acc", 0.5},
                           {"noisy_only/dataloader_idx_1", 3}};
  const std::string expected = bar(80) + "     Validate metric           DataLoader 0             DataLoader 1\n" +
                               bar(80) +
                               "       noisy_only                                            3.0\n"
                               "         val_acc                    0.5                      0.5\n"
                               "        val_loss                   0.25                     0.125\n" +
                               bar(80);
  EXPECT_EQ(results_table(metrics, "validate", 2, 80, false), expected);
}

TEST(ResultsTable, LoadersThatDoNotFitGoOnToAnotherTable) {
  Metrics metrics;
  for (int i = 0; i < 5; ++i) metrics["m/dataloader_idx_" + std::to_string(i)] = i + 1;
  std::string expected;
  for (const auto& [loaders, values] :
       {std::pair{"DataLoader 0             DataLoader 1", "1.0                      2.0"},
        std::pair{"DataLoader 2             DataLoader 3", "3.0                      4.0"},
        std::pair{"DataLoader 4", "5.0"}})
    expected += bar(80) + "       Test metric             " + loaders + "\n" + bar(80) +
                "            m                       " + values + "\n" + bar(80);
  EXPECT_EQ(results_table(metrics, "test", 5, 80, false), expected);
}

TEST(ResultsTable, LongNamesWidenTheColumnsUpToHalfTheWidthAndWrapBeyond) {
  EXPECT_EQ(results_table({{"a_rather_long_metric_name_of_forty_chars", 1e-05}}, "test", 1, 100, false),
            bar(100) + "              Test metric                             DataLoader 0\n" + bar(100) +
                "a_rather_long_metric_name_of_forty_chars                 1e-05\n" + bar(100));
  // 30 wide: the name in pieces of 15, its value beside the first.
  EXPECT_EQ(results_table({{"a_rather_long_metric_name_of_forty_chars", 2}}, "test", 1, 30, false),
            bar(30) + "  Test metric   DataLoader 0\n" + bar(30) + "a_rather_long_m      2.0\n" + "etric_name_of_f\n" +
                "  orty_chars\n" + bar(30));
}

TEST(ResultsTable, NoMetricsNoTable) { EXPECT_EQ(results_table({}, "validate", 1, 120, true), ""); }

}  // namespace
}  // namespace arc::detail
