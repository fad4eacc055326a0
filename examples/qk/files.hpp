// Raw files for qk's subcommands: read whole, validate, compute in memory, then replace the output
// in one rename, so that a failure leaves no half-written file. fail() reports a bad input or
// file: main() prints its message and exits with status 1.
#pragma once

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/core.h>

namespace qk_tool {

[[noreturn]] inline void fail(std::string message)
{
    throw std::runtime_error(std::move(message));
}

struct file_closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using file_handle = std::unique_ptr<std::FILE, file_closer>;

// Reads to end of file rather than trusting a size query, so pipes and /dev/stdin work too.
inline std::vector<std::byte> read_file(const std::string& path)
{
    const file_handle file(std::fopen(path.c_str(), "rb"));
    if (!file) {
        fail(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
    }
    std::vector<std::byte> bytes;
    std::size_t used = 0;
    for (;;) {
        bytes.resize(std::max<std::size_t>(used * 2, 1 << 16));
        used += std::fread(bytes.data() + used, 1, bytes.size() - used, file.get());
        if (used < bytes.size()) {
            break;
        }
    }
    if (std::ferror(file.get())) {
        fail(fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
    }
    bytes.resize(used);
    return bytes;
}

// The files hold little-endian values and blocks are stored byte for byte, so on a big-endian
// host reading and writing them would silently garble every value.
inline void require_little_endian()
{
    if constexpr (std::endian::native != std::endian::little) {
        fail("raw files are little-endian and this host is not; quantize/dequantize are unsupported here");
    }
}

inline std::vector<float> read_floats(const std::string& path, std::string_view role)
{
    const std::vector<std::byte> bytes = read_file(path);
    if (bytes.size() % sizeof(float) != 0) {
        fail(fmt::format("{} '{}' has {} bytes, not a multiple of 4: it is not raw float32", role, path, bytes.size()));
    }
    std::vector<float> values(bytes.size() / sizeof(float));
    if (!values.empty()) { // memcpy's pointers must not be null, even for 0 bytes
        std::memcpy(values.data(), bytes.data(), bytes.size());
    }
    return values;
}

// Refuses a target that exists and is not a regular file (a device, a pipe, a directory; a link
// is followed): the rename of pending_file would put a regular file in its place (as root, even
// in place of /dev/full) instead of writing to it.
inline void require_replaceable(const std::string& target)
{
    std::error_code ec;
    const std::filesystem::file_status status = std::filesystem::status(target, ec);
    if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
        fail(fmt::format("cannot write '{}': it exists and is not a regular file (a device, a pipe or a directory), and qk "
                         "writes its output to a temporary file renamed over the target; name a regular file",
                         target));
    }
}

// Whether two paths name one file (the same device and inode: also through a symbolic or a hard
// link). False when either does not exist or cannot be examined.
inline bool same_file(const std::string& a, const std::string& b)
{
    std::error_code ec;
    return std::filesystem::equivalent(a, b, ec) && !ec;
}

// A new file beside the target, removed again unless commit() renames it over the target; so a
// failure at any step leaves the target as it was and no stray file behind.
class pending_file {
public:
    explicit pending_file(std::string target) : target_(std::move(target))
    {
        require_replaceable(target_);
        // fopen's "x" (exclusive create, C11) makes the name ours; the random suffix avoids
        // collisions with other runs. Unlike mkstemp, the file gets the usual 0666 & ~umask.
        std::random_device entropy;
        constexpr std::string_view alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
        for (int attempt = 0; attempt < 100 && !file_; ++attempt) {
            path_ = target_ + ".tmp-";
            for (int k = 0; k < 6; ++k) {
                path_ += alphabet[entropy() % alphabet.size()];
            }
            file_.reset(std::fopen(path_.c_str(), "wbx"));
            if (!file_ && errno != EEXIST) {
                break;
            }
        }
        if (!file_) {
            fail(fmt::format("cannot write '{}': creating the temporary file '{}' failed: {}", target_, path_, std::strerror(errno)));
        }
    }
    pending_file(const pending_file&) = delete;
    pending_file& operator=(const pending_file&) = delete;

    ~pending_file()
    {
        if (!committed_) {
            file_.reset();
            std::remove(path_.c_str());
        }
    }

    void write(std::span<const std::byte> bytes)
    {
        if (std::fwrite(bytes.data(), 1, bytes.size(), file_.get()) != bytes.size()) {
            fail(fmt::format("cannot write '{}' (via '{}'): {}", target_, path_, std::strerror(errno)));
        }
    }

    void commit()
    {
        // fclose flushes, so a full disk can show up only here.
        if (std::fclose(file_.release()) != 0) {
            fail(fmt::format("cannot write '{}' (via '{}'): {}", target_, path_, std::strerror(errno)));
        }
        // std::filesystem::rename replaces an existing target on every platform (std::rename
        // does not on Windows).
        std::error_code ec;
        std::filesystem::rename(path_, target_, ec);
        if (ec) {
            fail(fmt::format("cannot write '{}': renaming '{}' over it failed: {}", target_, path_, ec.message()));
        }
        committed_ = true;
    }

private:
    std::string target_;
    std::string path_;
    file_handle file_;
    bool committed_ = false;
};

template <class T>
void write_file(const std::string& path, std::span<const T> values)
{
    static_assert(std::is_trivially_copyable_v<T>);
    pending_file out(path);
    out.write(std::as_bytes(values));
    out.commit();
}

} // namespace qk_tool
