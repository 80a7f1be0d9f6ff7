// Entry point of the `arc` tool.
#include <arc/apps/cli.h>

int main(int argc, char** argv) { return arc::cli::run(argc, argv); }
