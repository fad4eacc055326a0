// doctest's runner for one architecture tag's test executable (see runner.cpp for why that
// executable is started through qkern_arch_runner).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
