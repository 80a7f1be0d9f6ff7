#include "run_cli.h"

#include <arc/cli/cli.h>

#include <iostream>
#include <sstream>
#include <stdexcept>

namespace arc::fuzz {

void run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), "arc");
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  std::ostringstream out, err;
  auto* const cout = std::cout.rdbuf(out.rdbuf());
  auto* const cerr = std::cerr.rdbuf(err.rdbuf());
  int code = 0;
  try {
    code = arc::cli::run(static_cast<int>(argv.size()), argv.data());
  } catch (...) {
    std::cout.rdbuf(cout);
    std::cerr.rdbuf(cerr);
    throw;
  }
  std::cout.rdbuf(cout);
  std::cerr.rdbuf(cerr);
  if (code == 1) throw std::runtime_error("arc failed with other than arc::Error: " + err.str());
}

}  // namespace arc::fuzz
