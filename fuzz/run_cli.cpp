#include "run_cli.h"

#include <arc/cli/cli.h>

#include <iostream>
#include <sstream>
#include <stdexcept>

namespace arc::fuzz {

namespace {

// Sends `stream` to `into` while it lives.
class Redirect {
 public:
  Redirect(std::ostream& stream, std::ostream& into) : stream_(stream), saved_(stream.rdbuf(into.rdbuf())) {}
  Redirect(const Redirect&) = delete;
  Redirect& operator=(const Redirect&) = delete;
  ~Redirect() { stream_.rdbuf(saved_); }

 private:
  std::ostream& stream_;
  std::streambuf* saved_;
};

}  // namespace

std::string run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), "arc");
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  std::ostringstream out, err;
  int code = 0;
  {
    const Redirect to_out(std::cout, out), to_err(std::cerr, err);
    code = arc::cli::run(static_cast<int>(argv.size()), argv.data());
  }
  if (code == 1) throw std::runtime_error("arc failed with other than arc::Error: " + err.str());
  return out.str();
}

}  // namespace arc::fuzz
