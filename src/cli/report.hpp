// nibble CLI: the `report` subcommand.
#pragma once

namespace nibble::cli {
/// `nibble report [options]`: argc/argv are the arguments after "report". Returns the exit code.
int cmd_report(int argc, char** argv);
}  // namespace nibble::cli
