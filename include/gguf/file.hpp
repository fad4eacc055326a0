// qk::gguf::file: a GGUF file (version 3, and version 2, which has the same layout), opened
// read-only and memory-mapped, validated completely before the constructor returns: its
// metadata as values, its tensors as infos, their bytes as spans into the mapping (blocks<Block>
// type-checked against qkern's formats, floats() converting F32/F16/BF16).
//
// The reader lives in its own layer above kernels: a file format is neither a kernel nor part of
// sampling or drafting, it only needs the formats' type ids and sizes (kernels/formats.hpp), and
// the backends and the tool read weights through it.
//
// A hostile file is the normal case. Every count, length, offset and shape is checked against
// what remains of the file and against overflow before it is used; no allocation is sized by a
// field that was not bounded by the file's size first; tensors must lie inside the data section,
// aligned, without overlapping; unknown value and tensor types are errors. Errors are qk::error
// naming the field and the byte offset it was read at. Nothing is read outside the file.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define QK_GGUF_MMAP 1
#else
#include <fstream>
#define QK_GGUF_MMAP 0
#endif

#include "../kernels/error.hpp"
#include "../kernels/format_traits.hpp"
#include "../kernels/fp16.hpp"
#include "tensor_types.hpp"
#include "value.hpp"

namespace qk::gguf {

inline constexpr std::uint32_t default_alignment = 32;
inline constexpr std::size_t max_dimensions = 4;    // GGML_MAX_DIMS
inline constexpr std::size_t max_tensor_name = 63;  // GGML_MAX_NAME - 1 bytes
inline constexpr std::string_view alignment_key = "general.alignment";

struct tensor_info {
    std::string name;
    std::uint32_t type = 0;            // ggml type id (find_tensor_type(type) is never null here)
    std::vector<std::uint64_t> shape;  // ggml order: shape[0] is the row length; 1 to 4 entries
    std::uint64_t offset = 0;          // from the start of the data section
    std::uint64_t bytes = 0;

    [[nodiscard]] const tensor_type_info& type_info() const noexcept { return *find_tensor_type(type); }
    [[nodiscard]] std::uint64_t elements() const noexcept
    {
        std::uint64_t n = 1;
        for (const std::uint64_t d : shape) {
            n *= d; // bounded when the file was read
        }
        return n;
    }
    [[nodiscard]] std::uint64_t rows() const noexcept { return shape.empty() || shape[0] == 0 ? 0 : elements() / shape[0]; }
};

struct metadata_entry {
    std::string key;
    gguf::value value;
};

namespace detail {

// The bytes of the file: a read-only mapping, a copy (where there is no mmap), or a caller's span.
class mapping {
public:
    mapping() = default;
    explicit mapping(const std::string& path)
    {
#if QK_GGUF_MMAP
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            qk::detail::fail("qk::gguf::file: cannot open '", path, "': ", std::strerror(errno));
        }
        struct stat st {};
        if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            const int e = errno;
            ::close(fd);
            qk::detail::fail("qk::gguf::file: '", path, "' is not a regular file", S_ISREG(st.st_mode) ? std::string(": ") + std::strerror(e) : "");
        }
        size_ = static_cast<std::size_t>(st.st_size);
        if (size_ > 0) {
            void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED) {
                const int e = errno;
                ::close(fd);
                qk::detail::fail("qk::gguf::file: cannot map '", path, "' (", size_, " bytes): ", std::strerror(e));
            }
            data_ = static_cast<const std::byte*>(p);
            mapped_ = true;
        }
        ::close(fd);
#else
        std::ifstream in(path, std::ios::binary | std::ios::ate);
        if (!in) {
            qk::detail::fail("qk::gguf::file: cannot open '", path, "'");
        }
        const auto end = in.tellg();
        copy_.resize(static_cast<std::size_t>(end));
        in.seekg(0);
        in.read(reinterpret_cast<char*>(copy_.data()), static_cast<std::streamsize>(copy_.size()));
        if (!in) {
            qk::detail::fail("qk::gguf::file: cannot read '", path, "'");
        }
        data_ = copy_.data();
        size_ = copy_.size();
#endif
    }
    explicit mapping(std::span<const std::byte> bytes) noexcept : data_(bytes.data()), size_(bytes.size()) {}
    mapping(const mapping&) = delete;
    mapping& operator=(const mapping&) = delete;
    ~mapping()
    {
#if QK_GGUF_MMAP
        if (mapped_) {
            ::munmap(const_cast<std::byte*>(data_), size_);
        }
#endif
    }

    [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }

private:
    const std::byte* data_ = nullptr;
    std::size_t size_ = 0;
#if QK_GGUF_MMAP
    bool mapped_ = false;
#else
    std::vector<std::byte> copy_;
#endif
};

// Reads little-endian fields from the front of the file, each checked against what remains.
class cursor {
public:
    explicit cursor(std::span<const std::byte> bytes) noexcept : bytes_(bytes) {}

    [[nodiscard]] std::uint64_t position() const noexcept { return at_; }
    [[nodiscard]] std::uint64_t remaining() const noexcept { return bytes_.size() - at_; }

    template <class T>
    T read(std::string_view field)
    {
        static_assert(std::is_trivially_copyable_v<T>);
        need(sizeof(T), field);
        T v;
        std::memcpy(&v, bytes_.data() + at_, sizeof(T));
        at_ += sizeof(T);
        if constexpr (std::endian::native == std::endian::big && sizeof(T) > 1) {
            auto raw = std::bit_cast<std::array<std::byte, sizeof(T)>>(v);
            std::reverse(raw.begin(), raw.end());
            v = std::bit_cast<T>(raw);
        }
        return v;
    }

    std::string read_string(std::string_view field)
    {
        const std::uint64_t start = at_;
        const auto length = read<std::uint64_t>(field);
        if (length > remaining()) {
            qk::detail::fail("qk::gguf::file: ", field, " at byte ", start, ": a length of ", length, " bytes exceeds the ", remaining(),
                             " bytes left in the file");
        }
        std::string s(reinterpret_cast<const char*>(bytes_.data() + at_), static_cast<std::size_t>(length));
        at_ += length;
        return s;
    }

    void need(std::uint64_t n, std::string_view field) const
    {
        if (n > remaining()) {
            qk::detail::fail("qk::gguf::file: ", field, " at byte ", at_, ": needs ", n, " bytes, the file has ", remaining(), " left (truncated?)");
        }
    }

    void skip_to(std::uint64_t position, std::string_view field)
    {
        if (position > bytes_.size()) {
            qk::detail::fail("qk::gguf::file: ", field, " would start at byte ", position, ", past the end of the file (", bytes_.size(), " bytes)");
        }
        at_ = position;
    }

private:
    std::span<const std::byte> bytes_;
    std::uint64_t at_ = 0;
};

// Two entries with the same name, as (earlier, later) indices: found by sorting, since a search
// per entry would make a file of many entries cost quadratic time.
template <class Entry, class Name>
[[nodiscard]] std::optional<std::pair<std::size_t, std::size_t>> duplicate(std::span<const Entry> entries, Name name)
{
    std::vector<std::size_t> order(entries.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
        order[i] = i;
    }
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return std::pair(name(entries[a]), a) < std::pair(name(entries[b]), b);
    });
    for (std::size_t i = 1; i < order.size(); ++i) {
        if (name(entries[order[i - 1]]) == name(entries[order[i]])) {
            return std::pair(order[i - 1], order[i]);
        }
    }
    return std::nullopt;
}

} // namespace detail

class file {
public:
    // Maps the file read-only and validates it (header, metadata, tensor infos, data section).
    explicit file(const std::string& path)
    try : map_(std::make_unique<detail::mapping>(path)), path_(path)
    {
        parse();
    } catch (...) {
        qk::detail::rethrow_as_error("qk::gguf::file");
    }
    // The same over bytes the caller keeps alive as long as the file and what it returned.
    explicit file(std::span<const std::byte> bytes)
    try : map_(std::make_unique<detail::mapping>(bytes)), path_("(memory)")
    {
        parse();
    } catch (...) {
        qk::detail::rethrow_as_error("qk::gguf::file");
    }

    file(file&&) noexcept = default;
    file& operator=(file&&) noexcept = default;
    file(const file&) = delete;
    file& operator=(const file&) = delete;
    ~file() = default;

    [[nodiscard]] std::uint32_t version() const noexcept { return version_; }
    [[nodiscard]] std::uint32_t alignment() const noexcept { return alignment_; }
    // Where the data section starts, from the start of the file.
    [[nodiscard]] std::uint64_t data_offset() const noexcept { return data_offset_; }
    [[nodiscard]] std::uint64_t size() const noexcept { return map_->bytes().size(); }
    [[nodiscard]] const std::string& path() const noexcept { return path_; }

    [[nodiscard]] std::span<const metadata_entry> metadata() const noexcept { return metadata_; }
    [[nodiscard]] const gguf::value* find(std::string_view key) const noexcept
    {
        for (const metadata_entry& e : metadata_) {
            if (e.key == key) {
                return &e.value;
            }
        }
        return nullptr;
    }
    // The value under `key` as T: a scalar type, std::string, or std::vector of one for an array;
    // nullopt when there is no such key. A value of another type: qk::error naming both types.
    template <class T>
    [[nodiscard]] std::optional<T> get(std::string_view key) const
    try {
        const gguf::value* v = find(key);
        if (v == nullptr) {
            return std::nullopt;
        }
        if constexpr (requires { typename T::value_type; } && !std::is_same_v<T, std::string>) {
            using element = typename T::value_type;
            if (v->is_array() && v->element_type() == type_of<element>()) {
                return std::get<T>(std::get<gguf::array>(v->data));
            }
            qk::detail::fail("qk::gguf::file::get: '", key, "' is ", v->type_name(), ", not array of ", name(type_of<element>()));
        } else {
            if (!v->is_array() && v->type() == type_of<T>()) {
                return std::get<T>(std::get<gguf::scalar>(v->data));
            }
            qk::detail::fail("qk::gguf::file::get: '", key, "' is ", v->type_name(), ", not ", name(type_of<T>()));
        }
    } catch (...) {
        qk::detail::rethrow_as_error("qk::gguf::file::get");
    }

    [[nodiscard]] std::span<const tensor_info> tensors() const noexcept { return tensors_; }
    [[nodiscard]] const tensor_info* find_tensor(std::string_view name) const noexcept
    {
        for (const tensor_info& t : tensors_) {
            if (t.name == name) {
                return &t;
            }
        }
        return nullptr;
    }
    // An unknown name: qk::error.
    [[nodiscard]] const tensor_info& tensor(std::string_view name) const
    {
        const tensor_info* t = find_tensor(name);
        if (t == nullptr) {
            qk::detail::fail("qk::gguf::file: no tensor '", name, "' in ", path_, " (", tensors_.size(), " tensors)");
        }
        return *t;
    }
    // A tensor's bytes, whatever its type.
    [[nodiscard]] std::span<const std::byte> bytes(const tensor_info& t) const noexcept
    {
        return map_->bytes().subspan(static_cast<std::size_t>(data_offset_ + t.offset), static_cast<std::size_t>(t.bytes));
    }
    [[nodiscard]] std::span<const std::byte> bytes(std::string_view name) const { return bytes(tensor(name)); }

    // A tensor of one of qkern's formats as its blocks; a tensor of another type, or bytes not
    // aligned for Block in memory (a file whose alignment is below the block's): qk::error.
    template <block_format Block>
    [[nodiscard]] std::span<const Block> blocks(std::string_view name) const
    {
        const tensor_info& t = tensor(name);
        if (t.type != format_traits<Block>::gguf_type) {
            qk::detail::fail("qk::gguf::file::blocks: tensor '", name, "' is ", t.type_info().name, " (type ", t.type, "), not ",
                             format_traits<Block>::name, " (type ", format_traits<Block>::gguf_type, ")");
        }
        const std::span<const std::byte> b = bytes(t);
        if (reinterpret_cast<std::uintptr_t>(b.data()) % alignof(Block) != 0) {
            qk::detail::fail("qk::gguf::file::blocks: tensor '", name, "' lies at byte ", data_offset_ + t.offset, ", not aligned to ",
                             alignof(Block), " bytes for ", format_traits<Block>::name);
        }
        return {reinterpret_cast<const Block*>(b.data()), b.size() / sizeof(Block)};
    }

    // An F32, F16 or BF16 tensor as floats (exact: both convert without rounding); another type: qk::error.
    [[nodiscard]] std::vector<float> floats(std::string_view name) const { return floats(tensor(name)); }
    [[nodiscard]] std::vector<float> floats(const tensor_info& t) const
    try {
        std::vector<float> out(static_cast<std::size_t>(t.elements()));
        floats(t, 0, out);
        return out;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::gguf::file::floats");
    }
    // Values [first, first + out.size()) of an F32, F16 or BF16 tensor, in its memory order, into
    // out: a part of a tensor too large to convert at once. Outside the tensor, or another type:
    // qk::error.
    void floats(const tensor_info& t, std::uint64_t first, std::span<float> out) const
    {
        if (first > t.elements() || out.size() > t.elements() - first) {
            qk::detail::fail("qk::gguf::file::floats: values ", first, "..", first + out.size(), " are outside tensor '", t.name, "' (",
                             t.elements(), " values)");
        }
        const std::byte* b = bytes(t).data();
        switch (t.type) {
        case type_f32:
            if (!out.empty()) {
                std::memcpy(out.data(), b + 4 * first, 4 * out.size());
            }
            break;
        case type_f16:
            for (std::size_t i = 0; i < out.size(); ++i) {
                std::uint16_t h;
                std::memcpy(&h, b + 2 * (first + i), 2);
                out[i] = qk::fp16_to_fp32(h);
            }
            break;
        case type_bf16:
            for (std::size_t i = 0; i < out.size(); ++i) {
                std::uint16_t h;
                std::memcpy(&h, b + 2 * (first + i), 2);
                out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
            }
            break;
        default:
            qk::detail::fail("qk::gguf::file::floats: tensor '", t.name, "' is ", t.type_info().name, ": only f32, f16 and bf16 convert to floats");
        }
    }

private:
    void parse();
    gguf::value read_value(detail::cursor& in, std::uint32_t type, const std::string& key);
    template <class T>
    static void read_numbers(detail::cursor& in, std::vector<T>& out, std::uint64_t n, const std::string& key);

    std::unique_ptr<detail::mapping> map_;
    std::string path_;
    std::uint32_t version_ = 0;
    std::uint32_t alignment_ = default_alignment;
    std::uint64_t data_offset_ = 0;
    std::vector<metadata_entry> metadata_;
    std::vector<tensor_info> tensors_;
};

template <class T>
inline void file::read_numbers(detail::cursor& in, std::vector<T>& out, std::uint64_t n, const std::string& key)
{
    // n was bounded by the bytes left, so the allocation is at most the file's size.
    out.reserve(static_cast<std::size_t>(n));
    for (std::uint64_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<T, bool>) {
            const std::uint64_t at = in.position();
            const auto b = in.read<std::uint8_t>("a bool");
            if (b > 1) {
                qk::detail::fail("qk::gguf::file: metadata '", key, "': the bool at byte ", at, " is ", unsigned(b), ", not 0 or 1");
            }
            out.push_back(b == 1);
        } else if constexpr (std::is_same_v<T, std::string>) {
            out.push_back(in.read_string("a string in an array"));
        } else {
            out.push_back(in.read<T>("an array element"));
        }
    }
}

inline gguf::value file::read_value(detail::cursor& in, std::uint32_t type, const std::string& key)
{
    const auto scalar_of = [&](auto tag) -> gguf::value {
        using T = typename decltype(tag)::type;
        std::vector<T> one;
        read_numbers(in, one, 1, key);
        return {gguf::scalar(std::in_place_type<T>, std::move(one[0]))};
    };
    switch (static_cast<value_type>(type)) {
    case value_type::uint8: return scalar_of(std::type_identity<std::uint8_t>{});
    case value_type::int8: return scalar_of(std::type_identity<std::int8_t>{});
    case value_type::uint16: return scalar_of(std::type_identity<std::uint16_t>{});
    case value_type::int16: return scalar_of(std::type_identity<std::int16_t>{});
    case value_type::uint32: return scalar_of(std::type_identity<std::uint32_t>{});
    case value_type::int32: return scalar_of(std::type_identity<std::int32_t>{});
    case value_type::float32: return scalar_of(std::type_identity<float>{});
    case value_type::boolean: return scalar_of(std::type_identity<bool>{});
    case value_type::string: return scalar_of(std::type_identity<std::string>{});
    case value_type::uint64: return scalar_of(std::type_identity<std::uint64_t>{});
    case value_type::int64: return scalar_of(std::type_identity<std::int64_t>{});
    case value_type::float64: return scalar_of(std::type_identity<double>{});
    case value_type::array: break;
    default:
        qk::detail::fail("qk::gguf::file: metadata '", key, "' before byte ", in.position(), ": unknown value type ", type);
    }
    const std::uint64_t at = in.position();
    const auto element = in.read<std::uint32_t>("an array's element type");
    const auto n = in.read<std::uint64_t>("an array's length");
    // Every element takes at least element_bytes (a string its 8-byte length), so a longer array cannot fit.
    std::uint64_t element_bytes = 1;
    switch (static_cast<value_type>(element)) {
    case value_type::uint16:
    case value_type::int16: element_bytes = 2; break;
    case value_type::uint32:
    case value_type::int32:
    case value_type::float32: element_bytes = 4; break;
    case value_type::uint64:
    case value_type::int64:
    case value_type::float64:
    case value_type::string: element_bytes = 8; break;
    case value_type::uint8:
    case value_type::int8:
    case value_type::boolean: break;
    case value_type::array:
        qk::detail::fail("qk::gguf::file: metadata '", key, "' at byte ", at, ": an array of arrays, which GGUF does not have");
    default:
        qk::detail::fail("qk::gguf::file: metadata '", key, "' at byte ", at, ": unknown array element type ", element);
    }
    if (n > in.remaining() / element_bytes) {
        qk::detail::fail("qk::gguf::file: metadata '", key, "' at byte ", at, ": an array of ", n, " ", name(static_cast<value_type>(element)),
                         " values cannot fit in the ", in.remaining(), " bytes left");
    }
    gguf::array out;
    switch (static_cast<value_type>(element)) {
    case value_type::uint8: read_numbers(in, out.emplace<std::vector<std::uint8_t>>(), n, key); break;
    case value_type::int8: read_numbers(in, out.emplace<std::vector<std::int8_t>>(), n, key); break;
    case value_type::uint16: read_numbers(in, out.emplace<std::vector<std::uint16_t>>(), n, key); break;
    case value_type::int16: read_numbers(in, out.emplace<std::vector<std::int16_t>>(), n, key); break;
    case value_type::uint32: read_numbers(in, out.emplace<std::vector<std::uint32_t>>(), n, key); break;
    case value_type::int32: read_numbers(in, out.emplace<std::vector<std::int32_t>>(), n, key); break;
    case value_type::float32: read_numbers(in, out.emplace<std::vector<float>>(), n, key); break;
    case value_type::boolean: read_numbers(in, out.emplace<std::vector<bool>>(), n, key); break;
    case value_type::string: read_numbers(in, out.emplace<std::vector<std::string>>(), n, key); break;
    case value_type::uint64: read_numbers(in, out.emplace<std::vector<std::uint64_t>>(), n, key); break;
    case value_type::int64: read_numbers(in, out.emplace<std::vector<std::int64_t>>(), n, key); break;
    case value_type::float64: read_numbers(in, out.emplace<std::vector<double>>(), n, key); break;
    case value_type::array: break; // refused above
    }
    return {std::move(out)};
}

inline void file::parse()
{
    const std::span<const std::byte> all = map_->bytes();
    detail::cursor in(all);
    const auto fail = [&](auto&&... parts) { qk::detail::fail("qk::gguf::file: ", path_, ": ", parts...); };

    in.need(4, "the magic");
    if (std::memcmp(all.data(), "GGUF", 4) != 0) {
        fail("not a GGUF file: the first 4 bytes are not \"GGUF\"");
    }
    static_cast<void>(in.read<std::uint32_t>("the magic"));
    version_ = in.read<std::uint32_t>("the version");
    if (version_ == 1) {
        fail("GGUF version 1 (32-bit counts) is not supported: convert the file with a current tool");
    }
    if (version_ != 2 && version_ != 3) {
        fail("the version at byte 4 is ", version_, (version_ & 0xffffu) == 0 ? " (a big-endian file?)" : "", ": only versions 2 and 3 are read");
    }
    const std::uint64_t tensors_at = in.position();
    const auto n_tensors = in.read<std::uint64_t>("the tensor count");
    const std::uint64_t kv_at = in.position();
    const auto n_kv = in.read<std::uint64_t>("the metadata count");
    // The smallest entries: a key (8 + 1 bytes), a type (4) and a one-byte value; a name (8 + 0),
    // a dimension count (4), one dimension (8), a type (4) and an offset (8).
    if (n_kv > in.remaining() / 14) {
        fail("the metadata count at byte ", kv_at, " is ", n_kv, ": more entries than the ", in.remaining(), " bytes left can hold");
    }
    if (n_tensors > in.remaining() / 32) {
        fail("the tensor count at byte ", tensors_at, " is ", n_tensors, ": more tensors than the ", in.remaining(), " bytes left can hold");
    }

    metadata_.reserve(static_cast<std::size_t>(n_kv));
    std::vector<std::uint64_t> key_at; // where each entry starts, for the duplicate check's message
    key_at.reserve(static_cast<std::size_t>(n_kv));
    for (std::uint64_t i = 0; i < n_kv; ++i) {
        const std::uint64_t at = in.position();
        key_at.push_back(at);
        std::string key = in.read_string("a metadata key");
        if (key.empty()) {
            fail("metadata entry ", i, " at byte ", at, " has an empty key");
        }
        const auto type = in.read<std::uint32_t>("a metadata value type");
        gguf::value v = read_value(in, type, key);
        metadata_.push_back({std::move(key), std::move(v)});
    }
    const auto key_of = [](const metadata_entry& e) { return std::string_view(e.key); };
    if (const auto twice = detail::duplicate(std::span<const metadata_entry>(metadata_), key_of)) {
        fail("metadata entries ", twice->first, " and ", twice->second, " (at bytes ", key_at[twice->first], " and ", key_at[twice->second],
             ") have the same key '", metadata_[twice->first].key, "'");
    }
    if (const gguf::value* a = find(alignment_key)) {
        if (a->is_array() || a->type() != value_type::uint32) {
            fail("'", alignment_key, "' is ", a->type_name(), ", not uint32");
        }
        alignment_ = std::get<std::uint32_t>(std::get<gguf::scalar>(a->data));
        if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
            fail("'", alignment_key, "' is ", alignment_, ", not a power of two");
        }
    }

    tensors_.reserve(static_cast<std::size_t>(n_tensors));
    std::vector<std::uint64_t> name_at;
    name_at.reserve(static_cast<std::size_t>(n_tensors));
    for (std::uint64_t i = 0; i < n_tensors; ++i) {
        const std::uint64_t at = in.position();
        name_at.push_back(at);
        tensor_info t;
        t.name = in.read_string("a tensor name");
        if (t.name.empty() || t.name.size() > max_tensor_name) {
            fail("tensor ", i, " at byte ", at, ": the name is ", t.name.size(), " bytes, not 1 to ggml's ", max_tensor_name);
        }
        const std::uint64_t dims_at = in.position();
        const auto dims = in.read<std::uint32_t>("a tensor's dimension count");
        if (dims == 0 || dims > max_dimensions) {
            fail("tensor '", t.name, "': the dimension count at byte ", dims_at, " is ", dims, ", not 1 to ", max_dimensions);
        }
        std::uint64_t elements = 1;
        for (std::uint32_t d = 0; d < dims; ++d) {
            const std::uint64_t dim_at = in.position();
            const auto n = in.read<std::uint64_t>("a tensor dimension");
            if (n > std::uint64_t(std::numeric_limits<std::int64_t>::max()) || (n != 0 && elements > std::uint64_t(std::numeric_limits<std::int64_t>::max()) / n)) {
                fail("tensor '", t.name, "': dimension ", d, " at byte ", dim_at, " is ", n, ": the element count exceeds 2^63 - 1");
            }
            elements *= n;
            t.shape.push_back(n);
        }
        const std::uint64_t type_at = in.position();
        t.type = in.read<std::uint32_t>("a tensor type");
        const tensor_type_info* type = find_tensor_type(t.type);
        if (type == nullptr) {
            fail("tensor '", t.name, "': the type at byte ", type_at, " is ", t.type, ", not a tensor type GGUF files hold");
        }
        const std::optional<std::uint64_t> bytes = bytes_of(*type, t.shape);
        if (!bytes) {
            fail("tensor '", t.name, "' (", type->name, "): a row of ", t.shape[0], " values is not a whole number of ", type->block_size,
                 "-value blocks, or the size exceeds 2^63 - 1 bytes");
        }
        t.bytes = *bytes;
        const std::uint64_t offset_at = in.position();
        t.offset = in.read<std::uint64_t>("a tensor offset");
        if (t.offset % alignment_ != 0) {
            fail("tensor '", t.name, "': the offset at byte ", offset_at, " is ", t.offset, ", not a multiple of the alignment ", alignment_);
        }
        tensors_.push_back(std::move(t));
    }

    const auto name_of = [](const tensor_info& t) { return std::string_view(t.name); };
    if (const auto twice = detail::duplicate(std::span<const tensor_info>(tensors_), name_of)) {
        fail("tensors ", twice->first, " and ", twice->second, " (at bytes ", name_at[twice->first], " and ", name_at[twice->second],
             ") have the same name '", tensors_[twice->first].name, "'");
    }

    // The data section starts at the next multiple of the alignment (even with no tensors).
    const std::uint64_t end = in.position();
    data_offset_ = end + (alignment_ - end % alignment_) % alignment_;
    if (n_tensors > 0) {
        in.skip_to(data_offset_, "the data section");
    }
    const std::uint64_t data_bytes = all.size() >= data_offset_ ? all.size() - data_offset_ : 0;
    std::vector<const tensor_info*> by_offset;
    by_offset.reserve(tensors_.size());
    for (const tensor_info& t : tensors_) {
        if (t.offset > data_bytes || t.bytes > data_bytes - t.offset) {
            fail("tensor '", t.name, "': ", t.bytes, " bytes at offset ", t.offset, " of the data section (byte ", data_offset_, ") run past the end of the file (",
                 all.size(), " bytes)");
        }
        by_offset.push_back(&t);
    }
    std::sort(by_offset.begin(), by_offset.end(), [](const tensor_info* a, const tensor_info* b) { return a->offset < b->offset; });
    for (std::size_t i = 1; i < by_offset.size(); ++i) {
        const tensor_info& a = *by_offset[i - 1];
        const tensor_info& b = *by_offset[i];
        if (a.offset + a.bytes > b.offset && a.bytes > 0 && b.bytes > 0) {
            fail("tensors '", a.name, "' (", a.bytes, " bytes at offset ", a.offset, ") and '", b.name, "' (at offset ", b.offset, ") overlap");
        }
    }
}

} // namespace qk::gguf
