// arc_fuzz_seeds <folder>: writes every target's seed inputs to <folder>/<target>/ (scripts/fuzz.sh).
#include "seeds.h"

#include <arc/base/error.h>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: arc_fuzz_seeds <folder>\n";
    return 2;
  }
  try {
    arc::fuzz::write_seeds(argv[1], ARC_SOURCE_DIR);
  } catch (const std::exception& error) {
    std::cerr << "arc_fuzz_seeds: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
