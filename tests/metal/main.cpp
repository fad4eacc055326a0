// The Metal kernel-logic tests' runner: doctest's own main. The tests compile the .metal sources
// as C++ through tests/metal/shim and run them on the CPU emulator; no Metal device is involved.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
