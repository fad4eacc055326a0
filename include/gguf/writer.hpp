// qk::gguf::writer: builds a GGUF version 3 file (metadata of every value type, tensors of any
// GGUF tensor type) and writes it atomically: into a new temporary file beside the target,
// renamed over it only once complete, so that an error at any point leaves the target as it was
// and no partial file behind. Every argument is checked when it is given (qk::error), so that
// write() can only fail on the file system, or in a tensor's source. Tensor data is aligned to
// general.alignment (32 by default), padded with zeros, in the order the tensors were added, as
// ggml writes it. A tensor's bytes are either copied when it is added or produced by a source
// function while the file is written, one tensor at a time, so that converting a model of many
// gigabytes needs the memory of its largest tensor, not of the whole file.
#pragma once

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "../kernels/error.hpp"
#include "../kernels/format_traits.hpp"
#include "file.hpp"
#include "tensor_types.hpp"
#include "value.hpp"

namespace qk::gguf {

// Fills a tensor's bytes (exactly the size its type and shape give) while the file is written.
using tensor_source = std::function<void(std::span<std::byte> out)>;

class writer {
public:
    writer() = default;

    // Sets `key` (a new key goes last; an existing one keeps its place and takes the new value).
    // An empty key, or general.alignment that is not a uint32 power of two: qk::error.
    void set(std::string_view key, gguf::value v)
    try {
        if (key.empty()) {
            qk::detail::fail("qk::gguf::writer::set: the key is empty");
        }
        std::optional<std::uint32_t> alignment;
        if (key == alignment_key) {
            if (v.is_array() || v.type() != value_type::uint32) {
                qk::detail::fail("qk::gguf::writer::set: '", key, "' must be uint32, not ", v.type_name());
            }
            const std::uint32_t a = std::get<std::uint32_t>(std::get<gguf::scalar>(v.data));
            if (a == 0 || (a & (a - 1)) != 0) {
                qk::detail::fail("qk::gguf::writer::set: '", key, "' = ", a, " is not a power of two");
            }
            alignment = a;
        }
        // An index, not a search: set_all() of a file with a million keys stays linear. What can
        // run out of memory comes before anything changes: the writer is as it was on any error.
        std::string name(key);
        if (const auto at = key_index_.find(name); at != key_index_.end()) {
            metadata_[at->second].value = std::move(v);
        } else {
            if (metadata_.size() == metadata_.capacity()) {
                metadata_.reserve(std::max<std::size_t>(16, 2 * metadata_.size()));
            }
            key_index_.emplace(name, metadata_.size());
            metadata_.push_back({std::move(name), std::move(v)}); // no allocation: reserved, and both moved
        }
        if (alignment) {
            alignment_ = *alignment;
        }
    } catch (...) {
        qk::detail::rethrow_as_error("qk::gguf::writer::set");
    }
    template <class T>
        requires(!std::is_same_v<std::decay_t<T>, gguf::value>)
    void set(std::string_view key, T&& v)
    try {
        using U = std::decay_t<T>;
        if constexpr (std::is_same_v<U, const char*> || std::is_same_v<U, char*> || std::is_same_v<U, std::string_view>) {
            set(key, gguf::value{gguf::scalar(std::in_place_type<std::string>, std::string(v))});
        } else if constexpr (requires { typename U::value_type; } && !std::is_same_v<U, std::string>) {
            static_cast<void>(type_of<typename U::value_type>()); // GGUF has arrays of scalars and strings only
            set(key, gguf::value{gguf::array(std::in_place_type<U>, std::forward<T>(v))});
        } else {
            static_cast<void>(type_of<U>());
            set(key, gguf::value{gguf::scalar(std::in_place_type<U>, std::forward<T>(v))});
        }
    } catch (...) {
        qk::detail::rethrow_as_error("qk::gguf::writer::set");
    }
    // Copies every metadata entry of `from` (a file being rewritten), in its order.
    // On any error, memory running out included, the metadata is as it was.
    void set_all(std::span<const metadata_entry> from)
    try {
        std::vector<metadata_entry> metadata = metadata_;
        std::unordered_map<std::string, std::size_t> index = key_index_;
        const std::uint32_t alignment = alignment_;
        try {
            for (const metadata_entry& e : from) {
                set(e.key, e.value);
            }
        } catch (...) {
            metadata_ = std::move(metadata);
            key_index_ = std::move(index);
            alignment_ = alignment;
            throw;
        }
    } catch (...) {
        qk::detail::rethrow_as_error("qk::gguf::writer::set_all");
    }
    // Removes `key`; whether it was there.
    bool erase(std::string_view key)
    try {
        const auto at = key_index_.find(std::string(key));
        if (at == key_index_.end()) {
            return false;
        }
        // The new index is built before anything changes, so that running out of memory does not
        // leave an index that disagrees with the entries.
        const std::size_t gone = at->second;
        std::unordered_map<std::string, std::size_t> index;
        index.reserve(metadata_.size());
        for (std::size_t i = 0; i < metadata_.size(); ++i) {
            if (i != gone) {
                index.emplace(metadata_[i].key, i < gone ? i : i - 1);
            }
        }
        if (key == alignment_key) {
            alignment_ = default_alignment;
        }
        metadata_.erase(metadata_.begin() + static_cast<std::ptrdiff_t>(gone));
        key_index_ = std::move(index);
        return true;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::gguf::writer::erase");
    }

    // Adds a tensor of ggml type `type` and `shape` (ggml order: shape[0] is the row length) with
    // its bytes, which are copied. A name that is empty, longer than 63 bytes or already added, an
    // unknown type, 0 or more than 4 dimensions, a row that is not whole blocks, or bytes of
    // another size than the shape gives: qk::error.
    void add_tensor(std::string_view name, std::uint32_t type, std::span<const std::uint64_t> shape, std::span<const std::byte> bytes)
    try {
        pending p = check_tensor(name, type, shape);
        if (p.info.bytes != bytes.size()) {
            qk::detail::fail("qk::gguf::writer::add_tensor: '", name, "' (", p.info.type_info().name, "): the shape gives ", p.info.bytes,
                             " bytes, ", bytes.size(), " were given");
        }
        p.data.assign(bytes.begin(), bytes.end());
        push(std::move(p));
    } catch (...) {
        qk::detail::rethrow_as_error("qk::gguf::writer::add_tensor");
    }
    // The same with bytes that `source` writes when the file is written (bytes() or write()), into
    // a buffer of exactly the tensor's size. Whatever the source reads must outlive those calls;
    // an exception from it ends the write, which then leaves no file behind. Checked as above.
    void add_tensor(std::string_view name, std::uint32_t type, std::span<const std::uint64_t> shape, tensor_source source)
    try {
        if (!source) {
            qk::detail::fail("qk::gguf::writer::add_tensor: '", name, "': the source is empty");
        }
        pending p = check_tensor(name, type, shape);
        p.source = std::move(source);
        push(std::move(p));
    } catch (...) {
        qk::detail::rethrow_as_error("qk::gguf::writer::add_tensor");
    }
    // The same for blocks of one of qkern's formats.
    template <block_format Block>
    void add_tensor(std::string_view name, std::span<const std::uint64_t> shape, std::span<const Block> blocks)
    {
        add_tensor(name, format_traits<Block>::gguf_type, shape, std::as_bytes(blocks));
    }

    [[nodiscard]] std::span<const metadata_entry> metadata() const noexcept { return metadata_; }
    [[nodiscard]] std::size_t tensor_count() const noexcept { return tensors_.size(); }
    [[nodiscard]] std::uint32_t alignment() const noexcept { return alignment_; }

    // The whole file, as write() would write it.
    [[nodiscard]] std::vector<std::byte> bytes() const
    try {
        std::vector<std::byte> out;
        emit([&](std::span<const std::byte> b) { out.insert(out.end(), b.begin(), b.end()); });
        return out;
    } catch (...) {
        qk::detail::rethrow_as_error("qk::gguf::writer::bytes");
    }

    // Writes the file to `path` through a temporary file beside it; on any failure the temporary
    // file is removed, the target is left as it was, and qk::error says what failed. A `path` that
    // exists and is not a regular file (a device, a pipe, a directory; a link is followed) is
    // refused before anything is written: the rename would replace it rather than write to it.
    void write(const std::string& path) const
    try {
        std::error_code status_error;
        const std::filesystem::file_status status = std::filesystem::status(path, status_error);
        if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
            qk::detail::fail("qk::gguf::writer::write: '", path, "' exists and is not a regular file (a device, a pipe or a directory); "
                             "the file is written to a temporary file renamed over the target, which would replace it");
        }
        std::random_device entropy;
        std::string temporary;
        std::FILE* out = nullptr;
        for (int attempt = 0; attempt < 100 && out == nullptr; ++attempt) {
            temporary = path + ".tmp-" + std::to_string(entropy() % 1000000000u);
            out = std::fopen(temporary.c_str(), "wbx"); // exclusive: the name is ours
            if (out == nullptr && errno != EEXIST) {
                break;
            }
        }
        if (out == nullptr) {
            qk::detail::fail("qk::gguf::writer::write: cannot create a temporary file beside '", path, "' ('", temporary, "'): ", std::strerror(errno));
        }
        bool ok = true;
        try {
            emit([&](std::span<const std::byte> b) { ok = ok && std::fwrite(b.data(), 1, b.size(), out) == b.size(); });
        } catch (...) {
            std::fclose(out);
            std::remove(temporary.c_str());
            throw;
        }
        const int write_errno = errno;
        ok = std::fclose(out) == 0 && ok; // a full disk may show only when the buffer is flushed
        std::error_code ec;
        if (ok) {
            try {
                std::filesystem::rename(temporary, path, ec); // may still run out of memory
            } catch (...) {
                std::remove(temporary.c_str());
                throw;
            }
        }
        if (!ok || ec) {
            std::remove(temporary.c_str());
            qk::detail::fail("qk::gguf::writer::write: cannot write '", path, "': ", ec ? ec.message() : std::string(std::strerror(write_errno ? write_errno : errno)));
        }
    } catch (...) {
        qk::detail::rethrow_as_error("qk::gguf::writer::write");
    }

private:
    struct pending {
        tensor_info info;
        std::vector<std::byte> data;
        tensor_source source; // set: data is produced by it, data stays empty
    };

    pending check_tensor(std::string_view name, std::uint32_t type, std::span<const std::uint64_t> shape) const
    {
        const tensor_type_info* info = find_tensor_type(type);
        if (name.empty() || name.size() > max_tensor_name) {
            qk::detail::fail("qk::gguf::writer::add_tensor: the name '", name, "' is ", name.size(), " bytes: it needs 1 to ", max_tensor_name);
        }
        if (names_.contains(std::string(name))) {
            qk::detail::fail("qk::gguf::writer::add_tensor: a tensor named '", name, "' was already added");
        }
        if (info == nullptr) {
            qk::detail::fail("qk::gguf::writer::add_tensor: '", name, "': type ", type, " is not a GGUF tensor type");
        }
        if (shape.empty() || shape.size() > max_dimensions) {
            qk::detail::fail("qk::gguf::writer::add_tensor: '", name, "': ", shape.size(), " dimensions, not 1 to ", max_dimensions);
        }
        const std::optional<std::uint64_t> expected = bytes_of(*info, shape);
        if (!expected) {
            qk::detail::fail("qk::gguf::writer::add_tensor: '", name, "' (", info->name, "): a row of ", shape[0], " values is not a whole number of ",
                             info->block_size, "-value blocks, or the size exceeds 2^63 - 1 bytes");
        }
        pending p;
        p.info.name = std::string(name);
        p.info.type = type;
        p.info.shape.assign(shape.begin(), shape.end());
        p.info.bytes = *expected;
        return p;
    }

    // Either both the tensor and its name are added or, memory running out, neither.
    void push(pending p)
    {
        tensors_.push_back(std::move(p));
        try {
            names_.insert(tensors_.back().info.name);
        } catch (...) {
            tensors_.pop_back();
            throw;
        }
    }

    template <class Sink>
    void emit(Sink&& sink) const
    {
        std::uint64_t written = 0;
        const auto put = [&](const void* p, std::size_t n) {
            if (n > 0) {
                sink(std::span<const std::byte>(static_cast<const std::byte*>(p), n));
                written += n;
            }
        };
        const auto number = [&](auto v) { put(&v, sizeof v); }; // little-endian hosts (static_assert below)
        const auto string = [&](std::string_view s) {
            number(std::uint64_t{s.size()});
            put(s.data(), s.size());
        };
        const auto pad = [&] {
            static constexpr std::byte zeros[256] = {};
            while (written % alignment_ != 0) {
                put(zeros, std::min<std::uint64_t>(sizeof zeros, alignment_ - written % alignment_));
            }
        };
        put("GGUF", 4);
        number(std::uint32_t{3});
        number(std::uint64_t{tensors_.size()});
        number(std::uint64_t{metadata_.size()});
        for (const metadata_entry& e : metadata_) {
            string(e.key);
            number(static_cast<std::uint32_t>(e.value.type()));
            const auto element = [&](const auto& x) {
                using T = std::decay_t<decltype(x)>;
                if constexpr (std::is_same_v<T, std::string>) {
                    string(x);
                } else if constexpr (std::is_same_v<T, bool>) {
                    number(std::uint8_t{x ? std::uint8_t{1} : std::uint8_t{0}});
                } else {
                    number(x);
                }
            };
            if (e.value.is_array()) {
                number(static_cast<std::uint32_t>(e.value.element_type()));
                std::visit(
                    [&](const auto& values) {
                        number(std::uint64_t{values.size()});
                        for (const auto& x : values) {
                            element(static_cast<typename std::decay_t<decltype(values)>::value_type>(x));
                        }
                    },
                    std::get<gguf::array>(e.value.data));
            } else {
                std::visit(element, std::get<gguf::scalar>(e.value.data));
            }
        }
        std::uint64_t offset = 0;
        for (const pending& p : tensors_) {
            string(p.info.name);
            number(static_cast<std::uint32_t>(p.info.shape.size()));
            for (const std::uint64_t d : p.info.shape) {
                number(d);
            }
            number(p.info.type);
            number(offset);
            offset += p.info.bytes + (alignment_ - p.info.bytes % alignment_) % alignment_;
        }
        // No data section without tensors: a large alignment would otherwise pad an empty file.
        if (!tensors_.empty()) {
            pad();
        }
        std::vector<std::byte> produced; // reused: the largest source tensor's size
        for (const pending& p : tensors_) {
            if (p.source) {
                produced.assign(static_cast<std::size_t>(p.info.bytes), std::byte{0});
                p.source(std::span<std::byte>(produced));
                put(produced.data(), produced.size());
            } else {
                put(p.data.data(), p.data.size());
            }
            pad();
        }
    }
    static_assert(std::endian::native == std::endian::little, "qk::gguf::writer writes little-endian files from little-endian hosts only");

    std::vector<metadata_entry> metadata_;
    std::vector<pending> tensors_;
    std::unordered_set<std::string> names_;
    std::unordered_map<std::string, std::size_t> key_index_;
    std::uint32_t alignment_ = default_alignment;
};

} // namespace qk::gguf
