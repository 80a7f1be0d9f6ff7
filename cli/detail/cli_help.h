// What the command line prints about the keys a config may set: the trainer keys of `fit --help`,
// `modules`, jsonargparse's `--<key>.help <class>`, and `reference`.
#pragma once

#include <string>

namespace arc::cli {

/// Every trainer key with its default and help, and the classes trainer.callbacks and trainer.logger
/// may name: the footer of `arc fit --help`.
std::string trainer_keys_help();

/// `<program> modules`: the registered modules and data modules with the keys each reads, then the other
/// classes a config can name. Returns the exit status.
int list_modules(const std::string& program);

/// `--<key>.help <class>` (`request` is "trainer.callbacks=ModelCheckpoint"): the init_args the class
/// reads, with their defaults. Returns the exit status.
int class_help(const std::string& program, const std::string& request);

/// `arc reference`: every key a config may set, with its default, as the Markdown page
/// docs/reference/options.md. Returns the exit status.
int print_reference();

}  // namespace arc::cli
