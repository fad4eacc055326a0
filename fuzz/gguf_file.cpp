// libFuzzer target: qk::gguf::file over arbitrary bytes. The contract, not just "no crash": the
// reader either throws qk::error or accepts, and what it accepts is consistent: every tensor's
// bytes lie inside the input, F32/F16/BF16 tensors convert to as many floats as they have
// elements, qkern's formats come back as blocks (or qk::error when misaligned in memory), and
// the writer, given everything the reader found, writes a file that reads back to the same
// metadata and tensors. The same bytes also go to qk::gguf::importance_matrix (llama-imatrix's
// GGUF and legacy forms): refused, or every weight finite and non-negative. Built and run by
// scripts/fuzz.sh (clang, ASan and UBSan).
#include <gguf/gguf.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

namespace {

void require(bool ok)
{
    if (!ok) {
        std::abort(); // a broken contract, reported by libFuzzer like a crash
    }
}

void check_accepted(const qk::gguf::file& f, std::span<const std::byte> input)
{
    qk::gguf::writer out;
    out.set_all(f.metadata());
    for (const qk::gguf::tensor_info& t : f.tensors()) {
        const std::span<const std::byte> b = f.bytes(t);
        require(b.data() >= input.data() && b.data() + b.size() <= input.data() + input.size());
        require(b.size() == t.bytes);
        if (t.type == qk::gguf::type_f32 || t.type == qk::gguf::type_f16 || t.type == qk::gguf::type_bf16) {
            require(f.floats(t.name).size() == t.elements());
        }
        if (const auto format = qk::gguf::kernel_format(t.type)) {
            qk::visit_format(*format, [&]<class Block>(std::type_identity<Block>) {
                try {
                    require(f.blocks<Block>(t.name).size_bytes() == t.bytes);
                } catch (const qk::error&) {
                    require(reinterpret_cast<std::uintptr_t>(b.data()) % alignof(Block) != 0);
                }
            });
        }
        out.add_tensor(t.name, t.type, t.shape, b);
    }
    const std::vector<std::byte> rewritten = out.bytes();
    const qk::gguf::file again(std::span<const std::byte>(rewritten.data(), rewritten.size()));
    // Values compared by their bytes as written (a NaN is not equal to itself, but reads back the same).
    const auto same = [](const qk::gguf::metadata_entry& a, const qk::gguf::metadata_entry& b) {
        qk::gguf::writer wa;
        qk::gguf::writer wb;
        wa.set(a.key, a.value);
        wb.set(b.key, b.value);
        return a.key == b.key && wa.bytes() == wb.bytes();
    };
    require(std::ranges::equal(again.metadata(), f.metadata(), same));
    require(again.tensors().size() == f.tensors().size());
    for (std::size_t i = 0; i < f.tensors().size(); ++i) {
        const qk::gguf::tensor_info& a = again.tensors()[i];
        const qk::gguf::tensor_info& b = f.tensors()[i];
        require(a.name == b.name && a.type == b.type && a.shape == b.shape && a.bytes == b.bytes);
        require(std::ranges::equal(again.bytes(a), f.bytes(b)));
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
    try {
        const qk::gguf::file f(input);
        check_accepted(f, input);
    } catch (const qk::error&) {
        // refused, as a bad file should be
    }
    try {
        const qk::gguf::importance_matrix m(input, "(fuzz input)");
        require(m.size() > 0);
    } catch (const qk::error&) {
    }
    return 0;
}
