// zerotrain: subcommands info, prepare, train. Errors a user can cause exit with code 2.
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  std::fprintf(stderr, "usage: zerotrain <info|prepare|train> [flags]\n");
  return 2;
}
