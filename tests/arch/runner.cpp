// Runs one architecture tag's test executable if the CPU can, else exits 77 (CTest's "skipped").
// That executable is compiled with the tag's flags throughout, so none of it may start on a CPU
// without the tag (its static initialisers already use the wider instructions); this launcher is
// built without them. Usage: qkern_arch_runner TAG EXECUTABLE [ARGUMENTS...]
#include <kernels/cpu_features.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <unistd.h>

int main(int argc, char** argv)
{
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s TAG EXECUTABLE [ARGUMENTS...]\n", argv[0]);
        return 2;
    }
    if (!qk::arch::all::visit(argv[1], [](auto) {})) {
        std::fprintf(stderr, "qkern_arch_runner: unknown tag '%s'\n", argv[1]);
        return 2;
    }
    if (!qk::runs(argv[1], qk::detect_cpu_features())) {
        std::printf("skipped: this CPU cannot run the %s kernels\n", argv[1]);
        return 77;
    }
    execv(argv[2], argv + 2);
    std::fprintf(stderr, "qkern_arch_runner: cannot run %s: %s\n", argv[2], std::strerror(errno));
    return 2;
}
