// Compiled (and expected to fail) by CTest on platforms without Metal: naming
// qk::backend::metal::context must stop the build with a message that says why.
#include <backends/metal/metal.hpp>

int main()
{
    qk::backend::metal::context context;
    (void)context;
}
