// The docs stay true: every `arc` command line in README.md and docs/ parses (run with
// --print_config), every config block loads, relative links resolve, pages stay short and undated,
// and the options reference is what the tool prints now. (Their C++ blocks are built and run by
// install.ConsumerProjectBuildsAndTrains.)
#include "support/arc_tool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using arc::testing::run_command;
using arc::testing::write_config;

namespace {

const fs::path kSource = ARC_SOURCE_DIR;

std::string read_file(const fs::path& path) { return arc::testing::read_file(path.string()); }

// README.md and every page under docs/, relative to the source folder.
std::vector<fs::path> pages() {
  std::vector<fs::path> out = {"README.md"};
  for (const auto& entry : fs::recursive_directory_iterator(kSource / "docs"))
    if (entry.path().extension() == ".md") out.push_back(fs::relative(entry.path(), kSource));
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// A fenced block of a page: its language, the line its fence opens at (1-based), and its lines with
// the fence's indentation taken off.
struct Block {
  std::string language;
  int line = 0;
  std::vector<std::string> lines;

  std::string text() const {
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }
};

std::vector<Block> blocks_of(const std::vector<std::string>& lines) {
  static const std::regex fence(R"(^(\s*)```([^\s`]*)\s*$)");
  std::vector<Block> out;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::smatch open;
    if (!std::regex_match(lines[i], open, fence)) continue;
    Block block{open[2], static_cast<int>(i + 1), {}};
    const size_t indent = open[1].length();
    for (++i; i < lines.size() && lines[i].find("```") == std::string::npos; ++i)
      block.lines.push_back(lines[i].substr(std::min({indent, lines[i].find_first_not_of(' '), lines[i].size()})));
    out.push_back(block);
  }
  return out;
}

// The languages a fenced block may name: those the tests below read (cpp, sh, yaml, json) and those
// they leave alone (text, cmake).
const std::set<std::string> kLanguages = {"cpp", "sh", "yaml", "json", "text", "cmake"};

// Where a command line of the docs came from, and the command.
struct Command {
  std::string where;
  std::string args;  // after "arc"
};

// "# comment" at the end of a shell line, outside quotes, taken off.
std::string without_comment(const std::string& line) {
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    if (quote != 0) {
      if (line[i] == quote) quote = 0;
    } else if (line[i] == '\'' || line[i] == '"') {
      quote = line[i];
    } else if (line[i] == '#' && (i == 0 || line[i - 1] == ' ')) {
      return line.substr(0, i);
    }
  }
  return line;
}

// The command in a shell line that runs the arc tool, from its arguments to the first shell
// operator (a pipe, a redirection, a second command); "" where the line runs no arc.
std::string arc_arguments(const std::string& line) {
  static const std::regex runs_arc(R"((?:^|[\s;&|(])(?:build/bin/)?arc\s+(.*))");
  std::smatch found;
  if (!std::regex_search(line, found, runs_arc)) return "";
  std::string args = found[1];
  for (const char* op : {" | ", " > ", " >> ", " 2>", " && ", " || ", "; "}) args = args.substr(0, args.find(op));
  return args;
}

// Every `arc` command of the pages: the lines of shell blocks that run arc (a launcher before it is
// left out), and inline code that starts with `arc <subcommand>` or `arc --version`.
std::vector<Command> commands() {
  static const std::regex inline_command(
      R"(`(?:build/bin/)?arc ((?:fit|train|validate|test|predict|lr_find|scale_batch_size|modules|reference)\b[^`]*|--version)`)");
  std::vector<Command> out;
  for (const auto& page : pages()) {
    const auto lines = lines_of(read_file(kSource / page));
    for (const auto& block : blocks_of(lines)) {
      if (block.language != "sh") continue;
      std::string joined;
      for (size_t i = 0; i < block.lines.size(); ++i) {
        std::string line = without_comment(block.lines[i]);
        while (!line.empty() && line.back() == ' ') line.pop_back();
        if (!line.empty() && line.back() == '\\') {
          joined += line.substr(0, line.size() - 1);
          continue;
        }
        joined += line;
        const auto args = arc_arguments(joined);
        if (!args.empty())
          out.push_back({page.string() + ":" + std::to_string(block.line + 1 + static_cast<int>(i)), args});
        joined.clear();
      }
    }
    for (size_t i = 0; i < lines.size(); ++i)
      for (std::sregex_iterator it(lines[i].begin(), lines[i].end(), inline_command), end; it != end; ++it)
        out.push_back({page.string() + ":" + std::to_string(i + 1), (*it)[1]});
  }
  return out;
}

// Whether `args` asks for help or a listing (which print and exit) rather than a run.
bool prints_and_exits(const std::string& args) {
  return args.find("--help") != std::string::npos || args.find(".help ") != std::string::npos ||
         args.rfind("modules", 0) == 0 || args.rfind("reference", 0) == 0 || args.find("--version") == 0;
}

}  // namespace

TEST(Docs, EveryArcCommandLineParses) {
  const auto found = commands();
  ASSERT_GT(found.size(), 20u) << "the docs show the arc tool's commands";
  std::set<std::string> checked;
  const auto export_help = run_command(std::string(ARC_BINARY) + " export --help").output;
  for (const auto& command : found) {
    if (!checked.insert(command.args).second) continue;
    // arc export reads a checkpoint, not a config: each option it is given must be one of its own.
    if (command.args.rfind("export ", 0) == 0) {
      std::istringstream words(command.args);
      for (std::string word; words >> word;) {
        const auto option = word.substr(0, word.find('='));
        if (option.rfind("--", 0) != 0) continue;
        EXPECT_TRUE(export_help.find(option + " ") != std::string::npos ||
                    export_help.find(option + ",") != std::string::npos)
            << command.where << ": `arc " << command.args << "`: arc export has no option " << word;
      }
      continue;
    }
    const std::string args = command.args + (prints_and_exits(command.args) ? "" : " --print_config");
    const auto run = run_command("cd " + kSource.string() + " && " + ARC_BINARY + " " + args);
    EXPECT_EQ(run.status, 0) << command.where << ": `arc " << command.args << "` fails:\n" << run.output;
    EXPECT_EQ(run.output.find("is an alias that still works"), std::string::npos)
        << command.where << ": `arc " << command.args << "` uses an alias key:\n"
        << run.output;
  }
}

TEST(Docs, EveryConfigBlockLoads) {
  static const std::set<std::string> sections = {"trainer",   "module",       "model",           "data",
                                                 "optimizer", "lr_scheduler", "seed_everything", "ckpt_path"};
  static const std::regex yaml_key(R"(^([A-Za-z_]+):)");
  int configs = 0;
  for (const auto& page : pages()) {
    for (const auto& block : blocks_of(lines_of(read_file(kSource / page)))) {
      bool config = false;
      if (block.language == "yaml") {
        for (const auto& line : block.lines) {
          std::smatch key;
          if (std::regex_search(line, key, yaml_key) && sections.count(key[1]) > 0) config = true;
        }
      } else if (block.language == "json") {
        const auto json = nlohmann::json::parse(block.text(), nullptr, false);
        ASSERT_FALSE(json.is_discarded()) << page.string() << ":" << block.line << ": a JSON block that does not parse";
        for (const auto& section : sections) config = config || (json.is_object() && json.contains(section));
      }
      if (!config) continue;
      ++configs;
      // A block that starts with a shipped config's first line must be that config, whole.
      for (const auto& shipped : fs::directory_iterator(kSource / "apps/configs")) {
        const auto file = read_file(shipped.path());
        if (file.substr(0, file.find('\n')) != block.lines.front()) continue;
        EXPECT_EQ(block.text(), file) << page.string() << ":" << block.line << " shows "
                                      << fs::relative(shipped.path(), kSource).string()
                                      << " but differs from it; copy the file as it is";
      }
      const auto file = write_config("docs_block." + block.language, block.text());
      const auto run = run_command(std::string(ARC_BINARY) + " fit --config " + file + " --print_config");
      EXPECT_EQ(run.status, 0) << page.string() << ":" << block.line << ": the config does not load:\n" << run.output;
      EXPECT_EQ(run.output.find("is an alias that still works"), std::string::npos)
          << page.string() << ":" << block.line << ": the config uses an alias key:\n"
          << run.output;
    }
  }
  EXPECT_GT(configs, 2) << "the docs show configs";
}

TEST(Docs, CodeBlocksNameAKnownLanguage) {
  for (const auto& page : pages())
    for (const auto& block : blocks_of(lines_of(read_file(kSource / page))))
      EXPECT_EQ(kLanguages.count(block.language), 1u)
          << page.string() << ":" << block.line << ": a ```" << block.language << " block; name one of cpp (a complete "
          << "program, which the suite builds and runs), sh, yaml, json, text or cmake";
}

TEST(Docs, PagesStayShortAndUndated) {
  static const std::regex date(R"(20[0-9]{2}-[0-9]{2}-[0-9]{2})");
  for (const auto& page : pages()) {
    const auto lines = lines_of(read_file(kSource / page));
    const size_t limit = page == "README.md" ? 250 : page == "docs/architecture.md" ? 150 : 300;
    EXPECT_LE(lines.size(), limit) << page.string() << " has " << lines.size() << " lines; split it by topic";
    for (size_t i = 0; i < lines.size(); ++i)
      EXPECT_FALSE(std::regex_search(lines[i], date))
          << page.string() << ":" << i + 1 << " has a date; the docs say what Arclight does (figures with their date "
          << "belong in bench/RESULTS.md, changes in CHANGELOG.md): " << lines[i];
  }
}

TEST(Docs, RelativeLinksResolveAndTheReadmeLinksEveryPage) {
  static const std::regex link(R"(\]\(([^)\s]+)\))");
  std::set<fs::path> linked_from_readme;
  for (const auto& page : pages()) {
    const auto text = read_file(kSource / page);
    for (std::sregex_iterator it(text.begin(), text.end(), link), end; it != end; ++it) {
      std::string target = (*it)[1];
      if (target.find("://") != std::string::npos || target[0] == '#') continue;
      target = target.substr(0, target.find('#'));
      const auto path = (kSource / page).parent_path() / target;
      EXPECT_TRUE(fs::exists(path)) << page.string() << " links " << target << ", which does not exist";
      if (page == "README.md") linked_from_readme.insert(fs::relative(path, kSource).lexically_normal());
    }
  }
  for (const auto& page : pages()) {
    if (page == "README.md") continue;
    EXPECT_EQ(linked_from_readme.count(page), 1u) << "README.md does not link " << page.string();
  }
}

TEST(Docs, OptionsReferenceIsWhatTheToolPrints) {
  const auto run = run_command("{ " + std::string(ARC_BINARY) + " reference 2>/dev/null; }");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(read_file(kSource / "docs/reference/options.md"), run.output)
      << "docs/reference/options.md is out of date: run scripts/docs.sh to write it anew";
}
