// nibble command-line program (placeholder; `nibble report` lands with the foundation issue).
#include <cstdio>
int main() {
  std::puts("nibble: not yet implemented");
  return 0;
}
