// The loom executable: the command line of cli/entry.h, with the reference models.
#include "cli/entry.h"

int main(int argc, char** argv) { return loom::cli::command_line(argc, argv); }
