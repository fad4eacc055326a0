// Runs one architecture tag's test executable if the CPU can, else exits 77 (CTest's "skipped").
// That executable is compiled with the tag's flags throughout, so none of it may start on a CPU
// without the tag (its static initialisers already use the wider instructions); this launcher is
// built without them. Usage: qkern_arch_runner TAG EXECUTABLE [ARGUMENTS...]
#include <kernels/cpu_features.hpp>

#include <cstdio>
#include <cstring>
#include <string_view>

#include <unistd.h>

namespace {

bool cpu_runs(std::string_view tag, const qk::cpu_features& cpu)
{
    if (tag == "generic") return qk::runs<qk::arch::generic>(cpu);
    if (tag == "sse4_2") return qk::runs<qk::arch::sse4_2>(cpu);
    if (tag == "avx2") return qk::runs<qk::arch::avx2>(cpu);
    if (tag == "avx512bw") return qk::runs<qk::arch::avx512bw>(cpu);
    if (tag == "avx512vnni") return qk::runs<qk::arch::avx512vnni>(cpu);
    if (tag == "neon64") return qk::runs<qk::arch::neon64>(cpu);
    if (tag == "neon64_dotprod") return qk::runs<qk::arch::neon64_dotprod>(cpu);
    std::fprintf(stderr, "qkern_arch_runner: unknown tag '%.*s'\n", static_cast<int>(tag.size()), tag.data());
    return false;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s TAG EXECUTABLE [ARGUMENTS...]\n", argv[0]);
        return 2;
    }
    if (!cpu_runs(argv[1], qk::detect_cpu_features())) {
        std::printf("skipped: this CPU cannot run the %s kernels\n", argv[1]);
        return 77;
    }
    execv(argv[2], argv + 2);
    std::fprintf(stderr, "qkern_arch_runner: cannot run %s: %s\n", argv[2], std::strerror(errno));
    return 2;
}
